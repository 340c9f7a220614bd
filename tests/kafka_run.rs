//! `tidemark run` end to end against a real broker: the committed output (judged from the raw log
//! by `audit`, never by the broker's read_committed filtering) equals `tidemark simulate` run on each
//! partition's records, nothing is duplicated, and bad records reach the dead-letter topic.

mod common;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use serde_json::json;
use std::time::{Duration, Instant};
use tidemark::audit::{check_panes, read_topic};

const PARTITIONS: i32 = 3;

fn config(broker: &str, state: &std::path::Path) -> String {
    format!(
        r#"
name = "e2e"
allowed_lateness = "2s"
[input]
key = "user"
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[watermark]
max_out_of_orderness = "500ms"
[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "total"
op = "sum"
field = "amount"
[kafka]
bootstrap_servers = "{broker}"
application_id = "e2e"
input_topic = "events"
output_topic = "panes"
dead_letter_topic = "dead"
state_dir = "{}"
commit_interval = "100ms"
[kafka.properties]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
"#,
        state.display()
    )
}

#[test]
fn run_commits_what_simulate_computes() {
    let broker = common::Broker::start();
    broker.create_topic("events", PARTITIONS);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pipeline.toml");
    std::fs::write(&cfg, config(&broker.addr, &dir.path().join("state"))).unwrap();

    // Events about an hour ago (the future-skew check compares with the wall clock), 20 keys, 1 s
    // windows, a little disorder; one late and one malformed record per partition; a last record per
    // partition far ahead so that every window before it fires.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let base = (now - 3_600_000) / 1000 * 1000;
    let mut sent: Vec<(i32, String, String)> = Vec::new();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .create()
        .unwrap();
    let mut send = |p: i32, key: &str, value: String| {
        producer
            .send(
                BaseRecord::to("events")
                    .partition(p)
                    .key(key)
                    .payload(&value),
            )
            .unwrap();
        sent.push((p, key.to_string(), value));
        producer.poll(Duration::ZERO);
    };
    let mut x: u64 = 42;
    for i in 0..3_000i64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let user = format!("u{}", x % 20);
        let p = (x % 20) as i32 % PARTITIONS;
        let jitter = if x % 10 == 0 {
            -(((x >> 8) % 400) as i64)
        } else {
            0
        };
        let ts = base + i * 7 + jitter;
        send(
            p,
            &user,
            json!({"user": user, "ts": ts, "amount": (x % 100) as i64}).to_string(),
        );
        if i == 1500 {
            for p in 0..PARTITIONS {
                send(
                    p,
                    &format!("u{p}"),
                    json!({"user": format!("u{p}"), "ts": base - 60_000, "amount": 1}).to_string(),
                );
                send(p, &format!("u{p}"), "{not json".to_string());
            }
        }
    }
    for p in 0..PARTITIONS {
        send(
            p,
            "end",
            json!({"user": "end", "ts": base + 60_000, "amount": 0}).to_string(),
        );
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let end_cutoff = base + 60_000; // windows ending after this are still open in `run`

    // Expected: simulate on each partition's records, panes of windows that end by the cutoff.
    let (expected, expected_dead) =
        common::simulate_expected(&std::fs::read_to_string(&cfg).unwrap(), &sent, end_cutoff);
    assert!(
        expected.len() > 100,
        "the scenario should produce many panes"
    );

    let child = common::start_member(&cfg);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut got: Vec<String>;
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let log = read_topic(&broker.addr, "panes").unwrap();
        got = log
            .committed
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect();
        if got.len() >= expected.len() || Instant::now() > deadline {
            break;
        }
    }
    let status = common::stop_member(child);
    assert!(status.success(), "tidemark run exited with {status}");

    let log = read_topic(&broker.addr, "panes").unwrap();
    let report = check_panes(&log.committed);
    assert!(
        report.duplicates.is_empty(),
        "duplicates: {:?}",
        report.duplicates
    );
    assert!(report.gaps.is_empty(), "gaps: {:?}", report.gaps);
    got = log
        .committed
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    got.sort();
    assert_eq!(got.len(), expected.len(), "committed panes vs simulate");
    assert_eq!(got, expected);

    let dead = read_topic(&broker.addr, "dead").unwrap();
    assert_eq!(dead.committed.len(), expected_dead, "dead letters");
    let reasons: Vec<String> = dead
        .committed
        .iter()
        .map(|r| {
            let h = r
                .headers
                .iter()
                .find(|(k, _)| k == "tidemark.reason")
                .unwrap();
            String::from_utf8(h.1.clone().unwrap().to_vec()).unwrap()
        })
        .collect();
    assert_eq!(
        reasons.iter().filter(|r| *r == "late").count(),
        PARTITIONS as usize
    );
    assert_eq!(
        reasons.iter().filter(|r| *r == "malformed").count(),
        PARTITIONS as usize
    );
}
