//! Aggregations: one trait, every operation behind it, and the accumulator a window keeps.
//!
//! An operation ([`Aggregate`]) is configured once per pipeline and makes states ([`State`]): a
//! state takes one input value at a time, merges another state of the same operation (the parts
//! of a merged session, the slices of a sliding window), retracts one where the operation can,
//! encodes itself into the saved state format and evaluates to the pane's value. This follows
//! DataFusion's `Accumulator` (update, merge, state, evaluate, retract).
//!
//! A window's [`Acc`] holds the element count and one state per aggregation. States are created
//! when the first element arrives, so an empty accumulator costs nothing.
//!
//! Operations register in [`OPERATIONS`]: a new one is a file in this folder and a line there.
//!
//! NULL inputs follow SQL: every operation that reads a field skips NULLs (`count` counts
//! elements). An operation that reads numbers is only given numbers or NULL: the record step
//! dead-letters a record whose value is of another type.

pub mod counts;
mod duration;
mod first_last;
mod hll;
mod moments;
mod numeric;
mod percentile;
pub mod value;

#[cfg(test)]
mod tests;

use smallvec::SmallVec;
use std::any::Any;
use std::fmt;
use std::sync::Arc;
pub use value::{Scalar, Value};

/// What an operation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Nothing: the operation counts elements.
    Nothing,
    /// Numbers (integers or doubles); NULLs are skipped.
    Number,
    /// Any value; NULLs are skipped.
    Any,
}

/// What an operation outputs, for the output formats and sink column types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputType {
    /// An integer (a count, a duration): a JSON integer, an Avro double (as every numeric
    /// aggregate), a `bigint` column.
    Integer,
    /// A double, NULL when there was no input.
    Double,
    /// One of the input values, of whatever type it had; NULL when there was none.
    Any,
    /// A list of `{value, count}`.
    Top,
}

/// The value of one aggregation in a pane.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A single value (NULL when the operation had no input).
    Value(Value),
    /// Values with their counts, most frequent first.
    Top(Vec<(Value, u64)>),
}

impl Output {
    /// The output as a double, for a number.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Output::Value(v) => v.as_f64(),
            Output::Top(_) => None,
        }
    }
}

/// One configured operation: what it reads and outputs, and how its states are made.
pub trait Aggregate: fmt::Debug + Send + Sync {
    /// The operation's name in a pipeline file (`sum`).
    fn name(&self) -> &'static str;
    /// Its parameters as a pipeline file writes them (`q = 0.99`); empty when it has none.
    fn params(&self) -> String {
        String::new()
    }
    /// What it reads.
    fn input(&self) -> Input;
    /// What it outputs.
    fn output(&self) -> OutputType;
    /// Whether [`State::retract`] is supported. Sliced sliding windows move a running aggregate
    /// forward by retracting the slices that leave it when every operation can; otherwise they
    /// combine the window's slices each time.
    fn retractable(&self) -> bool {
        false
    }
    /// A note for `validate` about the cost of its state, when that grows with the input.
    fn state_note(&self) -> Option<&'static str> {
        None
    }
    /// How many bytes its saved state ([`State::encode`]) can take.
    fn saved_size(&self) -> SavedSize;
    /// An empty state.
    fn new_state(&self) -> Box<dyn State>;
    /// Decodes what [`State::encode`] wrote (the whole slice); `None` if it does not decode.
    fn decode(&self, bytes: &[u8]) -> Option<Box<dyn State>>;
}

/// How large an operation's saved state can grow: what lets a pipeline promise that every
/// window's state and pane fits one Kafka record ([`crate::windowing::spec::RecordBudget`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedSize {
    /// At most this many bytes, whatever the input.
    AtMost(usize),
    /// It keeps input values: its state stays within the share of a record
    /// [`Params::max_bytes`] gives it, as long as no string it reads is longer than that share
    /// divided by `value_divisor` (less 64 bytes of framing).
    Share {
        /// How many of the longest strings the share must hold at once.
        value_divisor: usize,
    },
}

