//! The member's place in its group: the consumer, created with the rebalance context that
//! restores and commits on its behalf and subscribed to the pipeline's topics, the group
//! watchdog and the way the member joins again when the watchdog finds the group wedged (see
//! [`super::watchdog`]), the group's fallback from the cooperative rebalance protocol to the
//! eager one ([`crate::kafka::assignor`]), and its move to membership from the log
//! (`super::roster`).
//!
//! **The move to membership from the log.** A group coordinator that never evicts a member that
//! died ([`crate::kafka::quirks::DEAD_MEMBERS_NOT_EVICTED`]) leaves partitions without an owner
//! that no rejoin gives one. When the watchdog finds the group wedged [`MOVE_AFTER_WEDGES`]
//! times in a row (the rejoins in between did not give every partition an owner), the member
//! writes the move record ([`crate::kafka::roster::MOVE_KEY`]) into the claims topic, commits,
//! leaves the consumer group and follows the roster. Every other member reads the record within
//! [`LOOK_AT_CLAIMS_EVERY`] (or at start) and moves too; the record stays, so the group keeps
//! membership from the log until the claims topic is recreated. While some members have moved
//! and others have not, the claims keep every partition's commits to one owner: the two kinds of
//! member share one fencing.

use super::errors::{Cause, CycleError, RunError};
use super::member::Core;
use super::rebalance::{self, RebalanceContext, Rejoin, Why};
use super::scaling::Idle;
use super::watchdog::{Held, Watchdog};
use crate::config::KafkaSpec;
use crate::kafka::assignor::{self, Protocol};
use crate::kafka::members::Roster;
use crate::metrics as m;
use metrics::counter;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a member of the broker's consumer group reads the claims topic for the group's
/// decisions (the eager fallback, the move to membership from the log) besides its commit
/// cycles' reads.
const LOOK_AT_CLAIMS_EVERY: Duration = Duration::from_secs(1);

/// How many wedges in a row move the group to membership from the log.
pub(super) const MOVE_AFTER_WEDGES: u32 = 2;

/// A member of the group: its consumer and what joining again needs.
pub(super) struct Membership {
    /// The consumer, subscribed to the pipeline's topics.
    pub(super) consumer: BaseConsumer<RebalanceContext>,
    /// The consumer context's record of the loop's waiting (for the scaling signal).
    pub(super) idle: Arc<Idle>,
    core: Arc<Mutex<Core>>,
    k: KafkaSpec,
    input_partitions: usize,
    settings: ClientConfig,
    topics: Vec<String>,
    /// The rebalance protocol of the consumer's assignor.
    protocol: Protocol,
    /// When the claims topic was last read for the group's fallback.
    last_look: Instant,
    /// After a fallback: the cooperative assignor given up, and since when (with the context's
    /// assignment count then) the broker has refused the eager joins.
    fell_back: Option<FellBack>,
    /// Set when the broker refused the eager protocol for longer than the bound: this process
    /// stays with the cooperative one.
    pinned: bool,
    /// With membership from the log: the roster the consumer's manual assignment follows
    /// (the consumer then joins no group).
    roster: Option<Roster>,
    /// With the broker's consumer group: the group watchdog, when it could start.
    watchdog: Option<Watchdog>,
}

/// What a member that gave up the cooperative protocol remembers.
struct FellBack {
    /// The assignor it used before.
    cooperative: String,
    /// Since when, and after how many assignments, the broker has refused its eager joins.
    refused: Option<(Instant, u64)>,
}

