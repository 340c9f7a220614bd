//! `approx_percentile`: one quantile from a DDSketch (Masson, Rim and Lee, VLDB 2019), by the
//! `sketches-ddsketch` crate.
//!
//! The guarantee: for a sketch of relative error `α` (default 1%), the value returned for the
//! quantile `q` is within `α·|x|` of `x`, the element of rank `⌊q·(n−1)⌋` in the window's values
//! sorted ascending. It holds for values of magnitude at least 10⁻⁹ (smaller ones count as 0) and
//! while the values span fewer than 2048 bins, a ratio of about 10¹⁷ between the largest and
//! the smallest magnitude at 1%; past that the lowest bins collapse. Sketches merge exactly, so
//! a merged session or a combined sliding window answers as if one sketch had seen it all.
//! NaN and infinite values are skipped like NULLs.
//!
//! The sketch is saved through its serde form, written as a small binary tree of JSON values
//! (so doubles keep every bit; JSON text would round them).

use super::value::{get_varint, put_value, put_varint, take, take_u64, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, State};
use serde_json::{Map, Number, Value as Json};
use sketches_ddsketch::{Config, DDSketch};
use std::sync::Arc;

/// The default relative error.
pub const DEFAULT_RELATIVE_ERROR: f64 = 0.01;
const MAX_BINS: u32 = 2048;
const MIN_VALUE: f64 = 1e-9;

#[derive(Debug)]
struct Percentile {
    q: f64,
    alpha: f64,
}

/// `approx_percentile`: the quantile `q` of the non-NULL values.
pub fn approx_percentile(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("approx_percentile", p, &["q", "relative_error"])?;
    let q =
        p.q.ok_or("approx_percentile needs q, the quantile (0.99 for the 99th percentile)")?;
    if !(0.0..=1.0).contains(&q) {
        return Err(format!("approx_percentile q must be from 0 to 1, not {q}"));
    }
    let alpha = p.relative_error.unwrap_or(DEFAULT_RELATIVE_ERROR);
    if !(0.0001..=0.5).contains(&alpha) {
        return Err(format!(
            "approx_percentile relative_error must be from 0.0001 to 0.5, not {alpha}"
        ));
    }
    Ok(Arc::new(Percentile { q, alpha }))
}

impl Aggregate for Percentile {
    fn name(&self) -> &'static str {
        "approx_percentile"
    }

    fn params(&self) -> String {
        format!("q = {}, relative_error = {}", self.q, self.alpha)
    }

    fn input(&self) -> Input {
        Input::Number
    }

    fn output(&self) -> OutputType {
        OutputType::Double
    }

    fn new_state(&self) -> Box<dyn State> {
        Box::new(Sketch {
            q: self.q,
            sketch: DDSketch::new(Config::new(self.alpha, MAX_BINS, MIN_VALUE)),
        })
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let b = &mut bytes;
        let [1, present] = take::<2>(b)? else {
            return None;
        };
        let sketch = match present {
            0 => return bytes.is_empty().then(|| self.new_state()),
            _ => serde_json::from_value(get_json(b, 0)?).ok()?,
        };
        let st = Sketch { q: self.q, sketch };
        bytes.is_empty().then_some(Box::new(st) as Box<dyn State>)
    }
}

#[derive(Clone)]
struct Sketch {
    q: f64,
    sketch: DDSketch,
}

impl std::fmt::Debug for Sketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sketch")
            .field("q", &self.q)
            .field("count", &self.sketch.count())
            .finish()
    }
}

impl State for Sketch {
    fn add(&mut self, v: &Value, _: i64) {
        if let Some(x) = v.as_f64().filter(|x| x.is_finite()) {
            self.sketch.add(x);
        }
    }

    fn merge(&mut self, other: &dyn State) {
        // Sketches of one aggregation share their configuration, so merging cannot fail.
        let _ = self.sketch.merge(&same::<Sketch>(other).sketch);
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        if self.sketch.count() == 0 {
            out.push(0);
            return;
        }
        out.push(1);
        let tree = serde_json::to_value(&self.sketch).expect("a sketch serialises");
        put_json(out, &tree);
    }

