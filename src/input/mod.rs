//! Input records: from a record's bytes to the engine's [`Event`].
//!
//! A pipeline reads a record through SQL expressions ([`crate::expr`]): an optional filter, the
//! key parts, the event time, and one input per aggregation. Their field paths are the
//! decoder's *slots* ([`InputSpec::paths`]). The JSON decoder parses a record once and keeps
//! only the values at those paths (no JSON tree is built); the Avro decoder reads the datum with
//! the reader schema and looks the same paths up. Both then hand the values to one evaluation,
//! [`InputSpec::event`], so JSON and Avro records mean the same thing:
//!
//! 1. the filter: false or NULL and the record is *filtered* (counted, not an error);
//! 2. the key: each part's value (a string or a number; NULL or a boolean is `malformed`),
//!    joined by the canonical encoding of [`encode_key`];
//! 3. the event time: a field or expression (epoch milliseconds, or an RFC 3339 string), the
//!    Kafka record's own timestamp (`$record_timestamp`), or processing time;
//! 4. each aggregation's input value, a number.
//!
//! A record that is not JSON (or Avro), lacks a key, a timestamp or an input value, or has one of
//! the wrong type is a [`DecodeError`] that becomes a dead letter with reason `malformed`; an
//! expression that cannot be evaluated on it (a string where a number is needed, a division by
//! zero) is [`DecodeError::Expression`], reason `expression`.
//!
//! This module holds the JSON decoder and what both decoders share; [`avro`] the Avro one (with
//! the Schema Registry client); [`decode`] the one entry point the record step calls.

pub mod avro;
pub mod decode;

use crate::expr::{Datum, Expr, Func, Paths, Row};
use crate::pipeline::Reason;
use crate::windowing::spec::MAX_KEY_BYTES;
use crate::windowing::time::MAX_ABS_TIMESTAMP;
use serde::Deserialize as _;
use serde_json::Value;

pub use crate::windowing::spec::Event;

/// An expression with the text it was written as.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    /// The text in the pipeline file.
    pub text: String,
    /// The compiled expression.
    pub expr: Expr,
}

/// One input of the aggregations: the expression, and whether an aggregation reads it as a
/// number (a record whose value there is of another type, and not NULL, is dead-lettered).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldInput {
    /// The expression.
    pub value: Compiled,
    /// Whether it must be a number or NULL.
    pub numeric: bool,
    /// The longest string an aggregation reading it may keep
    /// ([`crate::windowing::spec::RecordBudget::longest_value`]); `None` when none keeps it.
    pub longest: Option<usize>,
}

/// One part of the grouping key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyPart {
    /// The part's name: its alias, or its text.
    pub name: String,
    /// The part's value.
    pub value: Compiled,
}

/// Where a record's event time comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeSpec {
    /// A field or expression of the record: epoch milliseconds, or an RFC 3339 string.
    Field(Compiled),
    /// The Kafka record's timestamp (CreateTime or LogAppendTime, whichever the topic has).
    RecordTimestamp,
    /// The processing-time clock when the record is read.
    Processing,
}

/// The unit of an event time given as a number: epoch milliseconds unless the pipeline says
/// otherwise (`[input] timestamp_unit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TimeUnit {
    /// Epoch seconds.
    Seconds,
    /// Epoch milliseconds.
    #[default]
    Millis,
    /// Epoch microseconds.
    Micros,
    /// Epoch nanoseconds.
    Nanos,
}

impl TimeUnit {
    /// Every unit with its spelling in a pipeline file.
    pub const ALL: [(&'static str, TimeUnit); 4] = [
        ("s", TimeUnit::Seconds),
        ("ms", TimeUnit::Millis),
        ("us", TimeUnit::Micros),
        ("ns", TimeUnit::Nanos),
    ];

    /// The unit spelled `name`.
    pub fn parse(name: &str) -> Option<TimeUnit> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, u)| *u)
    }

    /// The unit's spelling.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, u)| *u == self)
            .map_or("ms", |(n, _)| n)
    }

    /// `n` of this unit in epoch milliseconds (`None` on overflow); sub-millisecond parts are
    /// dropped toward negative infinity, as windows assign them.
    fn to_millis(self, n: i64) -> Option<i64> {
        match self {
            TimeUnit::Seconds => n.checked_mul(1_000),
            TimeUnit::Millis => Some(n),
            TimeUnit::Micros => Some(n.div_euclid(1_000)),
            TimeUnit::Nanos => Some(n.div_euclid(1_000_000)),
        }
    }
}

/// The spelling of [`TimeSpec::RecordTimestamp`] in a pipeline file.
pub const RECORD_TIMESTAMP: &str = "$record_timestamp";

/// What a pipeline reads from each record.
#[derive(Debug, Clone, PartialEq)]
pub struct InputSpec {
    /// The distinct field paths the expressions read; a path's index is its slot.
    pub paths: Paths,
    /// Records for which this is false or NULL are filtered out.
    pub filter: Option<Compiled>,
    /// The key parts, in order; none: one group per window.
    pub key: Vec<KeyPart>,
    /// The event time.
    pub time: TimeSpec,
    /// The unit of an event time given as a number.
    pub time_unit: TimeUnit,
    /// The aggregations' inputs; aggregations refer to them by index.
    pub fields: Vec<FieldInput>,
}

