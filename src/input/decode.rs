//! Turning the input topic's records into events: JSON, or Avro (plain or Confluent-framed).

use super::avro::{AvroDecoder, AvroError, AvroInputSpec, SchemaRegistry};
use super::{DecodeError, Event, InputSpec, JsonDecoder, Meta};

/// Decodes input records in the pipeline's format.
#[derive(Debug)]
pub enum Decoder {
    /// JSON objects.
    Json(Box<JsonDecoder>),
    /// Avro, plain or Confluent-framed.
    Avro(Box<AvroDecoder>),
}

impl Decoder {
    /// The decoder for what the pipeline reads (`input`), in its format: JSON, or Avro with
    /// the `[input.avro]` settings; `registry` serves Confluent ids.
    pub fn new(
        input: &InputSpec,
        avro: Option<&AvroInputSpec>,
        registry: Option<SchemaRegistry>,
    ) -> Result<Decoder, AvroError> {
        Ok(match avro {
            None => Decoder::Json(Box::new(JsonDecoder::new(input.clone()))),
            Some(avro) => Decoder::Avro(Box::new(AvroDecoder::new(input.clone(), avro, registry)?)),
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