impl Membership {
    /// Creates the consumer with `settings` and subscribes it to `topics`, or, with membership
    /// from the log (configured, or decided by the group), starts the roster. `owned_here` is
    /// what the core publishes of the partitions it holds, for the group watchdog.
    pub(super) fn join(
        core: Arc<Mutex<Core>>,
        k: &KafkaSpec,
        input_partitions: usize,
        settings: ClientConfig,
        topics: Vec<String>,
        owned_here: Held,
    ) -> Result<Membership, RunError> {
        let mut settings = settings;
        let mut protocol = protocol_of(&settings)?;
        if protocol == Protocol::Cooperative && core.lock().expect("lock").claims().group_is_eager()
        {
            tracing::warn!(
                assignor = assignor::EAGER_FALLBACK,
                "the claims topic says this group gave up the cooperative rebalance protocol \
                 (a rebalance did not complete on this broker): joining with the eager one"
            );
            settings.set("partition.assignment.strategy", assignor::EAGER_FALLBACK);
            protocol = Protocol::Eager;
        }
        let moved = !k.log_membership && core.lock().expect("lock").claims().group_uses_log();
        if moved {
            tracing::warn!(
                "the claims topic says this group moved to membership from the log (its \
                 consumer group stopped assigning partitions): joining no consumer group"
            );
        }
        let log = k.log_membership || moved;
        let (consumer, idle) = if log {
            unsubscribed(&core, k, input_partitions, &settings)?
        } else {
            subscribed(&core, k, input_partitions, &settings, &topics)?
        };
        let roster = if log {
            Some(start_roster(&core, k, &consumer, &topics)?)
        } else {
            None
        };
        let watchdog = if log {
            None
        } else {
            Watchdog::start(k, topics.clone(), owned_here).ok()
        };
        Ok(Membership {
            consumer,
            idle,
            core,
            k: k.clone(),
            input_partitions,
            settings,
            topics,
            protocol,
            last_look: Instant::now(),
            fell_back: None,
            pinned: false,
            roster,
            watchdog,
        })
    }

    /// Takes note of a consumer error: after a fallback, a join the broker refuses because the
    /// group's protocol is another one.
    pub(super) fn note_consumer_error(&mut self, e: &rdkafka::error::KafkaError) {
        let refused = e.rdkafka_error_code()
            == Some(rdkafka::types::RDKafkaErrorCode::InconsistentGroupProtocol);
        if let (true, Some(f)) = (refused, self.fell_back.as_mut()) {
            let assignments = self.consumer.context().assignments.load(Ordering::Relaxed);
            match f.refused {
                Some((_, seen)) if seen == assignments => {}
                _ => f.refused = Some((Instant::now(), assignments)),
            }
        }
    }

    /// Rejoins when the group watchdog asks for it (the group is wedged), or when the core found
    /// partitions of this member's claimed by another member; moves to membership from the log
    /// when the group stays wedged or another member moved it; with membership from the log,
    /// follows the roster.
    pub(super) fn rejoin_if_asked(&mut self) -> Result<(), RunError> {
        if let Some(roster) = self.roster.as_mut() {
            // Membership from the log: partitions claimed by another member were dropped
            // already, and the next look follows the claim.
            let mut core = self.core.lock().expect("lock");
            core.claims().take_superseded();
            return match roster.tick() {
                Some(want) => core.follow(&self.consumer, &want),
                None => Ok(()),
            };
        }
        if self.last_look.elapsed() >= LOOK_AT_CLAIMS_EVERY {
            self.last_look = Instant::now();
            self.core
                .lock()
                .expect("lock")
                .claims()
                .look_between_cycles();
        }
        if self.core.lock().expect("lock").claims().group_uses_log() {
            return self.move_to_log("group");
        }
        if let Some(reason) = self.fallback_reason() {
            return self.fall_back(reason);
        }
        if self.refused_for_too_long() {
            return self.go_back();
        }
        let wedged = self
            .watchdog
            .as_ref()
            .and_then(|w| Some((w.take_rejoin()?, w.bound_ms)));
        if let Some((in_a_row, bound_ms)) = wedged {
            if in_a_row >= MOVE_AFTER_WEDGES {
                return self.move_to_log("wedged");
            }
            self.rejoin(Why::Wedged { bound_ms })?;
        }
        let superseded = self.core.lock().expect("lock").claims().take_superseded();
        if superseded {
            self.rejoin(Why::Superseded)?;
        }
        Ok(())
    }

