//! `duration`: the milliseconds between the earliest and the latest event time in the window (a
//! session's length as the Dataflow guide's session analysis computes it); 0 for one element,
//! NULL for none. It reads no field.

use super::value::{take, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, SavedSize, State};
use std::sync::Arc;

#[derive(Debug)]
struct Duration;

/// `duration`: latest minus earliest event time, in milliseconds.
pub fn duration(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("duration", p, &[])?;
    Ok(Arc::new(Duration))
}

impl Aggregate for Duration {
    fn name(&self) -> &'static str {
        "duration"
    }

    fn input(&self) -> Input {
        Input::Nothing
    }

    fn output(&self) -> OutputType {
        OutputType::Integer
    }

    fn saved_size(&self) -> SavedSize {
        SavedSize::AtMost(32)
    }

    fn new_state(&self) -> Box<dyn State> {
        Box::new(Span(None))
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let b = &mut bytes;
        let [1, present] = take::<2>(b)? else {
            return None;
        };
        let span = match present {
            0 => None,
            _ => Some((
                i64::from_le_bytes(take::<8>(b)?),
                i64::from_le_bytes(take::<8>(b)?),
            )),
        };
        bytes
            .is_empty()
            .then_some(Box::new(Span(span)) as Box<dyn State>)
    }
}

/// The earliest and latest event times seen.
#[derive(Debug, Clone)]
struct Span(Option<(i64, i64)>);

impl Span {
    fn cover(&mut self, lo: i64, hi: i64) {
        self.0 = Some(match self.0 {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }
}

impl State for Span {
    fn add(&mut self, _: &Value, ts: i64) {
        self.cover(ts, ts);
    }

    fn merge(&mut self, other: &dyn State) {
        if let Some((lo, hi)) = same::<Span>(other).0 {
            self.cover(lo, hi);
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        match self.0 {
            None => out.push(0),
            Some((lo, hi)) => {
                out.push(1);
                out.extend_from_slice(&lo.to_le_bytes());
                out.extend_from_slice(&hi.to_le_bytes());
            }
        }
    }

    fn evaluate(&self, _elements: u64) -> Output {
        Output::Value(match self.0 {
            None => Value::Null,
            Some((lo, hi)) => Value::Int(hi.saturating_sub(lo)),
        })
    }
}
