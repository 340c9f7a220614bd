//! Startup: the topics the pipeline needs, and the input decoder and output encoder.

use super::errors::RunError;
use crate::avro::{AvroEncoder, Framing, OutputFormat, SchemaRegistry};
use crate::config::{KafkaSpec, PipelineSpec};
use crate::source::decode::Decoder;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use std::time::Duration;

pub(super) fn ensure_topics(k: &KafkaSpec) -> Result<i32, RunError> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let probe: BaseConsumer = crate::source::base_config(k)
        .create()
        .map_err(|e| RunError::Startup(format!("creating a client: {e}")))?;
    let meta = probe
        .fetch_metadata(Some(&k.input_topic), Duration::from_secs(10))
        .map_err(|e| RunError::Startup(format!("reading metadata of {}: {e}", k.input_topic)))?;
    let partitions = meta
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map(|t| t.partitions().len() as i32)
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            RunError::Startup(format!("input topic {} does not exist", k.input_topic))
        })?;
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = crate::source::base_config(k)
        .create()
        .map_err(|e| RunError::Startup(format!("creating an admin client: {e}")))?;
    let out_parts = k.output_partitions.unwrap_or(partitions);
    // Only missing topics are created: a cluster where they all exist needs no admin rights (and
    // librdkafka's mock cluster, used by the fault-injection tests, has no CreateTopics).
    let meta = probe
        .fetch_metadata(None, Duration::from_secs(10))
        .map_err(|e| RunError::Startup(format!("reading cluster metadata: {e}")))?;
    let exists = |name: &str| {
        meta.topics()
            .iter()
            .any(|t| t.name() == name && t.error().is_none() && !t.partitions().is_empty())
    };
    let topics: Vec<NewTopic<'_>> = [
        NewTopic::new(&k.output_topic, out_parts, TopicReplication::Fixed(1)),
        NewTopic::new(&k.dead_letter_topic, out_parts, TopicReplication::Fixed(1)),
        NewTopic::new(&k.changelog_topic, partitions, TopicReplication::Fixed(1))
            .set("cleanup.policy", "compact"),
    ]
    .into_iter()
    .filter(|t| !exists(t.name))
    .collect();
    if topics.is_empty() {
        return Ok(partitions);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Startup(e.to_string()))?;
    let results = rt
        .block_on(admin.create_topics(
            topics.iter(),
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .map_err(|e| RunError::Startup(format!("creating topics: {e}")))?;
    for r in results {
        match r {
            Ok(t) => tracing::info!(topic = t, "created topic"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => return Err(RunError::Startup(format!("creating topic {t}: {e}"))),
        }
    }
    Ok(partitions)
}

/// Builds the input decoder and the output encoder, connecting to the Schema Registry when one is
/// configured (a registry that is down is a startup error) and registering the output schemas
/// under `<topic>-value`.
pub(super) fn codecs(
    spec: &PipelineSpec,
    k: &KafkaSpec,
) -> Result<(Decoder, Option<AvroEncoder>), RunError> {
    let registry = match &spec.schema_registry {
        None => None,
        Some(url) => {
            Some(SchemaRegistry::connect(url).map_err(|e| RunError::Startup(e.to_string()))?)
        }
    };
    let decoder =
        Decoder::for_spec(spec, registry.clone()).map_err(|e| RunError::Startup(e.to_string()))?;
    let encoder = match &spec.output_format {
        OutputFormat::Json => None,
        OutputFormat::Avro {
            framing,
            pane_schema_id,
            dead_letter_schema_id,
        } => {
            let (pane_id, dl_id) = match (framing, &registry) {
                (Framing::Confluent, Some(r)) => {
                    let reg = |topic: &str, schema: &str| {
                        r.register(&format!("{topic}-value"), schema)
                            .map_err(|e| RunError::Startup(e.to_string()))
                    };
                    (
                        reg(&k.output_topic, crate::avro::WINDOW_RESULT_SCHEMA)?,
                        reg(&k.dead_letter_topic, crate::avro::DEAD_LETTER_SCHEMA)?,
                    )
                }
                _ => (
                    pane_schema_id.unwrap_or(0),
                    dead_letter_schema_id.unwrap_or(0),
                ),
            };
            Some(
                AvroEncoder::new(*framing, pane_id, dl_id)
                    .map_err(|e| RunError::Startup(e.to_string()))?,
            )
        }
    };
    Ok((decoder, encoder))
}
