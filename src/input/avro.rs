//! Avro: input decoding with a reader schema, plain Avro binary and the Confluent wire format, and
//! a Confluent-compatible Schema Registry client. (The Avro encodings of panes and dead letters
//! live with the other output formats, in [`crate::format::avro`].)
//!
//! *Plain* data is a bare Avro datum written with a known writer schema (the configured
//! `writer_schema`, or the reader schema itself). *Confluent* data starts with a magic byte 0 and a
//! 4-byte big-endian schema id; the id resolves against the Schema Registry
//! (`GET /schemas/ids/{id}`, cached) or against a local id → schema-file map. Either way the datum
//! is decoded with its writer schema and then resolved against the reader schema, so records
//! written with an older or newer schema (optional fields added or removed) decode.
//!
//! Every failure that is the record's fault — unknown schema id, bad framing, bytes that do not
//! decode, a missing field — is a [`DecodeError`], which becomes a dead letter. A registry that
//! cannot be reached is not the record's fault: [`DecodeError::Unavailable`] makes the caller
//! abort and retry the transaction instead.

use super::{Compiled, DecodeError, Event, InputSpec, Meta, TimeSpec};
use crate::expr::{infer, Datum, Row, Ty};
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use std::collections::{BTreeMap, HashMap};

/// How Avro bytes are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// A bare Avro datum.
    Plain,
    /// Magic byte 0, a 4-byte big-endian schema id, then the datum.
    Confluent,
}

impl Framing {
    /// Parses `"plain"` or `"confluent"`.
    pub fn parse(s: &str) -> Option<Framing> {
        match s {
            "plain" => Some(Framing::Plain),
            "confluent" => Some(Framing::Confluent),
            _ => None,
        }
    }
}

/// Validated Avro input settings (schema texts, already checked to parse).
#[derive(Debug, Clone, PartialEq)]
pub struct AvroInputSpec {
    /// The reader schema.
    pub reader: String,
    /// The writer schema of plain data (default: the reader schema).
    pub writer: Option<String>,
    /// Framing of input values.
    pub framing: Framing,
    /// Local schema ids for Confluent framing.
    pub ids: BTreeMap<u32, String>,
}

