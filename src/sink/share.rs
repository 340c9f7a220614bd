//! How a sink's members share the partitions they read: the broker's consumer group, or
//! membership from the log in a topic of the sink's own.
//!
//! A sink runs against the same broker as its pipeline, so it follows the decisions the
//! pipeline's group recorded in its claims topic ([`GroupDecisions`]): when the pipeline's
//! members gave up the cooperative rebalance protocol, the sink's consumer joins with the eager
//! one (decided at start); when they left the broker's consumer group for membership from the log (its coordinator
//! stopped assigning partitions), the sink does too, at start or within [`LOOK_AT_CLAIMS_EVERY`]
//! while it runs. Moving is safe at any moment: the sink's writes are idempotent and its
//! positions live in the database, so a partition read by two members for a while is written
//! once.

use super::watch::{Act, Watch};
use super::{Offsets, SinkError, TopicPartition};
use crate::config::KafkaSpec;
use crate::kafka::admin::{create_topics, partitions_of};
use crate::kafka::assignor;
use crate::kafka::members::{DecisionsWatch, Roster};
use crate::metrics as m;
use metrics::counter;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How a sink's members share the partitions they read.
pub(super) struct Share {
    k: KafkaSpec,
    group: String,
    topics: Vec<String>,
    how: How,
}

/// The two ways of sharing.
enum How {
    /// The broker's consumer group `<application_id>-<sink>`.
    Group(Box<GroupShare>),
    /// Membership from the log, in the topic `<application_id>-<sink>-members`.
    Log(Box<LogShare>),
}

/// A sink member's state in the broker's consumer group.
struct GroupShare {
    /// Only keeps the membership: its partitions stay paused (records are read from the raw
    /// log).
    consumer: BaseConsumer,
    /// Whether the consumer joins with the eager protocol (the pipeline's group gave up the
    /// cooperative one).
    eager: bool,
    /// The pipeline's decisions, from its claims topic.
    decisions: DecisionsWatch,
    /// The sink group's own: a move to membership from the log, from the sink's members topic.
    own: DecisionsWatch,
    /// When both were last read.
    looked: Instant,
    /// The watchdog of the sink's group.
    watch: Watch,
    /// Every partition the group shares, and when they were last looked up.
    parts: Vec<TopicPartition>,
    parts_looked: Option<Instant>,
}

/// A sink member's state under membership from the log.
struct LogShare {
    roster: Roster,
    /// What the roster last said is this member's.
    mine: BTreeSet<TopicPartition>,
    /// Reads the topics' partition counts: a sink may start before the pipeline created its
    /// output topic, so the partitions are looked up again until there are some, and then now
    /// and then.
    consumer: BaseConsumer,
    parts: Vec<TopicPartition>,
    looked: Instant,
}

/// How often a sink under membership from the log looks up its topics' partitions again.
const PARTITIONS_EVERY: Duration = Duration::from_secs(10);

/// How often a sink in the broker's consumer group reads its pipeline's claims topic for the
/// group's decisions.
pub(super) const LOOK_AT_CLAIMS_EVERY: Duration = Duration::from_secs(5);

fn startup(what: &str, e: impl Into<super::Source>) -> SinkError {
    SinkError::startup(what, e)
}

impl Share {
    /// Joins the sink's group `group` over `topics`: the broker's consumer group, or membership
    /// from the log when the pipeline is configured with it or its group moved to it.
    pub(super) fn start(k: &KafkaSpec, group: &str, topics: &[String]) -> Result<Share, SinkError> {
        let mut decisions = DecisionsWatch::new(&k.brokers, &k.claims_topic);
        let mut own = DecisionsWatch::new(&k.brokers, &members_topic(group));
        let decided = decisions.look();
        let how = if k.log_membership || decided.log_membership || own.look().log_membership {
            if !k.log_membership {
                tracing::warn!(
                    "the claims topic of the pipeline or the members topic of the sink says its \
                     group moved to membership from the log (its consumer group stopped giving \
                     every partition an owner): the sink joins no consumer group either"
                );
            }
            How::Log(Box::new(LogShare::start(k, group, topics)?))
        } else {
            How::Group(Box::new(GroupShare {
                consumer: group_consumer(k, group, topics, decided.eager)?,
                eager: decided.eager,
                decisions,
                own,
                looked: Instant::now(),
                watch: Watch::new(&k.brokers, crate::kafka::roster::session(&k.properties)),
                parts: Vec::new(),
                parts_looked: None,
            }))
        };
        Ok(Share {
            k: k.clone(),
            group: group.to_string(),
            topics: topics.to_vec(),
            how,
        })
    }

