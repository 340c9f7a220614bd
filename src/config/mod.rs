//! Pipeline configuration: one TOML file per pipeline, overridable from the environment.
//!
//! Loading has three steps. The file is parsed into a TOML tree; environment variables named
//! `TIDEMARK__SECTION__FIELD` (double underscores separate path segments, array items are
//! numbered: `TIDEMARK__AGGREGATIONS__0__FIELD`; in a librdkafka property's name single
//! underscores stand for dots: `TIDEMARK__KAFKA__PROPERTIES__SASL_PASSWORD`) replace or add
//! leaves of that tree; the tree is
//! deserialized with serde into [`RawConfig`], which rejects unknown keys. Then
//! [`RawConfig::validate`] checks every rule and reports *all* violations at once, or returns the
//! typed [`PipelineSpec`] the engine runs, together with warnings.
//!
//! Validation is written per section: `engine` (window, lateness, watermark, trigger,
//! aggregations: the [`crate::windowing::spec::EngineSpec`]), `io` (input paths, Avro input,
//! output format, Schema Registry, metrics address), `kafka`, and `validate`, which runs them in
//! the order the file reads and assembles the result.

pub use crate::input::InputSpec;
use crate::windowing::spec::EngineSpec;
pub use crate::windowing::watermark::WatermarkSpec;
pub use checker::Checker;
use serde::Deserialize;
pub use sink::SinkSection;
use std::fmt;
use std::path::Path;

/// Prefix of environment variables that override configuration leaves.
pub const ENV_PREFIX: &str = "TIDEMARK__";

/// The pipeline file as written, before validation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Pipeline name; part of every pane's deduplication id.
    pub name: String,
    /// How long window state is kept after the window's end for late data (default `"0s"`).
    #[serde(default)]
    pub allowed_lateness: Option<String>,
    /// Where the key, timestamp and values are in an event.
    pub input: RawInput,
    /// The window; absent in a pipeline of `[[columns]]`.
    #[serde(default)]
    pub window: Option<RawWindow>,
    /// The watermark strategy.
    #[serde(default)]
    pub watermark: RawWatermark,
    /// Early and late firings, and pane accumulation.
    #[serde(default)]
    pub trigger: RawTrigger,
    /// The aggregations computed for every pane.
    #[serde(default)]
    pub aggregations: Vec<RawAggregation>,
    /// Instead of a window and aggregations: the columns of the one row each record becomes.
    #[serde(default)]
    pub columns: Vec<RawColumn>,
    /// A condition on each pane's aggregations (SQL's `HAVING`), an expression over their
    /// names: a pane that fails it is written as a RETRACT.
    #[serde(default)]
    pub having: Option<String>,
    /// Kafka settings for `tidemark run` (not needed by `simulate`).
    #[serde(default)]
    pub kafka: Option<RawKafka>,
    /// The metrics and health endpoint of `tidemark run`.
    #[serde(default)]
    pub metrics: Option<RawMetrics>,
    /// How panes and dead letters are encoded (default JSON).
    #[serde(default)]
    pub output: Option<RawOutput>,
    /// A Confluent-compatible Schema Registry for Confluent-framed Avro.
    #[serde(default)]
    pub schema_registry: Option<RawRegistry>,
    /// The sinks' sections, `[sink.NAME]`, each checked by its sink ([`SinkSection`]).
    #[serde(default)]
    pub sink: Option<toml::Table>,
    /// The PostgreSQL sink's section under its earlier name: the same as `[sink.postgres]`.
    #[serde(default)]
    pub postgres: Option<toml::Table>,
    /// Directory that relative schema paths are resolved against (the pipeline file's directory
    /// when loaded from a file; the working directory otherwise).
    #[serde(skip)]
    pub base_dir: Option<std::path::PathBuf>,
}

/// The `[output]` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    /// `"json"` (default) or `"avro"` (`schemas/window_result.avsc`, `schemas/dead_letter.avsc`).
    #[serde(default)]
    pub format: Option<String>,
    /// `"plain"` (default) or `"confluent"`.
    #[serde(default)]
    pub framing: Option<String>,
    /// Schema id written in Confluent-framed panes when no registry is configured.
    #[serde(default)]
    pub pane_schema_id: Option<u32>,
    /// Schema id written in Confluent-framed dead letters when no registry is configured.
    #[serde(default)]
    pub dead_letter_schema_id: Option<u32>,
}

