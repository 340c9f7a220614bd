//! What the pipeline and its sinks ask of the brokers' metadata and admin APIs: the partitions
//! of topics, and creating topics that are missing.

use super::roster::TopicPartition;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use std::time::Duration;

/// Why a metadata or admin request failed, with the client's error.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A Kafka client call failed.
    #[error("{what}: {source}")]
    Kafka {
        /// The call, and on what.
        what: String,
        /// The client's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The broker refused to create a topic.
    #[error("creating topic {topic}: {code}")]
    Refused {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
    /// The runtime for the admin client could not start.
    #[error("starting the admin client's runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

fn kafka(what: impl Into<String>) -> impl FnOnce(rdkafka::error::KafkaError) -> AdminError {
    move |source| AdminError::Kafka {
        what: what.into(),
        source,
    }
}

/// The partitions of `topics`, sorted, as the brokers' metadata has them (a topic that does
/// not exist has none).
pub fn partitions_of<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topics: &[String],
) -> Result<Vec<TopicPartition>, AdminError> {
    let mut parts = Vec::new();
    for t in topics {
        let md = consumer
            .fetch_metadata(Some(t), Duration::from_secs(30))
            .map_err(kafka(format!("reading the partitions of {t}")))?;
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
) -> Result<Vec<String>, AdminError> {
    if topics.is_empty() {
        return Ok(Vec::new());
    }
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(kafka("creating an admin client"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let results = rt
        .block_on(admin.create_topics(
            topics.iter(),
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .map_err(kafka("creating topics"))?;
    let mut created = Vec::new();
    for r in results {
        match r {
            Ok(t) => created.push(t),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(AdminError::Refused { topic, code }),
        }
    }
    Ok(created)
}
