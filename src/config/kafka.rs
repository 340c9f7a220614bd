//! Validation of the `[kafka]` section.

use super::checker::Checker;
use super::{KafkaSpec, OffsetReset, RawConfig, RawKafka};
use crate::kafka::secure::{is_secret, Brokers, Secret, Security};
use std::collections::BTreeMap;

pub(super) fn validate_kafka(cfg: &RawConfig, k: &RawKafka, c: &mut Checker) -> Option<KafkaSpec> {
    let app = k.application_id.clone().unwrap_or_else(|| cfg.name.clone());
    let topic_ok = |t: &str| {
        !t.is_empty()
            && t.len() <= 249
            && t.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch))
    };
    let mut inputs: Vec<String> = match (&k.input_topic, &k.input_topics) {
        (Some(t), None) => vec![t.clone()],
        (None, Some(ts)) if !ts.is_empty() => ts.clone(),
        (None, Some(_)) => {
            c.fail("kafka.input_topics", "names no topic");
            Vec::new()
        }
        (None, None) => {
            c.fail("kafka", "needs input_topic or input_topics");
            Vec::new()
        }
        (Some(_), Some(_)) => {
            c.fail(
                "kafka.input_topics",
                "give input_topic (one topic) or input_topics (a list), not both",
            );
            Vec::new()
        }
    };
    inputs.sort();
    for pair in inputs.windows(2) {
        if pair[0] == pair[1] {
            c.fail(
                "kafka.input_topics",
                format!("{:?} is named twice", pair[0]),
            );
        }
    }
    inputs.dedup();
    let input_field = if k.input_topics.is_some() {
        "kafka.input_topics"
    } else {
        "kafka.input_topic"
    };
    let named = inputs.iter().map(|t| (input_field, Some(t))).chain([
        ("kafka.output_topic", Some(&k.output_topic)),
        ("kafka.dead_letter_topic", Some(&k.dead_letter_topic)),
        ("kafka.changelog_topic", k.changelog_topic.as_ref()),
        ("kafka.repartition_topic", k.repartition_topic.as_ref()),
        ("kafka.offsets_topic", k.offsets_topic.as_ref()),
    ]);
    for (field, t) in named {
        if let Some(t) = t {
            if !topic_ok(t) {
                c.fail(
                    field,
                    format!("{t:?} is not a valid topic name (letters, digits, '.', '_', '-')"),
                );
            }
        }
    }
    let repartition = k.repartition.unwrap_or(true);
    if !repartition && inputs.len() > 1 {
        c.fail(
            "kafka.repartition",
            "false needs a single input topic: several topics are grouped together through the repartition hop",
        );
    }
    if !repartition && k.repartition_partitions.is_some() {
        c.fail(
            "kafka.repartition_partitions",
            "applies with repartition = true only",
        );
    }
    if !repartition && k.combine.is_some() {
        c.fail("kafka.combine", "applies with repartition = true only");
    }
    if matches!(k.repartition_partitions, Some(n) if n < 1) {
        c.fail("kafka.repartition_partitions", "must be at least 1");
    }
    if repartition && cfg.watermark.idle_timeout.is_none() {
        c.warnings.push(
            "kafka: with the repartition hop the watermark is the minimum over every input partition; one that gets no records holds every window back until it does (set watermark.idle_timeout to let idle partitions go)".to_string(),
        );
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
    let repartition_topic = k
        .repartition_topic
        .clone()
        .unwrap_or_else(|| format!("{app}-repartition"));
    let offsets_topic = k
        .offsets_topic
        .clone()
        .unwrap_or_else(|| format!("{app}-offsets"));
    let claims_topic = format!("{app}-claims");
    let mut distinct: Vec<&String> = inputs.iter().collect();
    distinct.extend([
        &k.output_topic,
        &k.dead_letter_topic,
        &changelog,
        &claims_topic,
    ]);
    if repartition {
        distinct.extend([&repartition_topic, &offsets_topic]);
    }
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
    match k.membership.as_deref() {
        None | Some("group") => {}
        Some("log") if k.static_membership == Some(true) => c.fail(
            "kafka.static_membership",
            "is a consumer-group setting: it cannot be used with membership = \"log\"",
        ),
        Some("log") => {}
        Some(other) => c.fail(
            "kafka.membership",
            format!("{other:?} is not \"group\" or \"log\""),
        ),
    }
    let (properties, secrets) = resolve_properties(&k.properties, c);
    let security = security_of(&properties, &secrets, c);
    if let Some(strategy) = k.properties.get("partition.assignment.strategy") {
        if let Err(e) = crate::kafka::assignor::protocol_of(strategy) {
            c.fail(
                "kafka.properties.partition.assignment.strategy",
                format!("{strategy:?} {e}"),
            );
        }
    }
    if let Some(reset) = k.properties.get("auto.offset.reset") {
        if OffsetReset::parse(reset).is_none() {
            c.fail(
                "kafka.properties.auto.offset.reset",
                format!("{reset:?}: use earliest, latest (or smallest, largest, beginning, end)"),
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
    let target_backlog = c.duration(
        "kafka.target_backlog",
        k.target_backlog.as_deref(),
        60_000,
        true,
    );
    let state_memory = c.size(
        "kafka.state_memory",
        k.state_memory.as_deref(),
        crate::state::store::DEFAULT_MEMORY,
        16 << 20,
    );
    let cache_memory = c.size(
        "kafka.cache_memory",
        k.cache_memory.as_deref(),
        crate::windowing::spec::DEFAULT_CACHE_BYTES,
        1 << 20,
    );
    let instance_id = k.instance_id.clone().unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{}-{nanos:x}", std::process::id())
    });
    Some(KafkaSpec {
        brokers: Brokers::new(k.bootstrap_servers.trim(), security?),
        static_membership: k.static_membership.unwrap_or(false),
        log_membership: k.membership.as_deref() == Some("log"),
        instance_id,
        input_topics: inputs,
        repartition,
        combine: k.combine.unwrap_or(true),
        repartition_topic,
        repartition_partitions: k.repartition_partitions,
        offsets_topic,
        output_topic: k.output_topic.clone(),
        dead_letter_topic: k.dead_letter_topic.clone(),
        changelog_topic: changelog,
        claims_topic,
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
        target_backlog: target_backlog?,
        state_memory: state_memory?,
        cache_memory: cache_memory?,
        properties,
        secrets,
        application_id: app,
    })
}

/// How a command outside a pipeline (`produce`, `audit`, `tail`, `probe`) reaches a cluster:
/// the brokers with their security, and the librdkafka properties for its clients.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// The cluster and how connections to it are secured.
    pub brokers: Brokers,
    /// The librdkafka properties that may be shown.
    pub properties: BTreeMap<String, String>,
    /// The librdkafka properties that hold secrets.
    pub secrets: BTreeMap<String, Secret>,
}

