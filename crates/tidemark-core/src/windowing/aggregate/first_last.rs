//! `first` and `last`: the value of the element with the earliest or the latest event time in
//! the window, of any type. NULLs are skipped (as Flink's `FIRST_VALUE` and `LAST_VALUE` do). Of
//! elements with equal times the first in input order is `first` and the last is `last`; merged
//! states keep that rule, the merged-in state counting as the later input.

use super::value::{get_value, heap_size, put_value, take, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, SavedSize, State};
use std::borrow::Cow;
use std::sync::Arc;

#[derive(Debug)]
struct Pick {
    last: bool,
}

/// `first`: the value at the earliest event time.
pub fn first(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("first", p, &[])?;
    Ok(Arc::new(Pick { last: false }))
}

/// `last`: the value at the latest event time.
pub fn last(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("last", p, &[])?;
    Ok(Arc::new(Pick { last: true }))
}

impl Aggregate for Pick {
    fn name(&self) -> &'static str {
        if self.last {
            "last"
        } else {
            "first"
        }
    }

    fn input(&self) -> Input {
        Input::Any
    }

    fn output(&self) -> OutputType {
        OutputType::Any
    }

    fn saved_size(&self) -> SavedSize {
        SavedSize::Share { value_divisor: 1 }
    }

    fn new_state(&self) -> Box<dyn State> {
        Box::new(Picked {
            last: self.last,
            at: None,
        })
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let b = &mut bytes;
        let [1, present] = take::<2>(b)? else {
            return None;
        };
        let at = match present {
            0 => None,
            _ => Some((i64::from_le_bytes(take::<8>(b)?), get_value(b)?)),
        };
        let st = Picked {
            last: self.last,
            at,
        };
        bytes.is_empty().then_some(Box::new(st) as Box<dyn State>)
    }
}

#[derive(Debug, Clone)]
struct Picked {
    last: bool,
    /// The event time and value picked so far.
    at: Option<(i64, Value)>,
}

impl Picked {
    /// Whether a value at `ts`, coming after the current one in input order, replaces it.
    fn replaces(&self, ts: i64) -> bool {
        match &self.at {
            None => true,
            Some((t, _)) if self.last => ts >= *t,
            Some((t, _)) => ts < *t,
        }
    }
}

impl State for Picked {
    fn add(&mut self, v: &Value, ts: i64) {
        if v.is_null() || !self.replaces(ts) {
            return;
        }
        match (&mut self.at, v) {
            // A string replacing a string reuses its buffer.
            (Some((t, Value::Str(Cow::Owned(kept)))), Value::Str(s)) => {
                *t = ts;
                kept.clear();
                kept.push_str(s);
            }
            _ => self.at = Some((ts, v.clone())),
        }
    }

    fn merge(&mut self, other: &dyn State) {
        if let Some((ts, v)) = &same::<Picked>(other).at {
            if self.replaces(*ts) {
                self.at = Some((*ts, v.clone()));
            }
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        match &self.at {
            None => out.push(0),
            Some((ts, v)) => {
                out.push(1);
                out.extend_from_slice(&ts.to_le_bytes());
                put_value(out, v);
            }
        }
    }

    fn evaluate(&self, _elements: u64) -> Output {
        Output::Value(self.at.as_ref().map_or(Value::Null, |(_, v)| v.clone()))
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Picked>() + self.at.as_ref().map_or(0, |(_, v)| heap_size(v))
    }
}
