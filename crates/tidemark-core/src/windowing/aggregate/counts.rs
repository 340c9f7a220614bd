//! `count_distinct` and `top_k`: from the count of every distinct value, up to a bound.
//!
//! Both keep each distinct non-NULL value of the window with how often it came, up to
//! `max_values` distinct values (default [`DEFAULT_MAX_VALUES`]) and up to the bytes of a record
//! their share gives them ([`Params::max_bytes`], so that the state can be saved as one Kafka
//! record); within both bounds they are exact. Past either, neither grows further:
//!
//! * `count_distinct` carries on as a HyperLogLog sketch of precision 14 (a relative standard
//!   error of 0.81%, as `approx_count_distinct`), seeded with every value it kept;
//! * `top_k` carries on as a Misra–Gries summary of `max_values` to twice as many counters
//!   (pruned back to `max_values` when it reaches twice, or to as many of the most frequent as
//!   fill half its bytes when it outgrows them): a value that comes more than `n / (m + 1)`
//!   times in a window of `n` elements is always kept, where `m` is the fewest counters a prune
//!   kept, and each count it reports is at most that much below the true count, never above it.
//!
//! Values are [`Scalar`]s: `2` and `2.0` are one value. `top_k` outputs the `k` most frequent
//! values with their counts, most frequent first, ties by value ascending. Neither retracts:
//! a bounded state cannot give back what it no longer holds, so sliding windows combine their
//! slices for these operations.

use super::hll::Sketch;
use super::value::{take, take_u64, Scalar, ScalarKey, ScalarRef, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, SavedSize, State};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How many distinct values a window keeps exactly, unless `max_values` says otherwise.
pub const DEFAULT_MAX_VALUES: u32 = 100_000;

/// The precision of the sketch `count_distinct` continues with past its bound.
const SKETCH_PRECISION: u8 = 14;

/// The saved forms' version bytes: the exact counts (also a summary that never dropped a value),
/// the sketch of `count_distinct`, the summary of `top_k`.
const EXACT: u8 = 1;
const SKETCHED: u8 = 2;
const SUMMARY: u8 = 3;

#[derive(Debug)]
struct Distinct {
    /// `None` for `count_distinct`, the number of values output for `top_k`.
    k: Option<u32>,
    /// How many distinct values are kept.
    max_values: u32,
    /// The most bytes the saved state may take ([`Params::max_bytes`]).
    max_bytes: usize,
}

/// The bound on kept values from `max_values`.
fn max_values(op: &str, p: &Params) -> Result<u32, String> {
    match p.max_values.unwrap_or(DEFAULT_MAX_VALUES) {
        0 => Err(format!("{op} needs max_values of at least 1")),
        n => Ok(n),
    }
}

/// `count_distinct`: the number of distinct non-NULL values.
pub fn count_distinct(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("count_distinct", p, &["max_values"])?;
    Ok(Arc::new(Distinct {
        k: None,
        max_values: max_values("count_distinct", p)?,
        max_bytes: p.max_bytes.unwrap_or(usize::MAX),
    }))
}

/// `top_k`: the `k` (default 3) most frequent values with their counts.
pub fn top_k(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("top_k", p, &["k", "max_values"])?;
    let max = max_values("top_k", p)?;
    match p.k.unwrap_or(3) {
        0 => Err("top_k needs k of at least 1".to_string()),
        k if k > 1000 => Err(format!("top_k keeps at most 1000 values, not {k}")),
        k if k > max => Err(format!(
            "top_k needs max_values ({max}) of at least k ({k})"
        )),
        k => Ok(Arc::new(Distinct {
            k: Some(k),
            max_values: max,
            max_bytes: p.max_bytes.unwrap_or(usize::MAX),
        })),
    }
}