    /// Why this member must give up the cooperative protocol now, if it must: the group decided
    /// it (the claims topic says so), a rebalance waited on the broker past its bound, or the
    /// group gave a partition this member held to another member without revoking it first.
    fn fallback_reason(&mut self) -> Option<&'static str> {
        if self.protocol != Protocol::Cooperative || self.pinned {
            return None;
        }
        let mut core = self.core.lock().expect("lock");
        if core.claims().group_is_eager() {
            Some("group")
        } else if self.consumer.context().stalled.load(Ordering::Relaxed) {
            Some("stalled")
        } else if core.claims().superseded() {
            Some("superseded")
        } else {
            None
        }
    }

    /// Writes one decision of the group's into the claims topic (`announce`) and commits it
    /// with everything the member holds, not ready meanwhile. A decision that cannot be written
    /// aborts the transaction instead: the next member to find the trouble announces it again,
    /// or this one the next time.
    fn announce_and_commit(
        &self,
        what: &str,
        announce: fn(&mut Core) -> Result<(), CycleError>,
    ) -> Result<(), RunError> {
        let mut c = self.core.lock().expect("lock");
        c.set_ready(false);
        c.claims().take_superseded();
        if let Err(e) = announce(&mut c) {
            c.abort_and_rewind(&self.consumer, &format!("announcing {what}: {e:?}"))?;
        }
        c.commit_now(&self.consumer)?;
        Ok(())
    }

    /// Moves the group to the eager protocol (unless it already is: then only this member
    /// follows), commits, leaves, and joins again with a new consumer using
    /// [`assignor::EAGER_FALLBACK`].
    fn fall_back(&mut self, reason: &'static str) -> Result<(), RunError> {
        tracing::error!(
            reason,
            assignor = assignor::EAGER_FALLBACK,
            "a cooperative rebalance did not complete on this broker (stalled: a rebalance \
             waited on the broker past its bound; superseded: the group gave a held partition \
             to another member; group: another member found either): the group gives up the \
             cooperative protocol and joins again with the eager one"
        );
        counter!(m::ASSIGNOR_FALLBACKS, "reason" => reason).increment(1);
        self.announce_and_commit("the fallback", Core::announce_eager)?;
        let cooperative = self
            .settings
            .get("partition.assignment.strategy")
            .unwrap_or_default()
            .to_string();
        self.fell_back = Some(FellBack {
            cooperative,
            refused: None,
        });
        self.resubscribe(assignor::EAGER_FALLBACK, Protocol::Eager)
    }

    /// Moves the group to membership from the log (unless another member did: then this member
    /// follows), commits, leaves the consumer group and starts the roster; the consumer's
    /// partitions are assigned by the roster from then on.
    fn move_to_log(&mut self, reason: &'static str) -> Result<(), RunError> {
        tracing::error!(
            reason,
            "the consumer group does not give every partition an owner on this broker (wedged: \
             rejoins did not heal it; group: another member found that): the group moves to \
             membership from the log, and this member leaves the consumer group"
        );
        counter!(m::MEMBERSHIP_MOVES, "reason" => reason).increment(1);
        self.announce_and_commit("the move", Core::announce_log_membership)?;
        self.watchdog = None;
        self.consumer.unsubscribe();
        let (consumer, idle) =
            unsubscribed(&self.core, &self.k, self.input_partitions, &self.settings)?;
        // The old consumer closes here, revoking what it held (the rebalance context commits
        // and drops it).
        self.consumer = consumer;
        self.idle = idle;
        self.roster = Some(start_roster(
            &self.core,
            &self.k,
            &self.consumer,
            &self.topics,
        )?);
        Ok(())
    }

    /// Whether, since a fallback, the broker has refused every eager join for longer than the
    /// bound without this member being assigned in between: a broker that keeps the protocol a
    /// group had after all its members left does ([`crate::kafka::quirks::GROUP_KEEPS_ITS_PROTOCOL`]).
    fn refused_for_too_long(&self) -> bool {
        let Some(FellBack {
            refused: Some((since, seen)),
            ..
        }) = &self.fell_back
        else {
            return false;
        };
        let context = self.consumer.context();
        context.assignments.load(Ordering::Relaxed) == *seen
            && since.elapsed() > context.stall_bound
    }

    /// Goes back to the cooperative assignor this member gave up, for the rest of its life.
    fn go_back(&mut self) -> Result<(), RunError> {
        let cooperative = self
            .fell_back
            .take()
            .map(|f| f.cooperative)
            .unwrap_or_default();
        tracing::error!(
            assignor = cooperative,
            "the broker refuses the eager protocol for this group (it keeps the protocol the \
             group had): back to the cooperative one for the rest of this process"
        );
        self.pinned = true;
        self.core.lock().expect("lock").set_ready(false);
        self.resubscribe(&cooperative, Protocol::Cooperative)
    }

    /// Leaves the group and joins it again with a new consumer using `strategy`.
    fn resubscribe(&mut self, strategy: &str, protocol: Protocol) -> Result<(), RunError> {
        self.consumer.unsubscribe();
        self.settings.set("partition.assignment.strategy", strategy);
        self.protocol = protocol;
        self.subscribe_anew()
    }

    /// Replaces the consumer with a new one subscribed with the current settings.
    fn subscribe_anew(&mut self) -> Result<(), RunError> {
        let (consumer, idle) = subscribed(
            &self.core,
            &self.k,
            self.input_partitions,
            &self.settings,
            &self.topics,
        )?;
        self.consumer = consumer;
        self.idle = idle;
        Ok(())
    }

    /// Leaves the group and joins it again ([`rebalance::rejoin`]); a static member comes back
    /// as a dynamic one, with a new consumer without `group.instance.id` (the old one, which
    /// left and holds nothing, is closed).
    fn rejoin(&mut self, why: Why) -> Result<(), RunError> {
        let names: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        match rebalance::rejoin(&self.core, &self.consumer, &names, why)? {
            Rejoin::Subscribed => Ok(()),
            Rejoin::AsDynamicMember => {
                self.settings.remove("group.instance.id");
                self.subscribe_anew()
            }
        }
    }

    /// Ends the run with `result`: after a clean stop, commits the open transaction and logs
    /// what the member did; then leaves the group at once, so the partitions move to other
    /// members without waiting for the session to time out (revocation runs the commit cycle,
    /// which fails harmlessly after a fatal error).
    pub(super) fn leave(
        mut self,
        mut result: Result<(), RunError>,
        stop: &super::Stop,
    ) -> Result<(), RunError> {
        if result.is_ok() {
            tracing::info!("shutting down: committing the open transaction");
            let mut c = self.core.lock().expect("lock");
            result = c.commit_now(&self.consumer);
            if result.is_ok() {
                stop.mark_committed();
            }
            let (committed, aborted, panes, dead_letters) = c.outcomes();
            drop(c);
            tracing::info!(committed, aborted, panes, dead_letters, "stopped");
        }
        if let Some(roster) = self.roster.as_mut() {
            roster.leave();
        }
        self.consumer.unsubscribe();
        result
    }
}