/// The `[schema_registry]` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRegistry {
    /// Base URL, `http://host:port` or `https://host:port`.
    pub url: String,
    /// The user of HTTP basic authentication (Confluent Cloud: the API key).
    #[serde(default)]
    pub username: Option<String>,
    /// Its password (Confluent Cloud: the API secret); `${env:NAME}` or `${file:PATH}` keep it
    /// out of the file.
    #[serde(default)]
    pub password: Option<String>,
    /// A PEM file of the CAs an https registry's certificate is checked against (default: the
    /// system's trust store).
    #[serde(default)]
    pub ca_location: Option<String>,
}

/// The validated `[schema_registry]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySpec {
    /// Base URL.
    pub url: String,
    /// TLS and basic authentication.
    pub access: crate::http::Access,
}

/// The `[metrics]` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// `host:port` serving `/metrics`, `/healthz` and `/readyz` (port 0 picks a free port).
    pub address: String,
}

/// The `[kafka]` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKafka {
    /// `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    /// Consumer group id and prefix of every topic and transactional id (default: the pipeline name).
    #[serde(default)]
    pub application_id: Option<String>,
    /// Unique, stable id of this member (default: random per process); part of the transactional
    /// id and, when set, the consumer's `group.instance.id` (static membership).
    #[serde(default)]
    pub instance_id: Option<String>,
    /// Use `instance_id` as the consumer's `group.instance.id` (default: false). Turn on for
    /// brokers that implement static membership (KIP-345) fully.
    #[serde(default)]
    pub static_membership: Option<bool>,
    /// How members share the partitions: `"group"` (default: the broker's consumer group) or
    /// `"log"` (heartbeats and claims in the claims topic; for brokers whose group coordinator
    /// cannot be relied on).
    #[serde(default)]
    pub membership: Option<String>,
    /// The input topic (the one-topic form of `input_topics`).
    #[serde(default)]
    pub input_topic: Option<String>,
    /// The input topics: records of all of them are grouped and windowed together.
    #[serde(default)]
    pub input_topics: Option<Vec<String>>,
    /// Whether records go through the repartition hop (default true): a first stage reads the
    /// input and writes each decoded record to the repartition topic, partitioned by its grouping
    /// key; a second stage windows them there. `false` declares the input already partitioned by
    /// the grouping key (the Kafka record key equals `[input] key`): records are windowed where
    /// they are, and one whose record key is not its grouping key is dead-lettered
    /// (`key_mismatch`). Only for a single input topic.
    #[serde(default)]
    pub repartition: Option<bool>,
    /// Whether the hop's first stage folds the records of one key and one set of windows within
    /// a commit cycle into one partial aggregate and sends partials across the hop instead of
    /// records (default true; session windows and triggers that count records always send
    /// records).
    #[serde(default)]
    pub combine: Option<bool>,
    /// The repartition topic (default `<application_id>-repartition`).
    #[serde(default)]
    pub repartition_topic: Option<String>,
    /// Partitions of the repartition topic when tidemark creates it (default: the largest input
    /// partition count).
    #[serde(default)]
    pub repartition_partitions: Option<i32>,
    /// The topic of the first stage's offset markers (default `<application_id>-offsets`).
    #[serde(default)]
    pub offsets_topic: Option<String>,
    /// Where panes go.
    pub output_topic: String,
    /// Where late, malformed and future-stamped records go.
    pub dead_letter_topic: String,
    /// State changelog topic (default `<application_id>-changelog`).
    #[serde(default)]
    pub changelog_topic: Option<String>,
    /// Partitions of the output and dead-letter topics when tidemark creates them (default: as input).
    #[serde(default)]
    pub output_partitions: Option<i32>,
    /// How often the commit cycle runs (default `"100ms"`).
    #[serde(default)]
    pub commit_interval: Option<String>,
    /// The commit cycle also runs after this many records (default 10,000).
    #[serde(default)]
    pub max_batch_records: Option<usize>,
    /// Kafka `transaction.timeout.ms` (default `"10s"`).
    #[serde(default)]
    pub transaction_timeout: Option<String>,
    /// Records stamped further than this ahead of the wall clock are dead-lettered (default `"1h"`).
    #[serde(default)]
    pub max_future_skew: Option<String>,
    /// RocksDB directory (default `state/<application_id>`).
    #[serde(default)]
    pub state_dir: Option<String>,
    /// The backlog the scaling signal keeps the group under (default `"60s"`): see
    /// `tidemark_recommended_members`.
    #[serde(default)]
    pub target_backlog: Option<String>,
    /// Memory for all of RocksDB's column families together (default `"256MiB"`): the block
    /// cache, with memtables charged to it.
    #[serde(default)]
    pub state_memory: Option<String>,
    /// Window state each partition keeps in memory between commits (default `"64MiB"`); past
    /// it, clean keys are dropped after a commit and read back from RocksDB when next needed.
    #[serde(default)]
    pub cache_memory: Option<String>,
    /// Any librdkafka property, for consumer and producer alike.
    #[serde(default)]
    pub properties: std::collections::BTreeMap<String, String>,
}

