//! Avro: plain and Confluent-framed input through the pipeline's own decoder, schema evolution,
//! every failure as a decode error (which becomes a dead letter), the Schema Registry client
//! against a small Confluent-compatible registry served by the test, and pane and dead-letter
//! encodings read back with `schemas/*.avsc`.

use crate::common;

use apache_avro::types::Value;
use apache_avro::Schema;
use common::registry::FakeRegistry;
use std::collections::HashMap;
use std::net::TcpListener;
use std::path::Path;
use tidemark::config::{parse_raw, ConfigError, PipelineSpec};
use tidemark::format::avro::{AvroEncoder, DEAD_LETTER_SCHEMA, WINDOW_RESULT_SCHEMA};
use tidemark::format::dead_letter::DeadLetter;
use tidemark::input::avro::{decode_value, encode_value, parse_schema, Framing, SchemaRegistry};
use tidemark::input::decode::Decoder;
use tidemark::input::{DecodeError, Meta};
use tidemark::windowing::aggregate::{Output, Value as Datum};
use tidemark::windowing::assigner::Window;
use tidemark::windowing::engine::{dedup_id, Pane};
use tidemark::windowing::trigger::Timing;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn schema_file(name: &str) -> Schema {
    let text = std::fs::read_to_string(Path::new(ROOT).join("schemas").join(name)).unwrap();
    parse_schema(name, &text).unwrap()
}

/// A pipeline over clickstream events; `input_extra` and `top_extra` add settings.
fn spec(input_extra: &str, top_extra: &str) -> Result<PipelineSpec, ConfigError> {
    let text = format!(
        r#"
name = "avro"
{top_extra}
[input]
format = "avro"
schema = "schemas/clickstream.avsc"
key = "user_id"
timestamp = "ts"
{input_extra}
[window]
type = "tumbling"
size = "1m"
[[aggregations]]
name = "revenue"
op = "sum"
field = "price"
"#
    );
    let mut raw = parse_raw(&text, std::iter::empty())?;
    raw.base_dir = Some(ROOT.into());
    raw.validate().map(|(s, _)| s)
}

/// Decodes one record with the pipeline's decoder (no filter: every record is an event).
fn decode(d: &mut Decoder, bytes: &[u8]) -> Result<tidemark::input::Event, DecodeError> {
    d.decode(bytes, Meta::default())
        .map(|e| e.expect("no filter"))
}

fn click(user: &str, ts: i64, price: f64) -> Value {
    Value::Record(vec![
        ("user_id".into(), Value::String(user.into())),
        ("ts".into(), Value::TimestampMillis(ts)),
        ("page".into(), Value::String("/cart".into())),
        ("price".into(), Value::Double(price)),
    ])
}

#[test]
fn plain_avro_decodes_with_the_reader_schema() {
    let spec = spec("", "").unwrap();
    let mut d = Decoder::new(&spec.input, spec.avro_input.as_ref(), None).unwrap();
    let bytes = encode_value(
        &schema_file("clickstream.avsc"),
        None,
        click("u1", 1_000, 2.5),
    )
    .unwrap();
    let e = decode(&mut d, &bytes).unwrap();
    assert_eq!(
        (e.key.as_str(), e.ts, e.values.clone()),
        ("u1", 1_000, floats(&[2.5]))
    );
}

