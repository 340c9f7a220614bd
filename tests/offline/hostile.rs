//! No input panics: arbitrary bytes and hostile JSON fed to every decoder a member runs on data it
//! did not write itself or reads back after a crash (input records, the repartition topic's
//! records, panes, dead letters, changelog records, saved window state), and to the expressions.
//! Each decoder must answer with a value or an error; none may panic. A grouping key longer
//! than the hop carries, and a pipeline over hostile JSON, end as dead letters with their reasons.

use proptest::prelude::*;
use serde_json::{json, Value};
use tidemark::format::repartition as wire;
use tidemark::windowing::aggregate::{operation, AggSpec, Params, OPERATIONS};
use tidemark::windowing::entry;

/// Every registered operation, each reading input 0 (with the parameters those that take one
/// need).
fn every_operation() -> Vec<AggSpec> {
    let q = Params {
        q: Some(0.9),
        ..Params::default()
    };
    let k = Params {
        k: Some(2),
        ..Params::default()
    };
    OPERATIONS
        .iter()
        .map(|(name, _)| AggSpec {
            name: name.to_string(),
            op: [Params::default(), q, k]
                .iter()
                .find_map(|p| operation(name, p).ok())
                .expect("a registered operation"),
            field: (*name != "count").then_some(0),
        })
        .collect()
}

/// A valid record of each repartition kind, to be cut and flipped.
fn valid_hop_records() -> Vec<Vec<u8>> {
    use tidemark::windowing::aggregate::value::Value as V;
    use tidemark::windowing::spec::Event;
    let ev = Event {
        key: "user-1".into(),
        ts: 1_000,
        values: vec![V::Int(3), V::Float(2.5), V::Null],
    };
    let origin = wire::Origin {
        topic: 0,
        partition: 2,
        offset: 17,
        appended: 5,
    };
    let mut single = Vec::new();
    wire::put_event(&mut single, &ev, origin).unwrap();
    let mut pack = wire::Pack::default();
    pack.push(&ev, origin).unwrap();
    pack.push(&ev, origin).unwrap();
    let mut marks = Vec::new();
    wire::put_watermarks(
        &mut marks,
        &[(
            origin,
            tidemark::windowing::watermark::SourceWatermark {
                watermark: 900,
                last_record_at: Some(1),
                idle_at: None,
            },
        )],
    );
    vec![single, pack.finish().to_vec(), marks]
}

/// Runs every repartition decoder over `value` (and `key`); they may fail, never panic.
fn decode_hop(key: Option<&[u8]>, value: &[u8]) {
    let _ = wire::decode(key, value);
    let _ = wire::read_partials(value);
    if let Ok(mut r) = wire::PackReader::new(value) {
        let mut ev = Default::default();
        while let Ok(Some(_)) = r.next_into(&mut ev) {}
    }
}

/// Runs every saved-state decoder over `bytes` with every operation.
fn decode_state(bytes: &[u8]) {
    let aggs = every_operation();
    let _ = entry::decode_state_key(bytes);
    let _ = entry::get_slice(&aggs, bytes);
    let _ = entry::get_win_state(&aggs, bytes);
    let _ = entry::get_cursor(bytes);
    let _ = entry::get_session(&aggs, bytes);
    for legacy in [false, true] {
        let mut b = bytes;
        let _ = tidemark::windowing::aggregate::Acc::decode(&aggs, &mut b, legacy);
    }
}

/// Bytes: short runs of anything, and runs that start like each record kind.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        (
            0u8..5,
            0u8..6,
            proptest::collection::vec(any::<u8>(), 0..200)
        )
            .prop_map(|(version, kind, rest)| {
                let mut v = vec![version, kind];
                v.extend(rest);
                v
            }),
    ]
}

/// JSON as hostile producers write it: deep nesting, huge and tiny numbers, long strings,
/// every type where another is expected.
fn hostile_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
        (0usize..3).prop_map(|n| Value::from("é".repeat(n * 10_000))),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("user".to_string()),
                    Just("ts".to_string()),
                    Just("amount".to_string()),
                    Just("page".to_string()),
                    ".{0,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A pipeline whose every part evaluates expressions on the record.
