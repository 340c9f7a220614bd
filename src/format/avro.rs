//! The Avro encodings of panes (`WindowResult`, `schemas/window_result.avsc`) and dead letters
//! (`DeadLetter`, `schemas/dead_letter.avsc`), plain or Confluent-framed.

use super::dead_letter::DeadLetter;
use crate::input::avro::{encode_value, parse_schema, AvroError, Framing};
use crate::windowing::aggregate::AggSpec;
use crate::windowing::aggregate::{Output, OutputType, Value as Datum};
use crate::windowing::engine::Pane;
use apache_avro::types::Value;
use apache_avro::Schema;
use std::collections::HashMap;

/// The pane schema, `schemas/window_result.avsc`.
pub const WINDOW_RESULT_SCHEMA: &str = include_str!("../../schemas/window_result.avsc");
/// The dead-letter envelope schema, `schemas/dead_letter.avsc`.
pub const DEAD_LETTER_SCHEMA: &str = include_str!("../../schemas/dead_letter.avsc");

/// Encodes panes and dead-letter envelopes as Avro.
pub struct AvroEncoder {
    pane_schema: Schema,
    dead_letter_schema: Schema,
    /// The symbols of the dead-letter schema's `Reason` enum, in order.
    reasons: Vec<String>,
    framing: Framing,
    pane_id: u32,
    dead_letter_id: u32,
}

impl std::fmt::Debug for AvroEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroEncoder")
            .field("framing", &self.framing)
            .field("pane_id", &self.pane_id)
            .field("dead_letter_id", &self.dead_letter_id)
            .finish()
    }
}

impl AvroEncoder {
    /// An encoder; under Confluent framing the ids are the registered ones (or the local ones).
    pub fn new(
        framing: Framing,
        pane_id: u32,
        dead_letter_id: u32,
    ) -> Result<AvroEncoder, AvroError> {
        let dead_letter_schema = parse_schema("dead_letter.avsc", DEAD_LETTER_SCHEMA)?;
        let reasons = match &dead_letter_schema {
            Schema::Record(r) => {
                r.fields
                    .iter()
                    .find(|f| f.name == "reason")
                    .and_then(|f| match &f.schema {
                        Schema::Enum(e) => Some(e.symbols.clone()),
                        _ => None,
                    })
            }
            _ => None,
        }
        .ok_or_else(|| AvroError::SchemaShape {
            what: "dead_letter.avsc".into(),
            detail: "no reason enum".into(),
        })?;
        Ok(AvroEncoder {
            pane_schema: parse_schema("window_result.avsc", WINDOW_RESULT_SCHEMA)?,
            dead_letter_schema,
            reasons,
            framing,
            pane_id,
            dead_letter_id,
        })
    }

    fn frame(&self, schema: &Schema, id: u32, value: Value) -> Result<Vec<u8>, AvroError> {
        let id = (self.framing == Framing::Confluent).then_some(id);
        encode_value(schema, id, value)
    }

    /// A pane as a `WindowResult` record.
    pub fn pane(
        &self,
        p: &Pane,
        epoch: u64,
        aggregations: &[AggSpec],
    ) -> Result<Vec<u8>, AvroError> {
        // The schema's enum symbols are in `Timing`'s declaration order.
        let timing = p.timing as u32;
        let aggregates: HashMap<String, Value> = aggregations
            .iter()
            .zip(&p.values)
            .map(|(spec, v)| (spec.name.clone(), aggregate_value(spec.op.output(), v)))
            .collect();
        let value = Value::Record(vec![
            ("key".into(), Value::String(p.key.to_string())),
            (
                "window_start".into(),
                Value::TimestampMillis(p.window.start),
            ),
            ("window_end".into(), Value::TimestampMillis(p.window.end)),
            (
                "timing".into(),
                Value::Enum(timing, p.timing.as_str().to_string()),
            ),
            ("pane_index".into(), Value::Int(p.pane_index as i32)),
            ("dedup_id".into(), Value::String(p.dedup_id.to_string())),
            ("epoch".into(), Value::Long(epoch as i64)),
            ("count".into(), Value::Long(p.count as i64)),
            ("aggregates".into(), Value::Map(aggregates)),
            ("global_window".into(), Value::Boolean(p.window.is_global())),
        ]);
        self.frame(&self.pane_schema, self.pane_id, value)
    }