#[test]
fn confluent_framing_resolves_local_ids_and_evolves_both_ways() {
    // Id 1: an older writer without `price` (the reader's default 0.0 applies). Id 2: a newer
    // writer with an extra optional field (ignored by the reader). Id 3: the reader schema.
    let old = r#"{"type":"record","name":"Click","namespace":"io.tidemark.demo","fields":[
        {"name":"user_id","type":"string"},
        {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"page","type":"string"}]}"#;
    let new = r#"{"type":"record","name":"Click","namespace":"io.tidemark.demo","fields":[
        {"name":"user_id","type":"string"},
        {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"page","type":"string"},
        {"name":"price","type":"double","default":0.0},
        {"name":"referrer","type":["null","string"],"default":null}]}"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("old.avsc"), old).unwrap();
    std::fs::write(dir.path().join("new.avsc"), new).unwrap();
    let extra = format!(
        "framing = \"confluent\"\n[input.schema_ids]\n1 = \"{}\"\n2 = \"{}\"\n3 = \"schemas/clickstream.avsc\"",
        dir.path().join("old.avsc").display(),
        dir.path().join("new.avsc").display()
    );
    let spec = spec(&extra, "").unwrap();
    let mut d = Decoder::new(&spec.input, spec.avro_input.as_ref(), None).unwrap();

    let old_value = Value::Record(vec![
        ("user_id".into(), Value::String("u".into())),
        ("ts".into(), Value::TimestampMillis(5)),
        ("page".into(), Value::String("/".into())),
    ]);
    let b = encode_value(&parse_schema("old", old).unwrap(), Some(1), old_value).unwrap();
    assert_eq!(&b[..5], &[0, 0, 0, 0, 1], "magic byte and big-endian id");
    let e = decode(&mut d, &b).unwrap();
    assert_eq!((e.ts, e.values.clone()), (5, floats(&[0.0])));

    let new_value = Value::Record(vec![
        ("user_id".into(), Value::String("u".into())),
        ("ts".into(), Value::TimestampMillis(6)),
        ("page".into(), Value::String("/".into())),
        ("price".into(), Value::Double(4.0)),
        (
            "referrer".into(),
            Value::Union(1, Box::new(Value::String("ad".into()))),
        ),
    ]);
    let b = encode_value(&parse_schema("new", new).unwrap(), Some(2), new_value).unwrap();
    let e = decode(&mut d, &b).unwrap();
    assert_eq!((e.ts, e.values.clone()), (6, floats(&[4.0])));

    let b = encode_value(
        &schema_file("clickstream.avsc"),
        Some(3),
        click("u", 7, 1.0),
    )
    .unwrap();
    assert_eq!(decode(&mut d, &b).unwrap().ts, 7);

    // Failures are decode errors, never panics: unknown id, no magic byte, truncated datum,
    // trailing garbage, plain bytes where framing is expected.
    let unknown = encode_value(
        &schema_file("clickstream.avsc"),
        Some(99),
        click("u", 1, 1.0),
    )
    .unwrap();
    let err = decode(&mut d, &unknown).unwrap_err();
    assert!(
        matches!(&err, DecodeError::Avro(m) if m.contains("unknown schema id 99")),
        "{err}"
    );
    let mut no_magic = b.clone();
    no_magic[0] = 1;
    assert!(matches!(
        decode(&mut d, &no_magic),
        Err(DecodeError::Avro(_))
    ));
    assert!(matches!(
        decode(&mut d, &b[..b.len() - 3]),
        Err(DecodeError::Avro(_))
    ));
    let mut trailing = b.clone();
    trailing.extend_from_slice(b"xx");
    assert!(matches!(
        decode(&mut d, &trailing),
        Err(DecodeError::Avro(_))
    ));
    assert!(matches!(decode(&mut d, b"{}"), Err(DecodeError::Avro(_))));
}

#[test]
fn a_null_value_is_skipped_and_undecodable_bytes_are_errors() {
    // The reader makes `price` nullable; a record whose price is null is aggregated with its
    // NULL, which `sum` skips, as SQL's does.
    let nullable = r#"{"type":"record","name":"Click","namespace":"io.tidemark.demo","fields":[
        {"name":"user_id","type":"string"},
        {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"price","type":["null","double"],"default":null}]}"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nullable.avsc");
    std::fs::write(&path, nullable).unwrap();
    let extra = format!("writer_schema = \"{}\"", path.display());
    let text = format!(
        "name = \"n\"\n[input]\nformat = \"avro\"\nschema = \"{}\"\nkey = \"user_id\"\ntimestamp = \"ts\"\n{extra}\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n[[aggregations]]\nname = \"s\"\nop = \"sum\"\nfield = \"price\"\n",
        path.display()
    );
    let spec = parse_raw(&text, std::iter::empty())
        .unwrap()
        .validate()
        .unwrap()
        .0;
    let mut d = Decoder::new(&spec.input, spec.avro_input.as_ref(), None).unwrap();
    let schema = parse_schema("n", nullable).unwrap();
    let v = Value::Record(vec![
        ("user_id".into(), Value::String("u".into())),
        ("ts".into(), Value::TimestampMillis(1)),
        ("price".into(), Value::Union(0, Box::new(Value::Null))),
    ]);
    let b = encode_value(&schema, None, v).unwrap();
    assert_eq!(decode(&mut d, &b).unwrap().values, vec![Datum::Null]);
    for junk in [
        &b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"[..],
        b"",
        b"\x02",
    ] {
        assert!(decode(&mut d, junk).is_err());
    }
}