/// The validated `[kafka]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSpec {
    /// The cluster: its bootstrap servers and how every connection to it is secured.
    pub brokers: crate::kafka::secure::Brokers,
    /// Consumer group id.
    pub application_id: String,
    /// This member's id.
    pub instance_id: String,
    /// Whether `instance_id` is also the consumer's `group.instance.id` (static membership: a
    /// member that restarts within the session timeout gets its partitions back without a
    /// rebalance). Off by default: static members have wedged a group after rapid restarts
    /// ([`crate::kafka::quirks::STATIC_PHANTOM_LEADER`]).
    pub static_membership: bool,
    /// Whether members share the partitions through the log instead of the broker's consumer
    /// group (`kafka.membership = "log"`, see `coordinator::roster`).
    pub log_membership: bool,
    /// Input topics, sorted (a record's source topic travels through the hop as its index here).
    pub input_topics: Vec<String>,
    /// Whether records go through the repartition hop; `false`: the input is partitioned by the
    /// grouping key already (checked per record).
    pub repartition: bool,
    /// Whether partial aggregates cross the hop instead of records, where the pipeline allows
    /// (see [`crate::windowing::fold`]).
    pub combine: bool,
    /// The repartition topic.
    pub repartition_topic: String,
    /// Partitions of the repartition topic when tidemark creates it (`None`: the largest input
    /// partition count).
    pub repartition_partitions: Option<i32>,
    /// The topic of the first stage's offset markers.
    pub offsets_topic: String,
    /// Output topic.
    pub output_topic: String,
    /// Dead-letter topic.
    pub dead_letter_topic: String,
    /// Changelog topic.
    pub changelog_topic: String,
    /// The claims topic (`<application_id>-claims`, one partition): each member writes a claim
    /// there for every partition it is assigned, and checks before each commit that no other
    /// member has claimed one of its partitions since (see `coordinator::claims`).
    pub claims_topic: String,
    /// Partitions for created output and dead-letter topics.
    pub output_partitions: Option<i32>,
    /// Commit interval in ms.
    pub commit_interval: i64,
    /// Records per batch before a commit.
    pub max_batch_records: usize,
    /// Transaction timeout in ms.
    pub transaction_timeout: i64,
    /// Maximum future skew in ms.
    pub max_future_skew: i64,
    /// State directory.
    pub state_dir: std::path::PathBuf,
    /// Target backlog of the scaling signal, in ms.
    pub target_backlog: i64,
    /// RocksDB's memory budget, in bytes.
    pub state_memory: usize,
    /// Bytes of window state each partition keeps in memory.
    pub cache_memory: usize,
    /// Extra librdkafka properties, secrets left out (`${env:...}` and `${file:...}` values
    /// read).
    pub properties: std::collections::BTreeMap<String, String>,
    /// The librdkafka properties that hold secrets (passwords, client secrets, keys): given to
    /// the clients, never shown.
    pub secrets: std::collections::BTreeMap<String, crate::kafka::secure::Secret>,
}