/// Errors of schemas and the registry.
#[derive(Debug, thiserror::Error)]
pub enum AvroError {
    /// A schema does not parse.
    #[error("schema {what}: {source}")]
    Schema {
        /// Which schema.
        what: String,
        /// Why it does not parse.
        #[source]
        source: Box<apache_avro::Error>,
    },
    /// A schema parses but lacks what tidemark needs of it.
    #[error("schema {what}: {detail}")]
    SchemaShape {
        /// Which schema.
        what: String,
        /// What it lacks.
        detail: String,
    },
    /// The registry cannot be reached or answered with an error.
    #[error("schema registry {0}: {1}")]
    Registry(String, String),
    /// A pane or envelope could not be encoded (a bug: the values are built from the schema).
    #[error("encoding: {0}")]
    Encode(#[source] Box<apache_avro::Error>),
    /// A value to encode is not among the schema's symbols.
    #[error("encoding: {0}")]
    NotInSchema(String),
}

/// Parses a schema text, naming `what` in the error.
pub fn parse_schema(what: &str, text: &str) -> Result<Schema, AvroError> {
    Schema::parse_str(text).map_err(|e| AvroError::Schema {
        what: what.to_string(),
        source: Box::new(e),
    })
}

/// Checks the pipeline's fields against the reader schema: every path an expression reads
/// must be a scalar field of it, and a key, timestamp or aggregation input that is one plain
/// field must have a type that can serve as one. Returns one message per problem.
pub fn check_paths(schema: &Schema, spec: &InputSpec) -> Vec<String> {
    let mut problems = Vec::new();
    let scalar = |s: &Schema| {
        matches!(
            s,
            Schema::Boolean
                | Schema::Int
                | Schema::Long
                | Schema::Float
                | Schema::Double
                | Schema::String
                | Schema::Enum(_)
                | Schema::Uuid(_)
                | Schema::Date
                | Schema::TimestampMillis
                | Schema::TimestampMicros
                | Schema::LocalTimestampMillis
                | Schema::LocalTimestampMicros
        )
    };
    for path in spec.paths.all() {
        match field_schema(schema, path) {
            None => problems.push(format!(
                "{:?} is not a field of the reader schema",
                path.join(".")
            )),
            Some(s) if !scalar(s) => problems.push(format!(
                "{:?} is not a scalar in the reader schema (a record, array, map, bytes or fixed)",
                path.join(".")
            )),
            Some(_) => {}
        }
    }
    let numeric = |s: &Schema| {
        matches!(
            s,
            Schema::Int | Schema::Long | Schema::Float | Schema::Double
        )
    };
    let time = |s: &Schema| {
        matches!(
            s,
            Schema::Long
                | Schema::Int
                | Schema::TimestampMillis
                | Schema::TimestampMicros
                | Schema::LocalTimestampMillis
                | Schema::LocalTimestampMicros
                | Schema::String
        )
    };
    let key = |s: &Schema| {
        matches!(
            s,
            Schema::String | Schema::Int | Schema::Long | Schema::Enum(_) | Schema::Uuid(_)
        )
    };
    // Every expression's static type, from the schema's: one that no record could evaluate
    // (a string where a number is needed) is refused here rather than dead-lettered later.
    let slot_types: Vec<Ty> = spec
        .paths
        .all()
        .iter()
        .map(|p| match field_schema(schema, p) {
            Some(Schema::Boolean) => Ty::Bool,
            Some(
                Schema::Int
                | Schema::Long
                | Schema::Date
                | Schema::TimestampMillis
                | Schema::TimestampMicros
                | Schema::LocalTimestampMillis
                | Schema::LocalTimestampMicros,
            ) => Ty::Int,
            Some(Schema::Float | Schema::Double) => Ty::Float,
            Some(Schema::String | Schema::Enum(_) | Schema::Uuid(_)) => Ty::Str,
            _ => Ty::Any,
        })
        .collect();
    let mut expressions: Vec<(String, &Compiled, &[Ty])> = Vec::new();
    if let Some(f) = &spec.filter {
        expressions.push(("input.filter".into(), f, &[Ty::Bool]));
    }
    for (i, part) in spec.key.iter().enumerate() {
        expressions.push((format!("input.key[{i}]"), &part.value, &[Ty::Str, Ty::Int]));
    }
    if let TimeSpec::Field(c) = &spec.time {
        expressions.push(("input.timestamp".into(), c, &[Ty::Int, Ty::Str]));
    }
    for f in spec.fields.iter().filter(|f| f.numeric) {
        expressions.push(("aggregation field".into(), &f.value, &[Ty::Int, Ty::Float]));
    }
    for (what, c, want) in expressions {
        if c.expr.as_field().is_some() {
            continue; // a plain field: checked by its schema type below
        }
        match infer(&c.expr, &|s| slot_types[s]) {
            Err(why) => problems.push(format!("{what} {:?}: {why}", c.text)),
            Ok(t) if !matches!(t, Ty::Any | Ty::Null) && !want.contains(&t) => {
                let want: Vec<&str> = want.iter().map(|w| w.name()).collect();
                problems.push(format!(
                    "{what} {:?} gives {}; it must give {}",
                    c.text,
                    t.name(),
                    want.join(" or ")
                ))
            }
            Ok(_) => {}
        }
    }
    let mut typed = |what: &str, c: &Compiled, ok: &dyn Fn(&Schema) -> bool| {
        let Some(path) = c.expr.as_field() else {
            return;
        };
        let segs: Vec<String> = path.split('.').map(str::to_string).collect();
        if let Some(s) = field_schema(schema, &segs) {
            if scalar(s) && !ok(s) {
                problems.push(format!(
                    "{what} {path:?} has an unusable type in the reader schema"
                ));
            }
        }
    };
    for part in &spec.key {
        typed("input.key", &part.value, &key);
    }
    if let TimeSpec::Field(c) = &spec.time {
        typed("input.timestamp", c, &time);
    }
    for f in spec.fields.iter().filter(|f| f.numeric) {
        typed("aggregation field", &f.value, &numeric);
    }
    problems
}

/// The schema of a (possibly nested) field, looking through `["null", T]` unions.
fn field_schema<'a>(schema: &'a Schema, path: &[String]) -> Option<&'a Schema> {
    let mut s = unwrap_nullable(schema);
    for seg in path {
        let Schema::Record(r) = s else { return None };
        let f = r.fields.iter().find(|f| &f.name == seg)?;
        s = unwrap_nullable(&f.schema);
    }
    Some(s)
}