#[test]
fn timestamp_micros_become_milliseconds() {
    let text = format!(
        "name = \"s\"\n[input]\nformat = \"avro\"\nschema = \"{ROOT}/schemas/sensor_reading.avsc\"\nkey = \"sensor_id\"\ntimestamp = \"ts\"\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n[[aggregations]]\nname = \"t\"\nop = \"mean\"\nfield = \"temperature\"\n"
    );
    let spec = parse_raw(&text, std::iter::empty())
        .unwrap()
        .validate()
        .unwrap()
        .0;
    let mut d = Decoder::new(&spec.input, spec.avro_input.as_ref(), None).unwrap();
    let v = Value::Record(vec![
        ("sensor_id".into(), Value::String("s1".into())),
        ("ts".into(), Value::TimestampMicros(1_500_999)),
        ("temperature".into(), Value::Double(21.5)),
        ("humidity".into(), Value::Union(0, Box::new(Value::Null))),
    ]);
    let b = encode_value(&schema_file("sensor_reading.avsc"), None, v).unwrap();
    let e = decode(&mut d, &b).unwrap();
    assert_eq!((e.ts, e.values), (1_500, floats(&[21.5])));
}

#[test]
fn avro_config_problems_are_all_listed() {
    let err = spec(
        "framing = \"zip\"\nwriter_schema = \"schemas/nope.avsc\"",
        "[output]\nformat = \"avro\"\nframing = \"confluent\"",
    )
    .unwrap_err();
    let text = err.to_string();
    for needle in ["input.framing", "input.writer_schema", "output.framing"] {
        assert!(text.contains(needle), "{needle} missing from: {text}");
    }
    // Field paths are checked against the reader schema.
    let text = "name = \"x\"\n[input]\nformat = \"avro\"\nschema = \"schemas/clickstream.avsc\"\nkey = \"user\"\ntimestamp = \"price\"\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n[[aggregations]]\nname = \"s\"\nop = \"sum\"\nfield = \"page\"\n";
    let mut raw = parse_raw(text, std::iter::empty()).unwrap();
    raw.base_dir = Some(ROOT.into());
    let msg = raw.validate().unwrap_err().to_string();
    assert!(msg.contains("\"user\" is not a field"), "{msg}");
    assert!(
        msg.contains("input.timestamp \"price\" has an unusable type"),
        "{msg}"
    );
    assert!(
        msg.contains("aggregation field \"page\" has an unusable type"),
        "{msg}"
    );
    // Expressions are typed against the reader schema: what no record could evaluate is
    // refused at validate, naming the expression; a well-typed one passes.
    let text = "name = \"x\"\n[input]\nformat = \"avro\"\nschema = \"schemas/clickstream.avsc\"\nfilter = \"page > 3\"\nkey = [\"user_id\", \"price * 2\"]\ntimestamp = \"ts\"\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n[[aggregations]]\nname = \"s\"\nop = \"sum\"\nfield = \"lower(page)\"\n";
    let mut raw = parse_raw(text, std::iter::empty()).unwrap();
    raw.base_dir = Some(ROOT.into());
    let msg = raw.validate().unwrap_err().to_string();
    for needle in [
        "input.filter \"page > 3\": cannot compare a string with an integer",
        "input.key[1] \"price * 2\" gives a double; it must give a string or an integer",
        "aggregation field \"lower(page)\" gives a string; it must give an integer or a double",
    ] {
        assert!(msg.contains(needle), "{needle} missing from: {msg}");
    }
    let good = text
        .replace("page > 3", "page LIKE '/c%' AND price > 3")
        .replace("price * 2", "lower(page)")
        .replace("lower(page)\"\n", "price * 2\"\n");
    let mut raw = parse_raw(&good, std::iter::empty()).unwrap();
    raw.base_dir = Some(ROOT.into());
    assert!(raw.validate().is_ok(), "{good}");
    // Confluent framing without any way to resolve ids.
    let msg = spec("framing = \"confluent\"", "").unwrap_err().to_string();
    assert!(msg.contains("needs [schema_registry] url"), "{msg}");
}

