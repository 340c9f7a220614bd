//! Pane records.
//!
//! A pane record has the grouping key as key and the pane as value. The JSON value is one object
//! with `key`, `window_start`, `window_end` (epoch ms; a global window's `[-inf, +inf)` as the
//! smallest and largest 64-bit integers), `timing`, `pane_index`, `dedup_id`,
//! `epoch` (the pipeline's replay epoch: 0, plus one per `tidemark replay`), `count` and one field
//! per aggregation, in that order; whole-number results print as integers, min, max and mean
//! of an empty pane are `null`, `first` and `last` keep their input's JSON type, and `top_k` is an
//! array of `{"value": …, "count": n}`. The Avro value is a `WindowResult` ([`super::avro`]) with the
//! aggregates in a map. Every pane record carries the headers `tidemark.dedup_id`,
//! `tidemark.pane_index`, `tidemark.epoch`, `tidemark.window_start`, `tidemark.window_end` and
//! `tidemark.timing`, so tools can check panes without decoding values.

use crate::windowing::aggregate::{AggSpec, Output, Value as Datum};
use crate::windowing::engine::Pane;
use crate::windowing::trigger::Timing;
use rdkafka::message::{Header, OwnedHeaders};
use serde_json::Value;
use std::fmt::Write;

/// Header of the pane's dedup id.
pub const DEDUP_ID_HEADER: &str = "tidemark.dedup_id";
/// Header of the pane index.
pub const PANE_INDEX_HEADER: &str = "tidemark.pane_index";
/// Header of the replay epoch on panes and dead letters (the same header as on changelog
/// markers).
pub use crate::changelog::EPOCH_HEADER;
/// Header of the window start (epoch ms).
pub const WINDOW_START_HEADER: &str = "tidemark.window_start";
/// Header of the window end (epoch ms).
pub const WINDOW_END_HEADER: &str = "tidemark.window_end";
/// Header of the pane's timing.
pub const TIMING_HEADER: &str = "tidemark.timing";

/// Output fields every pane has (`global_window` in Avro only); aggregation names must not reuse
/// them.
pub const RESERVED_FIELDS: [&str; 9] = [
    "key",
    "window_start",
    "window_end",
    "timing",
    "pane_index",
    "dedup_id",
    "epoch",
    "count",
    "global_window",
];

/// Headers of a pane record of replay epoch `epoch`.
pub fn headers(p: &Pane, epoch: u64) -> OwnedHeaders {
    OwnedHeaders::new_with_capacity(6)
        .insert(Header {
            key: DEDUP_ID_HEADER,
            value: Some(p.dedup_id.as_str()),
        })
        .insert(Header {
            key: PANE_INDEX_HEADER,
            value: Some(&p.pane_index.to_string()),
        })
        .insert(Header {
            key: EPOCH_HEADER,
            value: Some(&epoch.to_string()),
        })
        .insert(Header {
            key: WINDOW_START_HEADER,
            value: Some(&p.window.start.to_string()),
        })
        .insert(Header {
            key: WINDOW_END_HEADER,
            value: Some(&p.window.end.to_string()),
        })
        .insert(Header {
            key: TIMING_HEADER,
            value: Some(p.timing.as_str()),
        })
}

/// Writes a float as JSON: integral values within ±2^53 as integers, non-finite values as null.
pub fn write_number(out: &mut String, v: f64) {
    if !v.is_finite() {
        out.push_str("null");
    } else if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{}", Value::from(v));
    }
}

/// How a pane's grouping key is written in JSON, from the number of key parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyShape {
    /// No key: `null`.
    None,
    /// One part: its value as a string.
    #[default]
    One,
    /// Several parts: the JSON array of their values (the key's canonical encoding is that
    /// array's text).
    Many,
}

impl KeyShape {
    /// The shape of a key of `parts` parts.
    pub fn of(parts: usize) -> KeyShape {
        match parts {
            0 => KeyShape::None,
            1 => KeyShape::One,
            _ => KeyShape::Many,
        }
    }
}

