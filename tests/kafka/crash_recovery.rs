//! Exactly-once under crashes: `tidemark run` is killed with SIGKILL at random moments (six times)
//! while input is still being produced, and restarted alternately on the same state directory and
//! on a fresh one (which forces a restore from the changelog). At the end every expected pane —
//! computed by `tidemark simulate` on each partition's records — is committed exactly once with the
//! expected value, and so is every dead letter. Judged from the raw log by `audit`. It runs with
//! sliding windows (slices and derived cursors in the changelog), with sessions (stored by start,
//! merging, with retractions), with late firings every 10 late elements on input heavy with late
//! data (pending counts in the changelog, final panes at expiry), with a global window per key
//! firing every 25 elements and expiring idle keys, and with sessions carrying every kind of
//! aggregate state (exact sets and counts, both sketches, moments, first and last, duration)
//! through kills, restores and session merges.

use crate::common;

use std::time::{Duration, Instant};

const PARTITIONS: i32 = 3;

const SLIDING: &str = "type = \"sliding\"\nsize = \"2s\"\nslide = \"500ms\"";
const SESSIONS: &str = "type = \"session\"\ngap = \"150ms\"";

/// A pipeline's shape: the window section, the watermark's out-of-orderness, allowed lateness,
/// the trigger section and the aggregations.
#[derive(Clone, Copy)]
struct Shape {
    window: &'static str,
    out_of_orderness: &'static str,
    lateness: &'static str,
    trigger: &'static str,
    aggregations: &'static str,
}

/// A count and a sum.
const COUNT_AND_SUM: &str = r#"[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "total"
op = "sum"
field = "amount""#;

/// Every operation whose state is not a count and a sum, over the records' `amount` (integers
/// 0..49), `user` and `ts`.
const EVERY_STATE: &str = r#"[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "distinct_amounts"
op = "count_distinct"
field = "amount"
[[aggregations]]
name = "approx_distinct"
op = "approx_count_distinct"
field = "amount"
precision = 10
[[aggregations]]
name = "p90"
op = "approx_percentile"
field = "amount"
q = 0.9
[[aggregations]]
name = "first_amount"
op = "first"
field = "amount"
[[aggregations]]
name = "last_amount"
op = "last"
field = "amount"
[[aggregations]]
name = "spread"
op = "stddev_samp"
field = "amount"
[[aggregations]]
name = "variance"
op = "var_pop"
field = "amount"
[[aggregations]]
name = "top"
op = "top_k"
field = "amount"
k = 2
[[aggregations]]
name = "mean_amount"
op = "mean"
field = "amount"
[[aggregations]]
name = "lowest"
op = "min"
field = "amount"
[[aggregations]]
name = "span"
op = "duration""#;

const fn windowed(window: &'static str) -> Shape {
    Shape {
        window,
        out_of_orderness: "300ms",
        lateness: "1s",
        trigger: "",
        aggregations: COUNT_AND_SUM,
    }
}

/// Tumbling 1 s windows, no out-of-orderness allowance and 5 s of lateness, a LATE pane every 10
/// late elements; the input (below) has a quarter of its events up to 3 s late.
const LATE_COUNT: Shape = Shape {
    window: "type = \"tumbling\"\nsize = \"1s\"",
    out_of_orderness: "0ms",
    lateness: "5s",
    trigger: "late_count = 10\naccumulation = \"discarding\"",
    aggregations: COUNT_AND_SUM,
};

/// A global window per key: an EARLY pane every 25 elements, and a final pane 2 s of event time
/// after a key's latest element.
const GLOBAL: Shape = Shape {
    window: "type = \"global\"\nidle_expiry = \"2s\"",
    out_of_orderness: "300ms",
    lateness: "0s",
    trigger: "early_count = 25",
    aggregations: COUNT_AND_SUM,
};