fn unwrap_nullable(s: &Schema) -> &Schema {
    if let Schema::Union(u) = s {
        let non_null: Vec<&Schema> = u
            .variants()
            .iter()
            .filter(|v| !matches!(v, Schema::Null))
            .collect();
        if non_null.len() == 1 {
            return non_null[0];
        }
    }
    s
}

/// Headers of every Schema Registry request.
const REGISTRY_HEADERS: &str = "Accept: application/vnd.schemaregistry.v1+json, application/json\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n";

/// A Confluent-compatible Schema Registry.
#[derive(Debug, Clone)]
pub struct SchemaRegistry {
    url: String,
    access: crate::http::Access,
}

impl SchemaRegistry {
    /// A client for `url` (e.g. `http://localhost:8081`), without authentication; checks that
    /// the registry answers, so a registry that is down is a clear startup error.
    pub fn connect(url: &str) -> Result<SchemaRegistry, AvroError> {
        SchemaRegistry::open(url, crate::http::Access::default())
    }

    /// A client for `url` reached as `access` says (the CAs of an https registry, basic
    /// authentication); checks that the registry answers.
    pub fn open(url: &str, access: crate::http::Access) -> Result<SchemaRegistry, AvroError> {
        let r = SchemaRegistry {
            url: url.trim_end_matches('/').to_string(),
            access,
        };
        match r.http("GET", "/subjects", None) {
            Ok((200, _)) => Ok(r),
            Ok((code, body)) => Err(AvroError::Registry(
                url.into(),
                format!("GET /subjects answered {code}: {body}"),
            )),
            Err(e) => Err(AvroError::Registry(url.into(), e)),
        }
    }

    /// The schema text with this id; `Ok(None)` when the registry does not know the id.
    pub fn schema(&self, id: u32) -> Result<Option<String>, AvroError> {
        let err = |e: String| AvroError::Registry(self.url.clone(), e);
        let (code, body) = self
            .http("GET", &format!("/schemas/ids/{id}"), None)
            .map_err(err)?;
        match code {
            200 => {
                let v: serde_json::Value =
                    serde_json::from_str(&body).map_err(|e| err(format!("schema {id}: {e}")))?;
                v.get("schema")
                    .and_then(|s| s.as_str())
                    .map(|s| Some(s.to_string()))
                    .ok_or_else(|| err(format!("schema {id}: no \"schema\" in {body}")))
            }
            404 => Ok(None),
            _ => Err(err(format!(
                "GET /schemas/ids/{id} answered {code}: {body}"
            ))),
        }
    }