    fn evaluate(&self, _elements: u64) -> Output {
        Output::Value(match self.sketch.quantile(self.q) {
            Ok(Some(x)) => Value::Float(x),
            _ => Value::Null,
        })
    }
}

const J_ARRAY: u8 = 10;
const J_OBJECT: u8 = 11;
const J_U64: u8 = 12;
const J_COUNTS: u8 = 13;

/// Appends a JSON value tree in binary: scalars as [`put_value`] writes them (`u64` beyond the
/// `i64` range with its own tag), arrays and objects with their length. An array of
/// non-negative integers (a sketch's bins, mostly zeros) is written sparse: its length, then the
/// index gap and value of each non-zero entry, as LEB128.
fn put_json(out: &mut Vec<u8>, v: &Json) {
    if let Json::Array(items) = v {
        let counts: Option<Vec<u64>> = items.iter().map(Json::as_u64).collect();
        if let Some(counts) = counts {
            out.push(J_COUNTS);
            put_varint(out, counts.len() as u64);
            put_varint(out, counts.iter().filter(|&&c| c != 0).count() as u64);
            let mut last = 0;
            for (i, &c) in counts.iter().enumerate().filter(|(_, &c)| c != 0) {
                put_varint(out, (i - last) as u64);
                put_varint(out, c);
                last = i;
            }
            return;
        }
    }
    match v {
        Json::Null => put_value(out, &Value::Null),
        Json::Bool(b) => put_value(out, &Value::Bool(*b)),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                put_value(out, &Value::Int(i));
            } else if let Some(u) = n.as_u64() {
                out.push(J_U64);
                out.extend_from_slice(&u.to_le_bytes());
            } else {
                put_value(out, &Value::Float(n.as_f64().unwrap_or(f64::NAN)));
            }
        }
        Json::String(s) => put_value(out, &super::value::string(s.as_str())),
        Json::Array(items) => {
            out.push(J_ARRAY);
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            for i in items {
                put_json(out, i);
            }
        }
        Json::Object(m) => {
            out.push(J_OBJECT);
            out.extend_from_slice(&(m.len() as u32).to_le_bytes());
            for (k, v) in m {
                put_value(out, &super::value::string(k.as_str()));
                put_json(out, v);
            }
        }
    }
}

/// Reads what [`put_json`] wrote.
fn get_json(b: &mut &[u8], depth: u32) -> Option<Json> {
    if depth > 8 {
        return None;
    }
    let len = |b: &mut &[u8]| take::<4>(b).map(|x| u32::from_le_bytes(x) as usize);
    match *b.first()? {
        J_U64 => {
            *b = &b[1..];
            Some(Json::from(take_u64(b)?))
        }
        J_COUNTS => {
            *b = &b[1..];
            let n = usize::try_from(get_varint(b)?).ok()?;
            let nonzero = get_varint(b)?;
            let mut counts = vec![0u64; n.min(1 << 20)];
            let mut at = 0usize;
            for _ in 0..nonzero {
                at = at.checked_add(usize::try_from(get_varint(b)?).ok()?)?;
                *counts.get_mut(at)? = get_varint(b)?;
            }
            Some(Json::Array(counts.into_iter().map(Json::from).collect()))
        }
        J_ARRAY => {
            *b = &b[1..];
            let n = len(b)?;
            (0..n)
                .map(|_| get_json(b, depth + 1))
                .collect::<Option<Vec<_>>>()
                .map(Json::Array)
        }
        J_OBJECT => {
            *b = &b[1..];
            let n = len(b)?;
            let mut m = Map::new();
            for _ in 0..n {
                let Value::Str(k) = super::value::get_value(b)? else {
                    return None;
                };
                m.insert(k.into_owned(), get_json(b, depth + 1)?);
            }
            Some(Json::Object(m))
        }
        _ => Some(match super::value::get_value(b)? {
            Value::Null => Json::Null,
            Value::Bool(x) => Json::Bool(x),
            Value::Int(i) => Json::from(i),
            Value::Float(x) => Json::Number(Number::from_f64(x)?),
            Value::Str(s) => Json::String(s.into_owned()),
        }),
    }
}