fn config(broker: &str, state: &std::path::Path, shape: Shape) -> String {
    let Shape {
        window,
        out_of_orderness,
        lateness,
        trigger,
        aggregations,
    } = shape;
    format!(
        r#"
name = "crash"
allowed_lateness = "{lateness}"
[input]
key = "user"
timestamp = "ts"
[window]
{window}
[watermark]
max_out_of_orderness = "{out_of_orderness}"
[trigger]
{trigger}
{aggregations}
[kafka]
bootstrap_servers = "{broker}"
application_id = "crash"
instance_id = "m1"
repartition = false
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
    kill_9_run(windowed(SLIDING), common::Shape::default());
}

#[test]
fn kill_9_never_loses_or_duplicates_sessions() {
    kill_9_run(windowed(SESSIONS), common::Shape::default());
}

#[test]
fn kill_9_never_loses_or_duplicates_late_count() {
    // Three keys, one per partition, and one event in four up to 3 s late: a key's 1 s window
    // gets about 16 late elements, so count firings and final panes at expiry both happen.
    let late_heavy = common::Shape {
        users: 3,
        jitter_one_in: 4,
        max_jitter_ms: 3_000,
    };
    kill_9_run(LATE_COUNT, late_heavy);
}

#[test]
fn kill_9_never_loses_or_duplicates_sessions_with_every_kind_of_state() {
    let shape = Shape {
        aggregations: EVERY_STATE,
        ..windowed(SESSIONS)
    };
    kill_9_run(shape, common::Shape::default());
}

#[test]
fn kill_9_never_loses_or_duplicates_global_window() {
    kill_9_run(GLOBAL, common::Shape::default());
}

fn kill_9_run(window: Shape, shape: common::Shape) {
    let broker = common::Broker::start();
    broker.create_topic("events", PARTITIONS);
    let dir = tempfile::tempdir().unwrap();

    let cfg_path = |name: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, config(&broker.addr, &dir.path().join(name), window)).unwrap();
        path
    };
    let same = cfg_path("state-a");
    // The input: 6,000 records (with late and malformed ones) produced over about 30 s while the
    // processor is being killed; the expected panes come from simulate on each partition.
    let scenario = common::Scenario::generate_shaped(
        &std::fs::read_to_string(&same).unwrap(),
        PARTITIONS,
        6_000,
        7,
        shape,
    );
    let timings = |t: &str| scenario.expected.iter().filter(|p| p.contains(t)).count();
    eprintln!(
        "expected panes: {} (EARLY {}, ON_TIME {}, LATE {}), dead letters {}",
        scenario.expected.len(),
        timings("\"EARLY\""),
        timings("\"ON_TIME\""),
        timings("\"LATE\""),
        scenario.expected_dead
    );
    // The input must exercise what the pipeline is here for.
    if window.trigger.contains("late_count") {
        let late = |p: &&String| p.contains("\"LATE\"");
        assert!(
            scenario
                .expected
                .iter()
                .filter(late)
                .any(|p| p.contains("\"count\":10,")),
            "no LATE pane fired by the count"
        );
        assert!(
            scenario
                .expected
                .iter()
                .filter(late)
                .any(|p| !p.contains("\"count\":10,")),
            "no final LATE pane at expiry"
        );
    }
    if window.aggregations == EVERY_STATE {
        let names = [
            "distinct_amounts",
            "approx_distinct",
            "p90",
            "first_amount",
            "last_amount",
            "spread",
            "variance",
            "top",
            "span",
        ];
        assert!(
            scenario
                .expected
                .iter()
                .any(|p| names.iter().all(|n| p.contains(&format!("\"{n}\":")))
                    && p.contains("\"top\":[{")),
            "no pane carries every aggregation: {:?}",
            scenario.expected.first()
        );
    }
    if window.window.contains("global") {
        assert!(timings("\"EARLY\"") > 0 && timings("\"ON_TIME\"") > 0);
    }
    let producer_thread = scenario.produce(&broker.addr, 50, Duration::from_millis(250));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;

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
    let child = common::start_member(&cfg_path("final"));
    common::wait_for(&broker.addr, "panes", scenario.expected.len(), 120);
    let status = common::stop_member(child);
    assert!(status.success(), "final member exited with {status}");
    let log = tidemark::kafka::raw_log::read_topic(&broker.addr, "panes").unwrap();
    eprintln!(
        "aborted pane records in the log: {}; served to read_committed by this broker: {}",
        log.aborted, log.aborted_served_to_read_committed
    );
    common::assert_exactly_once(&broker.addr, &scenario);
}
