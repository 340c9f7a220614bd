//! `tidemark run` end to end against a real broker: the committed output (judged from the raw log
//! by `audit`, never by the broker's read_committed filtering) equals `tidemark simulate` run on each
//! partition's records, nothing is duplicated, and bad records reach the dead-letter topic.

use crate::common;

use std::time::Duration;
use tidemark::kafka::raw_log::read_topic;

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
repartition = false
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

    // Events about an hour ago (the future-skew check compares with the wall clock), 30 keys, 1 s
    // windows, a little disorder; one late and one malformed record per partition; a last record
    // per partition far ahead so that every window before it fires. Expected: simulate on each
    // partition's records.
    let scenario = common::Scenario::generate_for(
        &std::fs::read_to_string(&cfg).unwrap(),
        PARTITIONS,
        3_000,
        42,
    );
    assert!(
        scenario.expected.len() > 100,
        "the scenario should produce many panes"
    );
    scenario
        .produce(&broker.addr, 10_000, Duration::ZERO)
        .join()
        .unwrap();

    let child = common::start_member(&cfg);
    common::wait_for(&broker.addr, "panes", scenario.expected.len(), 90);
    let status = common::stop_member(child);
    assert!(status.success(), "tidemark run exited with {status}");
    common::assert_exactly_once(&broker.addr, &scenario);

    let dead = read_topic(&broker.addr, "dead").unwrap();
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

    // `tidemark audit` checks a dead-letter topic per source record, and finds no duplicate.
    let audit = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args([
            "audit",
            "--bootstrap-servers",
            &broker.addr,
            "--topic",
            "dead",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&audit.stderr);
    assert!(audit.status.success(), "audit of dead letters: {said}");
    let expected = format!(
        "dead letters: {} (late {}, malformed {}); 0 source records dead-lettered more than once",
        2 * PARTITIONS,
        PARTITIONS,
        PARTITIONS
    );
    assert!(said.contains(&expected), "{said}");

    // `tidemark tail --once` shows every committed pane once, under one header.
    let tail = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args([
            "tail",
            "--once",
            "--bootstrap-servers",
            &broker.addr,
            "--topic",
            "panes",
        ])
        .env("TZ", "UTC")
        .output()
        .unwrap();
    assert!(
        tail.status.success(),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    let table = String::from_utf8(tail.stdout).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), scenario.expected.len() + 1, "{table}");
    assert!(
        rows[0].starts_with("key") && rows[0].ends_with("n        total"),
        "{}",
        rows[0]
    );
    assert!(rows[1..].iter().all(|r| r.contains("ON_TIME")), "{table}");
}
