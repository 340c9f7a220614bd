//! Input records: decoding a JSON event into the engine's [`Event`].
//!
//! A pipeline names dotted paths for the grouping key (a string or a number), the event timestamp
//! (epoch milliseconds as an integer, or an RFC 3339 string) and each numeric value. Anything else is
//! a [`DecodeError`], which callers turn into a dead letter with reason `malformed`.

use crate::windowing::time::MAX_ABS_TIMESTAMP;
use serde::Deserialize as _;
use serde_json::Value;

pub use crate::windowing::spec::Event;

/// Where the key, timestamp and numeric values are in an event, as split field paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    /// Key path segments.
    pub key: Vec<String>,
    /// Timestamp path segments.
    pub timestamp: Vec<String>,
    /// Distinct numeric field paths; aggregations refer to them by index.
    pub fields: Vec<Vec<String>>,
}

impl InputSpec {
    /// Number of configured paths: key, timestamp and each field.
    fn slots(&self) -> usize {
        2 + self.fields.len()
    }

    /// The path of a slot: 0 = key, 1 = timestamp, 2.. = the numeric fields in order.
    fn path(&self, slot: usize) -> &[String] {
        match slot {
            0 => &self.key,
            1 => &self.timestamp,
            i => &self.fields[i - 2],
        }
    }
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

/// Decodes JSON events according to an [`InputSpec`].
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

impl JsonDecoder {
    /// A decoder for the given field locations.
    pub fn new(spec: InputSpec) -> JsonDecoder {
        let picker = Picker::new(&spec);
        JsonDecoder { spec, picker }
    }

    /// Decodes raw bytes (one JSON object).
    pub fn decode(&self, bytes: &[u8]) -> Result<Event, DecodeError> {
        self.decode_bytes(bytes, None)
    }

    /// Decodes raw bytes whose grouping key is given (the Kafka record key); the key field of the
    /// input spec is not read.
    pub fn decode_keyed(&self, bytes: &[u8], key: String) -> Result<Event, DecodeError> {
        self.decode_bytes(bytes, Some(key))
    }

    /// Parses the bytes once, keeping only the configured paths (no JSON tree is built), and
    /// decodes them exactly as [`JsonDecoder::decode_value`] decodes the whole parsed value.
    fn decode_bytes(&self, bytes: &[u8], given_key: Option<String>) -> Result<Event, DecodeError> {
        let picked = self.picker.pick(bytes)?;
        self.decode_inner(|slot| picked.get(slot), given_key)
    }

    /// Decodes an already parsed JSON value.
    pub fn decode_value(&self, value: &Value) -> Result<Event, DecodeError> {
        if !value.is_object() {
            return Err(not_an_object(type_name(value)));
        }
        self.decode_inner(|slot| lookup(value, self.spec.path(slot)), None)
    }

    /// Decodes the event from its configured paths; `get(slot)` is the non-null value at path
    /// `slot` (0 = key, 1 = timestamp, 2.. = numeric fields), if any.
    fn decode_inner<'v>(
        &self,
        get: impl Fn(usize) -> Option<&'v Value>,
        given_key: Option<String>,
    ) -> Result<Event, DecodeError> {
        let key = match given_key {
            Some(k) => k,
            None => self.key_field(get(0))?,
        };
        let ts = self.timestamp(get(1))?;
        let mut values = Vec::with_capacity(self.spec.fields.len());
        for (i, path) in self.spec.fields.iter().enumerate() {
            match get(2 + i) {
                None => return Err(DecodeError::MissingField(path.join("."))),
                Some(Value::Number(n)) => values.push(n.as_f64().unwrap_or(f64::NAN)),
                Some(other) => {
                    return Err(DecodeError::WrongType {
                        field: path.join("."),
                        expected: "a number",
                        got: type_name(other),
                    })
                }
            }
        }
        Ok(Event { key, ts, values })
    }

    fn key_field(&self, found: Option<&Value>) -> Result<String, DecodeError> {
        let key_name = || self.spec.key.join(".");
        match found {
            None => Err(DecodeError::MissingField(key_name())),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(other) => Err(DecodeError::WrongType {
                field: key_name(),
                expected: "a string or a number",
                got: type_name(other),
            }),
        }
    }

    fn timestamp(&self, found: Option<&Value>) -> Result<i64, DecodeError> {
        let field = || self.spec.timestamp.join(".");
        let ts = match found {
            None => return Err(DecodeError::MissingField(field())),
            Some(Value::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    i
                } else {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    if f.fract() != 0.0 || !f.is_finite() || f.abs() > MAX_ABS_TIMESTAMP as f64 {
                        return Err(DecodeError::WrongType {
                            field: field(),
                            expected: "integer epoch milliseconds or an RFC 3339 string",
                            got: n.to_string(),
                        });
                    }
                    f as i64
                }
            }
            Some(Value::String(s)) => parse_rfc3339(&field(), s)?,
            Some(other) => {
                return Err(DecodeError::WrongType {
                    field: field(),
                    expected: "integer epoch milliseconds or an RFC 3339 string",
                    got: type_name(other),
                })
            }
        };
        if ts.unsigned_abs() > MAX_ABS_TIMESTAMP as u64 {
            return Err(DecodeError::TimestampOutOfRange {
                field: field(),
                value: ts.to_string(),
            });
        }
        Ok(ts)
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
/// nothing of it is allocated. Slot 0 is the key path, 1 the timestamp path, 2.. the fields.
#[derive(Debug, Clone)]
struct Picker {
    /// Number of slots (paths).
    slots: usize,
    root: PathNode,
}

/// The non-null values found at the configured paths, by slot. An object or array found at a path
/// is kept as an empty one (only its type matters there).
struct Picked(Vec<Option<Value>>);

impl Picked {
    fn get(&self, slot: usize) -> Option<&Value> {
        self.0[slot].as_ref()
    }
}

impl Picker {
    fn new(spec: &InputSpec) -> Picker {
        let slots = spec.slots();
        let mut root = PathNode::default();
        for slot in 0..slots {
            root.insert(spec.path(slot), slot);
        }
        Picker { slots, root }
    }

