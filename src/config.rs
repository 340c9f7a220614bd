//! Pipeline configuration: one TOML file per pipeline, overridable from the environment.
//!
//! Loading has three steps. The file is parsed into a TOML tree; environment variables named
//! `TIDEMARK__SECTION__FIELD` (double underscores separate path segments, array items are
//! numbered: `TIDEMARK__AGGREGATIONS__0__FIELD`) replace or add leaves of that tree; the tree is
//! deserialized with serde into [`RawConfig`], which rejects unknown keys. Then
//! [`RawConfig::validate`] checks every rule and reports *all* violations at once, or returns the
//! typed [`PipelineSpec`] the engine runs, together with warnings.

pub use crate::record::InputSpec;
use crate::windowing::aggregate::{AggOp, AggSpec};
use crate::windowing::assigner::WindowKind;
use crate::windowing::spec::EngineSpec;
use crate::windowing::time::{format_duration, parse_duration};
use crate::windowing::trigger::{Accumulation, LateFiring, TriggerSpec};
pub use crate::windowing::watermark::WatermarkSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
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
    /// The window.
    pub window: RawWindow,
    /// The watermark strategy.
    #[serde(default)]
    pub watermark: RawWatermark,
    /// Early and late firings, and pane accumulation.
    #[serde(default)]
    pub trigger: RawTrigger,
    /// The aggregations computed for every pane.
    pub aggregations: Vec<RawAggregation>,
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
    /// Base URL, `http://host:port`.
    pub url: String,
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
    /// Use `instance_id` as the consumer's `group.instance.id` (default: true when `instance_id`
    /// is set). Turn off for brokers whose static membership misbehaves.
    #[serde(default)]
    pub static_membership: Option<bool>,
    /// The input topic.
    pub input_topic: String,
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
    /// Any librdkafka property, for consumer and producer alike.
    #[serde(default)]
    pub properties: std::collections::BTreeMap<String, String>,
}

/// The validated `[kafka]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSpec {
    /// Bootstrap servers.
    pub bootstrap_servers: String,
    /// Consumer group id.
    pub application_id: String,
    /// This member's id.
    pub instance_id: String,
    /// Whether `instance_id` is also the consumer's `group.instance.id` (static membership: a
    /// member that restarts within the session timeout gets its partitions back without a
    /// rebalance). On by default when `instance_id` is configured, not generated.
    pub static_membership: bool,
    /// Input topic.
    pub input_topic: String,
    /// Output topic.
    pub output_topic: String,
    /// Dead-letter topic.
    pub dead_letter_topic: String,
    /// Changelog topic.
    pub changelog_topic: String,
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
    /// Extra librdkafka properties.
    pub properties: std::collections::BTreeMap<String, String>,
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
    /// Dotted path of the grouping key (string or number).
    pub key: String,
    /// Dotted path of the event timestamp: epoch milliseconds or an RFC 3339 string.
    pub timestamp: String,
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
    /// Per-key sessions.
    Session {
        /// Inactivity gap that closes a session.
        gap: String,
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
    /// `"every_element"` (default) or `"none"`.
    #[serde(default)]
    pub late: Option<String>,
    /// `"accumulating"` (default) or `"discarding"`.
    #[serde(default)]
    pub accumulation: Option<String>,
}

/// One aggregation as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAggregation {
    /// Output field name.
    pub name: String,
    /// `count`, `sum`, `min`, `max` or `mean`.
    pub op: String,
    /// Dotted path of the numeric input field (not for `count`).
    #[serde(default)]
    pub field: Option<String>,
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
    /// What the windowing core runs: window, lateness, watermark, trigger, aggregations.
    pub engine: EngineSpec,
    /// Kafka settings, if the file has a `[kafka]` section.
    pub kafka: Option<KafkaSpec>,
    /// Where `tidemark run` serves metrics and health, if the file has a `[metrics]` section.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Avro input settings; `None` for JSON input.
    pub avro_input: Option<crate::avro::AvroInputSpec>,
    /// How panes and dead letters are encoded.
    pub output_format: crate::avro::OutputFormat,
    /// Schema Registry base URL, if configured.
    pub schema_registry: Option<String>,
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
    /// The file is not TOML, or a key is unknown or of the wrong type.
    #[error("{0}")]
    Parse(String),
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
    let mut tree: toml::Table =
        toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
    let mut overrides: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    overrides.sort();
    for (name, value) in overrides {
        apply_override(&mut tree, &name, &value)?;
    }
    RawConfig::deserialize(toml::Value::Table(tree))
        .map_err(|e| ConfigError::Parse(format!("configuration: {e}")))
}

