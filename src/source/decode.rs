//! Turning the input topic's records into events: JSON, or Avro (plain or Confluent-framed).

use crate::avro::{AvroDecoder, AvroError, SchemaRegistry};
use crate::config::PipelineSpec;
use crate::record::{DecodeError, Event, JsonDecoder};

/// Decodes input records in the pipeline's format.
#[derive(Debug)]
pub enum Decoder {
    /// JSON objects.
    Json(JsonDecoder),
    /// Avro, plain or Confluent-framed.
    Avro(Box<AvroDecoder>),
}

impl Decoder {
    /// The decoder the pipeline's `[input]` section asks for; `registry` serves Confluent ids.
    pub fn for_spec(
        spec: &PipelineSpec,
        registry: Option<SchemaRegistry>,
    ) -> Result<Decoder, AvroError> {
        Ok(match &spec.avro_input {
            None => Decoder::Json(JsonDecoder::new(spec.input.clone())),
            Some(avro) => Decoder::Avro(Box::new(AvroDecoder::new(
                spec.input.clone(),
                avro,
                registry,
            )?)),
        })
    }

    /// Decodes a record value; the grouping key is its `[input] key` field.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Event, DecodeError> {
        match self {
            Decoder::Json(d) => d.decode(bytes),
            Decoder::Avro(d) => d.decode(bytes, None),
        }
    }

    /// Decodes a record value whose grouping key is the record key.
    pub fn decode_keyed(&mut self, bytes: &[u8], key: String) -> Result<Event, DecodeError> {
        match self {
            Decoder::Json(d) => d.decode_keyed(bytes, key),
            Decoder::Avro(d) => d.decode(bytes, Some(key)),
        }
    }
}