#[test]
fn registry_ids_resolve_and_register_and_a_dead_registry_fails_at_start() {
    let click_text =
        std::fs::read_to_string(Path::new(ROOT).join("schemas/clickstream.avsc")).unwrap();
    let reg = FakeRegistry::start(vec![click_text]);
    let client = SchemaRegistry::connect(&reg.url).unwrap();
    assert!(client.schema(1).unwrap().is_some());
    assert!(client.schema(42).unwrap().is_none());
    let id = client
        .register("panes-value", WINDOW_RESULT_SCHEMA)
        .unwrap();
    assert_eq!(id, 2);
    assert_eq!(
        client
            .register("panes-value", WINDOW_RESULT_SCHEMA)
            .unwrap(),
        2
    );
    assert_eq!(reg.schemas.lock().unwrap().len(), 2);

    let spec = spec(
        "framing = \"confluent\"",
        &format!("[schema_registry]\nurl = \"{}\"", reg.url),
    )
    .unwrap();
    let mut d = Decoder::new(&spec.input, spec.avro_input.as_ref(), Some(client)).unwrap();
    let b = encode_value(
        &schema_file("clickstream.avsc"),
        Some(1),
        click("u", 9, 3.0),
    )
    .unwrap();
    assert_eq!(decode(&mut d, &b).unwrap().values, floats(&[3.0]));
    let unknown = encode_value(
        &schema_file("clickstream.avsc"),
        Some(77),
        click("u", 9, 3.0),
    )
    .unwrap();
    assert!(matches!(
        decode(&mut d, &unknown),
        Err(DecodeError::Avro(m)) if m.contains("unknown schema id 77")
    ));

    // The registry goes away: a cached id still decodes; an id not cached yet is `Unavailable`
    // (the transaction is retried), not a dead letter.
    reg.down.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(decode(&mut d, &b).is_ok());
    let b2 = encode_value(
        &schema_file("clickstream.avsc"),
        Some(2),
        click("u", 9, 3.0),
    )
    .unwrap();
    assert!(matches!(
        decode(&mut d, &b2),
        Err(DecodeError::Unavailable(_))
    ));

    // Nothing listens here: a clear error at start.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let err = SchemaRegistry::connect(&dead).unwrap_err().to_string();
    assert!(err.contains("schema registry"), "{err}");
}

/// Double input values.
fn floats(xs: &[f64]) -> Vec<Datum> {
    xs.iter().map(|&x| Datum::Float(x)).collect()
}

fn pane(timing: Timing, values: Vec<Option<f64>>) -> Pane {
    Pane {
        key: "user-1".into(),
        window: Window {
            start: 60_000,
            end: 120_000,
        },
        timing,
        pane_index: 2,
        dedup_id: dedup_id("p", "user-1", Window::new(60_000, 120_000)),
        count: 3,
        values: values
            .into_iter()
            .map(|v| Output::Value(v.map_or(Datum::Null, Datum::Float)))
            .collect(),
    }
}

