//! `count_distinct` and `top_k`: exact, from the count of every distinct value.
//!
//! Both keep each distinct non-NULL value of the window with how often it came, so their state
//! grows with the number of distinct values (`approx_count_distinct` is the bounded alternative).
//! Keeping counts rather than a set makes them retractable. Values are [`Scalar`]s: `2` and `2.0`
//! are one value. `top_k` outputs the `k` most frequent values with their counts, most frequent
//! first, ties by value ascending.

use super::value::{take, take_u64, Scalar, ScalarKey, ScalarRef, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, State};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug)]
struct Distinct {
    /// `None` for `count_distinct`, the number of values kept for `top_k`.
    k: Option<u32>,
}

/// `count_distinct`: the number of distinct non-NULL values.
pub fn count_distinct(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("count_distinct", p, &[])?;
    Ok(Arc::new(Distinct { k: None }))
}

/// `top_k`: the `k` (default 3) most frequent values with their counts.
pub fn top_k(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("top_k", p, &["k"])?;
    match p.k.unwrap_or(3) {
        0 => Err("top_k needs k of at least 1".to_string()),
        k if k > 1000 => Err(format!("top_k keeps at most 1000 values, not {k}")),
        k => Ok(Arc::new(Distinct { k: Some(k) })),
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
        self.k.map(|k| format!("k = {k}")).unwrap_or_default()
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

    fn retractable(&self) -> bool {
        true
    }

    fn state_note(&self) -> Option<&'static str> {
        Some(
            "keeps every distinct value of a window with its count: state grows with the \
             distinct values (approx_count_distinct is bounded)",
        )
    }

    fn new_state(&self) -> Box<dyn State> {
        Box::new(Counts {
            counts: BTreeMap::new(),
            k: self.k,
        })
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let b = &mut bytes;
        let [1] = take::<1>(b)? else { return None };
        let n = take_u64(b)?;
        let mut counts = BTreeMap::new();
        for _ in 0..n {
            let v = Scalar::get(b)?;
            counts.insert(v, take_u64(b)?);
        }
        let st = Counts { counts, k: self.k };
        bytes.is_empty().then_some(Box::new(st) as Box<dyn State>)
    }
}

#[derive(Debug, Clone)]
struct Counts {
    counts: BTreeMap<Scalar, u64>,
    k: Option<u32>,
}

impl State for Counts {
    fn add(&mut self, v: &Value, _: i64) {
        let Some(s) = ScalarRef::of(v) else { return };
        // Looked up borrowed: a value already kept is counted without copying it.
        match self.counts.get_mut(&s as &dyn ScalarKey) {
            Some(n) => *n += 1,
            None => {
                self.counts.insert(s.to_scalar(), 1);
            }
        }
    }

    fn merge(&mut self, other: &dyn State) {
        for (v, n) in &same::<Counts>(other).counts {
            *self.counts.entry(v.clone()).or_insert(0) += n;
        }
    }

    fn retract(&mut self, other: &dyn State) {
        for (v, n) in &same::<Counts>(other).counts {
            if let Some(c) = self.counts.get_mut(v) {
                *c -= (*n).min(*c);
                if *c == 0 {
                    self.counts.remove(v);
                }
            }
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        out.extend_from_slice(&(self.counts.len() as u64).to_le_bytes());
        for (v, n) in &self.counts {
            v.put(out);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }

    fn evaluate(&self, _elements: u64) -> Output {
        let Some(k) = self.k else {
            return Output::Value(Value::Int(self.counts.len() as i64));
        };
        let mut top: Vec<(&Scalar, u64)> = self.counts.iter().map(|(v, n)| (v, *n)).collect();
        // Stable: equal counts keep the map's ascending value order.
        top.sort_by_key(|t| std::cmp::Reverse(t.1));
        Output::Top(
            top.into_iter()
                .take(k as usize)
                .map(|(v, n)| (v.to_value(), n))
                .collect(),
        )
    }
}