impl Aggregate for Distinct {
    fn name(&self) -> &'static str {
        if self.k.is_some() {
            "top_k"
        } else {
            "count_distinct"
        }
    }

    fn params(&self) -> String {
        let mut out = Vec::new();
        if let Some(k) = self.k {
            out.push(format!("k = {k}"));
        }
        if self.max_values != DEFAULT_MAX_VALUES {
            out.push(format!("max_values = {}", self.max_values));
        }
        out.join(", ")
    }

    fn input(&self) -> Input {
        Input::Any
    }

    fn output(&self) -> OutputType {
        if self.k.is_some() {
            OutputType::Top
        } else {
            OutputType::Integer
        }
    }

    fn saved_size(&self) -> SavedSize {
        // A quarter: a summary pruned to half its share still holds a value of the longest.
        SavedSize::Share { value_divisor: 4 }
    }

    fn state_note(&self) -> Option<&'static str> {
        Some(if self.k.is_some() {
            "keeps up to max_values distinct values of a window with their counts (default \
             100000); past that it keeps a Misra-Gries summary, whose counts may be low by at \
             most n/(max_values+1)"
        } else {
            "keeps up to max_values distinct values of a window (default 100000); past that it \
             estimates with a HyperLogLog sketch (0.81% standard error)"
        })
    }

    fn new_state(&self) -> Box<dyn State> {
        Box::new(Counts {
            kept: Kept::Counts(BTreeMap::new()),
            dropped: 0,
            heap: 0,
            k: self.k,
            max: self.max_values,
            max_bytes: self.max_bytes,
        })
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let b = &mut bytes;
        let [version] = take::<1>(b)?;
        let (kept, dropped) = match (version, self.k) {
            (EXACT, _) => (Kept::Counts(get_counts(b)?), 0),
            (SKETCHED, None) => (Kept::Sketch(Sketch::decode(b, SKETCH_PRECISION)?), 0),
            (SUMMARY, Some(_)) => {
                let dropped = take_u64(b)?;
                (Kept::Counts(get_counts(b)?), dropped)
            }
            _ => return None,
        };
        let heap = match &kept {
            Kept::Counts(c) => heap_of(c),
            Kept::Sketch(_) => 0,
        };
        let st = Counts {
            kept,
            dropped,
            heap,
            k: self.k,
            max: self.max_values,
            max_bytes: self.max_bytes,
        };
        bytes.is_empty().then_some(Box::new(st) as Box<dyn State>)
    }
}

/// Reads a count of entries and the entries (value, count), advancing `b`.
fn get_counts(b: &mut &[u8]) -> Option<BTreeMap<Scalar, u64>> {
    let n = take_u64(b)?;
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let v = Scalar::get(b)?;
        counts.insert(v, take_u64(b)?);
    }
    Some(counts)
}

/// What a state keeps.
#[derive(Debug, Clone)]
enum Kept {
    /// Values with their counts: exact while nothing was dropped.
    Counts(BTreeMap<Scalar, u64>),
    /// `count_distinct` past its bound.
    Sketch(Sketch),
}

#[derive(Debug, Clone)]
struct Counts {
    kept: Kept,
    /// For `top_k` past its bound: the most any kept count can be below the true one (what the
    /// summary subtracted from every counter).
    dropped: u64,
    /// The heap bytes of the kept values, kept as they change, so that measuring a state does
    /// not walk it (0 for a sketch).
    heap: usize,
    k: Option<u32>,
    max: u32,
    max_bytes: usize,
}

/// The most a kept entry's saved form takes beyond its string's heap bytes: a tag, a length or
/// a number, a count, and up to 24 bytes of a string kept inline.
const ENTRY_BYTES: usize = 41;

/// The most a saved state takes besides its entries: version, dropped count, entry count.
const SAVED_HEADER: usize = 17;

/// The heap bytes of the values of `counts`.
fn heap_of(counts: &BTreeMap<Scalar, u64>) -> usize {
    counts.keys().map(Scalar::heap_size).sum()
}

impl Counts {
    /// Brings the state back within its bound after values were added or merged: a distinct
    /// count past `max` values becomes a sketch; a summary past twice `max` counters is pruned
    /// to at most `max` (pruning at every new value past the bound would cost a pass each
    /// time; this way the cost per value stays constant and the memory within twice the bound).
    /// The state depends only on the values and merges it saw, never on when it was saved.
    fn bound(&mut self) {
        let Kept::Counts(counts) = &mut self.kept else {
            return;
        };
        let limit = match self.k {
            None => self.max as usize,
            Some(_) => 2 * self.max as usize,
        };
        let saved = SAVED_HEADER + counts.len() * ENTRY_BYTES + self.heap;
        if counts.len() <= limit && saved <= self.max_bytes {
            return;
        }
        if self.k.is_none() {
            let mut sketch = Sketch::new(SKETCH_PRECISION);
            for v in counts.keys() {
                sketch.add(&v.to_value(), 0);
            }
            self.kept = Kept::Sketch(sketch);
            self.heap = 0;
            return;
        }
        // Misra–Gries: subtract the (m+1)-th largest count from every counter and keep those
        // still above zero, where m is `max`, or fewer when the m largest would take more than
        // half the bytes. The subtraction bounds how far below its true count any count is.
        let at = if saved <= self.max_bytes {
            self.max as usize
        } else {
            let mut by_count: Vec<(u64, usize)> = counts
                .iter()
                .map(|(v, n)| (*n, ENTRY_BYTES + v.heap_size()))
                .collect();
            by_count.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
            let mut room = (self.max_bytes / 2).saturating_sub(SAVED_HEADER);
            let fit = by_count
                .iter()
                .take_while(|(_, b)| match room.checked_sub(*b) {
                    Some(r) => {
                        room = r;
                        true
                    }
                    None => false,
                })
                .count();
            fit.min(self.max as usize)
        };
        if at >= counts.len() {
            return;
        }
        let mut sizes: Vec<u64> = counts.values().copied().collect();
        let (_, cut, _) = sizes.select_nth_unstable_by(at, |a, b| b.cmp(a));
        let cut = *cut;
        let heap = &mut self.heap;
        counts.retain(|v, n| {
            *n = n.saturating_sub(cut);
            if *n == 0 {
                *heap -= v.heap_size();
            }
            *n > 0
        });
        self.dropped += cut;
    }
}