impl ClientSettings {
    /// Reads the settings from `bootstrap` and librdkafka `properties` (values may be
    /// `${env:NAME}` or `${file:PATH}`); every problem is listed.
    pub fn new(
        bootstrap: &str,
        properties: &BTreeMap<String, String>,
    ) -> Result<ClientSettings, super::ConfigError> {
        let mut c = Checker::default();
        if bootstrap.trim().is_empty() {
            c.fail("bootstrap_servers", "must not be empty");
        }
        let (properties, secrets) = resolve_properties(properties, &mut c);
        let security = security_of(&properties, &secrets, &mut c);
        match security {
            Some(security) if c.is_clean() => Ok(ClientSettings {
                brokers: Brokers::new(bootstrap.trim(), security),
                properties,
                secrets,
            }),
            _ => Err(super::ConfigError::Invalid(c.violations)),
        }
    }
}

/// The security settings the properties and secrets give, each problem recorded in `c` under
/// `kafka.properties.<name>`.
fn security_of(
    properties: &BTreeMap<String, String>,
    secrets: &BTreeMap<String, Secret>,
    c: &mut Checker,
) -> Option<Security> {
    let mut all = properties.clone();
    all.extend(
        secrets
            .iter()
            .map(|(key, v)| (key.clone(), v.expose().to_string())),
    );
    match Security::from_properties(&all) {
        Ok(s) => Some(s),
        Err(problems) => {
            for (key, message) in problems {
                c.fail(&format!("kafka.properties.{key}"), message);
            }
            None
        }
    }
}

/// The librdkafka properties with every value of the form `${env:NAME}` or `${file:PATH}` read
/// from the environment variable or the file (its text, without the final line break), split
/// into the ones that may be shown and the secrets ([`is_secret`]), which no output shows. A
/// variable that is not set or a file that cannot be read is a violation; its message never
/// holds a value.
fn resolve_properties(
    given: &BTreeMap<String, String>,
    c: &mut Checker,
) -> (BTreeMap<String, String>, BTreeMap<String, Secret>) {
    let mut shown = BTreeMap::new();
    let mut secrets = BTreeMap::new();
    for (key, value) in given {
        let Some(resolved) = resolve_value(&format!("kafka.properties.{key}"), value, c) else {
            continue;
        };
        if is_secret(key) {
            secrets.insert(key.clone(), Secret::new(resolved));
        } else {
            shown.insert(key.clone(), resolved);
        }
    }
    (shown, secrets)
}

/// `value` itself, or for `${env:NAME}` the environment variable and for `${file:PATH}` the
/// file's text without its final line break; `None`, with a violation of `field` that holds no
/// value, when the variable is not set or the file cannot be read.
pub(super) fn resolve_value(field: &str, value: &str, c: &mut Checker) -> Option<String> {
    match value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .and_then(|v| v.split_once(':'))
    {
        Some(("env", name)) => match std::env::var(name) {
            Ok(v) => Some(v),
            Err(_) => {
                c.fail(
                    field,
                    format!("names the environment variable {name}, which is not set"),
                );
                None
            }
        },
        Some(("file", path)) => match std::fs::read_to_string(path) {
            Ok(v) => Some(v.strip_suffix('\n').unwrap_or(&v).to_string()),
            Err(e) => {
                c.fail(
                    field,
                    format!("names the file {path}, which cannot be read: {e}"),
                );
                None
            }
        },
        Some((other, _)) if !other.contains(char::is_whitespace) => {
            c.fail(
                field,
                format!("${{{other}:...}} is not known: use ${{env:NAME}} or ${{file:PATH}}"),
            );
            None
        }
        _ => Some(value.to_string()),
    }
}

/// The bytes of one output record: `[kafka.properties] "message.max.bytes"` (the producer's
/// limit, 1,000,000 by default) less 4 KiB for headers and framing; the default without a
/// `[kafka]` section, as `simulate` runs.
pub(super) fn record_bytes(cfg: &RawConfig, c: &mut Checker) -> usize {
    use crate::windowing::spec::RECORD_HEADROOM as HEADROOM;
    let given = cfg
        .kafka
        .as_ref()
        .and_then(|k| k.properties.get("message.max.bytes"));
    match given.map(|v| v.trim().parse::<usize>()) {
        None => crate::windowing::spec::DEFAULT_RECORD_BYTES,
        Some(Ok(n)) if n > HEADROOM => n - HEADROOM,
        Some(_) => {
            c.fail(
                "kafka.properties.\"message.max.bytes\"",
                format!("must be a number of bytes above {HEADROOM}"),
            );
            crate::windowing::spec::DEFAULT_RECORD_BYTES
        }
    }
}
