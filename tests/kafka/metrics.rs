//! `/metrics`, `/healthz` and `/readyz` of a running member, scraped during a run against a real
//! broker. The counters are checked against what the raw log says was committed, so a metric that
//! counts aborted work, double counts or misses a partition fails here.

use crate::common;

use common::{free_port, http_get as get};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 3;
const EVENTS: u64 = 3_000;

fn parse(body: &str) -> BTreeMap<String, f64> {
    common::parse_metrics(body)
}

/// Sum of every series of `name` (any labels).
fn sum(m: &BTreeMap<String, f64>, name: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .sum()
}

/// Series of `name` with their labels.
fn series<'a>(m: &'a BTreeMap<String, f64>, name: &str) -> Vec<(&'a str, f64)> {
    m.iter()
        .filter(|(k, _)| k.starts_with(&format!("{name}{{")))
        .map(|(k, v)| (k.as_str(), *v))
        .collect()
}

#[test]
fn metrics_match_what_the_log_committed() {
    let broker = common::Broker::start();
    broker.create_topic("clicks", PARTITIONS);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("pipeline.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
name = "metrics"
allowed_lateness = "1s"
[input]
key = "user_id"
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[watermark]
max_out_of_orderness = "200ms"
idle_timeout = "2s"
[[aggregations]]
name = "clicks"
op = "count"
[kafka]
bootstrap_servers = "{}"
application_id = "metrics"
repartition = false
input_topic = "clicks"
output_topic = "panes"
dead_letter_topic = "dead"
state_dir = "{}"
[kafka.properties]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
"statistics.interval.ms" = "1000"
[metrics]
address = "127.0.0.1:{port}"
"#,
            broker.addr,
            dir.path().join("state").display()
        ),
    )
    .unwrap();

    let child = common::start_member(&cfg);
    // Alive at once; ready once the partitions are assigned and restored.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(port, "/healthz").is_none() {
        assert!(Instant::now() < deadline, "no /healthz");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(port, "/healthz").unwrap().0, 200);
    while get(port, "/readyz").unwrap().0 != 200 {
        assert!(Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(port, "/nope").unwrap().0, 404);

    // A live clickstream stamped with the wall clock, with late and malformed records.
    let produced = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args([
            "produce",
            "--bootstrap-servers",
            &broker.addr,
            "--topic",
            "clicks",
        ])
        .args([
            "--events",
            &EVENTS.to_string(),
            "--rate",
            "1000",
            "--keys",
            "20",
        ])
        .args(["--disorder-ms", "100", "--late-share", "0.02"])
        .args(["--malformed-share", "0.01"])
        .status()
        .unwrap();
    assert!(produced.success());

    // Wait until every record is counted, then a little longer for the idle watermark to close
    // the last windows and for the consumer statistics to report.
    let deadline = Instant::now() + Duration::from_secs(60);
    // The most window state the partitions were seen holding in memory while records came.
    let mut cache_seen = 0.0f64;
    let m = loop {
        let m = parse(&get(port, "/metrics").unwrap().1);
        cache_seen = cache_seen.max(sum(&m, "tidemark_state_cache_bytes"));
        if sum(&m, "tidemark_records_in_total") as u64 >= EVENTS {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "records_in stuck at {}",
            sum(&m, "tidemark_records_in_total")
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(sum(&m, "tidemark_records_in_total") as u64, EVENTS);
    std::thread::sleep(Duration::from_secs(5));
    let m = parse(&get(port, "/metrics").unwrap().1);

    // Per partition: records in, a watermark, a lag that is non-negative and small once caught up.
    assert_eq!(
        series(&m, "tidemark_records_in_total").len(),
        PARTITIONS as usize
    );
    let lags = series(&m, "tidemark_watermark_lag_seconds");
    assert_eq!(lags.len(), PARTITIONS as usize, "{lags:?}");
    for (s, lag) in &lags {
        assert!((0.0..5.0).contains(lag), "{s} = {lag}");
    }
    let consumer_lag = series(&m, "tidemark_consumer_lag_records");
    assert_eq!(consumer_lag.len(), PARTITIONS as usize, "{consumer_lag:?}");
    assert!(
        consumer_lag.iter().all(|(_, v)| *v == 0.0),
        "{consumer_lag:?}"
    );
    // The scaling signal: caught up, so no backlog anywhere, and one member is enough.
    let backlog = series(&m, "tidemark_backlog_seconds");
    assert_eq!(backlog.len(), PARTITIONS as usize, "{backlog:?}");
    assert!(backlog.iter().all(|(_, v)| *v == 0.0), "{backlog:?}");
    assert_eq!(m["tidemark_recommended_members"], 1.0);
    assert_eq!(m["tidemark_assigned_partitions"], PARTITIONS as f64);
    assert!(m["tidemark_state_size_bytes"] > 0.0);
    assert_eq!(
        series(&m, "tidemark_open_windows").len(),
        PARTITIONS as usize
    );
    let entries = series(&m, "tidemark_state_entries");
    assert_eq!(entries.len(), PARTITIONS as usize, "{entries:?}");
    assert!(entries.iter().any(|(_, v)| *v > 0.0), "{entries:?}");
    // The cache's own measure of the window state each partition holds, and its largest key:
    // some while records came (by now every window may have fired and been dropped).
    for name in [
        "tidemark_state_cache_bytes",
        "tidemark_state_largest_key_bytes",
    ] {
        let s = series(&m, name);
        assert_eq!(s.len(), PARTITIONS as usize, "{name}: {s:?}");
    }
    assert!(cache_seen > 0.0, "no window state was ever measured");
    // A fresh member restores every partition from an empty changelog.
    let restored = series(&m, "tidemark_restore_records_total");
    assert_eq!(restored.len(), PARTITIONS as usize, "{restored:?}");
    assert!(restored.iter().all(|(_, v)| *v == 0.0), "{restored:?}");
    assert!(m[r#"tidemark_transactions_total{outcome="committed"}"#] > 0.0);
    assert!(m["tidemark_commit_duration_seconds_count"] > 0.0);
    assert_eq!(
        m["tidemark_restore_duration_seconds_count"],
        PARTITIONS as f64
    );
    assert!(m[r#"tidemark_rebalances_total{kind="assign"}"#] >= 1.0);
    assert!(m["tidemark_record_lateness_seconds_count"] > 0.0);
    // Most panes commit within a second of the record that fired them.
    let within_1s = m[r#"tidemark_pane_commit_latency_seconds_bucket{le="1"}"#];
    let all = m["tidemark_pane_commit_latency_seconds_count"];
    assert!(all > 0.0 && within_1s / all > 0.9, "{within_1s}/{all}");

    let status = common::stop_member(child);
    assert!(status.success(), "tidemark run exited with {status}");

    // The counters equal what the raw log committed.
    let panes = common::committed_values(&broker.addr, "panes").len() as f64;
    let dead = common::committed_values(&broker.addr, "dead").len() as f64;
    assert!(panes > 0.0 && dead > 0.0);
    // By the last scrape the idle watermark had fired every window, so shutdown committed no
    // further pane.
    assert_eq!(
        sum(&m, "tidemark_panes_total"),
        panes,
        "panes counted vs committed"
    );
    // Per timing and per reason, the counters equal what committed.
    let committed_panes = common::committed_values(&broker.addr, "panes");
    for timing in ["EARLY", "ON_TIME", "LATE"] {
        let want = committed_panes
            .iter()
            .filter(|p| p.contains(&format!("\"timing\":\"{timing}\"")))
            .count() as f64;
        let key = format!("tidemark_panes_total{{timing=\"{timing}\"}}");
        assert_eq!(m.get(&key).copied().unwrap_or(0.0), want, "{key}");
    }
    assert!(m[r#"tidemark_panes_total{timing="ON_TIME"}"#] > 0.0);
    let committed_dead: Vec<String> = tidemark::kafka::raw_log::read_topic(&broker.addr, "dead")
        .unwrap()
        .committed
        .iter()
        .map(|r| {
            tidemark::format::dead_letter::DeadLetter::from_record(r)
                .expect("a dead letter")
                .reason
        })
        .collect();
    assert_eq!(
        sum(&m, "tidemark_dead_letters_total"),
        dead,
        "dead letters counted vs committed"
    );
    for reason in ["malformed", "late"] {
        let want = committed_dead.iter().filter(|d| *d == reason).count() as f64;
        let key = format!("tidemark_dead_letters_total{{reason=\"{reason}\"}}");
        assert!(want > 0.0, "the scenario has {reason} records");
        assert_eq!(m[&key], want, "{key}");
    }
    let out_dead: f64 = series(&m, "tidemark_records_out_total")
        .iter()
        .filter(|(s, _)| s.contains(r#"topic="dead""#))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(out_dead, dead);
    let out_panes: f64 = series(&m, "tidemark_records_out_total")
        .iter()
        .filter(|(s, _)| s.contains(r#"topic="panes""#))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(out_panes, panes, "pane records delivered vs committed");
}
