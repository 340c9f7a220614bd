//! How a sink's members share the partitions they read: the broker's consumer group, or
//! membership from the log in a topic of the sink's own.

use super::{SinkError, TopicPartition};
use crate::config::KafkaSpec;
use crate::kafka::admin::{create_topics, partitions_of};
use crate::kafka::members::Roster;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeSet;
use std::time::Duration;

/// How a sink's members share the partitions they read.
pub(super) enum Share {
    /// The broker's consumer group `<application_id>-<sink>`; the consumer only keeps the
    /// membership (its partitions stay paused: records are read from the raw log).
    Group(BaseConsumer),
    /// Membership from the log, in the topic `<application_id>-<sink>-members`.
    Log(Box<LogShare>),
}

/// A sink member's state under membership from the log.
pub(super) struct LogShare {
    roster: Roster,
    /// What the roster last said is this member's.
    mine: BTreeSet<TopicPartition>,
    /// Reads the topics' partition counts: a sink may start before the pipeline created its
    /// output topic, so the partitions are looked up again until there are some, and then now
    /// and then.
    consumer: BaseConsumer,
    topics: Vec<String>,
    parts: Vec<TopicPartition>,
    looked: std::time::Instant,
}

/// How often a sink under membership from the log looks up its topics' partitions again.
const PARTITIONS_EVERY: Duration = Duration::from_secs(10);

impl Share {
    /// Joins the sink's group `group` over `topics`.
    pub(super) fn start(k: &KafkaSpec, group: &str, topics: &[String]) -> Result<Share, SinkError> {
        let startup = |what: &str, e: String| SinkError::Startup(format!("{what}: {e}"));
        let consumer: BaseConsumer = crate::source::base_config(k)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("partition.assignment.strategy", "cooperative-sticky")
            .create()
            .map_err(|e| startup("creating the consumer", e.to_string()))?;
        if !k.log_membership {
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            consumer
                .subscribe(&names)
                .map_err(|e| startup("subscribing", e.to_string()))?;
            return Ok(Share::Group(consumer));
        }
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
            crate::source::base_config(k),
            &k.bootstrap_servers,
            &members,
            token,
            parts.clone(),
            crate::kafka::roster::session(&k.properties),
        )
        .map_err(|e| startup("membership from the log", e.to_string()))?;
        Ok(Share::Log(Box::new(LogShare {
            roster,
            mine: BTreeSet::new(),
            consumer,
            topics: topics.to_vec(),
            parts,
            looked: std::time::Instant::now(),
        })))
    }

    /// The partitions that are this member's now, after waiting up to `wait` for news.
    pub(super) fn assigned(&mut self, wait: Duration) -> BTreeSet<TopicPartition> {
        match self {
            Share::Group(consumer) => {
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
            Share::Log(log) => {
                std::thread::sleep(wait);
                let every = if log.parts.is_empty() {
                    Duration::from_secs(1)
                } else {
                    PARTITIONS_EVERY
                };
                if log.looked.elapsed() >= every {
                    log.looked = std::time::Instant::now();
                    match partitions_of(&log.consumer, &log.topics) {
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
        if let Share::Log(log) = self {
            log.roster.leave();
        }
    }
}

/// Creates the topic `name` of one partition unless it exists.
fn create_topic(k: &KafkaSpec, name: &str) -> Result<(), SinkError> {
    use rdkafka::admin::{NewTopic, TopicReplication};
    create_topics(
        &crate::source::base_config(k),
        &[NewTopic::new(name, 1, TopicReplication::Fixed(1))],
    )
    .map(|_| ())
    .map_err(|e| SinkError::Startup(format!("creating topic {name}: {e}")))
}
