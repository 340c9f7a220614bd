//! `tidemark run --sql` end to end: the example query of `examples/sql/clicks_per_minute.sql`,
//! its broker and state directory given by `TIDEMARK__*` overrides, through the repartition hop
//! and on input keyed by the grouping key, killed with SIGKILL once midway and started again. Judged from the raw log: every window the watermark passed has its
//! one pane, committed once, and equal to Flink's row for it (`tests/golden/sql/`), and no
//! transaction is left open.

use crate::common;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tidemark::kafka::raw_log::read_topic;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tidemark run --sql` on the example, against `broker`, with state under `state`; `direct`
/// declares the input keyed by the grouping key (no repartition hop).
fn member(broker: &str, state: &Path, log: &Path, direct: bool) -> Child {
    let log = std::fs::File::create(log).unwrap();
    common::adopt(
        Command::new(common::tidemark_bin())
            .args(["run", "--sql"])
            .env(
                "TIDEMARK__KAFKA__REPARTITION",
                if direct { "false" } else { "true" },
            )
            .arg(root().join("examples/sql/clicks_per_minute.sql"))
            .env("TIDEMARK__KAFKA__BOOTSTRAP_SERVERS", broker)
            .env("TIDEMARK__KAFKA__STATE_DIR", state)
            .env("TIDEMARK__KAFKA__INSTANCE_ID", "m1")
            .env("TIDEMARK__KAFKA__COMMIT_INTERVAL", "100ms")
            .env("TIDEMARK__KAFKA__MAX_BATCH_RECORDS", "50")
            // A member killed is replaced within seconds, not librdkafka's default 45 s.
            .env("TIDEMARK__KAFKA__PROPERTIES__SESSION.TIMEOUT.MS", "'6000'")
            .env(
                "TIDEMARK__KAFKA__PROPERTIES__MAX.POLL.INTERVAL.MS",
                "'10000'",
            )
            .env("TIDEMARK_LOG", "info")
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

/// Flink's rows, by (user, window start in epoch ms): (clicks, revenue, max price).
fn flink_rows() -> BTreeMap<(String, i64), (f64, f64, f64)> {
    let text =
        std::fs::read_to_string(root().join("tests/golden/sql/clicks_per_minute.rows")).unwrap();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let start = chrono::NaiveDateTime::parse_from_str(
                v["window_start"].as_str().unwrap(),
                "%Y-%m-%d %H:%M:%S%.3f",
            )
            .unwrap()
            .and_utc()
            .timestamp_millis();
            let f = |k: &str| v[k].as_f64().unwrap();
            (
                (v["user_id"].as_str().unwrap().to_string(), start),
                (f("clicks"), f("revenue"), f("max_price")),
            )
        })
        .collect()
}

/// Panes by (key, window start): (clicks, revenue, max price) of each.
type Panes = BTreeMap<(String, i64), Vec<(f64, f64, f64)>>;

/// The committed panes, and how many transactions are open.
fn committed(broker: &str) -> (Panes, usize) {
    let Ok(log) = read_topic(broker, "clicks-per-minute") else {
        return (BTreeMap::new(), 0);
    };
    let mut out: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for r in &log.committed {
        let v: Value = serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap();
        let f = |k: &str| v[k].as_f64().unwrap();
        out.entry((
            v["key"].as_str().unwrap().to_string(),
            v["window_start"].as_i64().unwrap(),
        ))
        .or_default()
        .push((f("clicks"), f("revenue"), f("max_price")));
    }
    (out, log.open)
}

#[test]
fn a_sql_pipeline_through_the_hop_runs_exactly_once_and_gives_flinks_rows() {
    sql_run(false);
}

#[test]
fn a_sql_pipeline_on_keyed_input_runs_exactly_once_and_gives_flinks_rows() {
    sql_run(true);
}

/// Runs the example over its events (keyed by user when `direct`), killed once, and judges it.
fn sql_run(direct: bool) {
    let broker = common::Broker::start();
    broker.create_topic("clicks", 1);
    let events = std::fs::read_to_string(root().join("examples/sql/clicks.jsonl")).unwrap();
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .create()
        .unwrap();
    let mut last_ts = 0;
    for line in events.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        last_ts = last_ts.max(v["ts"].as_i64().unwrap());
        let user = v["user_id"].as_str().unwrap().as_bytes();
        let mut record = BaseRecord::<[u8], str>::to("clicks")
            .partition(0)
            .payload(line);
        if direct {
            record = record.key(user);
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();

    // The windows the last watermark (the latest event time less 5 s) passes.
    let watermark = last_ts - 5_000;
    let want: BTreeMap<_, _> = flink_rows()
        .into_iter()
        .filter(|((_, start), _)| start + 60_000 <= watermark)
        .collect();
    assert!(want.len() > 20, "{} windows to judge", want.len());

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("m1.log");
    let mut m = member(&broker.addr, &dir.path().join("state"), &log, direct);
    // Killed as soon as some panes are committed, then started again.
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed(&broker.addr).0.is_empty() {
        assert!(
            m.try_wait().unwrap().is_none(),
            "the member stopped:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            Instant::now() < deadline,
            "no pane within 60 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    m.kill().unwrap();
    m.wait().unwrap();
    let mut m = member(&broker.addr, &dir.path().join("state"), &log, direct);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (got, _) = committed(&broker.addr);
        if want.keys().all(|k| got.contains_key(k)) {
            break;
        }
        assert!(
            m.try_wait().unwrap().is_none(),
            "the member stopped:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            Instant::now() < deadline,
            "not every window within 90 s: {} of {}\n{}",
            got.len(),
            want.len(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert!(common::stop_member(m).success());
    let (got, open) = committed(&broker.addr);
    assert_eq!(open, 0, "open transactions");
    let mut problems = Vec::new();
    for (k, row) in &want {
        match got.get(k).map(Vec::as_slice) {
            Some([pane]) if pane == row => {}
            other => problems.push(format!("{k:?}: Flink {row:?}, tidemark {other:?}")),
        }
    }
    // Nothing besides: the windows after the watermark have not fired.
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        problems.push(format!(
            "{k:?}: a pane Flink's final rows do not have before the watermark"
        ));
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