/// Where fields are in an input event.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInput {
    /// Input format: `"json"` (default) or `"avro"`.
    #[serde(default = "default_format")]
    pub format: String,
    /// Avro reader schema file (Avro only).
    #[serde(default)]
    pub schema: Option<String>,
    /// Avro writer schema file of plain-framed data, when it differs from the reader schema.
    #[serde(default)]
    pub writer_schema: Option<String>,
    /// Avro framing: `"plain"` (default) or `"confluent"`.
    #[serde(default)]
    pub framing: Option<String>,
    /// Local Confluent schema ids: id → writer schema file.
    #[serde(default)]
    pub schema_ids: std::collections::BTreeMap<String, String>,
    /// Records for which this SQL expression is false or NULL are filtered out (counted, not
    /// dead-lettered).
    #[serde(default)]
    pub filter: Option<String>,
    /// The grouping key: one expression (`"user_id"`), several (`["page", "lower(country)"]`,
    /// each an expression or `{ expr, alias }`), or none (`[]`: one group per window).
    /// Required of a windowing pipeline; a pipeline of rows has none (a row keeps its record's
    /// Kafka key).
    #[serde(default)]
    pub key: Option<RawKey>,
    /// The event time: a field or expression (epoch milliseconds or an RFC 3339 string), or
    /// `"$record_timestamp"` (the Kafka record's timestamp). Not with `time = "processing"`.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// The unit of an event time given as a number: `"ms"` (default), `"s"`, `"us"` or `"ns"`.
    /// RFC 3339 strings and `$record_timestamp` are not affected.
    #[serde(default)]
    pub timestamp_unit: Option<String>,
    /// `"event"` (default: the time `timestamp` says) or `"processing"` (the time a record is
    /// read; the watermark is the processing-time clock).
    #[serde(default)]
    pub time: Option<String>,
}

/// The grouping key as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawKey {
    /// One expression.
    One(String),
    /// Several parts, or none.
    Parts(Vec<RawKeyPart>),
}

/// One key part as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawKeyPart {
    /// An expression, named after its text.
    Expr(String),
    /// An expression with the name its column and field take.
    Aliased {
        /// The expression.
        expr: String,
        /// The part's name.
        alias: String,
    },
}

fn default_format() -> String {
    "json".to_string()
}

/// The window as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum RawWindow {
    /// Fixed windows.
    Tumbling {
        /// Window length.
        size: String,
        /// Grid offset from the epoch.
        #[serde(default)]
        offset: Option<String>,
    },
    /// Hopping windows.
    Sliding {
        /// Window length.
        size: String,
        /// Distance between window starts.
        slide: String,
        /// Grid offset from the epoch.
        #[serde(default)]
        offset: Option<String>,
    },
    /// Cumulative windows (Flink's `CUMULATE`): windows from each period's start, one ending
    /// every step, up to the size.
    Cumulate {
        /// The period, and the largest window.
        size: String,
        /// How far each window ends after the one before; the size is a whole number of steps.
        step: String,
        /// Offset of the periods from the epoch.
        #[serde(default)]
        offset: Option<String>,
    },
    /// Per-key sessions.
    Session {
        /// Inactivity gap that closes a session.
        gap: String,
        /// Whether sessions that touch (events exactly one gap apart) merge, as Flink's do
        /// (default false: Beam's rule, they stay apart).
        #[serde(default)]
        merge_touching: bool,
    },
    /// One window per key that never closes.
    Global {
        /// Event time after a key's latest element at which its state is dropped.
        #[serde(default)]
        idle_expiry: Option<String>,
    },
}

/// The watermark strategy as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWatermark {
    /// Watermark = max event time seen − this (default `"0s"`).
    #[serde(default)]
    pub max_out_of_orderness: Option<String>,
    /// After this much processing time without data, the watermark follows processing time.
    #[serde(default)]
    pub idle_timeout: Option<String>,
}

/// The trigger as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrigger {
    /// Early firing delay, counted from the first element of the current pane.
    #[serde(default)]
    pub early_every: Option<String>,
    /// Early firing once this many elements arrived since the window's last pane.
    #[serde(default)]
    pub early_count: Option<i64>,
    /// `"every_element"` (default) or `"none"`.
    #[serde(default)]
    pub late: Option<String>,
    /// Late firing once this many late elements arrived since the window's last pane.
    #[serde(default)]
    pub late_count: Option<i64>,
    /// `"accumulating"` (default) or `"discarding"`.
    #[serde(default)]
    pub accumulation: Option<String>,
}

/// One column of a pipeline that writes a row per record, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawColumn {
    /// The column's name in the row.
    pub name: String,
    /// Its value: a field path or a SQL expression over the record.
    pub expr: String,
    /// `"timestamp"`: the value is epoch milliseconds, written as SQL writes a `TIMESTAMP(3)`
    /// (`2026-12-07 14:01:00.000`, UTC).
    #[serde(default)]
    pub format: Option<String>,
    /// The number of decimals a double is rounded to when written (a SQL `DECIMAL`'s scale,
    /// 0 to 15); integers are written as they are.
    #[serde(default)]
    pub scale: Option<u32>,
}