    /// The partitions that are this member's now, after waiting up to `wait` for news. `stored`
    /// reads the offsets the sink stored, for the group's watchdog (`None` when it cannot).
    pub(super) fn assigned(
        &mut self,
        wait: Duration,
        stored: &mut dyn FnMut() -> Option<Offsets>,
    ) -> BTreeSet<TopicPartition> {
        let act = match &mut self.how {
            How::Group(g) => g.tick(&self.group, &self.topics, wait, stored),
            How::Log(_) => GroupAct::Stay,
        };
        match act {
            GroupAct::Stay => {}
            GroupAct::Rejoin => {
                if let How::Group(g) = &mut self.how {
                    // The old consumer closes as it is replaced: it leaves the group.
                    match group_consumer(&self.k, &self.group, &self.topics, g.eager) {
                        Ok(c) => g.consumer = c,
                        Err(e) => tracing::warn!("rejoining the sink's group: {e}"),
                    }
                }
            }
            GroupAct::Move { reason, announce } => {
                // The group's consumer closes as it is replaced: it leaves the group.
                match LogShare::start(&self.k, &self.group, &self.topics) {
                    Ok(mut log) => {
                        if announce {
                            if let Err(e) = log.roster.announce_move() {
                                tracing::warn!("writing the sink group's move: {e}");
                            }
                        }
                        self.how = How::Log(Box::new(log));
                        counter!(m::MEMBERSHIP_MOVES, "reason" => reason).increment(1);
                    }
                    Err(e) => tracing::warn!("moving to membership from the log: {e}"),
                }
            }
        }
        match &mut self.how {
            How::Group(g) => g.held(),
            How::Log(log) => {
                std::thread::sleep(wait);
                log.tick(&self.topics)
            }
        }
    }

    /// Says this member is leaving, so the others take its partitions at once.
    pub(super) fn leave(&mut self) {
        if let How::Log(log) = &mut self.how {
            log.roster.leave();
        }
    }
}

/// What a member in the consumer group does after its tick.
enum GroupAct {
    /// Stays as it is.
    Stay,
    /// Leaves the group and joins it again as a new member.
    Rejoin,
    /// Leaves the consumer group for membership from the log; `announce` writes the move into
    /// the sink's members topic for the other members.
    Move {
        reason: &'static str,
        announce: bool,
    },
}

/// How often a member in the consumer group looks up its topics' partitions again, for the
/// watchdog.
const WATCHED_PARTITIONS_EVERY: Duration = Duration::from_secs(60);

impl GroupShare {
    /// Polls the consumer for up to `wait`, reads the group decisions when due and lets the
    /// watchdog look when due; says what the member does next.
    fn tick(
        &mut self,
        group: &str,
        topics: &[String],
        wait: Duration,
        stored: &mut dyn FnMut() -> Option<Offsets>,
    ) -> GroupAct {
        if self.looked.elapsed() >= LOOK_AT_CLAIMS_EVERY {
            self.looked = Instant::now();
            if self.decisions.look().log_membership {
                tracing::warn!(
                    "the pipeline's group moved to membership from the log (its consumer \
                     group stopped assigning partitions): the sink leaves its consumer group \
                     and follows a roster too"
                );
                return GroupAct::Move {
                    reason: "group",
                    announce: false,
                };
            }
            if self.own.look().log_membership {
                tracing::warn!(
                    "another member moved the sink's group to membership from the log (its \
                     consumer group left partitions without a reader): the sink leaves its \
                     consumer group and follows a roster too"
                );
                return GroupAct::Move {
                    reason: "group",
                    announce: false,
                };
            }
        }
        if let Some(Err(e)) = self.consumer.poll(wait) {
            tracing::warn!("consumer: {e}");
        }
        if !self.watch.due() {
            return GroupAct::Stay;
        }
        if self
            .parts_looked
            .is_none_or(|t| t.elapsed() >= WATCHED_PARTITIONS_EVERY || self.parts.is_empty())
        {
            match partitions_of(&self.consumer, topics) {
                Ok(parts) => {
                    self.parts = parts;
                    self.parts_looked = Some(Instant::now());
                }
                Err(e) => tracing::debug!("the sink's group watchdog: {e}"),
            }
        }
        let held = self.held();
        match self.watch.look(&self.parts, stored().as_ref(), &held) {
            Act::Wait => GroupAct::Stay,
            Act::Rejoin => {
                counter!(m::GROUP_WEDGES).increment(1);
                tracing::error!(
                    group,
                    bound_ms = self.watch.bound_ms,
                    "the sink's consumer group has left partitions without a reader that makes \
                     progress for longer than the bound: leaving and joining it again as a new \
                     member"
                );
                GroupAct::Rejoin
            }
            Act::Move => {
                counter!(m::GROUP_WEDGES).increment(1);
                tracing::error!(
                    group,
                    members_topic = members_topic(group),
                    "the sink's consumer group does not give every partition a reader on this \
                     broker (a rejoin did not heal it): the sink's group moves to membership \
                     from the log, and this member leaves the consumer group"
                );
                GroupAct::Move {
                    reason: "wedged",
                    announce: true,
                }
            }
        }
    }

