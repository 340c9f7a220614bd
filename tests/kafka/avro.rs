//! Avro end to end against a real broker: Confluent-framed payments in (local schema ids), panes
//! and dead-letter envelopes out (Confluent-framed, `schemas/*.avsc`). Every input record is
//! accounted for: counted in exactly one final pane, or present in the dead-letter topic.

use crate::common;

use apache_avro::types::Value;
use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::{Duration, Instant};
use tidemark::audit::check_panes;
use tidemark::format::avro::{DEAD_LETTER_SCHEMA, WINDOW_RESULT_SCHEMA};
use tidemark::input::avro::{decode_value, parse_schema, Framing};
use tidemark::kafka::raw_log::read_topic;

const EVENTS: u64 = 2_000;

/// `tidemark produce` of Confluent-framed payment events with schema id `id`, no disorder.
fn produce_payments(broker: &str, id: &str, events: &str, extra: &[&str]) {
    let status = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args([
            "produce",
            "--bootstrap-servers",
            broker,
            "--topic",
            "payments",
        ])
        .args([
            "--kind",
            "payment",
            "--format",
            "avro-confluent",
            "--schema-id",
            id,
        ])
        .args(["--events", events, "--disorder-ms", "0"])
        .args(extra)
        .status()
        .unwrap();
    assert!(status.success());
}

fn fields(v: Value) -> HashMap<String, Value> {
    match v {
        Value::Record(f) => f.into_iter().collect(),
        other => panic!("not a record: {other:?}"),
    }
}