/// What the decoder knows of a record besides its value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// The Kafka record's timestamp (in `simulate`: the envelope's, or the clock's).
    pub record_timestamp: Option<i64>,
    /// Processing time when the record is read.
    pub now: i64,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not a JSON object.
    #[error("not a JSON object: {0}")]
    NotJson(String),
    /// A configured field is absent or null.
    #[error("missing field {0}")]
    MissingField(String),
    /// A key part that is an expression is NULL.
    #[error("key part {0} is NULL")]
    NullKey(String),
    /// A configured field has the wrong JSON type.
    #[error("field {field} must be {expected}, got {got}")]
    WrongType {
        /// Dotted field path.
        field: String,
        /// What was expected.
        expected: &'static str,
        /// What was found.
        got: String,
    },
    /// The timestamp string is not RFC 3339.
    #[error("field {field}: {value:?} is not an RFC 3339 timestamp")]
    BadTimestamp {
        /// Dotted field path.
        field: String,
        /// The string found.
        value: String,
    },
    /// Avro bytes that do not decode: bad framing, unknown schema id, schemas that do not resolve.
    #[error("avro: {0}")]
    Avro(String),
    /// Decoding needs a service that is unreachable (the schema registry); not the record's fault,
    /// so the record is retried rather than dead-lettered.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The timestamp is too far from the epoch to compute windows safely.
    #[error("field {field}: timestamp {value} is out of range")]
    TimestampOutOfRange {
        /// Dotted field path.
        field: String,
        /// The timestamp.
        value: String,
    },
    /// The record has no timestamp (`$record_timestamp` on a record without one).
    #[error("the record has no timestamp")]
    NoRecordTimestamp,
    /// An expression cannot be evaluated on the record.
    #[error("{0}")]
    Expression(String),
    /// The grouping key is longer than [`MAX_KEY_BYTES`].
    #[error("the grouping key is {bytes} bytes long; the longest a key may be is {MAX_KEY_BYTES}")]
    KeyTooLong {
        /// The key's length in bytes.
        bytes: usize,
    },
    /// A string an aggregation keeps is longer than its share of an output record allows.
    #[error(
        "field {field}: a string of {bytes} bytes is longer than the {longest} bytes an \
         aggregation may keep of it, so that its state fits one record"
    )]
    ValueTooLong {
        /// The field's expression.
        field: String,
        /// The string's length in bytes.
        bytes: usize,
        /// The longest it may be.
        longest: usize,
    },
}

impl DecodeError {
    /// The dead-letter reason of a record that failed this way.
    pub fn reason(&self) -> Reason {
        match self {
            DecodeError::Expression(_) => Reason::Expression,
            DecodeError::KeyTooLong { .. } | DecodeError::ValueTooLong { .. } => Reason::TooLarge,
            _ => Reason::Malformed,
        }
    }
}

/// Parses an RFC 3339 timestamp into epoch milliseconds; `field` names it in the error.
pub(crate) fn parse_rfc3339(field: &str, s: &str) -> Result<i64, DecodeError> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| DecodeError::BadTimestamp {
            field: field.to_string(),
            value: s.to_string(),
        })
}

