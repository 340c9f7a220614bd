//! The records tidemark writes for others to read, in one home: output panes and dead letters —
//! their fields, headers, JSON and Avro encodings, and how they are read back.
//!
//! * [`pane`] — a pane's headers and JSON encoding, and [`pane::PaneRecord`], a pane read back;
//! * [`dead_letter`] — what a dead letter says ([`dead_letter::DeadLetter`]) and its headers;
//! * [`avro`] — the `WindowResult` and `DeadLetter` Avro schemas and encodings;
//! * [`repartition`] — the repartition topic's records (events and watermark reports) between the two
//!   stages of a pipeline that repartitions.
//!
//! [`Encoder`] writes panes and dead letters in the pipeline's output format (the coordinator
//! uses it); [`Decoder`] reads them back (`tail`, `audit --print`, the connectors and the tests).
//! Nothing else in the crate spells a pane or dead-letter header or field.

pub mod avro;
pub mod dead_letter;
pub mod pane;
pub mod repartition;
pub mod row;

use crate::input::avro::{decode_value, parse_schema, AvroError, Framing};
use crate::kafka::raw_log::RawRecord;
use crate::windowing::aggregate::AggSpec;
use crate::windowing::engine::Pane;
use dead_letter::DeadLetter;
use pane::PaneRecord;

/// How panes and dead letters are encoded, as validated from `[output]`.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    /// Panes as JSON; dead letters keep the original bytes.
    Json,
    /// Panes and dead-letter envelopes as Avro.
    Avro {
        /// Framing of output values.
        framing: Framing,
        /// Schema id of panes under Confluent framing when no registry is configured.
        pane_schema_id: Option<u32>,
        /// Schema id of dead letters under Confluent framing when no registry is configured.
        dead_letter_schema_id: Option<u32>,
    },
}

impl OutputFormat {
    /// The Avro framing, or `None` for JSON output.
    pub fn framing(&self) -> Option<Framing> {
        match self {
            OutputFormat::Json => None,
            OutputFormat::Avro { framing, .. } => Some(*framing),
        }
    }
}

/// Writes panes and dead letters in the pipeline's output format.
#[derive(Debug)]
pub struct Encoder {
    aggregations: Vec<AggSpec>,
    /// How JSON panes write the key.
    key_shape: pane::KeyShape,
    /// The Avro encoder; `None` for JSON output.
    avro: Option<avro::AvroEncoder>,
}

impl Encoder {
    /// A JSON encoder.
    pub fn json(aggregations: &[AggSpec]) -> Encoder {
        Encoder {
            aggregations: aggregations.to_vec(),
            key_shape: pane::KeyShape::One,
            avro: None,
        }
    }

    /// The encoder, writing JSON panes' keys as `shape` says (Avro panes carry the key's
    /// canonical text in their string field whatever its shape).
    pub fn with_key_shape(mut self, shape: pane::KeyShape) -> Encoder {
        self.key_shape = shape;
        self
    }

    /// An Avro encoder with the schema ids written under Confluent framing.
    pub fn avro(
        aggregations: &[AggSpec],
        framing: Framing,
        pane_schema_id: u32,
        dead_letter_schema_id: u32,
    ) -> Result<Encoder, AvroError> {
        Ok(Encoder {
            aggregations: aggregations.to_vec(),
            key_shape: pane::KeyShape::One,
            avro: Some(avro::AvroEncoder::new(
                framing,
                pane_schema_id,
                dead_letter_schema_id,
            )?),
        })
    }

    /// A pane's record value.
    pub fn pane(&self, p: &Pane, epoch: u64) -> Result<Vec<u8>, AvroError> {
        match &self.avro {
            None => Ok(pane::to_json(p, epoch, &self.aggregations, self.key_shape).into_bytes()),
            Some(enc) => enc.pane(p, epoch, &self.aggregations),
        }
    }

    /// A dead letter's record value: `None` under JSON output, where the dead letter keeps the
    /// original value bytes; the Avro `DeadLetter` envelope holding them otherwise.
    pub fn dead_letter(
        &self,
        d: &DeadLetter,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, AvroError> {
        match &self.avro {
            None => Ok(None),
            Some(enc) => enc.dead_letter(d, key, value).map(Some),
        }
    }
}

/// Reads panes and dead letters back from their record values.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// Framing and the pane and dead-letter schemas; `None` for JSON.
    avro: Option<(Framing, apache_avro::Schema, apache_avro::Schema)>,
}

impl Decoder {
    /// A decoder of JSON values (`None`) or Avro values with the given framing.
    pub fn new(framing: Option<Framing>) -> Decoder {
        let avro = framing.map(|f| {
            let schema = |name, text| parse_schema(name, text).expect("the bundled schemas parse");
            (
                f,
                schema("window_result.avsc", avro::WINDOW_RESULT_SCHEMA),
                schema("dead_letter.avsc", avro::DEAD_LETTER_SCHEMA),
            )
        });
        Decoder { avro }
    }

    /// A decoder for the pipeline's output format.
    pub fn for_output(format: &OutputFormat) -> Decoder {
        Decoder::new(format.framing())
    }

    /// A pane record's value as JSON (JSON output as is; an Avro `WindowResult` converted, with
    /// its aggregates in a map).
    pub fn pane_json(&self, value: &[u8]) -> Result<serde_json::Value, String> {
        match &self.avro {
            None => serde_json::from_slice(value).map_err(|e| format!("not JSON: {e}")),
            Some((framing, schema, _)) => avro_json(schema, *framing, value),
        }
    }

    /// Reads a pane from its record value.
    pub fn pane(&self, value: &[u8]) -> Result<PaneRecord, String> {
        PaneRecord::from_json(&self.pane_json(value)?)
    }

    /// A committed record of an output or dead-letter topic as one line of text: the value as is
    /// under JSON, or decoded to JSON under Avro (a dead-letter envelope when the record has the
    /// dead-letter headers, a pane otherwise).
    pub fn text(&self, r: &RawRecord) -> Result<String, String> {
        let value = r.value.as_deref().unwrap_or_default();
        match &self.avro {
            None => Ok(String::from_utf8_lossy(value).into_owned()),
            Some((framing, panes, dead)) => {
                let schema = if dead_letter::is_dead_letter(r) {
                    dead
                } else {
                    panes
                };
                avro_json(schema, *framing, value).map(|v| v.to_string())
            }
        }
    }
}

/// An Avro value decoded with its writer schema, as JSON.
fn avro_json(
    schema: &apache_avro::Schema,
    framing: Framing,
    value: &[u8],
) -> Result<serde_json::Value, String> {
    let decoded = decode_value(schema, framing, value)?;
    serde_json::Value::try_from(decoded).map_err(|e| e.to_string())
}

/// The replay epoch of a pane or dead letter (0 without the header, as before epochs existed).
pub fn epoch_of(r: &RawRecord) -> u64 {
    r.header(pane::EPOCH_HEADER)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