/// One aggregation as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAggregation {
    /// Output field name.
    pub name: String,
    /// The operation: `count`, `sum`, `min`, `max`, `mean`, `count_distinct`, `top_k`, ...
    pub op: String,
    /// The input: a field path or a SQL expression (not for `count`).
    #[serde(default)]
    pub field: Option<String>,
    /// The quantile of `approx_percentile`, from 0 to 1.
    #[serde(default)]
    pub q: Option<f64>,
    /// How many values `top_k` outputs (default 3).
    #[serde(default)]
    pub k: Option<u32>,
    /// The HyperLogLog precision of `approx_count_distinct` (default 14: 0.81% standard error).
    #[serde(default)]
    pub precision: Option<u8>,
    /// The relative error of `approx_percentile` (default 0.01).
    #[serde(default)]
    pub relative_error: Option<f64>,
    /// How many distinct values `count_distinct` and `top_k` keep per window (default 100,000);
    /// past it they continue as a sketch and a summary.
    #[serde(default)]
    pub max_values: Option<u32>,
}

/// Where a partition on which no transaction has ever committed starts (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The partition's first offset (`earliest`, `smallest`, `beginning`).
    Earliest,
    /// The partition's end (`latest`, `largest`, `end`).
    Latest,
}

impl OffsetReset {
    /// The position `auto.offset.reset` names; `None` for a value tidemark does not accept
    /// (`error` included: a partition without committed work is normal for a new pipeline).
    pub fn parse(value: &str) -> Option<OffsetReset> {
        match value {
            "earliest" | "smallest" | "beginning" => Some(OffsetReset::Earliest),
            "latest" | "largest" | "end" => Some(OffsetReset::Latest),
            _ => None,
        }
    }
}

/// A validated pipeline: everything the engine needs, in milliseconds and typed enums.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSpec {
    /// Input field locations.
    pub input: InputSpec,
    /// What the windowing core runs: window, lateness, watermark, trigger, aggregations. A
    /// pipeline of rows runs no engine: its spec is a global window with no aggregations, which
    /// nothing reads.
    pub engine: EngineSpec,
    /// The row each record becomes, when the pipeline has `[[columns]]` instead of a window.
    pub rows: Option<crate::format::row::RowSpec>,
    /// Kafka settings, if the file has a `[kafka]` section.
    pub kafka: Option<KafkaSpec>,
    /// Where `tidemark run` serves metrics and health, if the file has a `[metrics]` section.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Avro input settings; `None` for JSON input.
    pub avro_input: Option<crate::input::avro::AvroInputSpec>,
    /// How panes and dead letters are encoded.
    pub output_format: crate::format::OutputFormat,
    /// The Schema Registry, if configured: its base URL and how it is reached.
    pub schema_registry: Option<RegistrySpec>,
    /// The sinks' sections by sink name, as written (each checked by its sink).
    pub sinks: std::collections::BTreeMap<String, toml::Table>,
    /// The columns a table of panes gives the key: `key` for a key of one part, one column per
    /// part (named after its alias or text) for several, none for no key.
    pub key_columns: Vec<String>,
    /// The bytes of one output record: the producer's `message.max.bytes` less 4 KiB for
    /// headers. A pane larger than this is dead-lettered `too_large`, and the aggregations'
    /// states are kept within it ([`crate::windowing::spec::RecordBudget`]).
    pub record_bytes: usize,
}

