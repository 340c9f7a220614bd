//! Input records: decoding a JSON event into the engine's [`Event`].
//!
//! A pipeline names dotted paths for the grouping key (a string or a number), the event timestamp
//! (epoch milliseconds as an integer, or an RFC 3339 string) and each numeric value. Anything else is
//! a [`DecodeError`], which callers turn into a dead letter with reason `malformed`.

use crate::windowing::time::MAX_ABS_TIMESTAMP;
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
        JsonDecoder { spec }
    }

    /// Decodes raw bytes (one JSON object).
    pub fn decode(&self, bytes: &[u8]) -> Result<Event, DecodeError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| DecodeError::NotJson(e.to_string()))?;
        self.decode_value(&value)
    }

    /// Decodes raw bytes whose grouping key is given (the Kafka record key); the key field of the
    /// input spec is not read.
    pub fn decode_keyed(&self, bytes: &[u8], key: String) -> Result<Event, DecodeError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| DecodeError::NotJson(e.to_string()))?;
        self.decode_inner(&value, Some(key))
    }

    /// Decodes an already parsed JSON value.
    pub fn decode_value(&self, value: &Value) -> Result<Event, DecodeError> {
        self.decode_inner(value, None)
    }

    fn decode_inner(&self, value: &Value, given_key: Option<String>) -> Result<Event, DecodeError> {
        if !value.is_object() {
            return Err(DecodeError::NotJson(format!(
                "expected an object, got {}",
                type_name(value)
            )));
        }
        let key = match given_key {
            Some(k) => k,
            None => self.key_field(value)?,
        };
        let ts = self.timestamp(value)?;
        let mut values = Vec::with_capacity(self.spec.fields.len());
        for path in &self.spec.fields {
            match lookup(value, path) {
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

    fn key_field(&self, value: &Value) -> Result<String, DecodeError> {
        let key_name = || self.spec.key.join(".");
        match lookup(value, &self.spec.key) {
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

    fn timestamp(&self, value: &Value) -> Result<i64, DecodeError> {
        let field = || self.spec.timestamp.join(".");
        let ts = match lookup(value, &self.spec.timestamp) {
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
}