/// The canonical encoding of a key's parts as one string, the grouping key of the state, the
/// repartition hop and the dedup id. No parts: the empty string. One part: its text (a string
/// as is, a number as SQL writes it), so a one-field key is what it always was.
/// Several: the JSON array of the values, so `["a","b"]` and `"a\u0000b"` never collide and a
/// sink can read the parts back.
pub fn encode_key(parts: &[Datum<'_>]) -> String {
    let parts: smallvec::SmallVec<[(Datum<'_>, Fold); 4]> =
        parts.iter().map(|d| (d.clone(), Fold::Keep)).collect();
    encode_parts(&parts)
}

/// How a key part's string is written: as it is, or in ASCII lower or upper case (the value of
/// `lower(x)` or `upper(x)` when `x` is an ASCII string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    Keep,
    Lower,
    Upper,
}

impl Fold {
    /// The fold and its argument when `e` is `lower(x)` or `upper(x)`.
    fn of(e: &Expr) -> Option<(Fold, &Expr)> {
        match e {
            Expr::Call(Func::Lower, args) if args.len() == 1 => Some((Fold::Lower, &args[0])),
            Expr::Call(Func::Upper, args) if args.len() == 1 => Some((Fold::Upper, &args[0])),
            _ => None,
        }
    }

    /// Appends `s` to `out`, folded.
    fn push(self, out: &mut String, s: &str) {
        let start = out.len();
        out.push_str(s);
        match self {
            Fold::Keep => {}
            Fold::Lower => out[start..].make_ascii_lowercase(),
            Fold::Upper => out[start..].make_ascii_uppercase(),
        }
    }
}

/// [`encode_key`] of parts whose strings may be folded.
fn encode_parts(parts: &[(Datum<'_>, Fold)]) -> String {
    match parts {
        [] => String::new(),
        // A string is copied as is, without the formatting machinery (most keys are one).
        [(Datum::Str(s), Fold::Keep)] => String::from(s.as_ref()),
        [(Datum::Str(s), fold)] => {
            let mut out = String::with_capacity(s.len());
            fold.push(&mut out, s);
            out
        }
        [(one, _)] => one.to_string(),
        many => {
            // Written straight into one string, element by element, exactly as serde_json
            // writes the array of the values (so a reader that parses and re-serializes it gets
            // it back). A string that needs no escape, as nearly every key does, is copied
            // whole, without serde_json's byte-by-byte escaping; case folding changes no byte
            // that needs one.
            let mut out = String::with_capacity(16 * many.len());
            out.push('[');
            for (i, (d, fold)) in many.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                match d {
                    Datum::Str(s) if !s.bytes().any(json_escaped) => {
                        out.push('"');
                        fold.push(&mut out, s);
                        out.push('"');
                    }
                    Datum::Str(s) => {
                        let mut folded = String::with_capacity(s.len());
                        fold.push(&mut folded, s);
                        out.push_str(&Value::from(folded).to_string())
                    }
                    Datum::Int(n) => {
                        use std::fmt::Write as _;
                        write!(out, "{n}").expect("writing to a string cannot fail");
                    }
                    Datum::Float(x) => out.push_str(&Value::from(*x).to_string()),
                    Datum::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                    Datum::Null => out.push_str("null"),
                }
            }
            out.push(']');
            out
        }
    }
}

/// Whether JSON writes byte `b` of a string escaped: a control character, a quote or a
/// backslash (serde_json escapes nothing else).
fn json_escaped(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

#[cfg(test)]
fn datum_json(d: &Datum<'_>) -> Value {
    match d {
        Datum::Null => Value::Null,
        Datum::Bool(b) => Value::Bool(*b),
        Datum::Int(i) => Value::from(*i),
        Datum::Float(f) => Value::from(*f),
        Datum::Str(s) => Value::String(s.to_string()),
    }
}

impl InputSpec {
    /// A spec that reads the key, timestamp and numeric fields at plain dotted paths (the form
    /// tests and benches use most).
    pub fn plain(key: &str, timestamp: &str, fields: &[&str]) -> InputSpec {
        let mut paths = Paths::default();
        let mut compile = |text: &str| Compiled {
            text: text.to_string(),
            expr: crate::expr::parse(text, &mut paths).expect("a plain path parses"),
        };
        let key = vec![KeyPart {
            name: key.to_string(),
            value: compile(key),
        }];
        let time = TimeSpec::Field(compile(timestamp));
        let fields = fields
            .iter()
            .map(|f| FieldInput {
                value: compile(f),
                numeric: true,
                longest: None,
            })
            .collect();
        InputSpec {
            paths,
            filter: None,
            key,
            time,
            time_unit: TimeUnit::Millis,
            fields,
        }
    }

    /// The key as the state fingerprint and `explain` spell it: the part's text for one part,
    /// a JSON array of the texts for several.
    pub fn key_text(&self) -> String {
        match self.key.as_slice() {
            [one] => one.value.text.clone(),
            many => serde_json::to_string(
                &many
                    .iter()
                    .map(|p| p.value.text.as_str())
                    .collect::<Vec<_>>(),
            )
            .expect("strings serialize"),
        }
    }

    /// The event time as the pipeline file spells it.
    pub fn time_text(&self) -> &str {
        match &self.time {
            TimeSpec::Field(c) => &c.text,
            TimeSpec::RecordTimestamp => RECORD_TIMESTAMP,
            TimeSpec::Processing => "processing time",
        }
    }

    /// Evaluates the pipeline's expressions on one record's fields: the event, `None` when the
    /// filter rejects the record, or why the record cannot be used.
    pub fn event<R: Row>(&self, row: &R, meta: Meta) -> Result<Option<Event>, DecodeError> {
        let failed = |what: &str, e: crate::expr::EvalError| {
            DecodeError::Expression(format!("{what}: {}", e.0))
        };
        if let Some(f) = &self.filter {
            let keep = f
                .expr
                .eval_filter(row)
                .map_err(|e| failed(&format!("filter {:?}", f.text), e))?;
            if !keep {
                return Ok(None);
            }
        }
        let mut parts: smallvec::SmallVec<[(Datum<'_>, Fold); 4]> = smallvec::SmallVec::new();
        for part in &self.key {
            // `lower(x)` or `upper(x)` of an ASCII string is folded as the key is written,
            // without a string of its own; anything else is evaluated whole.
            let whole = &part.value.expr;
            let (v, fold) = match Fold::of(whole) {
                Some((fold, arg)) => match arg.eval(row) {
                    Ok(Datum::Str(s)) if s.is_ascii() => (Ok(Datum::Str(s)), fold),
                    _ => (whole.eval(row), Fold::Keep),
                },
                None => (whole.eval(row), Fold::Keep),
            };
            let v = v.map_err(|e| failed(&format!("key part {:?}", part.value.text), e))?;
            match v {
                Datum::Null => {
                    return Err(match part.value.expr.as_field() {
                        Some(path) => DecodeError::MissingField(path.to_string()),
                        None => DecodeError::NullKey(part.value.text.clone()),
                    })
                }
                Datum::Bool(_) => {
                    return Err(DecodeError::WrongType {
                        field: part.value.text.clone(),
                        expected: "a string or a number",
                        got: v.type_name().to_string(),
                    })
                }
                _ => parts.push((v, fold)),
            }
        }
        let key = encode_parts(&parts);
        drop(parts);
        if key.len() > MAX_KEY_BYTES {
            return Err(DecodeError::KeyTooLong { bytes: key.len() });
        }
        let ts = match &self.time {
            TimeSpec::Processing => meta.now,
            TimeSpec::RecordTimestamp => meta
                .record_timestamp
                .ok_or(DecodeError::NoRecordTimestamp)?,
            TimeSpec::Field(c) => {
                let v = c
                    .expr
                    .eval(row)
                    .map_err(|e| failed(&format!("timestamp {:?}", c.text), e))?;
                timestamp(&c.text, v, self.time_unit)?
            }
        };
        let mut values = Vec::with_capacity(self.fields.len());
        for f in &self.fields {
            let v = f
                .value
                .expr
                .eval(row)
                .map_err(|e| failed(&format!("field {:?}", f.value.text), e))?;
            if f.numeric && !matches!(v, Datum::Null | Datum::Int(_) | Datum::Float(_)) {
                return Err(DecodeError::WrongType {
                    field: f.value.text.clone(),
                    expected: "a number",
                    got: v.type_name().to_string(),
                });
            }
            if let (Datum::Str(s), Some(longest)) = (&v, f.longest) {
                if s.len() > longest {
                    return Err(DecodeError::ValueTooLong {
                        field: f.value.text.clone(),
                        bytes: s.len(),
                        longest,
                    });
                }
            }
            values.push(v.into_owned());
        }
        Ok(Some(Event { key, ts, values }))
    }
}

/// An event time from its value: an epoch number in `unit` (an integer, or a double without a
/// fraction), or an RFC 3339 string; in epoch milliseconds.
fn timestamp(field: &str, v: Datum<'_>, unit: TimeUnit) -> Result<i64, DecodeError> {
    const EXPECTED: &str = "an integer epoch time or an RFC 3339 string";
    let out_of_range = |value: String| DecodeError::TimestampOutOfRange {
        field: field.to_string(),
        value,
    };
    let ts = match v {
        Datum::Null => return Err(DecodeError::MissingField(field.to_string())),
        Datum::Int(i) => unit
            .to_millis(i)
            .ok_or_else(|| out_of_range(i.to_string()))?,
        Datum::Float(f) => {
            if f.fract() != 0.0 || !f.is_finite() || f.abs() > MAX_ABS_TIMESTAMP as f64 {
                return Err(DecodeError::WrongType {
                    field: field.to_string(),
                    expected: EXPECTED,
                    got: Datum::Float(f).to_string(),
                });
            }
            unit.to_millis(f as i64)
                .ok_or_else(|| out_of_range(f.to_string()))?
        }
        Datum::Str(s) => parse_rfc3339(field, &s)?,
        other => {
            return Err(DecodeError::WrongType {
                field: field.to_string(),
                expected: EXPECTED,
                got: other.type_name().to_string(),
            })
        }
    };
    if ts.unsigned_abs() > MAX_ABS_TIMESTAMP as u64 {
        return Err(DecodeError::TimestampOutOfRange {
            field: field.to_string(),
            value: ts.to_string(),
        });
    }
    Ok(ts)
}

/// Decodes JSON records according to an [`InputSpec`].
#[derive(Debug, Clone)]
pub struct JsonDecoder {
    spec: InputSpec,
    picker: Picker,
}

fn lookup<'a>(root: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut v = root;
    for seg in path {
        v = v.as_object()?.get(seg)?;
    }
    if v.is_null() {
        None
    } else {
        Some(v)
    }
}

fn not_an_object(got: String) -> DecodeError {
    DecodeError::NotJson(format!("expected an object, got {got}"))
}

fn type_name(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(_) => "a number".into(),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn not_a_scalar(path: &[String], got: String) -> DecodeError {
    DecodeError::WrongType {
        field: path.join("."),
        expected: "a string, a number or a boolean",
        got,
    }
}

/// A JSON value as an expression sees it.
fn json_datum(v: Option<&Value>) -> Datum<'_> {
    match v {
        None | Some(Value::Null) => Datum::Null,
        Some(Value::Bool(b)) => Datum::Bool(*b),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => Datum::Int(i),
            None => Datum::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Some(Value::String(s)) => Datum::Str(std::borrow::Cow::Borrowed(s)),
        // Refused before evaluation (see `JsonDecoder::decode_inner`).
        Some(Value::Array(_) | Value::Object(_)) => Datum::Null,
    }
}

/// The values at a record's slots, for expressions.
struct JsonFields<'v, F>(F, std::marker::PhantomData<&'v Value>);

impl<'v, F: Fn(usize) -> Option<&'v Value>> Row for JsonFields<'v, F> {
    fn field(&self, slot: usize) -> Datum<'_> {
        json_datum((self.0)(slot))
    }
}

impl JsonDecoder {
    /// A decoder for the given spec.
    pub fn new(spec: InputSpec) -> JsonDecoder {
        let picker = Picker::new(&spec);
        JsonDecoder { spec, picker }
    }

    /// Decodes raw bytes (one JSON object): the event, or `None` when the filter rejects it.
    pub fn decode(&self, bytes: &[u8], meta: Meta) -> Result<Option<Event>, DecodeError> {
        let picked = self.picker.pick(bytes)?;
        for (leaf, path) in picked.0.iter().zip(self.spec.paths.all()) {
            if let Leaf::Nested(got) = leaf {
                return Err(not_a_scalar(path, got.to_string()));
            }
        }
        self.spec.event(&picked, meta)
    }

    /// Decodes an already parsed JSON value.
    pub fn decode_value(&self, value: &Value, meta: Meta) -> Result<Option<Event>, DecodeError> {
        if !value.is_object() {
            return Err(not_an_object(type_name(value)));
        }
        let paths = self.spec.paths.all();
        self.decode_inner(|slot| lookup(value, &paths[slot]), meta)
    }

    /// Decodes the event from the values at its slots; `get(slot)` is the non-null value at
    /// path `slot`, if any. A value there must be a scalar.
    fn decode_inner<'v>(
        &self,
        get: impl Fn(usize) -> Option<&'v Value>,
        meta: Meta,
    ) -> Result<Option<Event>, DecodeError> {
        for (slot, path) in self.spec.paths.all().iter().enumerate() {
            if let Some(v @ (Value::Array(_) | Value::Object(_))) = get(slot) {
                return Err(not_a_scalar(path, type_name(v)));
            }
        }
        self.spec
            .event(&JsonFields(get, std::marker::PhantomData), meta)
    }
}

/// One node of the tree of configured paths: the slots whose path ends here, and the children by
/// field name.
#[derive(Debug, Clone, Default)]
struct PathNode {
    slots: Vec<usize>,
    /// Every slot at or below this node. They are cleared whenever the node's value is met, so a
    /// field that occurs twice counts with its last occurrence, as in a parsed JSON map.
    below: Vec<usize>,
    children: Vec<(String, PathNode)>,
}

impl PathNode {
    fn insert(&mut self, path: &[String], slot: usize) {
        self.below.push(slot);
        match path.split_first() {
            None => self.slots.push(slot),
            Some((first, rest)) => {
                let i = match self.children.iter().position(|(n, _)| n == first) {
                    Some(i) => i,
                    None => {
                        self.children.push((first.clone(), PathNode::default()));
                        self.children.len() - 1
                    }
                };
                self.children[i].1.insert(rest, slot);
            }
        }
    }
}

/// Parses one JSON value and keeps only the values at the configured paths: the rest is parsed
/// and checked as fully as when building a `serde_json::Value` (same parser, same errors), but
/// nothing of it is allocated. Slots are the spec's paths.
#[derive(Debug, Clone)]
struct Picker {
    /// Number of slots (paths).
    slots: usize,
    root: PathNode,
}

/// What the picker found at one path: nothing (absent or null), a scalar (a string borrowed
/// from the bytes where it has no escapes), or an array or object (named by its type).
#[derive(Debug, Clone)]
enum Leaf<'de> {
    Absent,
    Scalar(Datum<'de>),
    Nested(&'static str),
}

/// The values found at the configured paths, by slot.
struct Picked<'de>(Vec<Leaf<'de>>);

impl Row for Picked<'_> {
    fn field(&self, slot: usize) -> Datum<'_> {
        match &self.0[slot] {
            Leaf::Scalar(Datum::Str(s)) => Datum::Str(std::borrow::Cow::Borrowed(s)),
            Leaf::Scalar(d) => d.clone(),
            Leaf::Absent | Leaf::Nested(_) => Datum::Null,
        }
    }
}