#[test]
fn panes_and_dead_letters_read_back_with_the_published_schemas() {
    let spec = spec("", "").unwrap();
    let window_result = schema_file("window_result.avsc");
    let dead_letter = schema_file("dead_letter.avsc");
    assert_eq!(
        parse_schema("w", WINDOW_RESULT_SCHEMA).unwrap(),
        window_result
    );
    assert_eq!(parse_schema("d", DEAD_LETTER_SCHEMA).unwrap(), dead_letter);
    for (framing, id) in [(Framing::Plain, 0), (Framing::Confluent, 12)] {
        let enc = AvroEncoder::new(framing, id, id + 1).unwrap();
        let b = enc
            .pane(
                &pane(Timing::Late, vec![Some(7.5)]),
                3,
                &spec.engine.aggregations,
            )
            .unwrap();
        if framing == Framing::Confluent {
            assert_eq!(&b[..5], &[0, 0, 0, 0, 12]);
        }
        let Value::Record(fields) = decode_value(&window_result, framing, &b).unwrap() else {
            panic!("not a record")
        };
        let f: HashMap<String, Value> = fields.into_iter().collect();
        assert_eq!(f["key"], Value::String("user-1".into()));
        assert_eq!(f["window_start"], Value::TimestampMillis(60_000));
        assert_eq!(f["window_end"], Value::TimestampMillis(120_000));
        assert_eq!(f["timing"], Value::Enum(2, "LATE".into()));
        assert_eq!(f["pane_index"], Value::Int(2));
        assert_eq!(
            f["dedup_id"],
            Value::String(dedup_id("p", "user-1", Window::new(60_000, 120_000)).to_string())
        );
        assert_eq!(f["epoch"], Value::Long(3));
        assert_eq!(f["count"], Value::Long(3));
        let Value::Map(aggs) = &f["aggregates"] else {
            panic!("aggregates")
        };
        assert_eq!(
            aggs["revenue"],
            Value::Union(1, Box::new(Value::Double(7.5)))
        );

        // The same pane read back through the output decoder.
        let back = tidemark::format::Decoder::new(Some(framing))
            .pane(
                &enc.pane(
                    &pane(Timing::Late, vec![Some(7.5)]),
                    3,
                    &spec.engine.aggregations,
                )
                .unwrap(),
            )
            .unwrap();
        assert_eq!(
            (
                back.key.as_str(),
                back.window_start,
                back.window_end,
                back.timing,
                back.pane_index,
                back.epoch,
                back.count
            ),
            ("user-1", 60_000, 120_000, Timing::Late, 2, 3, 3)
        );
        assert_eq!(back.aggregate("revenue"), Some(7.5));
        assert_eq!(
            back.aggregates.len(),
            1,
            "global_window is not an aggregate"
        );
        assert_eq!(f["global_window"], Value::Boolean(false));

        // A global window's pane: the extreme longs, and the flag set.
        let mut global = pane(Timing::Early, vec![Some(1.0)]);
        global.window = Window::GLOBAL;
        let b = enc.pane(&global, 0, &spec.engine.aggregations).unwrap();
        let Value::Record(fields) = decode_value(&window_result, framing, &b).unwrap() else {
            panic!("not a record")
        };
        let f: HashMap<String, Value> = fields.into_iter().collect();
        assert_eq!(f["global_window"], Value::Boolean(true));
        assert_eq!(f["window_start"], Value::TimestampMillis(i64::MIN));
        assert_eq!(f["window_end"], Value::TimestampMillis(i64::MAX));
        let back = tidemark::format::Decoder::new(Some(framing))
            .pane(&b)
            .unwrap();
        assert_eq!((back.window_start, back.window_end), (i64::MIN, i64::MAX));

        let info = DeadLetter {
            reason: "malformed".into(),
            topic: "clicks".into(),
            partition: 2,
            offset: 41,
            watermark: Some(1_000),
            late_by_ms: None,
            detail: "avro: unknown schema id 9".into(),
            epoch: 3,
        };
        let b = enc
            .dead_letter(&info, Some(b"k"), Some(b"\x00\x00\x00\x00\x09junk"))
            .unwrap();
        let Value::Record(fields) = decode_value(&dead_letter, framing, &b).unwrap() else {
            panic!("not a record")
        };
        let f: HashMap<String, Value> = fields.into_iter().collect();
        assert_eq!(f["reason"], Value::Enum(1, "malformed".into()));
        assert_eq!(f["source_offset"], Value::Long(41));
        assert_eq!(f["epoch"], Value::Long(3));
        assert_eq!(
            f["value"],
            Value::Union(
                1,
                Box::new(Value::Bytes(b"\x00\x00\x00\x00\x09junk".to_vec()))
            ),
            "the original bytes are kept untouched"
        );
        assert_eq!(f["late_by_ms"], Value::Union(0, Box::new(Value::Null)));
    }
    // An empty mean is null, not NaN.
    let enc = AvroEncoder::new(Framing::Plain, 0, 0).unwrap();
    let b = enc
        .pane(
            &pane(Timing::OnTime, vec![None]),
            0,
            &spec.engine.aggregations,
        )
        .unwrap();
    let Value::Record(fields) = decode_value(&window_result, Framing::Plain, &b).unwrap() else {
        panic!()
    };
    let f: HashMap<String, Value> = fields.into_iter().collect();
    let Value::Map(aggs) = &f["aggregates"] else {
        panic!()
    };
    assert_eq!(aggs["revenue"], Value::Union(0, Box::new(Value::Null)));
}