    /// The partitions the group gave this member (kept paused).
    fn held(&self) -> BTreeSet<TopicPartition> {
        let assignment = self.consumer.assignment().unwrap_or_default();
        let _ = self.consumer.pause(&assignment);
        assignment
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect()
    }
}

/// The topic of the sink group `group`'s heartbeats under membership from the log, and of the
/// record that moves the group there.
fn members_topic(group: &str) -> String {
    format!("{group}-members")
}

/// The consumer of the sink's group `group`, subscribed to `topics`, with the pipeline's
/// default assignor unless the user set one, and the eager one when the pipeline's group gave
/// up the cooperative protocol.
fn group_consumer(
    k: &KafkaSpec,
    group: &str,
    topics: &[String],
    eager: bool,
) -> Result<BaseConsumer, SinkError> {
    let mut settings = crate::clients::base_config(k);
    settings
        .set("group.id", group)
        .set("enable.auto.commit", "false");
    if eager {
        settings.set("partition.assignment.strategy", assignor::EAGER_FALLBACK);
    } else if !k.properties.contains_key("partition.assignment.strategy") {
        settings.set("partition.assignment.strategy", assignor::DEFAULT_STRATEGY);
    }
    let consumer: BaseConsumer = settings
        .create()
        .map_err(|e| startup("creating the consumer", e))?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&names)
        .map_err(|e| startup("subscribing", e))?;
    Ok(consumer)
}

impl LogShare {
    /// Looks up the topics' partitions again when due, beats and reads the roster; returns the
    /// partitions that are this member's.
    fn tick(&mut self, topics: &[String]) -> BTreeSet<TopicPartition> {
        let every = if self.parts.is_empty() {
            Duration::from_secs(1)
        } else {
            PARTITIONS_EVERY
        };
        if self.looked.elapsed() >= every {
            self.looked = Instant::now();
            match partitions_of(&self.consumer, topics) {
                Ok(parts) if parts != self.parts => {
                    tracing::info!(
                        partitions = parts.len(),
                        "the sink's topics have new partitions"
                    );
                    self.roster.set_parts(parts.clone());
                    self.parts = parts;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("{e}"),
            }
        }
        if let Some(want) = self.roster.tick() {
            if want != self.mine {
                tracing::info!(partitions = ?want, "membership from the log: this member's partitions");
            }
            self.mine = want;
        }
        self.mine.clone()
    }

    /// Starts the roster of the sink's group `group` in its members topic, over `topics`'
    /// partitions; the consumer it keeps joins no group and only reads partition counts.
    fn start(k: &KafkaSpec, group: &str, topics: &[String]) -> Result<LogShare, SinkError> {
        let consumer: BaseConsumer = crate::clients::base_config(k)
            .create()
            .map_err(|e| startup("creating the consumer", e))?;
        let parts = partitions_of(&consumer, topics)
            .map_err(|e| startup("reading the topics' partitions", e))?;
        let members = members_topic(group);
        create_topic(k, &members)?;
        let wall = crate::clock::wall_ms();
        let token = format!(
            "{}.{}.{wall}",
            k.instance_id.replace(' ', "_"),
            std::process::id()
        );
        let roster = Roster::start(
            crate::clients::base_config(k),
            &k.brokers,
            &members,
            token,
            parts.clone(),
            crate::kafka::roster::session(&k.properties),
        )
        .map_err(|e| startup("membership from the log", e))?;
        Ok(LogShare {
            roster,
            mine: BTreeSet::new(),
            consumer,
            parts,
            looked: Instant::now(),
        })
    }
}

/// Creates the topic `name` of one partition unless it exists.
fn create_topic(k: &KafkaSpec, name: &str) -> Result<(), SinkError> {
    use rdkafka::admin::{NewTopic, TopicReplication};
    create_topics(
        &crate::clients::base_config(k),
        &[NewTopic::new(name, 1, TopicReplication::Fixed(1))],
    )
    .map(|_| ())
    .map_err(|e| SinkError::startup(format!("creating topic {name}"), e))
}