impl Picker {
    fn new(spec: &InputSpec) -> Picker {
        let slots = spec.paths.len();
        let mut root = PathNode::default();
        for (slot, path) in spec.paths.all().iter().enumerate() {
            root.insert(path, slot);
        }
        Picker { slots, root }
    }

    /// Picks from one JSON text. A text that is valid UTF-8 as a whole (nearly every record) is
    /// read as a `str`, so its encoding is checked once instead of once per string, field names
    /// included; any other goes through the byte reader, which reports the error a parse into a
    /// `serde_json::Value` reports.
    fn pick<'de>(&self, bytes: &'de [u8]) -> Result<Picked<'de>, DecodeError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.pick_from(serde_json::Deserializer::from_str(text)),
            Err(_) => self.pick_from(serde_json::Deserializer::from_slice(bytes)),
        }
    }

    fn pick_from<'de, R: serde_json::de::Read<'de>>(
        &self,
        mut de: serde_json::Deserializer<R>,
    ) -> Result<Picked<'de>, DecodeError> {
        use serde::de::DeserializeSeed;
        let not_json = |e: serde_json::Error| DecodeError::NotJson(e.to_string());
        let mut out = vec![Leaf::Absent; self.slots];
        let not_object = RootSeed {
            root: &self.root,
            out: &mut out,
        }
        .deserialize(&mut de)
        .map_err(not_json)?;
        de.end().map_err(not_json)?;
        match not_object {
            Some(got) => Err(not_an_object(got.to_string())),
            None => Ok(Picked(out)),
        }
    }
}