const EXPRESSIONS: &str = r#"
name = "hostile"
allowed_lateness = "1s"
[input]
filter = "amount IS NULL OR amount * 2 > -1000000 OR page LIKE '%x%'"
key = ["lower(user)", { expr = "CAST(amount AS INT) % 7", alias = "bucket" }]
timestamp = "ts"
[window]
type = "session"
gap = "1s"
[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "total"
op = "sum"
field = "amount / 3"
[[aggregations]]
name = "pages"
op = "count_distinct"
field = "concat(page, '-', user)"
[[aggregations]]
name = "p99"
op = "approx_percentile"
field = "amount"
q = 0.99
[[aggregations]]
name = "top"
op = "top_k"
field = "page"
k = 2
[[aggregations]]
name = "first"
op = "first"
field = "page"
"#;

/// Runs `simulate` over `input` with pipeline `text`; returns the dead letters.
fn simulate(text: &str, input: &[u8]) -> Vec<Value> {
    let (spec, _) = tidemark::config::parse_raw(text, Vec::new())
        .unwrap()
        .validate()
        .unwrap();
    crate::common::simulate_bytes(&spec, input).1
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn repartition_decoders_take_arbitrary_bytes(
        key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16)),
        value in bytes(),
    ) {
        decode_hop(key.as_deref(), &value);
    }

    #[test]
    fn repartition_decoders_take_cut_and_flipped_records(
        which in 0usize..3,
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        xor in 1u8..,
    ) {
        let mut v = valid_hop_records().swap_remove(which);
        let at = flip.index(v.len());
        v[at] ^= xor;
        decode_hop(Some(b"user-1"), &v);
        v.truncate(cut.index(v.len()));
        decode_hop(Some(b"user-1"), &v);
    }

    #[test]
    fn saved_state_decoders_take_arbitrary_bytes(value in bytes()) {
        decode_state(&value);
    }

    #[test]
    fn pane_dead_letter_and_changelog_readers_take_arbitrary_records(
        key in proptest::option::of(prop_oneof![
            Just(tidemark::changelog::OFFSET_MARKER_KEY.to_vec()),
            Just(tidemark::changelog::RESET_MARKER_KEY.to_vec()),
            Just(tidemark::changelog::EPOCH_MARKER_KEY.to_vec()),
            bytes(),
        ]),
        value in proptest::option::of(bytes()),
        headers in proptest::collection::vec(
            (
                prop_oneof![
                    Just("tidemark.reason".to_string()),
                    Just("tidemark.source_partition".to_string()),
                    Just("tidemark.source_offset".to_string()),
                    Just("tidemark.source_topic".to_string()),
                    Just("tidemark.epoch".to_string()),
                    Just("tidemark.dedup_id".to_string()),
                    Just("tidemark.input_offset".to_string()),
                    Just("tidemark.fingerprint".to_string()),
                    ".{0,8}",
                ],
                proptest::option::of(bytes()),
            ),
            0..6,
        ),
    ) {
        let r = tidemark::kafka::raw_log::RawRecord {
            partition: 0,
            offset: 0,
            producer_id: 1,
            transactional: true,
            epoch: 0,
            marker: None,
            timestamp: 0,
            key: key.map(Into::into),
            value: value.clone().map(Into::into),
            headers: headers.into_iter().map(|(k, v)| (k, v.map(Into::into))).collect(),
        };
        let _ = tidemark::format::dead_letter::DeadLetter::from_record(&r);
        let _ = tidemark::format::epoch_of(&r);
        for framing in [None, Some(tidemark::input::avro::Framing::Confluent)] {
            let d = tidemark::format::Decoder::new(framing);
            let bytes = value.as_deref().unwrap_or_default();
            let _ = d.pane(bytes);
            let _ = d.pane_json(bytes);
            let _ = d.text(&r);
        }
        let mut fold = tidemark::changelog::Fold::new(None, Default::default());
        let _ = fold.record(&r);
    }

    #[test]
    fn hostile_json_becomes_panes_or_dead_letters(
        records in proptest::collection::vec(hostile_json(), 1..12),
    ) {
        let mut input = String::new();
        for r in &records {
            input.push_str(&r.to_string());
            input.push('\n');
        }
        let dead = simulate(EXPRESSIONS, input.as_bytes());
        for d in &dead {
            let reason = d["reason"].as_str().unwrap();
            prop_assert!(
                ["malformed", "expression", "late", "too_large"].contains(&reason),
                "{d}"
            );
            prop_assert!(d["detail"].as_str().map_or(0, str::len) <= 1024, "{d}");
        }
    }
}

#[test]
fn a_key_longer_than_the_hop_carries_is_dead_lettered_as_too_large() {
    let long = "k".repeat(70_000);
    let edge = "e".repeat(tidemark::windowing::spec::MAX_KEY_BYTES);
    let input = [
        json!({"user": long, "ts": 1_000, "amount": 1, "page": "a"}),
        json!({"user": edge, "ts": 1_100, "amount": 1, "page": "a"}),
        json!({"user": "u", "ts": 1_200, "amount": 1, "page": "a"}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect::<String>();
    let text = EXPRESSIONS
        .replace(
            r#"key = ["lower(user)", { expr = "CAST(amount AS INT) % 7", alias = "bucket" }]"#,
            r#"key = "user""#,
        )
        .replace("filter = ", "# filter = ")
        // A distinct count of the key would keep it whole: longer than its share allows.
        .replace("concat(page, '-', user)", "page");
    let dead = simulate(&text, input.as_bytes());
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "too_large");
    assert_eq!(dead[0]["line"], 1);
    assert!(
        dead[0]["detail"].as_str().unwrap().contains("70000 bytes"),
        "{}",
        dead[0]["detail"]
    );
    // The key of exactly the limit crosses the hop's codec; one byte more does not.
    let ev = |key: String| tidemark::windowing::spec::Event {
        key,
        ts: 0,
        values: vec![],
    };
    let origin = wire::Origin {
        topic: 0,
        partition: 0,
        offset: 0,
        appended: 0,
    };
    let mut pack = wire::Pack::default();
    assert!(pack.push(&ev(edge.clone()), origin).is_ok());
    assert_eq!(
        pack.push(&ev(format!("{edge}x")), origin),
        Err(wire::HopError::KeyTooLong(edge.len() + 1))
    );
    assert_eq!(pack.len(), 1, "a refused event writes nothing");
    let back = wire::decode(None, pack.finish()).unwrap();
    assert!(matches!(back, wire::HopRecord::Events(ref e) if e[0].0.key == edge));
}

#[test]
fn a_pipeline_with_more_aggregations_than_the_state_carries_is_refused() {
    let mut text = EXPRESSIONS.to_string();
    for i in 0..256 {
        text.push_str(&format!(
            "[[aggregations]]\nname = \"c{i}\"\nop = \"count\"\n"
        ));
    }
    let err = tidemark::config::parse_raw(&text, Vec::new())
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("262 aggregations are more than the 255"),
        "{err}"
    );
}