    /// A dead letter as a `DeadLetter` envelope holding the original key and value bytes.
    pub fn dead_letter(
        &self,
        d: &DeadLetter,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Vec<u8>, AvroError> {
        let reason = self
            .reasons
            .iter()
            .position(|r| *r == d.reason)
            .ok_or_else(|| {
                AvroError::NotInSchema(format!("reason {:?} is not in dead_letter.avsc", d.reason))
            })? as u32;
        let opt_long = |v: Option<i64>, ts: bool| match v {
            Some(x) if ts => Value::Union(1, Box::new(Value::TimestampMillis(x))),
            Some(x) => Value::Union(1, Box::new(Value::Long(x))),
            None => Value::Union(0, Box::new(Value::Null)),
        };
        let opt_bytes = |v: Option<&[u8]>| match v {
            Some(b) => Value::Union(1, Box::new(Value::Bytes(b.to_vec()))),
            None => Value::Union(0, Box::new(Value::Null)),
        };
        let value = Value::Record(vec![
            ("reason".into(), Value::Enum(reason, d.reason.clone())),
            ("detail".into(), Value::String(d.detail.clone())),
            ("source_topic".into(), Value::String(d.topic.clone())),
            ("source_partition".into(), Value::Int(d.partition)),
            ("source_offset".into(), Value::Long(d.offset)),
            ("watermark".into(), opt_long(d.watermark, true)),
            ("late_by_ms".into(), opt_long(d.late_by_ms, false)),
            ("epoch".into(), Value::Long(d.epoch as i64)),
            ("key".into(), opt_bytes(key)),
            ("value".into(), opt_bytes(value)),
        ]);
        self.frame(&self.dead_letter_schema, self.dead_letter_id, value)
    }
}

/// One aggregate in the `aggregates` map's union: every numeric aggregate a double (as they have
/// always been), `first` and `last` in their value's own branch, `top_k` an array of `TopValue`.
fn aggregate_value(ty: OutputType, v: &Output) -> Value {
    let scalar = |d: &Datum, numbers_as_double: bool| match d {
        Datum::Float(x) if x.is_finite() => Value::Union(1, Box::new(Value::Double(*x))),
        Datum::Int(i) if numbers_as_double => Value::Union(1, Box::new(Value::Double(*i as f64))),
        Datum::Int(i) => Value::Union(2, Box::new(Value::Long(*i))),
        Datum::Bool(b) => Value::Union(3, Box::new(Value::Boolean(*b))),
        Datum::Str(s) => Value::Union(4, Box::new(Value::String(s.to_string()))),
        Datum::Float(_) | Datum::Null => Value::Union(0, Box::new(Value::Null)),
    };
    match v {
        Output::Value(d) => scalar(d, ty != OutputType::Any),
        Output::Top(items) => Value::Union(
            5,
            Box::new(Value::Array(
                items
                    .iter()
                    .map(|(d, n)| {
                        Value::Record(vec![
                            ("value".into(), scalar(d, false)),
                            ("count".into(), Value::Long(*n as i64)),
                        ])
                    })
                    .collect(),
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::avro::decode_value;
    use crate::pipeline::Reason;

    /// Every reason the pipeline gives is a symbol of the schema's enum, so no dead letter of an
    /// Avro pipeline fails to encode.
    #[test]
    fn every_reason_encodes_and_reads_back() {
        let enc = AvroEncoder::new(Framing::Plain, 0, 0).unwrap();
        for reason in Reason::ALL {
            let d = DeadLetter {
                reason: reason.as_str().to_string(),
                topic: "events".into(),
                partition: 2,
                offset: 41,
                watermark: Some(1_000),
                late_by_ms: None,
                detail: "why".into(),
                epoch: 3,
            };
            let bytes = enc.dead_letter(&d, Some(b"k"), Some(b"v")).unwrap();
            let value = decode_value(&enc.dead_letter_schema, Framing::Plain, &bytes).unwrap();
            let Value::Record(fields) = value else {
                panic!("not a record: {value:?}")
            };
            assert_eq!(fields[0].0, "reason");
            match &fields[0].1 {
                Value::Enum(_, s) => assert_eq!(s, reason.as_str()),
                other => panic!("reason is {other:?}"),
            }
        }
    }

    /// A reason the schema does not know is an error, not a silently different symbol.
    #[test]
    fn unknown_reason_is_an_error() {
        let enc = AvroEncoder::new(Framing::Plain, 0, 0).unwrap();
        let d = DeadLetter {
            reason: "gremlins".into(),
            topic: "events".into(),
            partition: 0,
            offset: 0,
            watermark: None,
            late_by_ms: None,
            detail: String::new(),
            epoch: 0,
        };
        assert!(enc.dead_letter(&d, None, None).is_err());
    }
}
