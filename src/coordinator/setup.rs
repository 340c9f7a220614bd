//! Startup: the topics the pipeline needs, how the state store opens, and the input decoder and
//! output encoder.

use super::errors::{Cause, RunError};
use super::Mode;
use crate::config::{KafkaSpec, PipelineSpec};
use crate::format::avro::{DEAD_LETTER_SCHEMA, WINDOW_RESULT_SCHEMA};
use crate::format::pane::KeyShape;
use crate::format::{Encoder, OutputFormat};
use crate::input::avro::{Framing, SchemaRegistry};
use crate::input::decode::Decoder;
use crate::state::store::{StateStore, StoreConfig};
use crate::windowing::engine::WINDOW_OPERATOR;
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use std::collections::BTreeMap;
use std::time::Duration;

/// What startup found and made of the topics.
#[derive(Debug)]
pub(super) struct Layout {
    /// Partitions of the repartition topic (0 without the hop).
    pub(super) repartition_partitions: i32,
    /// Partitions of the offsets topic (0 without the first stage).
    pub(super) offsets_partitions: i32,
    /// `topic/partition` of every input partition: the watermark sources of the hop.
    pub(super) source_names: Vec<String>,
}

/// Opens the state store within `k`'s memory budget, with a column family for every windowing
/// partition this member may own (the repartition topic's partitions with the hop, the input's
/// without), created together when the database opens instead of one at a time at assignment.
pub(super) fn open_store(
    k: &KafkaSpec,
    layout: &Layout,
    mode: Mode,
) -> Result<StateStore, RunError> {
    StateStore::open_with(&k.state_dir, &store_config(k, layout, mode))
        .map_err(|e| RunError::Startup(Cause::part("opening the state store", e)))
}

fn store_config(k: &KafkaSpec, layout: &Layout, mode: Mode) -> StoreConfig {
    let partitions = match mode {
        Mode::Passthrough | Mode::Rows => 0,
        Mode::Windows if k.repartition => layout.repartition_partitions,
        Mode::Windows => layout.source_names.len() as i32,
    };
    StoreConfig {
        memory: k.state_memory,
        column_families: (0..partitions)
            .map(|p| StateStore::cf_name(WINDOW_OPERATOR, p))
            .collect(),
    }
}

/// The partition counts of every topic in the cluster (topics without partitions left out).
fn partition_counts(probe: &BaseConsumer) -> Result<BTreeMap<String, i32>, RunError> {
    let meta = probe
        .fetch_metadata(None, Duration::from_secs(10))
        .map_err(|e| RunError::Startup(Cause::kafka("reading cluster metadata", e)))?;
    Ok(meta
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
        .collect())
}