/// Encodes a pane of replay epoch `epoch` as one line of JSON (without the newline), its key
/// written as `shape` says.
pub fn to_json(pane: &Pane, epoch: u64, aggregations: &[AggSpec], shape: KeyShape) -> String {
    let mut out = String::with_capacity(160);
    out.push_str("{\"key\":");
    match shape {
        KeyShape::None => out.push_str("null"),
        // A key of several parts is the JSON array `input::encode_key` wrote.
        KeyShape::Many => out.push_str(&pane.key),
        KeyShape::One => out.push_str(&Value::from(pane.key.as_str()).to_string()),
    }
    let _ = write!(
        out,
        ",\"window_start\":{},\"window_end\":{},\"timing\":\"{}\",\"pane_index\":{},\"dedup_id\":\"{}\",\"epoch\":{},\"count\":{}",
        pane.window.start,
        pane.window.end,
        pane.timing.as_str(),
        pane.pane_index,
        pane.dedup_id,
        epoch,
        pane.count
    );
    for (spec, value) in aggregations.iter().zip(&pane.values) {
        out.push(',');
        out.push_str(&Value::from(spec.name.as_str()).to_string());
        out.push(':');
        write_output(&mut out, value);
    }
    out.push('}');
    out
}

/// A bound on the length of [`to_json`]'s line for `pane`, found without writing it: every
/// string counted as if each byte were escaped (`\u00XX`), every number at its longest. A pane
/// whose bound fits a record needs no line to be found small enough.
pub fn json_len_bound(pane: &Pane, aggregations: &[AggSpec]) -> usize {
    const NUMBER: usize = 32;
    let text = |s: &str| 6 * s.len() + 2;
    let datum = |d: &Datum| match d {
        Datum::Str(s) => text(s),
        _ => NUMBER,
    };
    let mut n = 256 + text(&pane.key) + pane.dedup_id.len();
    for (spec, value) in aggregations.iter().zip(&pane.values) {
        n += text(&spec.name) + 2;
        n += match value {
            Output::Value(v) => datum(v),
            Output::Top(items) => {
                2 + items
                    .iter()
                    .map(|(v, _)| datum(v) + NUMBER + 20)
                    .sum::<usize>()
            }
        };
    }
    n
}

/// Writes one aggregate's value as JSON.
pub fn write_output(out: &mut String, value: &Output) {
    match value {
        Output::Value(v) => write_datum(out, v),
        Output::Top(items) => {
            out.push('[');
            for (i, (v, n)) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"value\":");
                write_datum(out, v);
                let _ = write!(out, ",\"count\":{n}}}");
            }
            out.push(']');
        }
    }
}

/// Writes a value as JSON: doubles as [`write_number`] does.
fn write_datum(out: &mut String, v: &Datum) {
    match v {
        Datum::Null => out.push_str("null"),
        Datum::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Datum::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Datum::Float(x) => write_number(out, *x),
        Datum::Str(s) => out.push_str(&Value::from(s.as_ref()).to_string()),
    }
}

/// A value as a JSON value (non-finite doubles as null).
pub fn datum_json(v: &Datum) -> Value {
    match v {
        Datum::Null => Value::Null,
        Datum::Bool(b) => Value::Bool(*b),
        Datum::Int(i) => Value::from(*i),
        Datum::Float(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
        Datum::Str(s) => Value::from(s.as_ref()),
    }
}

/// A JSON value with every whole number within ±2^53 as an integer, as the JSON output writes
/// it, so a pane read from JSON equals the same pane read from Avro (whose numeric aggregates
/// are doubles).
fn canonical(v: &Value) -> Value {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 9_007_199_254_740_992.0 => {
                Value::from(x as i64)
            }
            _ => v.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
        }
        other => other.clone(),
    }
}

