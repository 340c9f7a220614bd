//! `approx_percentile`: one quantile from a DDSketch (Masson, Rim and Lee, VLDB 2019).
//!
//! A value `x` of magnitude at least 10⁻⁹ falls in bin `⌈log_γ |x|⌉` of the store of its sign,
//! with `γ = (1 + α) / (1 − α)`; smaller magnitudes count as zero. A bin stands for
//! `2·γ^k / (γ + 1)`, within `α` of every value in it. The guarantee: the value returned for the
//! quantile `q` is within `α·|x|` of `x`, the element of rank `⌊q·(n−1)⌋` in the window's values
//! sorted ascending (`q = 0` and `q = 1` give the exact minimum and maximum). It holds while a
//! store's bins span at most 2048 keys, a ratio of about 10¹⁷ between the largest and the
//! smallest magnitude at α = 1%; past that the lowest bins collapse into one. Sketches merge by
//! adding bins, without further error, so a merged session or a combined sliding window answers
//! as one sketch would. NaN and infinite values are skipped like NULLs.
//!
//! The mapping and the ranks are those of the `sketches-ddsketch` crate, which tidemark used
//! first: its sketch saves only through serde, and building that form for every dirty window at
//! every flush cost most of a percentile pipeline's time (docs/performance.md). This sketch keeps
//! its bins sparse and saves them as LEB128 gaps and counts.

use super::value::{get_varint, put_varint, take, take_f64, take_u64, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, SavedSize, State};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The default relative error.
pub const DEFAULT_RELATIVE_ERROR: f64 = 0.01;
/// The most keys one store spans before its lowest bins collapse.
const MAX_BINS: i32 = 2048;
/// Magnitudes below this count as zero.
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

impl Percentile {
    fn mapping(&self) -> Mapping {
        let gamma = 1.0 + 2.0 * self.alpha / (1.0 - self.alpha);
        Mapping {
            gamma,
            ln_gamma: (2.0 * self.alpha / (1.0 - self.alpha)).ln_1p(),
        }
    }
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

    fn saved_size(&self) -> SavedSize {
        // Version, zeros, min and max; then two stores of at most MAX_BINS bins, each a gap
        // and a count as varints (at most 5 and 10 bytes), after the store's length.
        SavedSize::AtMost(25 + 2 * (10 + MAX_BINS as usize * 15))
    }

    fn new_state(&self) -> Box<dyn State> {
        Box::new(Sketch {
            q: self.q,
            map: self.mapping(),
            pos: BTreeMap::new(),
            neg: BTreeMap::new(),
            zeros: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        })
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let b = &mut bytes;
        let [2] = take::<1>(b)? else { return None };
        let zeros = take_u64(b)?;
        let (min, max) = (take_f64(b)?, take_f64(b)?);
        let pos = get_store(b)?;
        let neg = get_store(b)?;
        let st = Sketch {
            q: self.q,
            map: self.mapping(),
            pos,
            neg,
            zeros,
            min,
            max,
        };
        bytes.is_empty().then_some(Box::new(st) as Box<dyn State>)
    }
}

/// The logarithmic mapping of values to bin keys.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    gamma: f64,
    ln_gamma: f64,
}

impl Mapping {
    fn key(&self, magnitude: f64) -> i32 {
        (magnitude.ln() / self.ln_gamma).ceil() as i32
    }

    fn value(&self, key: i32) -> f64 {
        (key as f64 * self.ln_gamma).exp() * (2.0 / (1.0 + self.gamma))
    }
}

#[derive(Debug, Clone)]
struct Sketch {
    q: f64,
    map: Mapping,
    /// Bin counts of positive values, by key.
    pos: BTreeMap<i32, u64>,
    /// Bin counts of negative values, by the key of their magnitude.
    neg: BTreeMap<i32, u64>,
    zeros: u64,
    min: f64,
    max: f64,
}