/// A value that is parsed and checked, then dropped.
struct Skip;

impl<'de> serde::Deserialize<'de> for Skip {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Skip, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> serde::de::Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_none<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Skip, D::Error> {
        Skip::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_key::<Skip>()?.is_some() {
            map.next_value::<Skip>()?;
        }
        Ok(Skip)
    }
}

/// The value at one node of the path tree.
struct NodeSeed<'a, 'de> {
    node: &'a PathNode,
    out: &'a mut Vec<Leaf<'de>>,
}

impl<'de> NodeSeed<'_, 'de> {
    fn leaf<E>(self, v: Leaf<'de>) -> Result<(), E> {
        if let Some((last, rest)) = self.node.slots.split_last() {
            for &s in rest {
                self.out[s] = v.clone();
            }
            self.out[*last] = v;
        }
        Ok(())
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for NodeSeed<'_, 'de> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        for &s in &self.node.below {
            self.out[s] = Leaf::Absent;
        }
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for NodeSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.leaf(Leaf::Scalar(Datum::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.leaf(Leaf::Scalar(Datum::Int(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        let d = i64::try_from(v).map_or(Datum::Float(v as f64), Datum::Int);
        self.leaf(Leaf::Scalar(d))
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        // A value that is not a finite number parses to null (as `serde_json::Value` does).
        if v.is_finite() {
            self.leaf(Leaf::Scalar(Datum::Float(v)))
        } else {
            self.leaf(Leaf::Absent)
        }
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<(), E> {
        self.leaf(Leaf::Scalar(Datum::Str(std::borrow::Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.leaf(Leaf::Scalar(Datum::Str(std::borrow::Cow::Owned(
            v.to_string(),
        ))))
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.leaf(Leaf::Absent)
    }
    fn visit_none<E>(self) -> Result<(), E> {
        self.leaf(Leaf::Absent)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        serde::de::DeserializeSeed::deserialize(self, d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        SkipVisitor.visit_seq(seq)?;
        self.leaf(Leaf::Nested("an array"))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let NodeSeed { node, out } = self;
        NodeSeed {
            node,
            out: &mut *out,
        }
        .leaf(Leaf::Nested("an object"))?;
        while let Some(child) = map.next_key_seed(KeySeed(node))? {
            match child {
                Some(child) => map.next_value_seed(NodeSeed {
                    node: child,
                    out: &mut *out,
                })?,
                None => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(())
    }
}

/// A field name, looked up among a node's children without allocating.
struct KeySeed<'a>(&'a PathNode);

impl<'de, 'a> serde::de::DeserializeSeed<'de> for KeySeed<'a> {
    type Value = Option<&'a PathNode>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, 'a> serde::de::Visitor<'de> for KeySeed<'a> {
    type Value = Option<&'a PathNode>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.children.iter().find(|(n, _)| n == v).map(|(_, c)| c))
    }
}

/// The top-level value: an object is picked from; anything else is parsed and named (its type).
struct RootSeed<'a, 'de> {
    root: &'a PathNode,
    out: &'a mut Vec<Leaf<'de>>,
}

impl<'de> serde::de::DeserializeSeed<'de> for RootSeed<'_, 'de> {
    type Value = Option<&'static str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for RootSeed<'_, 'de> {
    type Value = Option<&'static str>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Some("a boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Some("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Some("a number"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        // A value that is not a finite number parses to null (as `serde_json::Value` does).
        Ok(Some(if v.is_finite() { "a number" } else { "null" }))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Some("a string"))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Some("null"))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        SkipVisitor.visit_seq(seq)?;
        Ok(Some("an array"))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        serde::de::Visitor::visit_map(
            NodeSeed {
                node: self.root,
                out: self.out,
            },
            map,
        )?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> JsonDecoder {
        JsonDecoder::new(InputSpec::plain("user.id", "ts", &["amount"]))
    }

    fn decode(d: &JsonDecoder, bytes: &[u8]) -> Result<Event, DecodeError> {
        d.decode(bytes, Meta::default())
            .map(|e| e.expect("no filter"))
    }

    #[test]
    fn decodes_nested_key_and_both_timestamp_forms() {
        let d = decoder();
        let e = decode(&d, br#"{"user":{"id":"u1"},"ts":1000,"amount":2.5}"#).unwrap();
        assert_eq!(
            e,
            Event {
                key: "u1".into(),
                ts: 1000,
                values: vec![Datum::Float(2.5)]
            }
        );
        let e = decode(
            &d,
            br#"{"user":{"id":7},"ts":"1970-01-01T00:00:01.500+00:00","amount":1}"#,
        )
        .unwrap();
        assert_eq!((e.key.as_str(), e.ts), ("7", 1500));
        let e = decode(
            &d,
            br#"{"user":{"id":"a"},"ts":"1969-12-31T23:59:59Z","amount":1}"#,
        )
        .unwrap();
        assert_eq!(e.ts, -1000);
    }

    fn spec(filter: Option<&str>, key: &[&str], time: &str, fields: &[&str]) -> InputSpec {
        let mut paths = Paths::default();
        let mut compile = |text: &str| Compiled {
            text: text.to_string(),
            expr: crate::expr::parse(text, &mut paths).unwrap(),
        };
        let filter = filter.map(&mut compile);
        let key = key
            .iter()
            .map(|k| KeyPart {
                name: k.to_string(),
                value: compile(k),
            })
            .collect();
        let time = match time {
            RECORD_TIMESTAMP => TimeSpec::RecordTimestamp,
            "processing" => TimeSpec::Processing,
            t => TimeSpec::Field(compile(t)),
        };
        let fields = fields
            .iter()
            .map(|f| FieldInput {
                value: compile(f),
                numeric: true,
                longest: None,
            })
            .collect();
        InputSpec {
            paths,
            filter,
            key,
            time,
            time_unit: TimeUnit::Millis,
            fields,
        }
    }

    #[test]
    fn filters_keys_of_any_shape_and_three_kinds_of_time() {
        let d = JsonDecoder::new(spec(
            Some("kind = 'click' AND price > 0"),
            &["page", "lower(geo.country)"],
            "ts",
            &["price * qty"],
        ));
        let meta = Meta::default();
        let e = d
            .decode(
                br#"{"kind":"click","price":2.5,"qty":2,"page":"/a","geo":{"country":"DE"},"ts":5}"#,
                meta,
            )
            .unwrap()
            .unwrap();
        assert_eq!(e.key, r#"["/a","de"]"#);
        assert_eq!(e.values, vec![Datum::Float(5.0)]);
        // Rejected by the filter: not an error; the timestamp is not even read.
        for rejected in [
            r#"{"kind":"view","price":2.5,"qty":2,"page":"/a","geo":{"country":"DE"}}"#,
            r#"{"kind":"click","price":null,"page":"/a"}"#,
        ] {
            assert_eq!(d.decode(rejected.as_bytes(), meta), Ok(None), "{rejected}");
        }
        // A filter that cannot be evaluated is an expression error.
        let err = d
            .decode(br#"{"kind":"click","price":"cheap"}"#, meta)
            .unwrap_err();
        assert_eq!(err.reason(), Reason::Expression);
        assert_eq!(
            err.to_string(),
            r#"filter "kind = 'click' AND price > 0": cannot compare a string with an integer"#
        );
        // A NULL key part is a missing key.
        let err = d
            .decode(
                br#"{"kind":"click","price":1,"qty":1,"page":"/a","ts":5}"#,
                meta,
            )
            .unwrap_err();
        assert_eq!(err, DecodeError::NullKey("lower(geo.country)".into()));
        assert_eq!(err.reason(), Reason::Malformed);

        // No key; the record's own timestamp; processing time.
        let none = JsonDecoder::new(spec(None, &[], RECORD_TIMESTAMP, &[]));
        let meta = Meta {
            record_timestamp: Some(42),
            now: 7,
        };
        let e = none.decode(b"{}", meta).unwrap().unwrap();
        assert_eq!((e.key.as_str(), e.ts), ("", 42));
        assert_eq!(
            none.decode(b"{}", Meta::default()),
            Err(DecodeError::NoRecordTimestamp)
        );
        let arrival = JsonDecoder::new(spec(None, &["k"], "processing", &[]));
        let e = arrival.decode(br#"{"k":1}"#, meta).unwrap().unwrap();
        assert_eq!((e.key.as_str(), e.ts), ("1", 7));
        // A timestamp expression.
        let computed = JsonDecoder::new(spec(None, &["k"], "t_s * 1000", &[]));
        let e = computed
            .decode(br#"{"k":"a","t_s":3}"#, meta)
            .unwrap()
            .unwrap();
        assert_eq!(e.ts, 3000);
    }

    #[test]
    fn the_key_encoding_keeps_distinct_parts_distinct() {
        use std::borrow::Cow;
        let s = |x: &str| Datum::Str(Cow::Owned(x.to_string()));
        assert_eq!(encode_key(&[]), "");
        assert_eq!(encode_key(&[s("a")]), "a");
        assert_eq!(encode_key(&[Datum::Int(7)]), "7");
        assert_eq!(encode_key(&[s("a"), s("b")]), r#"["a","b"]"#);
        assert_ne!(encode_key(&[s("a"), s("b")]), encode_key(&[s("a\u{0}b")]));
        assert_ne!(
            encode_key(&[s("a,b"), s("c")]),
            encode_key(&[s("a"), s("b,c")])
        );
        assert_ne!(
            encode_key(&[Datum::Int(1), s("x")]),
            encode_key(&[s("1"), s("x")])
        );
    }

    mod key_encoding {
        use super::*;
        use proptest::prelude::*;
        use std::borrow::Cow;

        fn part() -> impl Strategy<Value = Datum<'static>> {
            prop_oneof![
                any::<i64>().prop_map(Datum::Int),
                any::<bool>().prop_map(Datum::Bool),
                "[a-c\\\",\\[\\]\u{0}\u{1f}\\\\é ]{0,4}".prop_map(|t| Datum::Str(Cow::Owned(t))),
                // Quarters: doubles whose JSON text reads back exactly.
                (-4_000_000i64..4_000_000).prop_map(|q| Datum::Float(q as f64 / 4.0)),
            ]
        }

        proptest! {
            /// Distinct tuples of key parts (of one pipeline, so of one length) encode to
            /// distinct keys, and a several-part key reads back as its parts.
            #[test]
            fn distinct_tuples_give_distinct_keys(
                n in 2usize..4,
                a in prop::collection::vec(part(), 4),
                b in prop::collection::vec(part(), 4),
            ) {
                let (a, b) = (&a[..n], &b[..n]);
                if a != b {
                    prop_assert_ne!(encode_key(a), encode_key(b));
                }
                let back: Vec<Value> = serde_json::from_str(&encode_key(a)).unwrap();
                prop_assert_eq!(&back, &a.iter().map(datum_json).collect::<Vec<_>>());
                // Byte for byte what serde_json writes for the array: the text is the state
                // key and the dedup id's input, so it must not change with the writer.
                prop_assert_eq!(encode_key(a), serde_json::to_string(&back).unwrap());
            }

            /// A key part `lower(x)` or `upper(x)`, folded as the key is written, gives the key
            /// (or the error) that evaluating the part whole gives, whatever `x` holds.
            #[test]
            fn folded_key_parts_encode_as_evaluated(
                a in "[a-cA-C\\\\\"\u{0}\u{1f}éÉ ]{0,4}",
                b in prop_oneof![
                    "[a-cA-C\\\\\"éÉ]{0,3}".prop_map(|t| Value::from(t).to_string()),
                    any::<i32>().prop_map(|n| n.to_string()),
                    Just("null".to_string()),
                    Just("true".to_string()),
                ],
            ) {
                let record = format!(r#"{{"a":{},"b":{b},"ts":1}}"#, Value::from(a.as_str()));
                let keys: [&[&str]; 4] = [&["lower(a)"], &["upper(b)"], &["a", "lower(a)", "upper(b)"], &["lower(b)", "b"]];
                for key in keys {
                    let spec = spec(None, key, "ts", &[]);
                    let value: Value = serde_json::from_str(&record).unwrap();
                    let paths = spec.paths.all();
                    let row = JsonFields(|slot: usize| lookup(&value, &paths[slot]), std::marker::PhantomData);
                    let whole: Result<Vec<Datum>, String> = spec
                        .key
                        .iter()
                        .map(|p| p.value.expr.eval(&row).map_err(|e| e.0))
                        .collect();
                    let got = JsonDecoder::new(spec.clone()).decode(record.as_bytes(), Meta::default());
                    match whole {
                        Ok(parts) if parts.iter().all(|d| matches!(d, Datum::Str(_) | Datum::Int(_))) => {
                            prop_assert_eq!(got.unwrap().unwrap().key, encode_key(&parts), "{:?}", key);
                        }
                        _ => prop_assert!(got.is_err(), "{:?} {:?}", key, got),
                    }
                }
            }
        }
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let d = decoder();
        let cases: &[&[u8]] = &[
            b"not json",
            b"[1,2]",
            br#"{"ts":1,"amount":1}"#,
            br#"{"user":{"id":[1]},"ts":1,"amount":1}"#,
            br#"{"user":{"id":true},"ts":1,"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":{},"amount":1}"#,
            br#"{"user":{"id":"u"},"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":"yesterday","amount":1}"#,
            br#"{"user":{"id":"u"},"ts":1.5,"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":1e300,"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":9223372036854775807,"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":1,"amount":"12"}"#,
        ];
        for c in cases {
            assert!(decode(&d, c).is_err(), "{}", String::from_utf8_lossy(c));
        }
        // A NULL or absent aggregation input is not an error: aggregations skip NULLs, as SQL's do.
        for c in [
            br#"{"user":{"id":"u"},"ts":1,"amount":null}"#.as_slice(),
            br#"{"user":{"id":"u"},"ts":1}"#,
        ] {
            assert_eq!(decode(&d, c).unwrap().values, vec![Datum::Null]);
        }
    }

    /// The parsed-once path (`decode`, `decode_keyed`) and the parse-then-look-up path
    /// (`decode_value` over a `serde_json::Value`) agree on every input: the same event, or the
    /// same error with the same message.
    mod picker_agrees_with_value {
        use super::*;
        use proptest::prelude::*;

        fn json() -> impl Strategy<Value = String> {
            let names = prop::sample::select(vec!["user", "id", "ts", "amount", "x", "u\\u0073er"]);
            let leaf = prop_oneof![
                Just("null".to_string()),
                Just("true".to_string()),
                any::<i64>().prop_map(|n| n.to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
                any::<f64>().prop_map(|f| format!("{f:?}")),
                Just("1e400".to_string()),
                Just("-0".to_string()),
                Just("1.5".to_string()),
                Just("\"1970-01-01T00:00:01Z\"".to_string()),
                "[a-zé€\\\\\"]{0,6}".prop_map(|t| format!("\"{t}\"")),
            ];
            let any_json = leaf.clone().prop_recursive(4, 24, 5, move |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4)
                        .prop_map(|v| format!("[{}]", v.join(","))),
                    prop::collection::vec((names.clone(), inner), 0..6).prop_map(|kv| {
                        let body: Vec<String> = kv
                            .into_iter()
                            .map(|(k, v)| format!("\"{k}\":{v}"))
                            .collect();
                        format!("{{{}}}", body.join(","))
                    }),
                ]
            });
            // Events that mostly decode: the configured fields with plausible values, among others.
            let ts = prop_oneof![
                any::<i32>().prop_map(|n| n.to_string()),
                Just("\"1970-01-01T00:00:01.5Z\"".to_string()),
                leaf.clone()
            ];
            let num = prop_oneof![
                any::<i32>().prop_map(|n| n.to_string()),
                Just("2.5".to_string()),
                leaf.clone()
            ];
            let id = prop_oneof!["[a-z]{1,3}".prop_map(|t| format!("\"{t}\"")), leaf];
            let event = (
                id,
                ts,
                num,
                prop::collection::vec(any_json.clone(), 0..3),
                any::<bool>(),
            )
                .prop_map(|(id, ts, num, extra, flip)| {
                    let mut fields = vec![
                        format!("\"user\":{{\"id\":{id}}}"),
                        format!("\"ts\":{ts}"),
                        format!("\"amount\":{num}"),
                    ];
                    fields.extend(
                        extra
                            .into_iter()
                            .enumerate()
                            .map(|(i, v)| format!("\"x{i}\":{v}")),
                    );
                    if flip {
                        fields.reverse();
                    }
                    format!("{{{}}}", fields.join(","))
                });
            prop_oneof![any_json, event]
        }

        fn by_value(d: &JsonDecoder, bytes: &[u8]) -> Result<Option<Event>, DecodeError> {
            let v: Value =
                serde_json::from_slice(bytes).map_err(|e| DecodeError::NotJson(e.to_string()))?;
            d.decode_value(&v, Meta::default())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]
            #[test]
            fn on_generated_json(text in json(), cut in any::<prop::sample::Index>(), noise in any::<u8>(), mangle in 0u8..4) {
                let mut bytes = text.into_bytes();
                match mangle {
                    0 => {}
                    1 => bytes.truncate(cut.index(bytes.len() + 1)),
                    2 => { let at = cut.index(bytes.len() + 1); bytes.insert(at, noise); }
                    _ => bytes.extend_from_slice(b" x"),
                }
                let d = decoder();
                prop_assert_eq!(d.decode(&bytes, Meta::default()), by_value(&d, &bytes));
            }
        }

        #[test]
        fn duplicated_fields_count_with_their_last_occurrence() {
            let d = decoder();
            for text in [
                r#"{"user":{"id":"a"},"ts":1,"amount":1,"user":{"x":1}}"#,
                r#"{"user":{"id":"a"},"ts":1,"amount":1,"user":{"id":"b"}}"#,
                r#"{"user":{"id":"a"},"ts":1,"amount":1,"amount":null}"#,
                r#"{"user":"a","user":{"id":"b"},"ts":1,"amount":2}"#,
            ] {
                assert_eq!(
                    d.decode(text.as_bytes(), Meta::default()),
                    by_value(&d, text.as_bytes()),
                    "{text}"
                );
            }
        }
    }
}