/// Reads `bytes` written with `writer` through `reader`.
fn resolve(writer: &apache_avro::Schema, reader: &apache_avro::Schema, bytes: &[u8]) -> Value {
    let mut datum = bytes;
    apache_avro::reader::datum::GenericDatumReader::builder(writer)
        .reader_schema(reader)
        .build()
        .unwrap()
        .read_value(&mut datum)
        .unwrap()
}

#[test]
fn fields_added_with_defaults_resolve_between_old_and_new_readers() {
    // The output schemas as they were before epochs and global windows.
    let old = |text: &str| {
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        let fields = v["fields"].as_array_mut().unwrap();
        fields.retain(|f| f["name"] != "epoch" && f["name"] != "global_window");
        apache_avro::Schema::parse_str(&v.to_string()).unwrap()
    };
    for (text, name) in [
        (WINDOW_RESULT_SCHEMA, "WindowResult"),
        (DEAD_LETTER_SCHEMA, "DeadLetter"),
    ] {
        let new = parse_schema(name, text).unwrap();
        let old = old(text);
        assert_ne!(old, new, "{name}: the new schema has the epoch");
        // A record written with the old schema, read with the new: epoch defaults to 0.
        let mut written = apache_avro::types::Record::new(&old).unwrap();
        for f in match &old {
            apache_avro::Schema::Record(r) => r.fields.clone(),
            _ => panic!("{name} is a record"),
        } {
            let v = match f.name.as_str() {
                "timing" => Value::Enum(0, "EARLY".into()),
                "reason" => Value::Enum(0, "late".into()),
                "aggregates" => Value::Map(HashMap::new()),
                "window_start" | "window_end" => Value::TimestampMillis(0),
                "pane_index" | "source_partition" => Value::Int(0),
                "count" | "source_offset" => Value::Long(0),
                "watermark" | "late_by_ms" | "key" | "value" if name == "DeadLetter" => {
                    Value::Union(0, Box::new(Value::Null))
                }
                _ => Value::String(String::new()),
            };
            written.put(&f.name, v);
        }
        let bytes = encode_value(&old, None, written.into()).unwrap();
        let read = resolve(&old, &new, &bytes);
        let Value::Record(fields) = read else {
            panic!("{name}: not a record")
        };
        let f: HashMap<String, Value> = fields.into_iter().collect();
        assert_eq!(f["epoch"], Value::Long(0), "{name}: the default");
        if name == "WindowResult" {
            assert_eq!(f["global_window"], Value::Boolean(false), "the default");
        }
        // And the old schema reads what the new one writes (the new fields are skipped).
        let mut written = apache_avro::types::Record::new(&new).unwrap();
        for (k, v) in f {
            written.put(&k, v);
        }
        let bytes = encode_value(&new, None, written.into()).unwrap();
        resolve(&new, &old, &bytes);
    }
}