impl PipelineSpec {
    /// A fingerprint of everything that shapes state: window kind and sizes, allowed lateness,
    /// watermark, trigger and accumulation, the aggregations' operations and inputs, the filter,
    /// the key and the event time, the input format, and how records reach the windows (the repartition hop
    /// or the record key) from which input topics. Names of the pipeline and of aggregations,
    /// other Kafka settings, metrics and the output format are left out: changing them keeps the
    /// state valid.
    /// Stored with the state and in the changelog; `run` refuses state of another fingerprint.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        use std::fmt::Write as _;
        let e = &self.engine;
        let mut text = String::from("tidemark-state-v2\n");
        // Written as before the merge rule existed unless it is set, so the fingerprints of
        // existing session pipelines stay as they were.
        match e.window {
            crate::windowing::assigner::WindowKind::Session {
                gap,
                merge_touching: false,
            } => {
                let _ = writeln!(text, "window=Session {{ gap: {gap} }}");
            }
            ref w => {
                let _ = writeln!(text, "window={w:?}");
            }
        }
        let _ = writeln!(text, "allowed_lateness={}", e.allowed_lateness);
        let _ = writeln!(
            text,
            "watermark={},{:?}",
            e.watermark.max_out_of_orderness, e.watermark.idle_timeout
        );
        if e.watermark.processing_time {
            let _ = writeln!(text, "time=processing");
        }
        let _ = writeln!(
            text,
            "trigger={:?},{:?},{:?}",
            e.trigger.early_every, e.trigger.late, e.trigger.accumulation
        );
        // Written only when set, so the fingerprints of pipelines without it stay as they were.
        if let Some(n) = e.trigger.early_count {
            let _ = writeln!(text, "early_count={n}");
        }
        if self.rows.is_some() {
            // A pipeline of rows keeps no window state: its fingerprint only keeps it apart.
            let _ = writeln!(text, "rows");
        }
        for a in &e.aggregations {
            let field = a.field.map(|i| self.input.fields[i].value.text.as_str());
            let _ = writeln!(text, "aggregation={},{:?}", fingerprint_op(&*a.op), field);
        }
        // Written as a one-field pipeline always wrote them, so its state stays valid.
        let _ = writeln!(text, "key={}", self.input.key_text());
        let _ = writeln!(text, "timestamp={}", self.input.time_text());
        if self.input.time_unit != crate::input::TimeUnit::Millis {
            // Only when set, so that the fingerprints of earlier pipelines stay as they were.
            let _ = writeln!(text, "timestamp_unit={}", self.input.time_unit.name());
        }
        if let Some(f) = &self.input.filter {
            let _ = writeln!(text, "filter={}", f.text);
        }
        let format = if self.avro_input.is_some() {
            "avro"
        } else {
            "json"
        };
        let _ = writeln!(text, "input={format}");
        // How records reach the windows: what a state entry's key and source mean.
        if let Some(k) = &self.kafka {
            let source = if k.repartition {
                "field-repartitioned"
            } else {
                "record-key"
            };
            let _ = writeln!(text, "key_source={source}");
            let _ = writeln!(text, "input_topics={}", k.input_topics.join(","));
        }
        let digest = Sha256::digest(text.as_bytes());
        digest[..8].iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

/// One violated rule, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Dotted path of the offending field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// An environment override does not apply.
    #[error("{0}")]
    Parse(String),
    /// A SQL pipeline file does not compile; every problem is listed with its line.
    #[error("the SQL does not compile:\n{0}")]
    Sql(#[from] tidemark_sql::SqlError),
    /// The configuration parsed but breaks rules; every violation is listed.
    #[error("invalid configuration:\n{}", .0.iter().map(|v| format!("  - {v}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Violation>),
}

/// Reads a pipeline file, applies `TIDEMARK__*` overrides from the process environment and
/// deserializes it.
pub fn load_raw(path: &Path) -> Result<RawConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_raw(&text, std::env::vars())
}

