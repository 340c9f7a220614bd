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

use super::{SinkError, TopicPartition};
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
    /// The broker's consumer group `<application_id>-<sink>`; the consumer only keeps the
    /// membership (its partitions stay paused: records are read from the raw log). `decisions`
    /// reads the pipeline's claims topic on for its group's decisions; `looked` is when it last
    /// did.
    Group {
        consumer: BaseConsumer,
        decisions: DecisionsWatch,
        looked: Instant,
    },
    /// Membership from the log, in the topic `<application_id>-<sink>-members`.
    Log(Box<LogShare>),
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

fn startup(what: &str, e: impl std::fmt::Display) -> SinkError {
    SinkError::Startup(format!("{what}: {e}"))
}

impl Share {
    /// Joins the sink's group `group` over `topics`: the broker's consumer group, or membership
    /// from the log when the pipeline is configured with it or its group moved to it.
    pub(super) fn start(k: &KafkaSpec, group: &str, topics: &[String]) -> Result<Share, SinkError> {
        let mut decisions = DecisionsWatch::new(&k.bootstrap_servers, &k.claims_topic);
        let decided = decisions.look();
        let how = if k.log_membership || decided.log_membership {
            if !k.log_membership {
                tracing::warn!(
                    "the pipeline's claims topic says its group moved to membership from the \
                     log (its consumer group stopped assigning partitions): the sink joins no \
                     consumer group either"
                );
            }
            How::Log(Box::new(LogShare::start(k, group, topics)?))
        } else {
            How::Group {
                consumer: group_consumer(k, group, topics, decided.eager)?,
                decisions,
                looked: Instant::now(),
            }
        };
        Ok(Share {
            k: k.clone(),
            group: group.to_string(),
            topics: topics.to_vec(),
            how,
        })
    }

    /// The partitions that are this member's now, after waiting up to `wait` for news.
    pub(super) fn assigned(&mut self, wait: Duration) -> BTreeSet<TopicPartition> {
        if let How::Group {
            looked, decisions, ..
        } = &mut self.how
        {
            if looked.elapsed() >= LOOK_AT_CLAIMS_EVERY {
                *looked = Instant::now();
                if decisions.look().log_membership {
                    tracing::warn!(
                        "the pipeline's group moved to membership from the log (its consumer \
                         group stopped assigning partitions): the sink leaves its consumer group \
                         and follows a roster too"
                    );
                    // The group's consumer closes as it is replaced: it leaves the group.
                    match LogShare::start(&self.k, &self.group, &self.topics) {
                        Ok(log) => {
                            self.how = How::Log(Box::new(log));
                            counter!(m::MEMBERSHIP_MOVES, "reason" => "group").increment(1);
                        }
                        Err(e) => tracing::warn!("moving to membership from the log: {e}"),
                    }
                }
            }
        }
        match &mut self.how {
            How::Group { consumer, .. } => {
                if let Some(Err(e)) = consumer.poll(wait) {
                    tracing::warn!("consumer: {e}");
                }
                let assignment = consumer.assignment().unwrap_or_default();
                let _ = consumer.pause(&assignment);
                assignment
                    .elements()
                    .iter()
                    .map(|e| (e.topic().to_string(), e.partition()))
                    .collect()
            }
            How::Log(log) => {
                std::thread::sleep(wait);
                let every = if log.parts.is_empty() {
                    Duration::from_secs(1)
                } else {
                    PARTITIONS_EVERY
                };
                if log.looked.elapsed() >= every {
                    log.looked = Instant::now();
                    match partitions_of(&log.consumer, &self.topics) {
                        Ok(parts) if parts != log.parts => {
                            tracing::info!(
                                partitions = parts.len(),
                                "the sink's topics have new partitions"
                            );
                            log.roster.set_parts(parts.clone());
                            log.parts = parts;
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!("{e}"),
                    }
                }
                if let Some(want) = log.roster.tick() {
                    if want != log.mine {
                        tracing::info!(partitions = ?want, "membership from the log: this member's partitions");
                    }
                    log.mine = want;
                }
                log.mine.clone()
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
    /// Starts the roster of the sink's group `group` in its members topic, over `topics`'
    /// partitions; the consumer it keeps joins no group and only reads partition counts.
    fn start(k: &KafkaSpec, group: &str, topics: &[String]) -> Result<LogShare, SinkError> {
        let consumer: BaseConsumer = crate::clients::base_config(k)
            .create()
            .map_err(|e| startup("creating the consumer", e))?;
        let parts = partitions_of(&consumer, topics).map_err(|e| startup("startup", e))?;
        let members = format!("{group}-members");
        create_topic(k, &members)?;
        let wall = crate::clock::wall_ms();
        let token = format!(
            "{}.{}.{wall}",
            k.instance_id.replace(' ', "_"),
            std::process::id()
        );
        let roster = Roster::start(
            crate::clients::base_config(k),
            &k.bootstrap_servers,
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
    .map_err(|e| SinkError::Startup(format!("creating topic {name}: {e}")))
}
