//! Rebalances: the consumer context whose callbacks have the member restore newly assigned
//! partitions from the log ([`super::restore`]) and commit or abort before partitions leave, and
//! the rejoin that leaves the group and joins it again.
//!
//! An assignment may hold input partitions and, with the repartition hop, partitions of the
//! repartition topic. Repartition partitions are assigned to keep the group's ownership, then
//! paused: the second stage reads them as a raw log.

use super::errors::{Cause, RunError};
use super::member::Core;
use super::restore::partitions_of;
use crate::kafka::assignor::{self, JoinWatch};
use crate::metrics as m;
use metrics::{counter, gauge};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, TopicPartitionList};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The consumer context: rebalance callbacks run the coordinator's assign and revoke; statistics
/// reports feed the lag gauges and the scaling signal.
pub struct RebalanceContext {
    pub(super) core: Arc<Mutex<Core>>,
    pub(super) input_topics: Vec<String>,
    pub(super) scaling: Mutex<super::scaling::ScalingModel>,
    /// Nanoseconds the loop has waited for records in all ([`super::scaling::Idle`]).
    pub(super) idle: Arc<super::scaling::Idle>,
    /// With the cooperative protocol: the watch on rebalances that wait on the broker, fed by
    /// the statistics reports, and when the context was made (the watch's clock).
    join_watch: Option<(Mutex<JoinWatch>, Instant)>,
    /// Set once a rebalance waited on the broker past the watch's bound.
    pub(super) stalled: AtomicBool,
    /// How long a rebalance may wait on the broker: the rebalance timeout plus a session.
    pub(super) stall_bound: Duration,
    /// Assignments this consumer was given (assignment callbacks).
    pub(super) assignments: AtomicU64,
}

impl RebalanceContext {
    /// The context of `k`'s consumer with client `settings`, over a pipeline with
    /// `input_partitions` input partitions.
    pub(super) fn new(
        core: Arc<Mutex<Core>>,
        k: &crate::config::KafkaSpec,
        input_partitions: usize,
        settings: &rdkafka::ClientConfig,
    ) -> Result<Self, RunError> {
        let strategy = settings
            .get("partition.assignment.strategy")
            .unwrap_or(assignor::DEFAULT_STRATEGY);
        let protocol = assignor::protocol_of(strategy).map_err(|e| {
            RunError::Startup(Cause::found(format!("partition.assignment.strategy: {e}")))
        })?;
        let ms = |key: &str, default: u64| {
            settings
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(default)
        };
        let stall_bound = assignor::stall_bound(
            ms("max.poll.interval.ms", 300_000),
            ms("session.timeout.ms", 45_000),
        );
        let join_watch = (protocol == assignor::Protocol::Cooperative)
            .then(|| (Mutex::new(JoinWatch::new(stall_bound)), Instant::now()));
        Ok(RebalanceContext {
            core,
            input_topics: k.input_topics.clone(),
            scaling: Mutex::new(super::scaling::ScalingModel::new(
                k.target_backlog as f64 / 1000.0,
                input_partitions,
            )),
            idle: Arc::default(),
            join_watch,
            stalled: AtomicBool::new(false),
            stall_bound,
            assignments: AtomicU64::new(0),
        })
    }
}

impl ClientContext for RebalanceContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        if let (Some((watch, born)), Some(group)) = (&self.join_watch, &statistics.cgrp) {
            let stalled = watch
                .lock()
                .expect("lock")
                .observe(born.elapsed(), &group.join_state);
            if stalled && !self.stalled.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    join_state = group.join_state,
                    "a rebalance has waited on the broker for longer than the rebalance timeout \
                     plus a session timeout"
                );
            }
        }
        let mut samples = Vec::new();
        for topic in statistics.topics.values() {
            if !self.input_topics.contains(&topic.topic) {
                continue;
            }
            // Offsets are committed by transactions, not by the consumer, so librdkafka's own
            // `consumer_lag` (against its committed offset) is unknown: the lag is the end a
            // read_committed consumer may read to (the last stable offset) minus the position
            // handed to the application.
            for (p, part) in &topic.partitions {
                let end = if part.ls_offset >= 0 {
                    part.ls_offset
                } else {
                    part.hi_offset
                };
                if *p >= 0 && part.app_offset >= 0 && end >= 0 {
                    gauge!(m::CONSUMER_LAG, "topic" => topic.topic.clone(), "partition" => p.to_string())
                        .set((end - part.app_offset).max(0) as f64);
                    samples.push(super::scaling::PartitionSample {
                        topic: topic.topic.clone(),
                        partition: *p,
                        end,
                        position: part.app_offset,
                    });
                }
            }
        }
        let (now, idle) = self.idle.seconds();
        let signal = self
            .scaling
            .lock()
            .expect("lock")
            .observe(now, idle, &samples);
        for (topic, p, seconds) in signal.backlog {
            gauge!(m::BACKLOG, "topic" => topic, "partition" => p.to_string()).set(seconds);
        }
        for (topic, p) in signal.gone {
            gauge!(m::BACKLOG, "topic" => topic, "partition" => p.to_string()).set(0.0);
        }
        if let Some(n) = signal.recommended_members {
            gauge!(m::RECOMMENDED_MEMBERS).set(n as f64);
        }
    }
}

