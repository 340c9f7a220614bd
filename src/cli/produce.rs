//! `tidemark produce`: synthetic events to a topic.

use crate::produce;
use clap::Args;

/// Produce synthetic clickstream, payment or sensor events to a topic.
#[derive(Debug, Args)]
pub struct Produce {
    #[command(flatten)]
    connection: super::connection::Connection,
    /// Target topic (created when missing).
    #[arg(long)]
    topic: String,
    /// Partitions when the topic is created.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Number of events.
    #[arg(long, default_value_t = 10_000)]
    events: u64,
    /// Events per second; 0 = as fast as possible.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 100)]
    keys: u64,
    /// Maximum disorder in ms (applied to 10% of events).
    #[arg(long, default_value_t = 2_000)]
    disorder_ms: i64,
    /// Share of late records (stamped an hour back), 0..1.
    #[arg(long, default_value_t = 0.0)]
    late_share: f64,
    /// Share of malformed records, 0..1.
    #[arg(long, default_value_t = 0.0)]
    malformed_share: f64,
    /// Write records without a Kafka key (round-robin, as most producers write them); the key
    /// field stays in the value.
    #[arg(long)]
    no_key: bool,
    /// What the events describe.
    #[arg(long, value_enum, default_value_t = produce::Kind::Clickstream)]
    kind: produce::Kind,
    /// Encoding: json, avro (plain binary) or avro-confluent (needs --schema-id).
    #[arg(long, default_value = "json")]
    format: String,
    /// Schema id written in Confluent-framed records.
    #[arg(long)]
    schema_id: Option<u32>,
}

impl Produce {
    /// Produces the events and prints how many were sent.
    pub fn execute(self) -> anyhow::Result<i32> {
        let format = match (self.format.as_str(), self.schema_id) {
            ("json", None) => produce::Format::Json,
            ("avro", None) => produce::Format::Avro,
            ("avro-confluent", Some(id)) => produce::Format::AvroConfluent(id),
            ("avro-confluent", None) => anyhow::bail!("--format avro-confluent needs --schema-id"),
            ("json" | "avro", Some(_)) => {
                anyhow::bail!("--schema-id applies to --format avro-confluent only")
            }
            (other, _) => anyhow::bail!("unknown --format {other:?}: json, avro or avro-confluent"),
        };
        let sent = produce::run(&produce::ProduceOptions {
            client: self.connection.settings()?,
            topic: self.topic.clone(),
            partitions: self.partitions,
            events: self.events,
            rate: self.rate,
            keys: self.keys,
            disorder_ms: self.disorder_ms,
            late_share: self.late_share,
            malformed_share: self.malformed_share,
            no_key: self.no_key,
            kind: self.kind,
            format,
        })?;
        eprintln!("produce: {sent} events to {}", self.topic);
        Ok(0)
    }
}
