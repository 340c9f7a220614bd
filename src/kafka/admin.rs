//! What the pipeline and its sinks ask of the brokers' metadata and admin APIs: the partitions
//! of topics, and creating topics that are missing.

use super::roster::TopicPartition;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use std::time::Duration;

/// The partitions of `topics`, sorted, as the brokers' metadata has them (a topic that does
/// not exist has none).
pub fn partitions_of<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
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

/// Creates `topics` with a client of `config`; one that exists already is fine. Returns the
/// names of the topics it created.
pub fn create_topics(
    config: &ClientConfig,
    topics: &[NewTopic<'_>],
) -> Result<Vec<String>, String> {
    if topics.is_empty() {
        return Ok(Vec::new());
    }
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|e| format!("creating an admin client: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let results = rt
        .block_on(admin.create_topics(
            topics.iter(),
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .map_err(|e| format!("creating topics: {e}"))?;
    let mut created = Vec::new();
    for r in results {
        match r {
            Ok(t) => created.push(t),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => return Err(format!("creating topic {t}: {e}")),
        }
    }
    Ok(created)
}