#[test]
fn avro_in_avro_out_accounts_for_every_record() {
    let broker = common::Broker::start();
    broker.create_topic("payments", 3);
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let cfg = dir.path().join("pipeline.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
name = "payments-per-second"
[input]
format = "avro"
framing = "confluent"
schema = "{root}/schemas/payment.avsc"
key = "account_id"
timestamp = "ts"
[input.schema_ids]
1 = "{root}/schemas/payment.avsc"
[window]
type = "tumbling"
size = "1s"
[watermark]
idle_timeout = "1s"
[[aggregations]]
name = "total"
op = "sum"
field = "amount"
[output]
format = "avro"
framing = "confluent"
pane_schema_id = 100
dead_letter_schema_id = 101
[kafka]
bootstrap_servers = "{}"
repartition = false
input_topic = "payments"
output_topic = "totals"
dead_letter_topic = "payments-dead"
state_dir = "{}"
[kafka.properties]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
"#,
            broker.addr,
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    produce_payments(
        &broker.addr,
        "1",
        &EVENTS.to_string(),
        &[
            "--rate",
            "2000",
            "--keys",
            "25",
            "--late-share",
            "0.02",
            "--malformed-share",
            "0.02",
        ],
    );

    let child = common::start_member(&cfg);
    // Wait until counted panes plus dead letters cover every input record.
    let window_result = parse_schema("window_result", WINDOW_RESULT_SCHEMA).unwrap();
    let dead_letter = parse_schema("dead_letter", DEAD_LETTER_SCHEMA).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (counted, summed, dead) = loop {
        let panes = read_topic(&broker.addr, "totals").unwrap().committed;
        let dead = read_topic(&broker.addr, "payments-dead").unwrap().committed;
        // The final pane of each window (highest pane index) holds its count and sum.
        let mut last: BTreeMap<String, (i32, i64, f64)> = BTreeMap::new();
        for r in &panes {
            let v = r.value.as_ref().expect("pane value");
            assert_eq!(&v[..5], &[0, 0, 0, 0, 100], "pane schema id");
            let f = fields(decode_value(&window_result, Framing::Confluent, v).unwrap());
            let (Value::String(id), Value::Int(idx), Value::Long(n), Value::Map(aggs)) = (
                &f["dedup_id"],
                &f["pane_index"],
                &f["count"],
                &f["aggregates"],
            ) else {
                panic!("pane fields {f:?}")
            };
            let total = match &aggs["total"] {
                Value::Union(_, v) => match v.as_ref() {
                    Value::Double(x) => *x,
                    other => panic!("total {other:?}"),
                },
                other => panic!("total {other:?}"),
            };
            let e = last.entry(id.clone()).or_insert((*idx, *n, total));
            if *idx >= e.0 {
                *e = (*idx, *n, total);
            }
        }
        let counted: i64 = last.values().map(|(_, n, _)| n).sum();
        let summed: f64 = last.values().map(|(_, _, s)| s).sum();
        if counted as u64 + dead.len() as u64 >= EVENTS || Instant::now() > deadline {
            assert!(check_panes(&panes).duplicates.is_empty(), "duplicate panes");
            break (counted as u64, summed, dead);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let status = common::stop_member(child);
    assert!(status.success(), "tidemark run exited with {status}");
    assert_eq!(
        counted + dead.len() as u64,
        EVENTS,
        "{counted} counted + {} dead",
        dead.len()
    );

    // The sums too, against the input decoded here with the payment schema (no tidemark code):
    // every amount that decodes is in a final pane or in a late dead letter.
    let payment = parse_schema("payment", include_str!("../../schemas/payment.avsc")).unwrap();
    let amount = |bytes: &[u8]| -> Option<f64> {
        let v = decode_value(&payment, Framing::Confluent, bytes).ok()?;
        match fields(v).remove("amount")? {
            Value::Double(a) => Some(a),
            _ => None,
        }
    };
    let input = read_topic(&broker.addr, "payments").unwrap().committed;
    let input_sum: f64 = input
        .iter()
        .filter_map(|r| amount(r.value.as_deref()?))
        .sum();
    let mut late_sum = 0.0;
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for r in &dead {
        let v = r.value.as_ref().expect("envelope");
        assert_eq!(&v[..5], &[0, 0, 0, 0, 101], "dead-letter schema id");
        let f = fields(decode_value(&dead_letter, Framing::Confluent, v).unwrap());
        let Value::Enum(_, reason) = &f["reason"] else {
            panic!("reason {f:?}")
        };
        *reasons.entry(reason.clone()).or_default() += 1;
        // The envelope keeps the original key and value bytes.
        let Value::Union(1, original) = &f["value"] else {
            panic!("no original value in {f:?}")
        };
        let Value::Bytes(original) = original.as_ref() else {
            panic!("value is not bytes")
        };
        if reason == "late" {
            late_sum += amount(original).expect("a late record decodes");
        }
        assert_eq!(
            &original[..5],
            &[0, 0, 0, 0, 1],
            "original Confluent frame kept"
        );
        assert_eq!(
            f["key"],
            Value::Union(1, Box::new(Value::Bytes(r.key.clone().unwrap().to_vec())))
        );
    }
    assert!(
        (summed + late_sum - input_sum).abs() < 1e-6 * input_sum.abs().max(1.0),
        "final panes sum to {summed} and late dead letters to {late_sum}; the input sums to {input_sum}"
    );
    assert!(
        reasons.get("malformed").copied().unwrap_or(0) > 0,
        "{reasons:?}"
    );
    assert!(reasons.get("late").copied().unwrap_or(0) > 0, "{reasons:?}");

    // `audit --print --avro confluent` shows Avro panes and envelopes as JSON.
    for (topic, field) in [("totals", "dedup_id"), ("payments-dead", "reason")] {
        let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args([
                "audit",
                "--bootstrap-servers",
                &broker.addr,
                "--topic",
                topic,
            ])
            .args(["--print", "--avro", "confluent"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(!lines.is_empty());
        assert!(
            lines.iter().all(|v| v.get(field).is_some()),
            "{topic}: {lines:?}"
        );
    }
}

#[test]
fn registry_ids_resolve_on_the_way_in_and_output_schemas_are_registered() {
    let root = env!("CARGO_MANIFEST_DIR");
    let payment = std::fs::read_to_string(format!("{root}/schemas/payment.avsc")).unwrap();
    let registry = common::registry::FakeRegistry::start(vec![payment]);
    let broker = common::Broker::start();
    broker.create_topic("payments", 1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pipeline.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
name = "payments-registry"
[input]
format = "avro"
framing = "confluent"
schema = "{root}/schemas/payment.avsc"
key = "account_id"
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[watermark]
idle_timeout = "1s"
[[aggregations]]
name = "total"
op = "sum"
field = "amount"
[output]
format = "avro"
framing = "confluent"
[schema_registry]
url = "{}"
[kafka]
bootstrap_servers = "{}"
input_topic = "payments"
output_topic = "totals"
dead_letter_topic = "payments-dead"
state_dir = "{}"
[kafka.properties]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
"#,
            registry.url,
            broker.addr,
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    // 300 events written with registry id 1, and one written with an id the registry does not know.
    let produce = |id: &str, events: &str| {
        produce_payments(&broker.addr, id, events, &["--rate", "1000", "--keys", "5"])
    };
    produce("1", "300");
    produce("9", "1");

    let child = common::start_member(&cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (panes, dead) = loop {
        let panes = read_topic(&broker.addr, "totals").unwrap().committed;
        let dead = read_topic(&broker.addr, "payments-dead").unwrap().committed;
        if (!panes.is_empty() && !dead.is_empty()) || Instant::now() > deadline {
            break (panes, dead);
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let status = common::stop_member(child);
    assert!(status.success(), "tidemark run exited with {status}");

    // The output schemas were registered (ids 2 and 3, after the input schema) and are the ids
    // written in the frames.
    let registered = registry.schemas.lock().unwrap().clone();
    assert_eq!(
        registered.len(),
        3,
        "window_result and dead_letter registered"
    );
    let window_result = parse_schema("window_result", WINDOW_RESULT_SCHEMA).unwrap();
    let dead_letter = parse_schema("dead_letter", DEAD_LETTER_SCHEMA).unwrap();
    let id_of = |schema: &apache_avro::Schema| {
        1 + registered
            .iter()
            .position(|t| parse_schema("registered", t).unwrap() == *schema)
            .expect("registered") as u8
    };
    let (pane_id, dead_id) = (id_of(&window_result), id_of(&dead_letter));
    assert!(!panes.is_empty(), "no panes");
    for r in &panes {
        let v = r.value.as_ref().unwrap();
        assert_eq!(&v[..5], &[0, 0, 0, 0, pane_id]);
        decode_value(&window_result, Framing::Confluent, v).unwrap();
    }
    // The record with the unknown id is a malformed dead letter that says so.
    assert_eq!(dead.len(), 1, "one dead letter");
    let v = dead[0].value.as_ref().unwrap();
    assert_eq!(&v[..5], &[0, 0, 0, 0, dead_id]);
    let f = fields(decode_value(&dead_letter, Framing::Confluent, v).unwrap());
    assert_eq!(f["reason"], Value::Enum(1, "malformed".into()));
    assert!(
        matches!(&f["detail"], Value::String(d) if d.contains("unknown schema id 9")),
        "{:?}",
        f["detail"]
    );
}