/// Checks the input topics and creates the missing topics the pipeline writes: output and dead
/// letters (as many partitions as `output_partitions`, or the largest input), the claims topic (one
/// partition), the changelog (one
/// partition per windowing partition), and for the hop the repartition topic
/// (`repartition_partitions`, or the largest input) and the offsets topic (the largest input). A
/// repartition topic that exists with another partition count, or a changelog with fewer
/// partitions than there are windowing partitions, is refused.
/// Opens one connection to a bootstrap server as the raw-log reader does (TLS, SASL,
/// `ApiVersions`) before any librdkafka client is made: settings that cannot work (a certificate
/// not trusted, credentials refused, a listener that speaks another protocol) fail here at once,
/// with what to fix, instead of as clients that retry for ever. A broker that cannot be reached
/// yet is waited for (the member is alive and not ready meanwhile) until `stop` is requested;
/// returns whether it was reached.
pub(super) fn check_access(k: &KafkaSpec, stop: &super::Stop) -> Result<bool, RunError> {
    use crate::kafka::raw_log::{RawClient, RawLogError};
    use std::sync::atomic::Ordering;
    let mut pause = Duration::from_millis(200);
    loop {
        match RawClient::bootstrap(&k.brokers) {
            Ok(_) => return Ok(true),
            Err(RawLogError::Connect(e)) if e.is_retryable() => {
                tracing::warn!(error = %e, "the cluster cannot be reached yet; trying again");
            }
            Err(RawLogError::Connect(e)) => return Err(RunError::Access(e)),
            Err(e) => {
                return Err(RunError::Startup(Cause::part(
                    format!("connecting to {}", k.brokers),
                    e,
                )))
            }
        }
        let waited = std::time::Instant::now();
        while waited.elapsed() < pause {
            if stop.requested().load(Ordering::Relaxed) {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

pub(super) fn ensure_topics(k: &KafkaSpec, mode: Mode) -> Result<Layout, RunError> {
    let probe: BaseConsumer = crate::clients::base_config(k)
        .create()
        .map_err(|e| RunError::Startup(Cause::kafka("creating a client", e)))?;
    let counts = partition_counts(&probe)?;
    let mut inputs = Vec::new();
    for t in &k.input_topics {
        // Ask for the topic itself too: a cluster's metadata can lag behind a new topic.
        let n = match counts.get(t) {
            Some(&n) => n,
            None => {
                let meta = probe.fetch_metadata(Some(t), Duration::from_secs(10)).ok();
                let found = meta.as_ref().and_then(|m| m.topics().first());
                if let Some(e) = found.and_then(|x| x.error()) {
                    if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::TopicAuthorizationFailed {
                        return Err(RunError::Startup(Cause::found(format!(
                            "not authorized to read input topic {t}: the member's principal \
                             needs DESCRIBE and READ on it (docs/operations.md lists every \
                             permission a member needs)"
                        ))));
                    }
                }
                found
                    .filter(|x| x.error().is_none())
                    .map(|x| x.partitions().len() as i32)
                    .filter(|&n| n > 0)
                    .ok_or_else(|| {
                        RunError::Startup(Cause::found(format!("input topic {t} does not exist")))
                    })?
            }
        };
        inputs.push((t.clone(), n));
    }
    let largest = inputs.iter().map(|(_, n)| *n).max().unwrap_or(1);
    let hop = mode == Mode::Windows && k.repartition;
    let first_stage = hop || matches!(mode, Mode::Passthrough | Mode::Rows);
    let repartition = if hop {
        let want = k.repartition_partitions.unwrap_or(largest);
        if let Some(&have) = counts.get(&k.repartition_topic) {
            if have != want {
                return Err(RunError::Incompatible(format!(
                    "the repartition topic {} has {have} partitions, but this pipeline needs {want} ({}): \
                     the partition of a key would change. Set kafka.repartition_partitions = {have}, \
                     or replay into a new application_id",
                    k.repartition_topic,
                    if k.repartition_partitions.is_some() {
                        "kafka.repartition_partitions"
                    } else {
                        "the largest input partition count"
                    }
                )));
            }
        }
        want
    } else {
        0
    };
    let windowing_partitions = if hop { repartition } else { largest };
    if let Some(&have) = counts.get(&k.changelog_topic) {
        if mode == Mode::Windows && have < windowing_partitions {
            return Err(RunError::Incompatible(format!(
                "the changelog topic {} has {have} partitions, fewer than the {windowing_partitions} partitions this pipeline windows",
                k.changelog_topic
            )));
        }
    }
    let out_parts = k.output_partitions.unwrap_or(largest);
    let mut wanted = vec![
        NewTopic::new(&k.output_topic, out_parts, TopicReplication::Fixed(1)),
        NewTopic::new(&k.dead_letter_topic, out_parts, TopicReplication::Fixed(1)),
        // One partition: a member reads every claim in the order they were written.
        NewTopic::new(&k.claims_topic, 1, TopicReplication::Fixed(1))
            .set("cleanup.policy", "compact"),
    ];
    if mode == Mode::Windows {
        wanted.push(
            NewTopic::new(
                &k.changelog_topic,
                windowing_partitions,
                TopicReplication::Fixed(1),
            )
            .set("cleanup.policy", "compact"),
        );
    }
    if hop {
        wanted.push(NewTopic::new(
            &k.repartition_topic,
            repartition,
            TopicReplication::Fixed(1),
        ));
    }
    if first_stage {
        wanted.push(
            NewTopic::new(&k.offsets_topic, largest, TopicReplication::Fixed(1))
                .set("cleanup.policy", "compact"),
        );
    }
    // Only missing topics are created: a cluster where they all exist needs no admin rights (and
    // librdkafka's mock cluster, used by the fault-injection tests, has no CreateTopics).
    wanted.retain(|t| !counts.contains_key(t.name));
    create(k, &wanted)?;
    let offsets_partitions = if first_stage {
        counts.get(&k.offsets_topic).copied().unwrap_or(largest)
    } else {
        0
    };
    let source_names = inputs
        .iter()
        .flat_map(|(t, n)| (0..*n).map(move |p| format!("{t}/{p}")))
        .collect();
    Ok(Layout {
        repartition_partitions: repartition,
        offsets_partitions,
        source_names,
    })
}

/// Creates `topics` (an existing one is fine).
fn create(k: &KafkaSpec, topics: &[NewTopic<'_>]) -> Result<(), RunError> {
    let created = crate::kafka::admin::create_topics(&crate::clients::base_config(k), topics)
        .map_err(|e| RunError::Startup(Cause::part("creating topics", e)))?;
    for t in created {
        tracing::info!(topic = t, "created topic");
    }
    Ok(())
}

/// Builds the input decoder and the output encoder (JSON or Avro), connecting to the Schema
/// Registry when one is configured (a registry that is down is a startup error) and registering
/// the output schemas under `<topic>-value`.
pub(super) fn codecs(spec: &PipelineSpec, k: &KafkaSpec) -> Result<(Decoder, Encoder), RunError> {
    let registry = match &spec.schema_registry {
        None => None,
        Some(r) => Some(
            SchemaRegistry::open(&r.url, r.access.clone())
                .map_err(|e| RunError::Startup(Cause::part("the schema registry", e)))?,
        ),
    };
    let decoder = Decoder::new(&spec.input, spec.avro_input.as_ref(), registry.clone())
        .map_err(|e| RunError::Startup(Cause::part("the input decoder", e)))?;
    let encoder = match &spec.output_format {
        OutputFormat::Json => Encoder::json(&spec.engine.aggregations)
            .with_key_shape(KeyShape::of(spec.input.key.len())),
        OutputFormat::Avro {
            framing,
            pane_schema_id,
            dead_letter_schema_id,
        } => {
            let (pane_id, dl_id) = match (framing, &registry) {
                (Framing::Confluent, Some(r)) => {
                    let reg = |topic: &str, schema: &str| {
                        r.register(&format!("{topic}-value"), schema)
                            .map_err(|e| RunError::Startup(Cause::part("registering a schema", e)))
                    };
                    (
                        reg(&k.output_topic, WINDOW_RESULT_SCHEMA)?,
                        reg(&k.dead_letter_topic, DEAD_LETTER_SCHEMA)?,
                    )
                }
                _ => (
                    pane_schema_id.unwrap_or(0),
                    dead_letter_schema_id.unwrap_or(0),
                ),
            };
            Encoder::avro(&spec.engine.aggregations, *framing, pane_id, dl_id)
                .map_err(|e| RunError::Startup(Cause::part("the output encoder", e)))?
        }
    };
    Ok((decoder, encoder))
}