/// Loads, validates and returns the pipeline with its warnings.
pub fn load(path: &Path) -> Result<(PipelineSpec, Vec<String>), ConfigError> {
    let mut raw = load_raw(path)?;
    raw.base_dir = path.parent().map(Path::to_path_buf);
    raw.validate()
}

fn apply_override(tree: &mut toml::Table, name: &str, value: &str) -> Result<(), ConfigError> {
    let path: Vec<String> = name[ENV_PREFIX.len()..]
        .split("__")
        .map(|s| s.to_ascii_lowercase())
        .collect();
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

/// Collects violations while validating.
struct Checker {
    violations: Vec<Violation>,
    warnings: Vec<String>,
}

impl Checker {
    fn fail(&mut self, field: &str, message: impl Into<String>) {
        self.violations.push(Violation {
            field: field.to_string(),
            message: message.into(),
        });
    }

    /// Parses a duration, recording a violation; `positive` also rejects zero.
    fn duration(
        &mut self,
        field: &str,
        raw: Option<&str>,
        default: i64,
        positive: bool,
    ) -> Option<i64> {
        let Some(raw) = raw else { return Some(default) };
        match parse_duration(raw) {
            Ok(0) if positive => {
                self.fail(field, format!("must be longer than zero, got {raw:?}"));
                None
            }
            Ok(ms) => Some(ms),
            Err(e) => {
                self.fail(field, e.to_string());
                None
            }
        }
    }

    fn path(&mut self, field: &str, raw: &str) -> Vec<String> {
        let segs: Vec<String> = raw.split('.').map(str::to_string).collect();
        if raw.is_empty() || segs.iter().any(|s| s.is_empty()) {
            self.fail(field, format!("field path {raw:?} has an empty segment"));
        }
        segs
    }
}

/// Output fields every pane has; aggregation names must not reuse them.
pub const RESERVED_PANE_FIELDS: [&str; 7] = [
    "key",
    "window_start",
    "window_end",
    "timing",
    "pane_index",
    "dedup_id",
    "count",
];

impl RawConfig {
    /// Checks every rule and returns the typed pipeline with warnings, or every violation.
    pub fn validate(&self) -> Result<(PipelineSpec, Vec<String>), ConfigError> {
        let mut c = Checker {
            violations: Vec::new(),
            warnings: Vec::new(),
        };
        if self.name.trim().is_empty() {
            c.fail("name", "must not be empty");
        }
        let key = c.path("input.key", &self.input.key);
        let timestamp = c.path("input.timestamp", &self.input.timestamp);

        let window = self.validate_window(&mut c);
        let allowed_lateness = c.duration(
            "allowed_lateness",
            self.allowed_lateness.as_deref(),
            0,
            false,
        );
        let ooo = c.duration(
            "watermark.max_out_of_orderness",
            self.watermark.max_out_of_orderness.as_deref(),
            0,
            false,
        );
        let idle = match &self.watermark.idle_timeout {
            None => Some(None),
            Some(raw) => c
                .duration("watermark.idle_timeout", Some(raw), 0, true)
                .map(Some),
        };
        let early = match &self.trigger.early_every {
            None => Some(None),
            Some(raw) => c
                .duration("trigger.early_every", Some(raw), 0, true)
                .map(Some),
        };
        let late = match self.trigger.late.as_deref() {
            None | Some("every_element") => Some(LateFiring::EveryElement),
            Some("none") => Some(LateFiring::None),
            Some(other) => {
                c.fail(
                    "trigger.late",
                    format!("must be \"every_element\" or \"none\", got {other:?}"),
                );
                None
            }
        };
        let accumulation = match self.trigger.accumulation.as_deref() {
            None | Some("accumulating") => Some(Accumulation::Accumulating),
            Some("discarding") => Some(Accumulation::Discarding),
            Some(other) => {
                c.fail(
                    "trigger.accumulation",
                    format!("must be \"accumulating\" or \"discarding\", got {other:?}"),
                );
                None
            }
        };

        let mut fields: Vec<Vec<String>> = Vec::new();
        let mut aggregations = Vec::new();
        if self.aggregations.is_empty() {
            c.fail("aggregations", "at least one aggregation is required");
        }
        for (i, agg) in self.aggregations.iter().enumerate() {
            let at = format!("aggregations[{i}]");
            if agg.name.is_empty() {
                c.fail(&format!("{at}.name"), "must not be empty");
            } else if RESERVED_PANE_FIELDS.contains(&agg.name.as_str()) {
                c.fail(
                    &format!("{at}.name"),
                    format!(
                        "{:?} is a built-in pane field; choose another name",
                        agg.name
                    ),
                );
            } else if self.aggregations[..i].iter().any(|a| a.name == agg.name) {
                c.fail(
                    &format!("{at}.name"),
                    format!("duplicate output name {:?}", agg.name),
                );
            }
            let op = match agg.op.as_str() {
                "count" => Some(AggOp::Count),
                "sum" => Some(AggOp::Sum),
                "min" => Some(AggOp::Min),
                "max" => Some(AggOp::Max),
                "mean" | "avg" => Some(AggOp::Mean),
                other => {
                    c.fail(
                        &format!("{at}.op"),
                        format!("unknown operation {other:?}: use count, sum, min, max or mean"),
                    );
                    None
                }
            };
            let field = match (op, &agg.field) {
                (Some(AggOp::Count), Some(_)) => {
                    c.fail(&format!("{at}.field"), "count takes no field");
                    None
                }
                (Some(AggOp::Count), None) | (None, _) => None,
                (Some(_), None) => {
                    c.fail(
                        &format!("{at}.field"),
                        format!("{} needs a numeric field", agg.op),
                    );
                    None
                }
                (Some(_), Some(path)) => {
                    let segs = c.path(&format!("{at}.field"), path);
                    let idx = fields.iter().position(|f| *f == segs).unwrap_or_else(|| {
                        fields.push(segs);
                        fields.len() - 1
                    });
                    Some(idx)
                }
            };
            if let Some(op) = op {
                aggregations.push(AggSpec {
                    name: agg.name.clone(),
                    op,
                    field,
                });
            }
        }

        if let (Some(WindowKind::Sliding { size, slide, .. }), Some(Some(_))) = (window, early) {
            c.warnings.push(format!(
                "sliding window with early firings: every window keeps its own state (size/slide = {} copies per event), not shared slices",
                size / slide
            ));
        }

        let kafka = self.kafka.as_ref().map(|k| self.validate_kafka(k, &mut c));
        let input_spec = InputSpec {
            key: key.clone(),
            timestamp: timestamp.clone(),
            fields: fields.clone(),
        };
        let avro_input = self.validate_avro_input(&input_spec, &mut c);
        let output_format = self.validate_output(&mut c);
        let schema_registry = self.schema_registry.as_ref().map(|r| {
            if !r.url.starts_with("http://") {
                c.fail(
                    "schema_registry.url",
                    format!("{:?} must be an http:// URL", r.url),
                );
            }
            r.url.clone()
        });
        let metrics_address = self.metrics.as_ref().and_then(|m| {
            m.address
                .parse::<std::net::SocketAddr>()
                .map_err(|_| {
                    c.fail(
                        "metrics.address",
                        format!("{:?} is not an IP:port address", m.address),
                    )
                })
                .ok()
        });
        if !c.violations.is_empty() {
            return Err(ConfigError::Invalid(c.violations));
        }
        let (
            Some(window),
            Some(allowed_lateness),
            Some(ooo),
            Some(idle),
            Some(early),
            Some(late),
            Some(accumulation),
        ) = (
            window,
            allowed_lateness,
            ooo,
            idle,
            early,
            late,
            accumulation,
        )
        else {
            unreachable!("every None above recorded a violation")
        };
        Ok((
            PipelineSpec {
                input: InputSpec {
                    key,
                    timestamp,
                    fields,
                },
                engine: EngineSpec {
                    name: self.name.clone(),
                    window,
                    allowed_lateness,
                    watermark: WatermarkSpec {
                        max_out_of_orderness: ooo,
                        idle_timeout: idle,
                    },
                    trigger: TriggerSpec {
                        early_every: early,
                        late,
                        accumulation,
                    },
                    aggregations,
                },
                kafka: kafka.flatten(),
                metrics_address,
                avro_input: avro_input.flatten(),
                output_format: output_format.unwrap_or(crate::avro::OutputFormat::Json),
                schema_registry,
            },
            c.warnings,
        ))
    }

    /// Reads a schema file (relative to the pipeline file's directory) and checks that it parses;
    /// returns its text and the parsed schema.
    fn schema_file(
        &self,
        field: &str,
        path: &str,
        c: &mut Checker,
    ) -> Option<(String, apache_avro::Schema)> {
        let full = match &self.base_dir {
            Some(dir) if Path::new(path).is_relative() => dir.join(path),
            _ => Path::new(path).to_path_buf(),
        };
        match std::fs::read_to_string(&full) {
            Err(e) => {
                c.fail(field, format!("cannot read {}: {e}", full.display()));
                None
            }
            Ok(text) => match crate::avro::parse_schema(path, &text) {
                Ok(schema) => Some((text, schema)),
                Err(e) => {
                    c.fail(field, e.to_string());
                    None
                }
            },
        }
    }

    /// `Some(None)` for JSON input, `Some(Some(_))` for valid Avro input, `None` after violations.
    fn validate_avro_input(
        &self,
        spec: &InputSpec,
        c: &mut Checker,
    ) -> Option<Option<crate::avro::AvroInputSpec>> {
        use crate::avro::{AvroInputSpec, Framing};
        let i = &self.input;
        match i.format.as_str() {
            "json" => {
                for (field, set) in [
                    ("input.schema", i.schema.is_some()),
                    ("input.writer_schema", i.writer_schema.is_some()),
                    ("input.framing", i.framing.is_some()),
                    ("input.schema_ids", !i.schema_ids.is_empty()),
                ] {
                    if set {
                        c.fail(field, "applies to format = \"avro\" only");
                    }
                }
                return Some(None);
            }
            "avro" => {}
            other => {
                c.fail(
                    "input.format",
                    format!("unsupported format {other:?}: \"json\" or \"avro\""),
                );
                return None;
            }
        }
        let before = c.violations.len();
        let framing = match i.framing.as_deref() {
            None => Some(Framing::Plain),
            Some(f) => Framing::parse(f).or_else(|| {
                c.fail(
                    "input.framing",
                    format!("must be \"plain\" or \"confluent\", got {f:?}"),
                );
                None
            }),
        };
        let reader = match &i.schema {
            None => {
                c.fail(
                    "input.schema",
                    "format = \"avro\" needs a reader schema file",
                );
                None
            }
            Some(p) => self.schema_file("input.schema", p, c),
        };
        let reader = reader.map(|(text, schema)| {
            for problem in crate::avro::check_paths(&schema, spec) {
                c.fail("input.schema", problem);
            }
            text
        });
        let writer = i
            .writer_schema
            .as_ref()
            .and_then(|p| self.schema_file("input.writer_schema", p, c))
            .map(|(text, _)| text);
        let mut ids = BTreeMap::new();
        for (id, path) in &i.schema_ids {
            let field = format!("input.schema_ids.{id}");
            match id.parse::<u32>() {
                Err(_) => c.fail(&field, "schema ids are unsigned 32-bit integers"),
                Ok(n) => {
                    if let Some((text, _)) = self.schema_file(&field, path, c) {
                        ids.insert(n, text);
                    }
                }
            }
        }
        if framing == Some(Framing::Confluent)
            && self.schema_registry.is_none()
            && i.schema_ids.is_empty()
        {
            c.fail(
                "input.framing",
                "confluent framing needs [schema_registry] url or input.schema_ids",
            );
        }
        if framing == Some(Framing::Plain) && !i.schema_ids.is_empty() {
            c.fail(
                "input.schema_ids",
                "applies to framing = \"confluent\" only",
            );
        }
        if c.violations.len() > before {
            return None;
        }
        Some(Some(AvroInputSpec {
            reader: reader?,
            writer,
            framing: framing?,
            ids,
        }))
    }

    fn validate_output(&self, c: &mut Checker) -> Option<crate::avro::OutputFormat> {
        use crate::avro::{Framing, OutputFormat};
        let Some(o) = &self.output else {
            return Some(OutputFormat::Json);
        };
        match o.format.as_deref() {
            None | Some("json") => {
                if o.framing.is_some() || o.pane_schema_id.is_some() {
                    c.fail("output.framing", "applies to format = \"avro\" only");
                }
                Some(OutputFormat::Json)
            }
            Some("avro") => {
                let framing = match o.framing.as_deref() {
                    None => Framing::Plain,
                    Some(f) => match Framing::parse(f) {
                        Some(f) => f,
                        None => {
                            c.fail(
                                "output.framing",
                                format!("must be \"plain\" or \"confluent\", got {f:?}"),
                            );
                            return None;
                        }
                    },
                };
                if framing == Framing::Confluent
                    && self.schema_registry.is_none()
                    && (o.pane_schema_id.is_none() || o.dead_letter_schema_id.is_none())
                {
                    c.fail(
                        "output.framing",
                        "confluent framing needs [schema_registry] url, or both output.pane_schema_id and output.dead_letter_schema_id",
                    );
                    return None;
                }
                Some(OutputFormat::Avro {
                    framing,
                    pane_schema_id: o.pane_schema_id,
                    dead_letter_schema_id: o.dead_letter_schema_id,
                })
            }
            Some(other) => {
                c.fail(
                    "output.format",
                    format!("unsupported format {other:?}: \"json\" or \"avro\""),
                );
                None
            }
        }
    }

    fn validate_kafka(&self, k: &RawKafka, c: &mut Checker) -> Option<KafkaSpec> {
        let app = k
            .application_id
            .clone()
            .unwrap_or_else(|| self.name.clone());
        let topic_ok = |t: &str| {
            !t.is_empty()
                && t.len() <= 249
                && t.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch))
        };
        for (field, t) in [
            ("kafka.input_topic", Some(&k.input_topic)),
            ("kafka.output_topic", Some(&k.output_topic)),
            ("kafka.dead_letter_topic", Some(&k.dead_letter_topic)),
            ("kafka.changelog_topic", k.changelog_topic.as_ref()),
        ] {
            if let Some(t) = t {
                if !topic_ok(t) {
                    c.fail(
                        field,
                        format!("{t:?} is not a valid topic name (letters, digits, '.', '_', '-')"),
                    );
                }
            }
        }
        if !topic_ok(&app) {
            c.fail(
                "kafka.application_id",
                format!("{app:?} must be usable in topic names"),
            );
        }
        if k.bootstrap_servers.trim().is_empty() {
            c.fail("kafka.bootstrap_servers", "must not be empty");
        }
        let changelog = k
            .changelog_topic
            .clone()
            .unwrap_or_else(|| format!("{app}-changelog"));
        let distinct = [
            &k.input_topic,
            &k.output_topic,
            &k.dead_letter_topic,
            &changelog,
        ];
        for (i, a) in distinct.iter().enumerate() {
            if distinct[..i].contains(a) {
                c.fail("kafka", format!("topic {a:?} is used for two purposes"));
            }
        }
        if matches!(k.output_partitions, Some(n) if n < 1) {
            c.fail("kafka.output_partitions", "must be at least 1");
        }
        if k.max_batch_records == Some(0) {
            c.fail("kafka.max_batch_records", "must be at least 1");
        }
        for reserved in [
            "transactional.id",
            "group.id",
            "enable.auto.commit",
            "isolation.level",
            "bootstrap.servers",
        ] {
            if k.properties.contains_key(reserved) {
                c.fail(
                    &format!("kafka.properties.{reserved}"),
                    "is set by tidemark (exactly-once needs its own value)",
                );
            }
        }
        if k.static_membership == Some(true) && k.instance_id.is_none() {
            c.fail(
                "kafka.static_membership",
                "needs kafka.instance_id (the group.instance.id must be stable across restarts)",
            );
        }
        if let Some(reset) = k.properties.get("auto.offset.reset") {
            if OffsetReset::parse(reset).is_none() {
                c.fail(
                    "kafka.properties.auto.offset.reset",
                    format!(
                        "{reset:?}: use earliest, latest (or smallest, largest, beginning, end)"
                    ),
                );
            }
        }
        let commit_interval = c.duration(
            "kafka.commit_interval",
            k.commit_interval.as_deref(),
            100,
            true,
        );
        let txn = c.duration(
            "kafka.transaction_timeout",
            k.transaction_timeout.as_deref(),
            10_000,
            true,
        );
        let skew = c.duration(
            "kafka.max_future_skew",
            k.max_future_skew.as_deref(),
            3_600_000,
            false,
        );
        let instance_id = k.instance_id.clone().unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            format!("{}-{nanos:x}", std::process::id())
        });
        Some(KafkaSpec {
            bootstrap_servers: k.bootstrap_servers.clone(),
            static_membership: k.static_membership.unwrap_or(k.instance_id.is_some()),
            instance_id,
            input_topic: k.input_topic.clone(),
            output_topic: k.output_topic.clone(),
            dead_letter_topic: k.dead_letter_topic.clone(),
            changelog_topic: changelog,
            output_partitions: k.output_partitions,
            commit_interval: commit_interval?,
            max_batch_records: k.max_batch_records.unwrap_or(10_000),
            transaction_timeout: txn?,
            max_future_skew: skew?,
            state_dir: k
                .state_dir
                .clone()
                .map(Into::into)
                .unwrap_or_else(|| std::path::PathBuf::from("state").join(&app)),
            properties: k.properties.clone(),
            application_id: app,
        })
    }

    fn validate_window(&self, c: &mut Checker) -> Option<WindowKind> {
        match &self.window {
            RawWindow::Tumbling { size, offset } => {
                let size = c.duration("window.size", Some(size), 0, true);
                let offset = c.duration("window.offset", offset.as_deref(), 0, false);
                let (size, offset) = (size?, offset?);
                if offset >= size {
                    c.fail(
                        "window.offset",
                        format!("must be shorter than the size ({})", format_duration(size)),
                    );
                    return None;
                }
                Some(WindowKind::Tumbling { size, offset })
            }
            RawWindow::Sliding {
                size,
                slide,
                offset,
            } => {
                let size = c.duration("window.size", Some(size), 0, true);
                let slide = c.duration("window.slide", Some(slide), 0, true);
                let offset = c.duration("window.offset", offset.as_deref(), 0, false);
                let (size, slide, offset) = (size?, slide?, offset?);
                if slide > size {
                    c.fail(
                        "window.slide",
                        format!(
                            "slide ({}) is longer than size ({}): events would fall between windows",
                            format_duration(slide),
                            format_duration(size)
                        ),
                    );
                    return None;
                }
                if offset >= slide {
                    c.fail(
                        "window.offset",
                        format!(
                            "must be shorter than the slide ({})",
                            format_duration(slide)
                        ),
                    );
                    return None;
                }
                if size / slide > 100 {
                    c.warnings.push(format!(
                        "window.slide: size/slide = {}: every event is in that many windows and every key emits a pane per slide",
                        size / slide
                    ));
                }
                Some(WindowKind::Sliding {
                    size,
                    slide,
                    offset,
                })
            }
            RawWindow::Session { gap } => {
                let gap = c.duration("window.gap", Some(gap), 0, true)?;
                Some(WindowKind::Session { gap })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "clicks"
allowed_lateness = "1m"
[input]
key = "user.id"
timestamp = "ts"
[window]
type = "sliding"
size = "10m"
slide = "1m"
[watermark]
max_out_of_orderness = "5s"
idle_timeout = "30s"
[trigger]
early_every = "10s"
late = "none"
accumulation = "discarding"
[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "revenue"
op = "sum"
field = "amount"
[[aggregations]]
name = "avg"
op = "mean"
field = "amount"
"#;

    fn no_env() -> Vec<(String, String)> {
        Vec::new()
    }

    #[test]
    fn a_full_config_validates() {
        let (spec, warnings) = parse_raw(GOOD, no_env()).unwrap().validate().unwrap();
        assert_eq!(
            spec.engine.window,
            WindowKind::Sliding {
                size: 600_000,
                slide: 60_000,
                offset: 0
            }
        );
        assert_eq!(spec.engine.allowed_lateness, 60_000);
        assert_eq!(spec.input.key, vec!["user", "id"]);
        assert_eq!(spec.input.fields, vec![vec!["amount".to_string()]]);
        assert_eq!(spec.engine.aggregations[2].field, Some(0));
        assert_eq!(spec.engine.trigger.late, LateFiring::None);
        assert_eq!(spec.engine.watermark.idle_timeout, Some(30_000));
        assert_eq!(
            warnings.len(),
            1,
            "sliding + early firings warns: {warnings:?}"
        );
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let text = GOOD.replace("[window]\n", "[window]\nsizee = \"1m\"\n");
        let err = parse_raw(&text, no_env()).unwrap_err().to_string();
        assert!(err.contains("sizee"), "{err}");
        let text = format!("colour = \"blue\"\n{GOOD}");
        let err = parse_raw(&text, no_env()).unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn every_violation_is_listed_at_once() {
        let text = r#"
name = "x"
allowed_lateness = "-1s"
[input]
key = "k"
timestamp = "ts"
[window]
type = "sliding"
size = "1m"
slide = "2m"
[watermark]
max_out_of_orderness = "-5s"
[trigger]
early_every = "0s"
[[aggregations]]
name = "total"
op = "sum"
"#;
        let err = parse_raw(text, no_env()).unwrap().validate().unwrap_err();
        let ConfigError::Invalid(v) = err else {
            panic!("expected violations")
        };
        let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "window.slide",
                "allowed_lateness",
                "watermark.max_out_of_orderness",
                "trigger.early_every",
                "aggregations[0].field"
            ],
            "{v:?}"
        );
    }

    #[test]
    fn calendar_units_and_zero_sizes_are_rejected() {
        for (window, field) in [
            ("type = \"tumbling\"\nsize = \"1mo\"", "window.size"),
            ("type = \"tumbling\"\nsize = \"0s\"", "window.size"),
            ("type = \"session\"\ngap = \"1y\"", "window.gap"),
            (
                "type = \"sliding\"\nsize = \"1h\"\nslide = \"0ms\"",
                "window.slide",
            ),
        ] {
            let text = format!(
                "name = \"x\"\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\n{window}\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n"
            );
            let err = parse_raw(&text, no_env()).unwrap().validate().unwrap_err();
            let ConfigError::Invalid(v) = err else {
                panic!()
            };
            assert_eq!(v[0].field, field, "{v:?}");
        }
    }

    #[test]
    fn large_size_to_slide_ratio_warns() {
        let text = GOOD
            .replace("early_every = \"10s\"\n", "")
            .replace("slide = \"1m\"", "slide = \"1s\"");
        let (_, warnings) = parse_raw(&text, no_env()).unwrap().validate().unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("600"), "{warnings:?}");
    }

    #[test]
    fn environment_overrides_the_file() {
        let env = vec![
            ("TIDEMARK__WINDOW__SIZE".to_string(), "20m".to_string()),
            (
                "TIDEMARK__AGGREGATIONS__1__FIELD".to_string(),
                "price".to_string(),
            ),
            ("TIDEMARK__NAME".to_string(), "renamed".to_string()),
            ("UNRELATED".to_string(), "1".to_string()),
        ];
        let (spec, _) = parse_raw(GOOD, env).unwrap().validate().unwrap();
        assert_eq!(spec.engine.name, "renamed");
        assert_eq!(
            spec.engine.window,
            WindowKind::Sliding {
                size: 1_200_000,
                slide: 60_000,
                offset: 0
            }
        );
        assert_eq!(spec.input.fields[0], vec!["price".to_string()]);
        // An override naming an unknown key is an unknown key.
        let env = vec![("TIDEMARK__WINDOW__BOGUS".to_string(), "1".to_string())];
        assert!(parse_raw(GOOD, env)
            .unwrap_err()
            .to_string()
            .contains("bogus"));
    }

    const KAFKA: &str = r#"
[kafka]
bootstrap_servers = "127.0.0.1:9092"
input_topic = "clicks"
output_topic = "clicks-out"
dead_letter_topic = "clicks-dead"
[kafka.properties]
"session.timeout.ms" = "6000"
"#;

    #[test]
    fn a_kafka_section_validates_with_defaults() {
        let text = format!("{GOOD}{KAFKA}");
        let (spec, _) = parse_raw(&text, no_env()).unwrap().validate().unwrap();
        let k = spec.kafka.unwrap();
        assert_eq!(k.application_id, "clicks");
        assert_eq!(k.changelog_topic, "clicks-changelog");
        assert_eq!(
            (k.commit_interval, k.transaction_timeout, k.max_future_skew),
            (100, 10_000, 3_600_000)
        );
        assert_eq!(k.max_batch_records, 10_000);
        assert_eq!(k.state_dir, std::path::PathBuf::from("state/clicks"));
        assert_eq!(
            k.properties.get("session.timeout.ms").map(String::as_str),
            Some("6000")
        );
        // The environment overrides Kafka settings too.
        let env = vec![(
            "TIDEMARK__KAFKA__BOOTSTRAP_SERVERS".to_string(),
            "broker:9093".to_string(),
        )];
        let (spec, _) = parse_raw(&text, env).unwrap().validate().unwrap();
        assert_eq!(spec.kafka.unwrap().bootstrap_servers, "broker:9093");
    }

    #[test]
    fn a_configured_instance_id_makes_the_member_static_unless_turned_off() {
        let text = format!("{GOOD}{KAFKA}");
        let (spec, _) = parse_raw(&text, no_env()).unwrap().validate().unwrap();
        assert!(
            !spec.kafka.unwrap().static_membership,
            "generated id: dynamic"
        );
        let with_id = text.replace("[kafka]\n", "[kafka]\ninstance_id = \"host-1\"\n");
        let (spec, _) = parse_raw(&with_id, no_env()).unwrap().validate().unwrap();
        let k = spec.kafka.unwrap();
        assert!(k.static_membership);
        assert_eq!(k.instance_id, "host-1");
        // Turned off from the environment, as compose or Kubernetes would.
        let env = vec![(
            "TIDEMARK__KAFKA__STATIC_MEMBERSHIP".to_string(),
            "false".to_string(),
        )];
        let (spec, _) = parse_raw(&with_id, env).unwrap().validate().unwrap();
        let k = spec.kafka.unwrap();
        assert!(!k.static_membership);
    }

    #[test]
    fn bad_kafka_settings_are_all_listed() {
        let text = format!("{GOOD}{KAFKA}")
            .replace("output_topic = \"clicks-out\"", "output_topic = \"clicks\"")
            .replace(
                "dead_letter_topic = \"clicks-dead\"",
                "dead_letter_topic = \"no spaces\"\ncommit_interval = \"0ms\"",
            )
            .replace(
                "\"session.timeout.ms\" = \"6000\"",
                "\"transactional.id\" = \"mine\"\n\"auto.offset.reset\" = \"error\"",
            )
            .replace("[kafka]\n", "[kafka]\nstatic_membership = true\n");
        let ConfigError::Invalid(v) = parse_raw(&text, no_env()).unwrap().validate().unwrap_err()
        else {
            panic!("expected violations")
        };
        let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        for f in [
            "kafka.dead_letter_topic",
            "kafka",
            "kafka.properties.transactional.id",
            "kafka.commit_interval",
            "kafka.properties.auto.offset.reset",
            "kafka.static_membership",
        ] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
    }

    #[test]
    fn reserved_and_duplicate_names_are_rejected() {
        let text = GOOD
            .replace("name = \"n\"", "name = \"count\"")
            .replace("name = \"avg\"", "name = \"revenue\"");
        let ConfigError::Invalid(v) = parse_raw(&text, no_env()).unwrap().validate().unwrap_err()
        else {
            panic!()
        };
        assert_eq!(v.len(), 2, "{v:?}");
    }
}