impl ConsumerContext for RebalanceContext {
    /// Replaces librdkafka's default handling so that assigned partitions start at the offsets the
    /// log says, never at the group's committed offset.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let mut core = self.core.lock().expect("lock");
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.assignments.fetch_add(1, Ordering::Relaxed);
                tracing::info!(partitions = ?partitions_of(tpl), "rebalance: assigning");
                match core.assign(consumer, tpl) {
                    Ok(a) => {
                        let assigned = if cooperative {
                            consumer.incremental_assign(&a.start_at)
                        } else {
                            consumer.assign(&a.start_at)
                        };
                        // The second stage reads repartition partitions as a raw log; the
                        // consumer only keeps them.
                        assigned.and_then(|()| {
                            if a.pause.count() > 0 {
                                consumer.pause(&a.pause)
                            } else {
                                Ok(())
                            }
                        })
                    }
                    Err(e) => {
                        core.fail(e);
                        Ok(())
                    }
                }
            }
            _ => {
                // A revocation, a lost assignment, or an error (which librdkafka's default
                // handler answers by dropping the assignment): the partitions leave this member.
                let lost = err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS
                    || consumer.assignment_lost();
                tracing::info!(partitions = ?partitions_of(tpl), lost, error = ?err, "rebalance: revoking");
                if let Err(e) = core.revoke(consumer, tpl, lost) {
                    core.fail(e);
                }
                if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
        };
        if let Err(e) = result {
            core.fail(RunError::Fatal(Cause::kafka("applying the rebalance", e)));
        }
    }
}

/// Why a member leaves its group and joins it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// The group watchdog saw partitions without an owner for longer than `bound_ms`.
    Wedged {
        /// The watchdog's bound, in ms.
        bound_ms: i64,
    },
    /// Another member claimed partitions this member held (see [`super::claims`]).
    Superseded,
}

/// How [`rejoin`] left the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rejoin {
    /// Subscribed again with the same consumer: the next poll joins as a new member.
    Subscribed,
    /// A static member left and removed its registration (where the broker supports it); the
    /// caller joins again with a new consumer as a dynamic member. A broker that keeps a static
    /// member's registration ([`crate::kafka::quirks::LEAVE_BY_INSTANCE_ID_IGNORED`],
    /// [`crate::kafka::quirks::STATIC_PHANTOM_LEADER`]) cannot hand the new membership the old
    /// one's place.
    AsDynamicMember,
}

/// Leaves the group and joins it again (`why`: the group watchdog found partitions without an
/// owner for longer than its bound, or another member claimed partitions of this member's): logs
/// it, counts a wedge as such, turns `/readyz` false and commits the open transaction first
/// (the revocation that leaving brings commits nothing more). A dynamic member subscribes again
/// at once; a static one gives up its static membership for the rest of the process's life (see
/// [`Rejoin::AsDynamicMember`]). The core must not be locked by the caller: leaving runs the
/// rebalance callback.
pub(super) fn rejoin<C: ConsumerContext>(
    core: &Mutex<Core>,
    consumer: &BaseConsumer<C>,
    topics: &[&str],
    why: Why,
) -> Result<Rejoin, RunError> {
    // What the static registration's removal needs is taken while the core is locked anyway.
    let k = {
        let mut c = core.lock().expect("lock");
        match why {
            Why::Wedged { bound_ms } => {
                tracing::error!(
                    bound_ms,
                    static_membership = c.k().static_membership,
                    "the consumer group has left partitions without an owner for longer than the \
                     bound: leaving and joining it again as a new member"
                );
                counter!(m::GROUP_WEDGES).increment(1);
            }
            Why::Superseded => tracing::warn!(
                static_membership = c.k().static_membership,
                "leaving the group and joining it again as a new member, since its view of this \
                 member's assignment is stale"
            ),
        }
        c.set_ready(false);
        c.commit_now(consumer)?;
        c.k().clone()
    };
    consumer.unsubscribe();
    if !k.static_membership {
        consumer
            .subscribe(topics)
            .map_err(|e| RunError::Fatal(Cause::kafka("subscribing again", e)))?;
        return Ok(Rejoin::Subscribed);
    }
    // A static member does not leave when it unsubscribes: remove its registration.
    if let Err(e) = crate::kafka::group::remove_static_members(
        &k.brokers,
        &k.application_id,
        &[k.instance_id.as_str()],
    ) {
        tracing::warn!("removing this member's static registration before rejoining: {e}");
    }
    tracing::warn!(
        "rejoining as a dynamic member: static membership is given up until this member restarts"
    );
    Ok(Rejoin::AsDynamicMember)
}
