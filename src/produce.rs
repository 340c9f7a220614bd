//! `tidemark produce`: a load generator for the demo, benchmarks and smoke tests.
//!
//! It writes synthetic clickstream events as JSON — `{"user_id", "ts", "page", "price"}` keyed by
//! `user_id` — at a given rate (or as fast as possible), over a number of keys, with bounded
//! disorder and a share of late and malformed records. The topic is created when missing.

use crate::coordinator::wall_ms;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::time::{Duration, Instant};

/// What to produce.
#[derive(Debug, Clone)]
pub struct ProduceOptions {
    /// Bootstrap servers.
    pub bootstrap_servers: String,
    /// Target topic.
    pub topic: String,
    /// Partitions when the topic is created.
    pub partitions: i32,
    /// Number of events.
    pub events: u64,
    /// Events per second (0 = as fast as possible).
    pub rate: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Maximum disorder in ms (a random delay subtracted from 10% of events).
    pub disorder_ms: i64,
    /// Share of records stamped an hour in the past (late).
    pub late_share: f64,
    /// Share of records that are not valid JSON events.
    pub malformed_share: f64,
}

/// Errors of `produce`.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// A Kafka client error.
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// Creating the topic failed.
    #[error("creating topic {0}: {1}")]
    CreateTopic(String, String),
}

/// Creates `topic` with `partitions` partitions unless it exists.
pub fn ensure_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), ProduceError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ProduceError::CreateTopic(topic.into(), e.to_string()))?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let res = rt.block_on(admin.create_topics(
        [&new],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))?;
    for r in res {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => return Err(ProduceError::CreateTopic(t, e.to_string())),
        }
    }
    Ok(())
}

/// Produces the events; returns how many were sent.
pub fn run(o: &ProduceOptions) -> Result<u64, ProduceError> {
    ensure_topic(&o.bootstrap_servers, &o.topic, o.partitions)?;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &o.bootstrap_servers)
        .set("linger.ms", "5")
        .create()?;
    let pages = ["/", "/cart", "/checkout", "/item/42", "/item/7"];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ wall_ms() as u64;
    let start = Instant::now();
    for i in 0..o.events {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let user = format!("user-{}", x % o.keys.max(1));
        let mut ts = wall_ms();
        if x % 10 == 0 && o.disorder_ms > 0 {
            ts -= ((x >> 16) % o.disorder_ms as u64) as i64;
        }
        let roll = ((x >> 32) % 1_000_000) as f64 / 1_000_000.0;
        let value = if roll < o.malformed_share {
            format!("{{\"user_id\": \"{user}\", \"ts\": \"not a time\"")
        } else {
            if roll < o.malformed_share + o.late_share {
                ts -= 3_600_000;
            }
            let price = [0.0, 0.0, 5.0, 12.5, 30.0][(x >> 40) as usize % 5];
            format!(
                "{{\"user_id\":\"{user}\",\"ts\":{ts},\"page\":\"{}\",\"price\":{price}}}",
                pages[(x >> 48) as usize % pages.len()]
            )
        };
        let mut record = BaseRecord::to(&o.topic).key(&user).payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        producer.poll(Duration::ZERO);
        if o.rate > 0 {
            let due = Duration::from_secs_f64((i + 1) as f64 / o.rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    producer.flush(Duration::from_secs(30))?;
    Ok(o.events)
}