/// Parses TOML text and applies overrides from `env` (pairs of name and value).
pub fn parse_raw(
    text: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<RawConfig, ConfigError> {
    from_tree(toml::from_str(text)?, env)
}

/// Compiles a SQL pipeline file's text ([`tidemark_sql`]) into the pipeline document a TOML
/// file would hold, applies overrides from `env` and deserializes it; with what the compiler
/// made (the document and the query's columns).
pub fn parse_sql(
    text: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(RawConfig, tidemark_sql::Compiled), ConfigError> {
    let compiled = tidemark_sql::compile(text)?;
    let raw = from_tree(compiled.pipeline.clone(), env)?;
    Ok((raw, compiled))
}

/// A pipeline read from its file, TOML or SQL, and validated.
#[derive(Debug)]
pub struct Loaded {
    /// The pipeline.
    pub spec: PipelineSpec,
    /// What `validate` warns of.
    pub warnings: Vec<String>,
    /// For a SQL file, what it compiled into.
    pub sql: Option<tidemark_sql::Compiled>,
}

/// Reads a SQL pipeline file, applies `TIDEMARK__*` overrides from the environment, validates
/// it (sink sections checked by `sinks`).
pub fn load_sql(path: &Path, sinks: &[&dyn SinkSection]) -> Result<Loaded, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let (mut raw, compiled) = parse_sql(&text, std::env::vars())?;
    raw.base_dir = path.parent().map(Path::to_path_buf);
    let (spec, warnings) = raw.validate_with(sinks)?;
    Ok(Loaded {
        spec,
        warnings,
        sql: Some(compiled),
    })
}

/// Applies overrides from `env` to a pipeline document and deserializes it.
fn from_tree(
    mut tree: toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<RawConfig, ConfigError> {
    let mut overrides: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    overrides.sort();
    for (name, value) in overrides {
        apply_override(&mut tree, &name, &value)?;
    }
    deserialize_all(tree)
}

/// The most unknown keys reported at once (each is taken out of the tree and the file read
/// again, so the loop is bounded).
const MAX_UNKNOWN_KEYS: usize = 50;

/// Deserializes the tree, reporting every unknown key at once (each with the key it most likely
/// meant) rather than stopping at the first, as serde's `deny_unknown_fields` does: each unknown
/// key is noted and taken out, and the tree read again. A value of the wrong type or an unknown
/// variant ends the search (it cannot be taken out without changing what the rest means).
fn deserialize_all(mut tree: toml::Table) -> Result<RawConfig, ConfigError> {
    let mut problems = Vec::new();
    loop {
        let de = toml::Value::Table(tree.clone());
        let err = match serde_path_to_error::deserialize::<_, RawConfig>(de) {
            Ok(raw) if problems.is_empty() => return Ok(raw),
            Ok(_) => break,
            Err(e) => e,
        };
        let mut path: Vec<String> = err
            .path()
            .iter()
            .map(|seg| match seg {
                serde_path_to_error::Segment::Seq { index } => format!("[{index}]"),
                other => other.to_string(),
            })
            .collect();
        // The path is named apart; the deserializer's own "in `...`" line is left out.
        let message = err.inner().to_string();
        let message = message.lines().next().unwrap_or_default().to_string();
        let Some((unknown, expected)) = unknown_of(&message, "field") else {
            let message = match unknown_of(&message, "variant") {
                Some((got, expected)) => {
                    with_suggestion(format!("unknown value {got:?}"), &got, &expected)
                }
                None => message,
            };
            problems.push(Violation {
                field: dotted(&path),
                message,
            });
            break;
        };
        if path.last() != Some(&unknown) {
            path.push(unknown.clone());
        }
        problems.push(Violation {
            field: dotted(&path),
            message: with_suggestion("unknown key".to_string(), &unknown, &expected),
        });
        if problems.len() >= MAX_UNKNOWN_KEYS || !remove_at(&mut tree, &path) {
            break;
        }
    }
    Err(ConfigError::Invalid(problems))
}

/// From serde's "unknown field `x`, expected one of `a`, `b`" (or "unknown variant"): the name
/// and the names expected.
fn unknown_of(message: &str, what: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix(&format!("unknown {what} `"))?;
    let (name, rest) = rest.split_once('`')?;
    // The TOML deserializer adds where it was on a line of its own: "\nin `window.type`".
    let rest = rest.lines().next().unwrap_or(rest);
    let expected = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    Some((name.to_string(), expected))
}

/// `message`, with the expected name closest to `got` suggested when one is close.
fn with_suggestion(message: String, got: &str, expected: &[String]) -> String {
    let closest = expected
        .iter()
        .map(|e| (strsim::damerau_levenshtein(got, e), e))
        .filter(|(d, e)| *d <= 2.max(e.len() / 4))
        .min();
    match closest {
        Some((_, e)) => format!("{message}; did you mean {e:?}?"),
        None if expected.is_empty() => message,
        None => {
            let names: Vec<String> = expected.iter().map(|e| format!("`{e}`")).collect();
            format!("{message} (expected one of {})", names.join(", "))
        }
    }
}

/// A path of keys and `[i]` indexes, as violations name fields.
fn dotted(path: &[String]) -> String {
    let mut out = String::new();
    for seg in path {
        if !out.is_empty() && !seg.starts_with('[') {
            out.push('.');
        }
        out.push_str(seg);
    }
    if out.is_empty() {
        out.push_str("(top level)");
    }
    out
}

/// Removes the key at `path` (keys and `[i]` indexes) from `table`; whether it was there.
fn remove_at(table: &mut toml::Table, path: &[String]) -> bool {
    match path {
        [] => false,
        [last] => table.remove(last.as_str()).is_some(),
        [first, rest @ ..] => table
            .get_mut(first.as_str())
            .is_some_and(|v| remove_in(v, rest)),
    }
}

/// [`remove_at`] below a value: a table's key, or an array's element by `[i]`.
fn remove_in(v: &mut toml::Value, path: &[String]) -> bool {
    match (v, path.split_first()) {
        (toml::Value::Table(t), _) => remove_at(t, path),
        (toml::Value::Array(items), Some((seg, rest))) => seg
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| items.get_mut(i))
            .is_some_and(|item| remove_in(item, rest)),
        _ => false,
    }
}

/// Loads, validates and returns the pipeline with its warnings; sink sections are checked by
/// `sinks` (see [`RawConfig::validate_with`]).
pub fn load(
    path: &Path,
    sinks: &[&dyn SinkSection],
) -> Result<(PipelineSpec, Vec<String>), ConfigError> {
    let mut raw = load_raw(path)?;
    raw.base_dir = path.parent().map(Path::to_path_buf);
    raw.validate_with(sinks)
}

fn apply_override(tree: &mut toml::Table, name: &str, value: &str) -> Result<(), ConfigError> {
    let mut path: Vec<String> = name[ENV_PREFIX.len()..]
        .split("__")
        .map(|s| s.to_ascii_lowercase())
        .collect();
    // librdkafka's property names are dotted, which environment variables cannot be:
    // `TIDEMARK__KAFKA__PROPERTIES__SASL_PASSWORD` sets `sasl.password`.
    if path.len() == 3 && path[0] == "kafka" && path[1] == "properties" {
        path[2] = path[2].replace('_', ".");
    }
    if path.iter().any(|s| s.is_empty()) {
        return Err(ConfigError::Parse(format!(
            "environment override {name}: empty path segment"
        )));
    }
    // A value that parses as a TOML scalar keeps its type; anything else is a string.
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut node = tree;
    for (i, seg) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        if last {
            node.insert(seg.clone(), parsed);
            return Ok(());
        }
        let next_is_index = path[i + 1].parse::<usize>().is_ok();
        let entry = node
            .entry(seg.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if next_is_index {
            let idx: usize = path[i + 1].parse().expect("checked");
            let arr = entry.as_array_mut().ok_or_else(|| {
                ConfigError::Parse(format!(
                    "environment override {name}: {seg} is not an array"
                ))
            })?;
            let item = arr.get_mut(idx).ok_or_else(|| {
                ConfigError::Parse(format!(
                    "environment override {name}: {seg} has no item {idx}"
                ))
            })?;
            let rest: Vec<String> = path[i + 2..].to_vec();
            let table = item.as_table_mut().ok_or_else(|| {
                ConfigError::Parse(format!(
                    "environment override {name}: {seg}[{idx}] is not a table"
                ))
            })?;
            if rest.is_empty() {
                return Err(ConfigError::Parse(format!(
                    "environment override {name}: cannot replace a whole array item"
                )));
            }
            let sub = format!("{ENV_PREFIX}{}", rest.join("__"));
            return apply_override(table, &sub, value);
        }
        node = entry.as_table_mut().ok_or_else(|| {
            ConfigError::Parse(format!("environment override {name}: {seg} is not a table"))
        })?;
    }
    Ok(())
}

mod checker;
mod engine;
mod input;
mod io;
mod kafka;
pub use kafka::ClientSettings;
mod rows;
mod sink;
mod validate;

#[cfg(test)]
mod tests;

/// An operation as the state fingerprint writes it: the five first operations as their enum was
/// printed when they were the only ones (so the state of those pipelines stays valid), the
/// others by name and parameters.
fn fingerprint_op(op: &dyn crate::windowing::aggregate::Aggregate) -> String {
    match op.name() {
        "count" => "Count".to_string(),
        "sum" => "Sum".to_string(),
        "min" => "Min".to_string(),
        "max" => "Max".to_string(),
        "mean" => "Mean".to_string(),
        name => format!("{name}({})", op.params()),
    }
}
