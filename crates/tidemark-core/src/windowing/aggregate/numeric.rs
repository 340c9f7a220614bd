//! `count`, `count_values`, `sum`, `min`, `max` and `mean`.
//!
//! `count` counts elements; `count_values` counts the elements whose input is not NULL (SQL's
//! `COUNT(x)`).
//!
//! `sum` of no values is 0 (as Beam's `Sum` and Kafka Streams' reducers give), `min`, `max` and
//! `mean` of no values are NULL. Count, sum and mean retract; minimum and maximum cannot.

use super::value::{take_f64, take_u64, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, SavedSize, State};
use std::sync::Arc;

/// Which of the simple numeric operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Count,
    CountValues,
    Sum,
    Min,
    Max,
    Mean,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Count => "count",
            Kind::CountValues => "count_values",
            Kind::Sum => "sum",
            Kind::Min => "min",
            Kind::Max => "max",
            Kind::Mean => "mean",
        }
    }
}

#[derive(Debug)]
struct Simple(Kind);

fn build(kind: Kind, params: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only(kind.name(), params, &[])?;
    Ok(Arc::new(Simple(kind)))
}

/// `count`: the number of elements.
pub fn count(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    build(Kind::Count, p)
}

/// `count_values`: the number of non-NULL values (SQL's `COUNT(x)`).
pub fn count_values(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    build(Kind::CountValues, p)
}

/// `sum`: the sum of the non-NULL values, 0 when there are none.
pub fn sum(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    build(Kind::Sum, p)
}

/// `min`: the smallest value.
pub fn min(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    build(Kind::Min, p)
}

/// `max`: the largest value.
pub fn max(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    build(Kind::Max, p)
}

/// `mean` (or `avg`): the arithmetic mean of the non-NULL values.
pub fn mean(p: &Params) -> Result<Arc<dyn Aggregate>, String> {
    build(Kind::Mean, p)
}

impl Aggregate for Simple {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn input(&self) -> Input {
        match self.0 {
            Kind::Count => Input::Nothing,
            Kind::CountValues => Input::Any,
            _ => Input::Number,
        }
    }

    fn output(&self) -> OutputType {
        match self.0 {
            Kind::Count | Kind::CountValues => OutputType::Integer,
            _ => OutputType::Double,
        }
    }

    fn saved_size(&self) -> SavedSize {
        SavedSize::AtMost(32)
    }

    fn retractable(&self) -> bool {
        matches!(
            self.0,
            Kind::Count | Kind::CountValues | Kind::Sum | Kind::Mean
        )
    }

    fn new_state(&self) -> Box<dyn State> {
        match self.0 {
            Kind::Count => Box::new(Count),
            Kind::CountValues => Box::new(Tally(0)),
            Kind::Sum => Box::new(Sum {
                sum: 0.0,
                n: 0,
                mean: false,
            }),
            Kind::Mean => Box::new(Sum {
                sum: 0.0,
                n: 0,
                mean: true,
            }),
            Kind::Min => Box::new(Extreme {
                v: f64::INFINITY,
                max: false,
            }),
            Kind::Max => Box::new(Extreme {
                v: f64::NEG_INFINITY,
                max: true,
            }),
        }
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let b = &mut bytes;
        let [1] = super::value::take::<1>(b)? else {
            return None;
        };
        let state: Box<dyn State> = match self.0 {
            Kind::Count => Box::new(Count),
            Kind::CountValues => Box::new(Tally(take_u64(b)?)),
            Kind::Sum | Kind::Mean => Box::new(Sum {
                sum: take_f64(b)?,
                n: take_u64(b)?,
                mean: self.0 == Kind::Mean,
            }),
            Kind::Min | Kind::Max => Box::new(Extreme {
                v: take_f64(b)?,
                max: self.0 == Kind::Max,
            }),
        };
        bytes.is_empty().then_some(state)
    }
}