#[test]
fn event_times_in_seconds_are_read_as_the_unit_says() {
    let text = EXPRESSIONS
        .replace(
            "timestamp = \"ts\"",
            "timestamp = \"ts\"\ntimestamp_unit = \"s\"",
        )
        .replace("filter = ", "# filter = ");
    let (spec, _) = tidemark::config::parse_raw(&text, Vec::new())
        .unwrap()
        .validate()
        .unwrap();
    let input = "{\"user\":\"u\",\"ts\":1765000000,\"amount\":1,\"page\":\"a\"}\n\
                 {\"user\":\"u\",\"ts\":1765000100,\"amount\":2,\"page\":\"b\"}\n";
    let (panes, dead) = crate::common::simulate_bytes(&spec, input.as_bytes());
    let first: Value = serde_json::from_str(panes.first().expect("a pane")).unwrap();
    assert_eq!(first["window_start"], 1_765_000_000_000i64, "{panes:?}");
    assert!(dead.is_empty());
    let bad = tidemark::config::parse_raw(&text.replace("= \"s\"", "= \"sec\""), Vec::new())
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(bad.contains("input.timestamp_unit"), "{bad}");
}

/// A pipeline whose aggregations keep the strings they read.
const KEEPING: &str = r#"
name = "keeping"
[input]
key = "user"
timestamp = "ts"
[window]
type = "tumbling"
size = "1m"
[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "first"
op = "first"
field = "page"
[[aggregations]]
name = "last"
op = "last"
field = "page"
[[aggregations]]
name = "top"
op = "top_k"
field = "page"
k = 3
"#;

#[test]
fn values_and_panes_too_large_for_a_record_are_dead_lettered_not_written() {
    let (spec, _) = tidemark::config::parse_raw(KEEPING, Vec::new())
        .unwrap()
        .validate()
        .unwrap();
    // The share of a record each of the three value-keeping aggregations gets, and the longest
    // string `top_k` (a quarter of it) lets the field carry.
    let longest = 63_127;
    assert_eq!(spec.record_bytes, 995_904);
    let input = [
        // Longer than any aggregation may keep: dead-lettered as it arrives.
        json!({"user": "a", "ts": 1_000, "page": "p".repeat(longest + 1)}),
        // Just within: kept, but its pane writes it three times, each control character
        // escaped to six bytes: more than one record can carry.
        json!({"user": "b", "ts": 1_000, "page": "\u{1}".repeat(longest)}),
        // The longest a page may be, in plain letters: its pane fits.
        json!({"user": "c", "ts": 1_000, "page": "q".repeat(longest)}),
        json!({"user": "d", "ts": 1_000, "page": "home"}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect::<String>();
    let (panes, dead) = crate::common::simulate_bytes(&spec, input.as_bytes());
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert_eq!(dead[0]["reason"], "too_large");
    assert_eq!(dead[0]["line"], 1);
    let detail = dead[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("{} bytes", longest + 1)) && detail.contains("field page"),
        "{detail}"
    );
    // The pane of `b` is named by its dedup id and window, with no payload.
    assert_eq!(dead[1]["reason"], "too_large");
    assert_eq!(dead[1]["window_start"], 0);
    assert_eq!(dead[1]["window_end"], 60_000);
    assert!(dead[1]["dedup_id"].as_str().is_some_and(|d| !d.is_empty()));
    assert!(dead[1].get("original").is_none());
    let keys: Vec<String> = panes
        .iter()
        .map(|p| serde_json::from_str::<Value>(p).unwrap()["key"].to_string())
        .collect();
    assert_eq!(keys, ["\"c\"", "\"d\""]);
    assert!(panes.iter().all(|p| p.len() < spec.record_bytes));
}

#[test]
fn a_record_too_small_for_the_aggregations_is_refused() {
    let text = format!(
        "{KEEPING}[kafka]\nbootstrap_servers = \"localhost:9092\"\noutput_topic = \"o\"\n\
         dead_letter_topic = \"d\"\n[kafka.properties]\n\"message.max.bytes\" = \"300000\"\n"
    );
    let err = tidemark::config::parse_raw(&text, Vec::new())
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("message.max.bytes"), "{err}");
}