/// Starts the roster of this process over the partitions of `topics`.
fn start_roster(
    core: &Arc<Mutex<Core>>,
    k: &KafkaSpec,
    consumer: &BaseConsumer<RebalanceContext>,
    topics: &[String],
) -> Result<Roster, RunError> {
    let token = core.lock().expect("lock").claims().token();
    let parts = crate::kafka::admin::partitions_of(consumer, topics)
        .map_err(|e| RunError::Startup(Cause::part("reading the topics' partitions", e)))?;
    super::roster::start(k, token, parts)
}

/// A consumer created with `settings` and a rebalance context over `core`, not subscribed: its
/// partitions are assigned by the roster (membership from the log).
fn unsubscribed(
    core: &Arc<Mutex<Core>>,
    k: &KafkaSpec,
    input_partitions: usize,
    settings: &ClientConfig,
) -> Result<(BaseConsumer<RebalanceContext>, Arc<Idle>), RunError> {
    let context = RebalanceContext::new(core.clone(), k, input_partitions, settings)?;
    let idle = context.idle.clone();
    let consumer: BaseConsumer<RebalanceContext> = settings
        .create_with_context(context)
        .map_err(|e| RunError::Startup(Cause::kafka("creating the consumer", e)))?;
    Ok((consumer, idle))
}

/// A consumer created with `settings` and a rebalance context over `core`, subscribed to
/// `topics`.
fn subscribed(
    core: &Arc<Mutex<Core>>,
    k: &KafkaSpec,
    input_partitions: usize,
    settings: &ClientConfig,
    topics: &[String],
) -> Result<(BaseConsumer<RebalanceContext>, Arc<Idle>), RunError> {
    let (consumer, idle) = unsubscribed(core, k, input_partitions, settings)?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&names)
        .map_err(|e| RunError::Startup(Cause::kafka("subscribing", e)))?;
    Ok((consumer, idle))
}

/// The rebalance protocol of the assignor `settings` name.
fn protocol_of(settings: &ClientConfig) -> Result<Protocol, RunError> {
    let strategy = settings
        .get("partition.assignment.strategy")
        .unwrap_or(assignor::DEFAULT_STRATEGY);
    assignor::protocol_of(strategy)
        .map_err(|e| RunError::Startup(Cause::found(format!("partition.assignment.strategy: {e}"))))
}
