//! Turning the input topic's records into events: JSON, or Avro (plain or Confluent-framed).

use crate::avro::{AvroDecoder, AvroError, SchemaRegistry};
use crate::config::PipelineSpec;
use crate::record::{DecodeError, Event, JsonDecoder, Meta};

/// Decodes input records in the pipeline's format.
#[derive(Debug)]
pub enum Decoder {
    /// JSON objects.
    Json(Box<JsonDecoder>),
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
            None => Decoder::Json(Box::new(JsonDecoder::new(spec.input.clone()))),
            Some(avro) => Decoder::Avro(Box::new(AvroDecoder::new(
                spec.input.clone(),
                avro,
                registry,
            )?)),
        })
    }

    /// Decodes a record value: the event, or `None` when the pipeline's filter rejects it.
    pub fn decode(&mut self, bytes: &[u8], meta: Meta) -> Result<Option<Event>, DecodeError> {
        match self {
            Decoder::Json(d) => d.decode(bytes, meta),
            Decoder::Avro(d) => d.decode(bytes, meta),
        }
    }
}
