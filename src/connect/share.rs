//! How a sink's members share the partitions they read: the broker's consumer group, or
//! membership from the log in a topic of the sink's own.

use super::{SinkError, TopicPartition};
use crate::config::KafkaSpec;
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

/// The partitions of `topics`, as the brokers' metadata has them (a missing topic has none).
fn partitions_of(
    consumer: &BaseConsumer,
    topics: &[String],
) -> Result<Vec<TopicPartition>, String> {
    let mut parts = Vec::new();
    for t in topics {
        let md = consumer
            .fetch_metadata(Some(t), Duration::from_secs(30))
            .map_err(|e| format!("reading the partitions of {t}: {e}"))?;
        for topic in md.topics() {
            parts.extend(topic.partitions().iter().map(|p| (t.clone(), p.id())));
        }
    }
    parts.sort();
    Ok(parts)
}

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
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::types::RDKafkaErrorCode;
    let failed = |e: String| SinkError::Startup(format!("creating topic {name}: {e}"));
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = crate::source::base_config(k)
        .create()
        .map_err(|e| failed(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let results = rt
        .block_on(admin.create_topics(
            [&NewTopic::new(name, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .map_err(|e| failed(e.to_string()))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, e)) => return Err(failed(e.to_string())),
        }
    }
    Ok(())
}