/// The state of one aggregation over some elements.
pub trait State: StateClone + fmt::Debug + Send + Sync {
    /// Adds one element's input value (NULL for an operation that reads nothing), with its
    /// event time. Elements of equal time are added in input order.
    fn add(&mut self, v: &Value, ts: i64);
    /// Merges a state of the same operation holding elements that came after this one's.
    fn merge(&mut self, other: &dyn State);
    /// Removes a state previously merged in; only called when the operation is retractable.
    fn retract(&mut self, _other: &dyn State) {
        unreachable!("retract called on an operation that cannot retract")
    }
    /// Appends the state in its saved form, starting with a version byte.
    fn encode(&self, out: &mut Vec<u8>);
    /// The pane's value; `elements` is the number of elements the accumulator holds.
    fn evaluate(&self, elements: u64) -> Output;
    /// The bytes of memory the state holds, itself included, as DataFusion's
    /// `Accumulator::size` counts them: what it allocated, not what its saved form takes.
    /// States without heap data keep this default.
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// Cloning and downcasting of boxed states, implemented for every `Clone` state.
pub trait StateClone {
    /// A boxed copy.
    fn clone_box(&self) -> Box<dyn State>;
    /// The state as `Any`, for merging with a state of the same type.
    fn as_any(&self) -> &dyn Any;
}

impl<T: State + Clone + 'static> StateClone for T {
    fn clone_box(&self) -> Box<dyn State> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Clone for Box<dyn State> {
    fn clone(&self) -> Box<dyn State> {
        self.clone_box()
    }
}

/// The other state of a merge or retraction, as this state's type.
pub(crate) fn same<T: 'static>(other: &dyn State) -> &T {
    other
        .as_any()
        .downcast_ref::<T>()
        .expect("states of one aggregation have one type")
}

/// The parameters an operation may take in a pipeline file.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Params {
    /// The quantile of `approx_percentile`, in [0, 1].
    pub q: Option<f64>,
    /// How many values `top_k` keeps.
    pub k: Option<u32>,
    /// The HyperLogLog precision of `approx_count_distinct` (registers = 2^precision).
    pub precision: Option<u8>,
    /// The relative error of `approx_percentile`'s sketch.
    pub relative_error: Option<f64>,
    /// How many distinct values `count_distinct` and `top_k` keep (see
    /// [`counts::DEFAULT_MAX_VALUES`]).
    pub max_values: Option<u32>,
    /// The bytes of a record an operation that keeps values may take (its
    /// [`SavedSize::Share`]); not written by users but derived from the output's record limit.
    /// `None` means no limit.
    pub max_bytes: Option<usize>,
}

/// A constructor of an operation from its parameters; errors name what is wrong.
type Build = fn(&Params) -> Result<Arc<dyn Aggregate>, String>;

/// Every operation, by name. A new operation is a file in this folder and a line here.
pub const OPERATIONS: &[(&str, Build)] = &[
    ("count", numeric::count),
    ("count_values", numeric::count_values),
    ("sum", numeric::sum),
    ("min", numeric::min),
    ("max", numeric::max),
    ("mean", numeric::mean),
    ("avg", numeric::mean),
    ("var_pop", moments::var_pop),
    ("var_samp", moments::var_samp),
    ("stddev_pop", moments::stddev_pop),
    ("stddev_samp", moments::stddev_samp),
    ("count_distinct", counts::count_distinct),
    ("top_k", counts::top_k),
    ("approx_count_distinct", hll::approx_count_distinct),
    ("approx_percentile", percentile::approx_percentile),
    ("first", first_last::first),
    ("last", first_last::last),
    ("duration", duration::duration),
];

