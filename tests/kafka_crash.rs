//! Exactly-once under crashes: `tidemark run` is killed with SIGKILL at random moments (six times)
//! while input is still being produced, and restarted alternately on the same state directory and
//! on a fresh one (which forces a restore from the changelog). At the end every expected pane —
//! computed by `tidemark simulate` on each partition's records — is committed exactly once with the
//! expected value, and so is every dead letter. Judged from the raw log by `audit`.

mod common;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};
use tidemark::audit::{check_panes, read_topic};
use tidemark::config::parse_raw;
use tidemark::state::store::StateStore;

const PARTITIONS: i32 = 3;

fn config(broker: &str, state: &std::path::Path) -> String {
    format!(
        r#"
name = "crash"
allowed_lateness = "1s"
[input]
key = "user"
timestamp = "ts"
[window]
type = "sliding"
size = "2s"
slide = "500ms"
[watermark]
max_out_of_orderness = "300ms"
[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "total"
op = "sum"
field = "amount"
[kafka]
bootstrap_servers = "{broker}"
application_id = "crash"
instance_id = "m1"
input_topic = "events"
output_topic = "panes"
dead_letter_topic = "dead"
state_dir = "{}"
commit_interval = "100ms"
max_batch_records = 200
[kafka.properties]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
"group.instance.id" = "m1"
"#,
        state.display()
    )
}

#[test]
fn kill_9_never_loses_or_duplicates() {
    let broker = common::Broker::start();
    broker.create_topic("events", PARTITIONS);
    let dir = tempfile::tempdir().unwrap();

    // The input: 6,000 records produced over about 12 s while the processor is being killed; the
    // producer slows down so that input is still arriving during the kills.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let base = (now - 3_600_000) / 1000 * 1000;
    let mut records: Vec<(i32, String, String)> = Vec::new();
    let mut x: u64 = 7;
    for i in 0..6_000i64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let user = format!("u{}", x % 30);
        let p = (x % 30) as i32 % PARTITIONS;
        let jitter = if x % 10 == 0 {
            -(((x >> 8) % 300) as i64)
        } else {
            0
        };
        let ts = base + i * 5 + jitter;
        records.push((
            p,
            user.clone(),
            json!({"user": user, "ts": ts, "amount": (x % 50) as i64}).to_string(),
        ));
        if i % 1000 == 999 {
            let p = (i / 1000) as i32 % PARTITIONS;
            records.push((
                p,
                "late".into(),
                json!({"user": "late", "ts": base - 60_000, "amount": 1}).to_string(),
            ));
            records.push((p, "bad".into(), "not json at all".to_string()));
        }
    }
    for p in 0..PARTITIONS {
        records.push((
            p,
            "end".into(),
            json!({"user": "end", "ts": base + 120_000, "amount": 0}).to_string(),
        ));
    }
    let cutoff = base + 120_000;

    let cfg_path = |name: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, config(&broker.addr, &dir.path().join(name))).unwrap();
        path
    };
    let same = cfg_path("state-a");

    // Expected output from simulate, per partition.
    let (spec, _) = parse_raw(&std::fs::read_to_string(&same).unwrap(), Vec::new())
        .unwrap()
        .validate()
        .unwrap();
    let mut per_partition: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for (p, _, v) in &records {
        per_partition.entry(*p).or_default().push(v.clone());
    }
    let mut expected: Vec<String> = Vec::new();
    let mut expected_dead = 0;
    for lines in per_partition.values() {
        let tmp = tempfile::tempdir().unwrap();
        let store = StateStore::open(tmp.path()).unwrap();
        let (mut panes, mut dead) = (Vec::new(), Vec::new());
        tidemark::simulate::run(
            &spec,
            &store,
            lines.join("\n").as_bytes(),
            &mut panes,
            &mut dead,
        )
        .unwrap();
        expected_dead += String::from_utf8(dead).unwrap().lines().count();
        for l in String::from_utf8(panes).unwrap().lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            if v["window_end"].as_i64().unwrap() <= cutoff {
                expected.push(l.to_string());
            }
        }
    }
    expected.sort();

    // Produce in the background.
    let addr = broker.addr.clone();
    let producer_thread = std::thread::spawn(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &addr)
            .create()
            .unwrap();
        for (i, (p, k, v)) in records.iter().enumerate() {
            producer
                .send(BaseRecord::to("events").partition(*p).key(k).payload(v))
                .unwrap();
            if i % 50 == 0 {
                producer.flush(Duration::from_secs(10)).unwrap();
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        producer.flush(Duration::from_secs(10)).unwrap();
    });

    // Six kills at random moments, alternating the same state dir and a fresh one. Each member is
    // killed only after it has committed new output, at a random moment after that, so every kill
    // interrupts real work (with a transaction open or being committed).
    let mut seed: u64 = 0x5eed ^ now as u64;
    let mut progressed = 0;
    for round in 0..6 {
        let cfg = if round % 2 == 0 {
            same.clone()
        } else {
            cfg_path(&format!("fresh-{round}"))
        };
        let before = common::committed_values(&broker.addr, "panes").len();
        let mut child = common::start_member(&cfg);
        let started = Instant::now();
        while common::committed_values(&broker.addr, "panes").len() <= before
            && started.elapsed() < Duration::from_secs(40)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait = seed % 1_500;
        std::thread::sleep(Duration::from_millis(wait));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let after = common::committed_values(&broker.addr, "panes").len();
        if after > before {
            progressed += 1;
        }
        eprintln!(
            "round {round}: first output after {} ms, killed {wait} ms later; committed panes {before} -> {after}",
            started.elapsed().as_millis() as u64 - wait
        );
    }
    assert!(
        progressed >= 5,
        "only {progressed} of 6 members made progress before being killed"
    );
    producer_thread.join().unwrap();

    // A final member on a fresh directory (one more restore) runs until the output is complete.
    let mut child = common::start_member(&cfg_path("final"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while common::committed_values(&broker.addr, "panes").len() < expected.len()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "final member exited with {status}");

    let log = read_topic(&broker.addr, "panes").unwrap();
    let report = check_panes(&log.committed);
    eprintln!(
        "aborted pane records in the log: {}; served to read_committed by this broker: {}",
        log.aborted, log.aborted_served_to_read_committed
    );
    assert!(
        report.duplicates.is_empty(),
        "duplicates: {:?}",
        report.duplicates
    );
    assert!(report.gaps.is_empty(), "gaps: {:?}", report.gaps);
    let mut got = common::committed_values(&broker.addr, "panes");
    got.sort();
    assert_eq!(got.len(), expected.len(), "committed panes vs simulate");
    assert_eq!(got, expected);
    assert_eq!(
        common::committed_values(&broker.addr, "dead").len(),
        expected_dead,
        "dead letters"
    );
}