/// A pane read back from an output topic.
#[derive(Debug, Clone, PartialEq)]
pub struct PaneRecord {
    /// The grouping key.
    pub key: String,
    /// Window start, epoch ms.
    pub window_start: i64,
    /// Window end, epoch ms.
    pub window_end: i64,
    /// Why the pane fired.
    pub timing: Timing,
    /// Index of the pane within its window and epoch.
    pub pane_index: u32,
    /// The window's dedup id.
    pub dedup_id: String,
    /// Replay epoch (0 for panes written before epochs).
    pub epoch: u64,
    /// Elements in the pane.
    pub count: u64,
    /// Aggregates by name, in name order, as JSON values (`null` for min, max or mean of an
    /// empty pane).
    pub aggregates: Vec<(String, Value)>,
}

impl PaneRecord {
    /// Reads a pane from its JSON form: the JSON output encoding (aggregates as fields) or an
    /// Avro `WindowResult` decoded to JSON (aggregates in a map).
    pub fn from_json(v: &Value) -> Result<PaneRecord, String> {
        let o = v.as_object().ok_or("a pane is a JSON object")?;
        let int = |name: &str| {
            o.get(name)
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("field {name} missing or not an integer"))
        };
        let text = |name: &str| {
            o.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("field {name} missing or not a string"))
        };
        let in_range = |name: &str, v: i64, max: i64| {
            if (0..=max).contains(&v) {
                Ok(v)
            } else {
                Err(format!("field {name} out of range: {v}"))
            }
        };
        let mut aggregates: Vec<(String, Value)> = o
            .iter()
            .filter(|(k, _)| *k != "aggregates" && !RESERVED_FIELDS.contains(&k.as_str()))
            .chain(
                o.get("aggregates")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten(),
            )
            .map(|(k, v)| (k.clone(), canonical(v)))
            .collect();
        aggregates.sort_by(|a, b| a.0.cmp(&b.0));
        let timing = text("timing")?;
        // The canonical key: a string as is; several parts (an array) as the array's text; no
        // key (null) as the empty string.
        let key = match o.get("key") {
            Some(Value::String(k)) => k.clone(),
            Some(Value::Null) => String::new(),
            Some(parts @ Value::Array(_)) => parts.to_string(),
            _ => return Err("field key missing or not a string, an array or null".to_string()),
        };
        Ok(PaneRecord {
            key,
            window_start: int("window_start")?,
            window_end: int("window_end")?,
            timing: Timing::parse(timing).ok_or_else(|| format!("unknown timing {timing:?}"))?,
            pane_index: in_range("pane_index", int("pane_index")?, u32::MAX as i64)? as u32,
            dedup_id: text("dedup_id")?.to_string(),
            epoch: match o.get("epoch") {
                None => 0,
                Some(_) => in_range("epoch", int("epoch")?, i64::MAX)? as u64,
            },
            count: in_range("count", int("count")?, i64::MAX)? as u64,
            aggregates,
        })
    }

    /// The aggregate named `name` as a number, if the pane has it and it is a number.
    pub fn aggregate(&self, name: &str) -> Option<f64> {
        self.aggregate_value(name).and_then(Value::as_f64)
    }

    /// The aggregate named `name`, if the pane has it.
    pub fn aggregate_value(&self, name: &str) -> Option<&Value> {
        self.aggregates
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windowing::assigner::Window;
    use crate::windowing::engine::dedup_id;

    fn aggs() -> Vec<AggSpec> {
        vec![
            AggSpec::new("s", "sum", Some(0)),
            AggSpec::new("lo", "min", Some(0)),
            AggSpec::new("avg", "mean", Some(0)),
        ]
    }

    fn pane() -> Pane {
        Pane {
            key: "u\"1".into(),
            window: Window::new(0, 60_000),
            timing: Timing::OnTime,
            pane_index: 0,
            dedup_id: dedup_id("p", "u\"1", Window::new(0, 60_000)),
            count: 0,
            values: [Datum::Float(3.0), Datum::Null, Datum::Float(2.5)]
                .into_iter()
                .map(Output::Value)
                .collect(),
        }
    }

    proptest::proptest! {
        /// The bound on a pane's line is never below the line, whatever its strings hold.
        #[test]
        fn the_json_length_bound_holds(
            key in ".{0,40}",
            first in proptest::option::of(".{0,40}"),
            top in proptest::collection::vec((".{0,12}", 0u64..u64::MAX), 0..5),
            x in proptest::num::f64::ANY,
            n in proptest::num::i64::ANY,
        ) {
            let aggs = vec![
                AggSpec::new("s\"um", "sum", Some(0)),
                AggSpec::new("first", "first", Some(0)),
                AggSpec::new("n", "count", None),
                AggSpec::new("top", "top_k", Some(0)),
            ];
            let mut p = pane();
            p.key = key.into();
            p.values = smallvec::smallvec![
                Output::Value(Datum::Float(x)),
                Output::Value(first.map_or(Datum::Null, |s| Datum::Str(s.into()))),
                Output::Value(Datum::Int(n)),
                Output::Top(top.into_iter().map(|(v, c)| (Datum::Str(v.into()), c)).collect()),
            ];
            for shape in [KeyShape::None, KeyShape::One] {
                let line = to_json(&p, u64::MAX, &aggs, shape);
                proptest::prop_assert!(line.len() <= json_len_bound(&p, &aggs));
            }
        }
    }

    #[test]
    fn pane_json_has_fixed_field_order_and_nulls() {
        let pane = pane();
        assert_eq!(
            to_json(&pane, 0, &aggs(), KeyShape::One),
            format!(
                r#"{{"key":"u\"1","window_start":0,"window_end":60000,"timing":"ON_TIME","pane_index":0,"dedup_id":"{}","epoch":0,"count":0,"s":3,"lo":null,"avg":2.5}}"#,
                pane.dedup_id
            )
        );
    }

    #[test]
    fn a_pane_reads_back_as_written() {
        let pane = pane();
        let v: Value = serde_json::from_str(&to_json(&pane, 3, &aggs(), KeyShape::One)).unwrap();
        let r = PaneRecord::from_json(&v).unwrap();
        assert_eq!(
            r,
            PaneRecord {
                key: "u\"1".into(),
                window_start: 0,
                window_end: 60_000,
                timing: Timing::OnTime,
                pane_index: 0,
                dedup_id: pane.dedup_id.to_string(),
                epoch: 3,
                count: 0,
                aggregates: vec![
                    ("avg".into(), Value::from(2.5)),
                    ("lo".into(), Value::Null),
                    ("s".into(), Value::from(3))
                ],
            }
        );
        assert_eq!(r.aggregate("s"), Some(3.0));
        assert_eq!(r.aggregate("lo"), None);
    }

    #[test]
    fn json_and_avro_shaped_panes_read_the_same() {
        let json: Value = serde_json::from_str(
            r#"{"key":"alice","window_start":0,"window_end":60000,"timing":"ON_TIME","pane_index":1,"dedup_id":"x","count":4,"revenue":42.5,"clicks":4,"low":null}"#,
        )
        .unwrap();
        let avro: Value = serde_json::from_str(
            r#"{"key":"alice","window_start":0,"window_end":60000,"timing":"ON_TIME","pane_index":1,"dedup_id":"x","count":4,"aggregates":{"revenue":42.5,"clicks":4.0,"low":null}}"#,
        )
        .unwrap();
        let a = PaneRecord::from_json(&json).unwrap();
        assert_eq!(a, PaneRecord::from_json(&avro).unwrap());
        assert_eq!(a.epoch, 0, "a pane without an epoch is of epoch 0");
        assert_eq!(
            a.aggregates,
            vec![
                ("clicks".to_string(), Value::from(4)),
                ("low".to_string(), Value::Null),
                ("revenue".to_string(), Value::from(42.5))
            ]
        );
        assert!(PaneRecord::from_json(&serde_json::json!({"reason": "late"})).is_err());
        let bad_timing: Value = serde_json::from_str(
            r#"{"key":"a","window_start":0,"window_end":1,"timing":"SOON","pane_index":0,"dedup_id":"x","count":1}"#,
        )
        .unwrap();
        assert!(PaneRecord::from_json(&bad_timing)
            .unwrap_err()
            .contains("SOON"));
    }
}