/// The operation named `name` with `params`; an error names the problem (an unknown name lists
/// the known ones).
pub fn operation(name: &str, params: &Params) -> Result<Arc<dyn Aggregate>, String> {
    match OPERATIONS.iter().find(|(n, _)| *n == name) {
        Some((_, build)) => build(params),
        None => Err(format!(
            "unknown operation {name:?}: use one of {}",
            OPERATIONS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Fails when a parameter is given to an operation that does not take it.
pub(crate) fn only(op: &str, params: &Params, allowed: &[&str]) -> Result<(), String> {
    let given = [
        ("q", params.q.is_some()),
        ("k", params.k.is_some()),
        ("precision", params.precision.is_some()),
        ("relative_error", params.relative_error.is_some()),
        ("max_values", params.max_values.is_some()),
    ];
    let extra: Vec<&str> = given
        .iter()
        .filter(|(n, set)| *set && !allowed.contains(n))
        .map(|(n, _)| *n)
        .collect();
    if extra.is_empty() {
        Ok(())
    } else {
        Err(format!("{op} takes no {}", extra.join(" or ")))
    }
}

/// One configured aggregation: an output name, an operation and (except for `count`) the index
/// of the input expression it reads.
#[derive(Debug, Clone)]
pub struct AggSpec {
    /// Name of the output field.
    pub name: String,
    /// The operation.
    pub op: Arc<dyn Aggregate>,
    /// Index into the event's values; `None` for `count`.
    pub field: Option<usize>,
}

impl AggSpec {
    /// An aggregation of a registered operation without parameters (tests, benchmarks).
    pub fn new(name: &str, op: &str, field: Option<usize>) -> AggSpec {
        AggSpec {
            name: name.to_string(),
            op: operation(op, &Params::default()).expect("a registered operation"),
            field,
        }
    }
}

impl PartialEq for AggSpec {
    fn eq(&self, other: &AggSpec) -> bool {
        self.name == other.name
            && self.field == other.field
            && self.op.name() == other.op.name()
            && self.op.params() == other.op.params()
    }
}

/// A mergeable accumulator: the count of elements and one state per aggregation (none until the
/// first element).
#[derive(Debug, Clone, Default)]
pub struct Acc {
    /// Number of elements.
    pub count: u64,
    /// One state is held inline, in the space a `Vec` takes, so that a window's state costs no
    /// allocation for the list when the pipeline has one aggregation.
    states: SmallVec<[Box<dyn State>; 1]>,
}

impl PartialEq for Acc {
    /// Equal when the counts and the saved forms of the states are.
    fn eq(&self, other: &Acc) -> bool {
        let enc = |a: &Acc| {
            let mut out = Vec::new();
            a.encode(&mut out);
            out
        };
        self.count == other.count && enc(self) == enc(other)
    }
}

/// The most aggregations one pipeline has: the saved form of an accumulator and the repartition
/// hop's events write their number in one byte (`validate` refuses more).
pub const MAX_AGGREGATIONS: usize = u8::MAX as usize;

/// The saved form's version byte (earlier forms had none; see [`Acc::decode`]).
const ACC_VERSION: u8 = 2;

impl Acc {
    /// Whether no element has been added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds one element: `values` are the event's input values, `ts` its event time.
    pub fn add(&mut self, aggs: &[AggSpec], values: &[Value], ts: i64) {
        self.count += 1;
        if self.states.is_empty() {
            self.states = aggs.iter().map(|a| a.op.new_state()).collect();
        }
        for (s, a) in self.states.iter_mut().zip(aggs) {
            let v = a.field.and_then(|i| values.get(i)).unwrap_or(&Value::Null);
            s.add(v, ts);
        }
    }

    /// Merges another accumulator, whose elements came after this one's, into this one.
    pub fn merge(&mut self, other: &Acc) {
        self.count += other.count;
        if other.states.is_empty() {
            return;
        }
        if self.states.is_empty() {
            self.states = other.states.clone();
            return;
        }
        for (s, o) in self.states.iter_mut().zip(&other.states) {
            s.merge(o.as_ref());
        }
    }

    /// Removes a previously merged accumulator; only for retractable operations (see
    /// [`retractable`]).
    pub fn retract(&mut self, other: &Acc) {
        self.count -= other.count.min(self.count);
        for (s, o) in self.states.iter_mut().zip(&other.states) {
            s.retract(o.as_ref());
        }
    }

    /// The bytes of memory the accumulator holds: itself, its states' list when it spilled to
    /// the heap, and every state ([`State::size`]).
    pub fn size(&self) -> usize {
        let list = if self.states.spilled() {
            self.states.capacity() * std::mem::size_of::<Box<dyn State>>()
        } else {
            0
        };
        std::mem::size_of::<Acc>() + list + self.states.iter().map(|s| s.size()).sum::<usize>()
    }

    /// Resets to empty.
    pub fn clear(&mut self) {
        self.count = 0;
        self.states.clear();
    }

    /// The value of aggregation `i` of `aggs`.
    pub fn value(&self, aggs: &[AggSpec], i: usize) -> Output {
        match self.states.get(i) {
            Some(s) => s.evaluate(self.count),
            None => aggs[i].op.new_state().evaluate(self.count),
        }
    }

    /// Appends the saved form: a version byte, the count, the number of states, and each state
    /// with its length (LEB128).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(ACC_VERSION);
        out.extend_from_slice(&self.count.to_le_bytes());
        // `validate` keeps the number of aggregations within MAX_AGGREGATIONS.
        out.push(u8::try_from(self.states.len()).unwrap_or(u8::MAX));
        for s in &self.states {
            // One byte of length is the common case; a longer length is spliced in.
            let at = out.len();
            out.push(0);
            s.encode(out);
            let len = out.len() - at - 1;
            if len < 0x80 {
                out[at] = len as u8;
            } else {
                let mut prefix = Vec::with_capacity(4);
                value::put_varint(&mut prefix, len as u64);
                out.splice(at..at + 1, prefix);
            }
        }
    }

    /// Decodes what [`Acc::encode`] wrote, advancing `bytes` past it. With `legacy`, reads the
    /// form of earlier versions instead: the count, then a sum, minimum and maximum per numeric
    /// input (what `count`, `sum`, `min`, `max` and `mean` need, the only operations then).
    pub fn decode(aggs: &[AggSpec], bytes: &mut &[u8], legacy: bool) -> Option<Acc> {
        if legacy {
            return Self::decode_legacy(aggs, bytes);
        }
        let [version] = value::take::<1>(bytes)?;
        if version != ACC_VERSION {
            return None;
        }
        let count = value::take_u64(bytes)?;
        let [n] = value::take::<1>(bytes)?;
        if n != 0 && n as usize != aggs.len() {
            return None;
        }
        let mut states = SmallVec::with_capacity(n as usize);
        for a in aggs.iter().take(n as usize) {
            let len = usize::try_from(value::get_varint(bytes)?).ok()?;
            let body = bytes.get(..len)?;
            states.push(a.op.decode(body)?);
            *bytes = &bytes[len..];
        }
        Some(Acc { count, states })
    }

    fn decode_legacy(aggs: &[AggSpec], bytes: &mut &[u8]) -> Option<Acc> {
        let count = value::take_u64(bytes)?;
        let [n] = value::take::<1>(bytes)?;
        let mut fields = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let sum = value::take_f64(bytes)?;
            let min = value::take_f64(bytes)?;
            let max = value::take_f64(bytes)?;
            fields.push((sum, min, max));
        }
        if count == 0 {
            return Some(Acc::default());
        }
        let states = aggs
            .iter()
            .map(|a| {
                let f = a.field.and_then(|i| fields.get(i).copied());
                numeric::from_legacy(a.op.name(), count, f).unwrap_or_else(|| a.op.new_state())
            })
            .collect();
        Some(Acc { count, states })
    }
}

/// Whether every aggregation can retract (see [`Aggregate::retractable`]).
pub fn retractable(aggs: &[AggSpec]) -> bool {
    aggs.iter().all(|a| a.op.retractable())
}