    /// Registers `schema` under `subject` (idempotent) and returns its id.
    pub fn register(&self, subject: &str, schema: &str) -> Result<u32, AvroError> {
        let err = |e: String| AvroError::Registry(self.url.clone(), e);
        let body = serde_json::json!({ "schema": schema }).to_string();
        let (code, text) = self
            .http(
                "POST",
                &format!("/subjects/{subject}/versions"),
                Some(&body),
            )
            .map_err(err)?;
        if code != 200 {
            return Err(err(format!(
                "registering {subject} answered {code}: {text}"
            )));
        }
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| err(format!("registering {subject}: {e}")))?;
        v.get("id")
            .and_then(|i| i.as_u64())
            .map(|i| i as u32)
            .ok_or_else(|| err(format!("registering {subject}: no id in {text}")))
    }

    /// One request to the registry.
    fn http(&self, method: &str, path: &str, body: Option<&str>) -> Result<(u16, String), String> {
        crate::http::request_with(
            &self.url,
            method,
            path,
            REGISTRY_HEADERS,
            body.unwrap_or(""),
            &self.access,
        )
    }
}

/// Decodes Avro input records into events.
pub struct AvroDecoder {
    spec: InputSpec,
    reader: Schema,
    plain_writer: Schema,
    framing: Framing,
    /// Writer schemas by id: the local map, then what the registry returned.
    ids: HashMap<u32, Schema>,
    registry: Option<SchemaRegistry>,
}

impl std::fmt::Debug for AvroDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroDecoder")
            .field("framing", &self.framing)
            .field("ids", &self.ids.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl AvroDecoder {
    /// A decoder for the validated settings.
    pub fn new(
        spec: InputSpec,
        avro: &AvroInputSpec,
        registry: Option<SchemaRegistry>,
    ) -> Result<AvroDecoder, AvroError> {
        let reader = parse_schema("input.schema", &avro.reader)?;
        let plain_writer = match &avro.writer {
            Some(w) => parse_schema("input.writer_schema", w)?,
            None => reader.clone(),
        };
        let mut ids = HashMap::new();
        for (id, text) in &avro.ids {
            ids.insert(*id, parse_schema(&format!("input.schema_ids.{id}"), text)?);
        }
        Ok(AvroDecoder {
            spec,
            reader,
            plain_writer,
            framing: avro.framing,
            ids,
            registry,
        })
    }

    /// Makes sure the writer schema of `id` is known, asking the registry when there is one.
    fn load_writer(&mut self, id: u32) -> Result<(), DecodeError> {
        if !self.ids.contains_key(&id) {
            let Some(registry) = &self.registry else {
                return Err(DecodeError::Avro(format!("unknown schema id {id}")));
            };
            let text = registry
                .schema(id)
                .map_err(|e| DecodeError::Unavailable(e.to_string()))?
                .ok_or_else(|| DecodeError::Avro(format!("unknown schema id {id}")))?;
            let schema = parse_schema(&format!("registry id {id}"), &text)
                .map_err(|e| DecodeError::Avro(e.to_string()))?;
            self.ids.insert(id, schema);
        }
        Ok(())
    }

    /// Decodes a record value: the event, or `None` when the pipeline's filter rejects it.
    pub fn decode(&mut self, bytes: &[u8], meta: Meta) -> Result<Option<Event>, DecodeError> {
        let (writer, mut datum) = match self.framing {
            Framing::Plain => (&self.plain_writer, bytes),
            Framing::Confluent => {
                if bytes.len() < 5 || bytes[0] != 0 {
                    return Err(DecodeError::Avro(
                        "not in the Confluent wire format (magic byte 0 + 4-byte schema id)".into(),
                    ));
                }
                let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
                self.load_writer(id)?;
                (self.ids.get(&id).expect("loaded"), &bytes[5..])
            }
        };
        let reader = GenericDatumReader::builder(writer)
            .reader_schema(&self.reader)
            .build()
            .map_err(|e| DecodeError::Avro(format!("schemas do not resolve: {e}")))?;
        let value = reader
            .read_value(&mut datum)
            .map_err(|e| DecodeError::Avro(format!("does not decode: {e}")))?;
        if !datum.is_empty() {
            return Err(DecodeError::Avro(format!(
                "{} bytes left after the datum",
                datum.len()
            )));
        }
        self.event(&value, meta)
    }

    fn event(&self, value: &Value, meta: Meta) -> Result<Option<Event>, DecodeError> {
        let paths = self.spec.paths.all();
        for path in paths {
            if let Some(v) = lookup(value, path) {
                if avro_datum(v).is_none() {
                    return Err(DecodeError::WrongType {
                        field: path.join("."),
                        expected: "a scalar",
                        got: format!("{v:?}"),
                    });
                }
            }
        }
        self.spec.event(&AvroFields { value, paths }, meta)
    }
}

/// A decoded Avro record's fields, for expressions.
struct AvroFields<'a> {
    value: &'a Value,
    paths: &'a [Vec<String>],
}