impl State for Counts {
    fn add(&mut self, v: &Value, _: i64) {
        let counts = match &mut self.kept {
            Kept::Sketch(s) => return s.add(v, 0),
            Kept::Counts(c) => c,
        };
        let Some(s) = ScalarRef::of(v) else { return };
        // Looked up borrowed: a value already kept is counted without copying it.
        match counts.get_mut(&s as &dyn ScalarKey) {
            Some(n) => *n += 1,
            None => {
                let kept = s.to_scalar();
                self.heap += kept.heap_size();
                counts.insert(kept, 1);
                self.bound();
            }
        }
    }

    fn merge(&mut self, other: &dyn State) {
        let other = same::<Counts>(other);
        self.dropped += other.dropped;
        match (&mut self.kept, &other.kept) {
            (Kept::Counts(mine), Kept::Counts(theirs)) => {
                for (v, n) in theirs {
                    match mine.get_mut(v) {
                        Some(c) => *c += n,
                        None => {
                            self.heap += v.heap_size();
                            mine.insert(v.clone(), *n);
                        }
                    }
                }
                self.bound();
            }
            (Kept::Sketch(mine), Kept::Counts(theirs)) => {
                for v in theirs.keys() {
                    mine.add(&v.to_value(), 0);
                }
            }
            (Kept::Counts(mine), Kept::Sketch(theirs)) => {
                let mut sketch = theirs.clone();
                for v in mine.keys() {
                    sketch.add(&v.to_value(), 0);
                }
                self.kept = Kept::Sketch(sketch);
                self.heap = 0;
            }
            (Kept::Sketch(mine), Kept::Sketch(theirs)) => mine.merge(theirs),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let put_counts = |out: &mut Vec<u8>, counts: &BTreeMap<Scalar, u64>| {
            out.extend_from_slice(&(counts.len() as u64).to_le_bytes());
            for (v, n) in counts {
                v.put(out);
                out.extend_from_slice(&n.to_le_bytes());
            }
        };
        match &self.kept {
            Kept::Sketch(s) => {
                out.push(SKETCHED);
                s.encode(out);
            }
            Kept::Counts(counts) if self.dropped == 0 => {
                out.push(EXACT);
                put_counts(out, counts);
            }
            Kept::Counts(counts) => {
                out.push(SUMMARY);
                out.extend_from_slice(&self.dropped.to_le_bytes());
                put_counts(out, counts);
            }
        }
    }

    fn evaluate(&self, _elements: u64) -> Output {
        let counts = match &self.kept {
            Kept::Sketch(s) => return s.evaluate(0),
            Kept::Counts(c) => c,
        };
        let Some(k) = self.k else {
            return Output::Value(Value::Int(counts.len() as i64));
        };
        let mut top: Vec<(&Scalar, u64)> = counts.iter().map(|(v, n)| (v, *n)).collect();
        // Stable: equal counts keep the map's ascending value order.
        top.sort_by_key(|t| std::cmp::Reverse(t.1));
        Output::Top(
            top.into_iter()
                .take(k as usize)
                .map(|(v, n)| (v.to_value(), n))
                .collect(),
        )
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Counts>()
            + match &self.kept {
                Kept::Sketch(s) => s.size(),
                // A B-tree node holds up to 11 entries; a third of the slots are empty on
                // average, hence the 3/2.
                Kept::Counts(c) => {
                    c.len() * (std::mem::size_of::<Scalar>() + 8) * 3 / 2 + self.heap
                }
            }
    }
}