/// The state of an operation of an earlier saved form, which kept the element count and a sum,
/// minimum and maximum per numeric input; `None` for an operation that did not exist then.
pub(super) fn from_legacy(
    op: &str,
    count: u64,
    field: Option<(f64, f64, f64)>,
) -> Option<Box<dyn State>> {
    let (sum, lo, hi) = field.unwrap_or((0.0, f64::INFINITY, f64::NEG_INFINITY));
    Some(match op {
        "count" => Box::new(Count),
        "sum" | "mean" => Box::new(Sum {
            sum,
            n: count,
            mean: op == "mean",
        }),
        "min" => Box::new(Extreme { v: lo, max: false }),
        "max" => Box::new(Extreme { v: hi, max: true }),
        _ => return None,
    })
}

/// `count` keeps nothing of its own: the accumulator counts its elements (and a box of a
/// zero-sized state does not allocate).
#[derive(Debug, Clone)]
struct Count;

impl State for Count {
    fn add(&mut self, _: &Value, _: i64) {}

    fn merge(&mut self, _: &dyn State) {}

    fn retract(&mut self, _: &dyn State) {}

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
    }

    fn evaluate(&self, elements: u64) -> Output {
        Output::Value(Value::Int(elements as i64))
    }
}

/// `count_values`: how many non-NULL values came.
#[derive(Debug, Clone)]
struct Tally(u64);

impl State for Tally {
    fn add(&mut self, v: &Value, _: i64) {
        if !v.is_null() {
            self.0 += 1;
        }
    }

    fn merge(&mut self, other: &dyn State) {
        self.0 += same::<Tally>(other).0;
    }

    fn retract(&mut self, other: &dyn State) {
        self.0 -= same::<Tally>(other).0;
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        out.extend_from_slice(&self.0.to_le_bytes());
    }

    fn evaluate(&self, _elements: u64) -> Output {
        Output::Value(Value::Int(self.0 as i64))
    }
}

/// A sum and the number of values in it: `sum`, and `mean` (the sum over the number).
#[derive(Debug, Clone)]
struct Sum {
    sum: f64,
    n: u64,
    mean: bool,
}

impl State for Sum {
    fn add(&mut self, v: &Value, _: i64) {
        if let Some(x) = v.as_f64() {
            self.sum += x;
            self.n += 1;
        }
    }

    fn merge(&mut self, other: &dyn State) {
        let o = same::<Sum>(other);
        self.sum += o.sum;
        self.n += o.n;
    }

    fn retract(&mut self, other: &dyn State) {
        let o = same::<Sum>(other);
        self.sum -= o.sum;
        self.n -= o.n.min(self.n);
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        out.extend_from_slice(&self.sum.to_le_bytes());
        out.extend_from_slice(&self.n.to_le_bytes());
    }

    fn evaluate(&self, _elements: u64) -> Output {
        Output::Value(match (self.mean, self.n) {
            (false, _) => Value::Float(self.sum),
            (true, 0) => Value::Null,
            (true, n) => Value::Float(self.sum / n as f64),
        })
    }
}

/// The smallest or the largest value (`±inf` when there is none).
#[derive(Debug, Clone)]
struct Extreme {
    v: f64,
    max: bool,
}

impl State for Extreme {
    fn add(&mut self, v: &Value, _: i64) {
        if let Some(x) = v.as_f64() {
            self.v = if self.max {
                self.v.max(x)
            } else {
                self.v.min(x)
            };
        }
    }

    fn merge(&mut self, other: &dyn State) {
        let o = same::<Extreme>(other).v;
        self.v = if self.max {
            self.v.max(o)
        } else {
            self.v.min(o)
        };
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        out.extend_from_slice(&self.v.to_le_bytes());
    }

    fn evaluate(&self, _elements: u64) -> Output {
        Output::Value(if self.v.is_infinite() && (self.v > 0.0) != self.max {
            Value::Null
        } else {
            Value::Float(self.v)
        })
    }
}