impl Row for AvroFields<'_> {
    fn field(&self, slot: usize) -> Datum<'_> {
        lookup(self.value, &self.paths[slot])
            .and_then(avro_datum)
            .unwrap_or(Datum::Null)
    }
}

/// An Avro value as an expression sees it; `None` for a value that is not a scalar. Timestamps
/// are epoch milliseconds, as event times are.
fn avro_datum(v: &Value) -> Option<Datum<'_>> {
    use std::borrow::Cow;
    Some(match v {
        Value::Null => Datum::Null,
        Value::Boolean(b) => Datum::Bool(*b),
        Value::Int(i) | Value::Date(i) => Datum::Int(*i as i64),
        Value::Long(i) => Datum::Int(*i),
        Value::TimestampMillis(ms) | Value::LocalTimestampMillis(ms) => Datum::Int(*ms),
        Value::TimestampMicros(us) | Value::LocalTimestampMicros(us) => {
            Datum::Int(us.div_euclid(1000))
        }
        Value::Float(f) => Datum::Float(*f as f64),
        Value::Double(f) => Datum::Float(*f),
        Value::String(s) | Value::Enum(_, s) => Datum::Str(Cow::Borrowed(s)),
        Value::Uuid(u) => Datum::Str(Cow::Owned(u.to_string())),
        _ => return None,
    })
}

/// A (possibly nested) field of a decoded record, looking through unions; null is absent.
fn lookup<'a>(root: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut v = strip_union(root);
    for seg in path {
        let Value::Record(fields) = v else {
            return None;
        };
        v = strip_union(&fields.iter().find(|(n, _)| n == seg)?.1);
    }
    (!matches!(v, Value::Null)).then_some(v)
}

fn strip_union(v: &Value) -> &Value {
    match v {
        Value::Union(_, inner) => strip_union(inner),
        other => other,
    }
}

/// The Confluent wire-format header: magic byte 0 and the big-endian schema id.
pub fn confluent_header(id: u32) -> [u8; 5] {
    let [a, b, c, d] = id.to_be_bytes();
    [0, a, b, c, d]
}

/// Encodes a value with `schema` (plain, or Confluent-framed with `id`): used by `produce` and
/// tests to write input data.
pub fn encode_value(schema: &Schema, id: Option<u32>, value: Value) -> Result<Vec<u8>, AvroError> {
    let mut out = Vec::with_capacity(128);
    if let Some(id) = id {
        out.extend_from_slice(&confluent_header(id));
    }
    let writer = GenericDatumWriter::builder(schema)
        .build()
        .map_err(|e| AvroError::Encode(Box::new(e)))?;
    writer
        .write_value(&mut out, value)
        .map_err(|e| AvroError::Encode(Box::new(e)))?;
    Ok(out)
}

/// Decodes a framed value with its writer schema (no resolution): used to read output back.
pub fn decode_value(schema: &Schema, framing: Framing, bytes: &[u8]) -> Result<Value, String> {
    let mut datum = match framing {
        Framing::Plain => bytes,
        Framing::Confluent if bytes.len() >= 5 && bytes[0] == 0 => &bytes[5..],
        Framing::Confluent => return Err("not Confluent-framed".into()),
    };
    GenericDatumReader::builder(schema)
        .build()
        .and_then(|r| r.read_value(&mut datum))
        .map_err(|e| e.to_string())
}