    fn pick(&self, bytes: &[u8]) -> Result<Picked, DecodeError> {
        use serde::de::DeserializeSeed;
        let not_json = |e: serde_json::Error| DecodeError::NotJson(e.to_string());
        let mut out = vec![None; self.slots];
        let mut de = serde_json::Deserializer::from_slice(bytes);
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
struct NodeSeed<'a> {
    node: &'a PathNode,
    out: &'a mut Vec<Option<Value>>,
}

impl NodeSeed<'_> {
    fn leaf<E>(self, v: impl FnOnce() -> Option<Value>) -> Result<(), E> {
        if let Some((last, rest)) = self.node.slots.split_last() {
            let v = v();
            for &s in rest {
                self.out[s] = v.clone();
            }
            self.out[*last] = v;
        }
        Ok(())
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        for &s in &self.node.below {
            self.out[s] = None;
        }
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for NodeSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.leaf(|| Some(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.leaf(|| Some(Value::Number(v.into())))
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.leaf(|| Some(Value::Number(v.into())))
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.leaf(|| serde_json::Number::from_f64(v).map(Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.leaf(|| Some(Value::String(v.to_string())))
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.leaf(|| None)
    }
    fn visit_none<E>(self) -> Result<(), E> {
        self.leaf(|| None)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        serde::de::DeserializeSeed::deserialize(self, d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        SkipVisitor.visit_seq(seq)?;
        self.leaf(|| Some(Value::Array(Vec::new())))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let NodeSeed { node, out } = self;
        NodeSeed {
            node,
            out: &mut *out,
        }
        .leaf(|| Some(Value::Object(serde_json::Map::new())))?;
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
struct RootSeed<'a> {
    root: &'a PathNode,
    out: &'a mut Vec<Option<Value>>,
}

impl<'de> serde::de::DeserializeSeed<'de> for RootSeed<'_> {
    type Value = Option<&'static str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for RootSeed<'_> {
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
        JsonDecoder::new(InputSpec {
            key: vec!["user".into(), "id".into()],
            timestamp: vec!["ts".into()],
            fields: vec![vec!["amount".into()]],
        })
    }

    #[test]
    fn decodes_nested_key_and_both_timestamp_forms() {
        let d = decoder();
        let e = d
            .decode(br#"{"user":{"id":"u1"},"ts":1000,"amount":2.5}"#)
            .unwrap();
        assert_eq!(
            e,
            Event {
                key: "u1".into(),
                ts: 1000,
                values: vec![2.5]
            }
        );
        let e = d
            .decode(br#"{"user":{"id":7},"ts":"1970-01-01T00:00:01.500+00:00","amount":1}"#)
            .unwrap();
        assert_eq!((e.key.as_str(), e.ts), ("7", 1500));
        let e = d
            .decode(br#"{"user":{"id":"a"},"ts":"1969-12-31T23:59:59Z","amount":1}"#)
            .unwrap();
        assert_eq!(e.ts, -1000);
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let d = decoder();
        let cases: &[&[u8]] = &[
            b"not json",
            b"[1,2]",
            br#"{"ts":1,"amount":1}"#,
            br#"{"user":{"id":true},"ts":1,"amount":1}"#,
            br#"{"user":{"id":"u"},"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":"yesterday","amount":1}"#,
            br#"{"user":{"id":"u"},"ts":1.5,"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":1e300,"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":9223372036854775807,"amount":1}"#,
            br#"{"user":{"id":"u"},"ts":1,"amount":"12"}"#,
            br#"{"user":{"id":"u"},"ts":1,"amount":null}"#,
            br#"{"user":{"id":"u"},"ts":1}"#,
        ];
        for c in cases {
            assert!(d.decode(c).is_err(), "{}", String::from_utf8_lossy(c));
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
                "[a-z\\\\\"]{0,6}".prop_map(|t| format!("\"{t}\"")),
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

        fn by_value(d: &JsonDecoder, bytes: &[u8]) -> Result<Event, DecodeError> {
            let v: Value =
                serde_json::from_slice(bytes).map_err(|e| DecodeError::NotJson(e.to_string()))?;
            d.decode_value(&v)
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
                prop_assert_eq!(d.decode(&bytes), by_value(&d, &bytes));
                let keyed = by_value(&d, &bytes).map(|e| Event { key: "k".into(), ..e });
                // With a given key, the key path is not read, so only the other paths can fail.
                match (d.decode_keyed(&bytes, "k".into()), keyed) {
                    (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                    (Err(DecodeError::NotJson(a)), Err(DecodeError::NotJson(b))) => prop_assert_eq!(a, b),
                    (a, _) => {
                        let v: Result<Value, _> = serde_json::from_slice(&bytes);
                        if let Ok(v) = v { prop_assert_eq!(a.is_ok(), d.decode_inner(|s| lookup(&v, d.spec.path(s)), Some("k".into())).is_ok()); }
                    }
                }
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
                    d.decode(text.as_bytes()),
                    by_value(&d, text.as_bytes()),
                    "{text}"
                );
            }
        }
    }
}