/// `simulate` reads Avro through the decoder `run` uses: one record per line as the base64 of its
/// value bytes (plain or Confluent-framed), control lines among them, and a line that does not
/// decode becomes a dead letter. The panes equal those of the same events as JSON.
#[test]
fn avro_pipelines_simulate_from_base64_lines() {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let schema = schema_file("clickstream.avsc");
    let events = [
        ("u1", 1_000, 2.5),
        ("u2", 30_000, 1.0),
        ("u1", 59_000, 4.0),
        ("u1", 61_000, 8.0),
    ];
    let run = |spec: &PipelineSpec, lines: &[String]| {
        let dir = tempfile::tempdir().unwrap();
        let store = tidemark::state::store::StateStore::open(dir.path()).unwrap();
        let (mut panes, mut dead) = (Vec::new(), Vec::new());
        let input = lines.join("\n");
        tidemark::simulate::run(spec, &store, input.as_bytes(), &mut panes, &mut dead).unwrap();
        (
            String::from_utf8(panes).unwrap(),
            String::from_utf8(dead).unwrap(),
        )
    };
    // The same events as JSON, through a JSON pipeline of the same shape.
    let json_spec = {
        let text = r#"
name = "avro"
[input]
key = "user_id"
timestamp = "ts"
[window]
type = "tumbling"
size = "1m"
[[aggregations]]
name = "revenue"
op = "sum"
field = "price"
"#;
        parse_raw(text, std::iter::empty())
            .unwrap()
            .validate()
            .unwrap()
            .0
    };
    let json_lines: Vec<String> = events
        .iter()
        .map(|(u, ts, p)| serde_json::json!({"user_id": u, "ts": ts, "price": p}).to_string())
        .collect();
    let (want, _) = run(&json_spec, &json_lines);
    assert_eq!(want.lines().count(), 3, "{want}");

    for (extra, id) in [
        ("", None),
        (
            "framing = \"confluent\"\n[input.schema_ids]\n7 = \"schemas/clickstream.avsc\"",
            Some(7),
        ),
    ] {
        let spec = spec(extra, "").unwrap();
        let mut lines: Vec<String> = events
            .iter()
            .map(|(u, ts, p)| b64(&encode_value(&schema, id, click(u, *ts, *p)).unwrap()))
            .collect();
        // A control line and two lines that do not decode, among the records.
        lines.insert(2, "{\"$advance_processing_time\": 5}".into());
        lines.push(b64(&[0x02, 0xff]));
        lines.push("not base64 at all!".into());
        let (panes, dead) = run(&spec, &lines);
        assert_eq!(panes, want, "framing {extra:?}");
        let reasons: Vec<String> = dead
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["reason"].to_string())
            .collect();
        assert_eq!(reasons, ["\"malformed\"", "\"malformed\""], "{dead}");
    }
}

#[test]
fn a_registry_over_https_with_basic_auth_is_reached_and_wrong_settings_are_named() {
    use tidemark::http::Access;
    use tidemark::kafka::secure::Secret;
    let certs = tempfile::tempdir().unwrap();
    common::secured::make_certificates(certs.path());
    let click_text =
        std::fs::read_to_string(Path::new(ROOT).join("schemas/clickstream.avsc")).unwrap();
    let reg = FakeRegistry::start_with(vec![click_text], Some(("api-key", "api-s3cret")));
    let front = common::secured::TlsFront::start(
        reg.url.trim_start_matches("http://"),
        common::free_port(),
        certs.path(),
    );
    let url = format!("https://127.0.0.1:{}", front.port);
    let access = |ca: &str, password: &str| Access {
        ca_location: Some(certs.path().join(ca)),
        basic: Some(("api-key".to_string(), Secret::new(password))),
    };
    let client = SchemaRegistry::open(&url, access("ca.pem", "api-s3cret")).unwrap();
    assert!(client.schema(1).unwrap().is_some());
    let err = SchemaRegistry::open(&url, access("ca.pem", "guess"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("401") && !err.contains("guess"), "{err}");
    let err = SchemaRegistry::open(&url, access("other-ca.pem", "api-s3cret"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("certificate verify failed"), "{err}");
    assert!(
        SchemaRegistry::connect(&reg.url).is_err(),
        "no credentials: 401"
    );

    // The section as a user writes it: the password from the environment, never shown.
    std::env::set_var("TEST_REGISTRY_SECRET", "api-s3cret");
    let section = format!(
        "[schema_registry]\nurl = \"{url}\"\nusername = \"api-key\"\npassword = \"${{env:TEST_REGISTRY_SECRET}}\"\nca_location = \"{}\"",
        certs.path().join("ca.pem").display()
    );
    let parsed = spec("framing = \"confluent\"", &section).unwrap();
    let r = parsed.schema_registry.clone().unwrap();
    assert_eq!(r.access, access("ca.pem", "api-s3cret"));
    assert!(!format!("{parsed:?}").contains("api-s3cret"));
    assert!(SchemaRegistry::open(&r.url, r.access).is_ok());
    // A CA for a plain http:// registry is named.
    let msg = spec(
        "framing = \"confluent\"",
        &format!(
            "[schema_registry]\nurl = \"{}\"\nca_location = \"/etc/hosts\"",
            reg.url
        ),
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("schema_registry.ca_location"), "{msg}");
}