/// Adds `n` to bin `key`, collapsing the lowest bins when the store spans too many keys.
fn bump(store: &mut BTreeMap<i32, u64>, key: i32, n: u64) {
    *store.entry(key).or_insert(0) += n;
    let (Some((&lo, _)), Some((&hi, _))) = (store.first_key_value(), store.last_key_value()) else {
        return;
    };
    if hi - lo >= MAX_BINS {
        let floor = hi - (MAX_BINS - 1);
        let low: Vec<i32> = store.range(..floor).map(|(k, _)| *k).collect();
        let folded: u64 = low.iter().filter_map(|k| store.remove(k)).sum();
        *store.entry(floor).or_insert(0) += folded;
    }
}

/// The key of the element of rank `rank` (from 0) in a store's ascending order.
fn key_at_rank(store: &BTreeMap<i32, u64>, rank: u64) -> i32 {
    let mut seen = 0;
    for (&k, &n) in store {
        seen += n;
        if seen > rank {
            return k;
        }
    }
    store.last_key_value().map_or(0, |(k, _)| *k)
}

fn put_store(out: &mut Vec<u8>, store: &BTreeMap<i32, u64>) {
    put_varint(out, store.len() as u64);
    let mut last: Option<i32> = None;
    for (&k, &n) in store {
        match last {
            // The first key as zigzag, the rest as gaps.
            None => put_varint(out, ((k << 1) ^ (k >> 31)) as u32 as u64),
            Some(l) => put_varint(out, (k - l) as u64),
        }
        put_varint(out, n);
        last = Some(k);
    }
}

fn get_store(b: &mut &[u8]) -> Option<BTreeMap<i32, u64>> {
    let n = get_varint(b)?;
    let mut store = BTreeMap::new();
    let mut last: Option<i32> = None;
    for _ in 0..n {
        let v = get_varint(b)?;
        let k = match last {
            None => {
                let z = u32::try_from(v).ok()?;
                ((z >> 1) as i32) ^ -((z & 1) as i32)
            }
            Some(l) => l.checked_add(i32::try_from(v).ok().filter(|g| *g > 0)?)?,
        };
        store.insert(k, get_varint(b)?);
        last = Some(k);
    }
    Some(store)
}

impl Sketch {
    fn count(&self) -> u64 {
        self.zeros + self.pos.values().sum::<u64>() + self.neg.values().sum::<u64>()
    }

    fn quantile(&self) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        if self.q == 0.0 {
            return Some(self.min);
        }
        if self.q == 1.0 {
            return Some(self.max);
        }
        let rank = (self.q * (n as f64 - 1.0)) as u64;
        let negatives: u64 = self.neg.values().sum();
        Some(if rank < negatives {
            // Negative values ascend as their magnitudes descend.
            -self.map.value(key_at_rank(&self.neg, negatives - rank - 1))
        } else if rank < negatives + self.zeros {
            0.0
        } else {
            self.map
                .value(key_at_rank(&self.pos, rank - negatives - self.zeros))
        })
    }
}

impl State for Sketch {
    fn add(&mut self, v: &Value, _: i64) {
        let Some(x) = v.as_f64().filter(|x| x.is_finite()) else {
            return;
        };
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        if x >= MIN_VALUE {
            bump(&mut self.pos, self.map.key(x), 1);
        } else if x <= -MIN_VALUE {
            bump(&mut self.neg, self.map.key(-x), 1);
        } else {
            self.zeros += 1;
        }
    }

    fn merge(&mut self, other: &dyn State) {
        let o = same::<Sketch>(other);
        for (&k, &n) in &o.pos {
            bump(&mut self.pos, k, n);
        }
        for (&k, &n) in &o.neg {
            bump(&mut self.neg, k, n);
        }
        self.zeros += o.zeros;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(2);
        out.extend_from_slice(&self.zeros.to_le_bytes());
        out.extend_from_slice(&self.min.to_le_bytes());
        out.extend_from_slice(&self.max.to_le_bytes());
        put_store(out, &self.pos);
        put_store(out, &self.neg);
    }

    fn evaluate(&self, _elements: u64) -> Output {
        Output::Value(self.quantile().map_or(Value::Null, Value::Float))
    }

    fn size(&self) -> usize {
        // Each bin: a B-tree slot of key and count, a third of the slots empty on average.
        std::mem::size_of::<Sketch>() + (self.pos.len() + self.neg.len()) * (4 + 8) * 3 / 2
    }
}
