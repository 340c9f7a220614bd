//! `tidemark sink postgres` (and its other name, `sink-postgres`) against a real broker and a
//! real PostgreSQL: the table equals the final panes `simulate` computes (one row per dedup id
//! with its last pane, retracted rows absent) after a clean run, after SIGKILLs of the sink under
//! live load alternating with SIGKILLs of the `run` member and a PostgreSQL restart mid-run,
//! after SIGKILLs of the sink alone on a broker that keeps killed members, and after a replay
//! (the higher epoch wins). A table with other columns is refused at start, naming the
//! difference.

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 3;

/// (key, window_start, window_end, pane_index, epoch, timing, count, n, total) per dedup id.
type Table = BTreeMap<
    String,
    (
        String,
        i64,
        i64,
        i64,
        i64,
        String,
        i64,
        Option<i64>,
        Option<f64>,
    ),
>;

/// The table the sink must converge to: per dedup id the pane with the highest
/// (epoch, pane_index), without the retracted ones.
fn expected_table(pane_lines: &[String], epoch: i64) -> Table {
    let mut last: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for l in pane_lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let id = v["dedup_id"].as_str().unwrap().to_string();
        let idx = v["pane_index"].as_i64().unwrap();
        if last
            .get(&id)
            .is_none_or(|old| old["pane_index"].as_i64().unwrap() < idx)
        {
            last.insert(id, v);
        }
    }
    last.into_iter()
        .filter(|(_, v)| v["timing"] != "RETRACT")
        .map(|(id, v)| {
            (
                id,
                (
                    v["key"].as_str().unwrap().to_string(),
                    v["window_start"].as_i64().unwrap(),
                    v["window_end"].as_i64().unwrap(),
                    v["pane_index"].as_i64().unwrap(),
                    epoch,
                    v["timing"].as_str().unwrap().to_string(),
                    v["count"].as_i64().unwrap(),
                    v["n"].as_i64(),
                    v["total"].as_f64(),
                ),
            )
        })
        .collect()
}

fn table(pg: &Postgres) -> Table {
    let mut c = pg.client();
    let rows = match c.query(
        "SELECT dedup_id, key, (extract(epoch from window_start) * 1000)::bigint, \
         (extract(epoch from window_end) * 1000)::bigint, pane_index, epoch, timing, count, n, total \
         FROM panes_pg",
        &[],
    ) {
        Ok(r) => r,
        Err(_) => return Table::new(), // not created yet
    };
    rows.iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                (
                    r.get::<_, String>(1),
                    r.get::<_, i64>(2),
                    r.get::<_, i64>(3),
                    r.get::<_, i32>(4) as i64,
                    r.get::<_, i64>(5),
                    r.get::<_, String>(6),
                    r.get::<_, i64>(7),
                    r.get::<_, Option<i64>>(8),
                    r.get::<_, Option<f64>>(9),
                ),
            )
        })
        .collect()
}

fn config(dir: &Path, broker: &str, pg: &Postgres) -> std::path::PathBuf {
    let text = format!(
        "{}\n[sink.postgres]\nurl = \"{}\"\ntable = \"panes_pg\"\ndead_letter_table = \"dead_pg\"\ncommit_interval = \"200ms\"\nmax_batch_records = 500\n",
        dynamic(pipeline(broker, &dir.join("state"), Some("m1"), "")),
        pg.url()
    );
    let p = dir.join("pipeline.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn start_sink(cfg: &Path) -> Child {
    start_tidemark("sink postgres", cfg)
}

/// A pause of `least_ms` plus up to `spread_ms` more, drawn from the xorshift state `x`.
fn pause(x: &mut u64, least_ms: u64, spread_ms: u64) -> Duration {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    Duration::from_millis(least_ms + *x % spread_ms)
}

fn kill9(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits until the table equals `want` (or fails after `secs`, showing the difference).
fn wait_for_table(pg: &Postgres, want: &Table, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let got = table(pg);
        if got == *want {
            return;
        }
        if Instant::now() > deadline {
            let missing: Vec<_> = want
                .keys()
                .filter(|k| !got.contains_key(*k))
                .take(5)
                .collect();
            let extra: Vec<_> = got
                .keys()
                .filter(|k| !want.contains_key(*k))
                .take(5)
                .collect();
            let differ: Vec<_> = want
                .iter()
                .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
                .take(5)
                .map(|(k, v)| (k, v, &got[k]))
                .collect();
            panic!(
                "table: {} rows, want {}; missing {missing:?}; extra {extra:?}; differ {differ:?}",
                got.len(),
                want.len()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn dead_rows(pg: &Postgres) -> i64 {
    pg.client()
        .query_one("SELECT count(*) FROM dead_pg", &[])
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0)
}

/// A dead letter as stored: (source partition, source offset, epoch, reason, original value).
type DeadRow = (i32, i64, i64, String, Option<Vec<u8>>);

/// The dead-letter table's rows, sorted.
fn dead_table(pg: &Postgres) -> Vec<DeadRow> {
    let mut rows: Vec<DeadRow> = pg
        .client()
        .query(
            "SELECT source_partition, source_offset, epoch, reason, value FROM dead_pg \
             WHERE source_topic = 'events'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    rows.sort();
    rows
}

/// The dead letters the scenario must leave in the table for `epochs`, with the original bytes,
/// from the independent reference.
fn expected_dead_rows(s: &Scenario, epochs: &[i64]) -> Vec<DeadRow> {
    let reference = s.reference();
    let records = s.with_offsets();
    let value = |p: i32, o: i64| {
        records
            .iter()
            .find(|r| r.0 == p && r.1 == o)
            .map(|r| r.2.as_bytes().to_vec())
    };
    let mut rows: Vec<DeadRow> = epochs
        .iter()
        .flat_map(|&e| {
            let late = reference.late.iter().map(move |&(p, o)| (p, o, e, "late"));
            let bad = reference
                .malformed
                .iter()
                .map(move |&(p, o)| (p, o, e, "malformed"));
            late.chain(bad)
        })
        .map(|(p, o, e, reason)| (p, o, e, reason.to_string(), value(p, o)))
        .collect();
    rows.sort();
    rows
}

/// Checks the table's rows against the independent reference: per window the count and the sum
/// of the last pane (no engine code on this side).
fn assert_table_matches_reference(pg: &Postgres, s: &Scenario) {
    let reference = s.reference();
    let got: BTreeMap<(String, i64), (i64, u64, f64)> = table(pg)
        .into_values()
        .map(|(key, start, end, _, _, _, count, _, total)| {
            ((key, start), (end, count as u64, total.unwrap_or(0.0)))
        })
        .collect();
    let problems = common::reference::compare(&got, &reference, 1_000);
    assert!(problems.is_empty(), "against the reference: {problems:?}");
}

#[test]
fn the_table_equals_simulate_after_a_clean_run_and_after_a_replay() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &broker.addr, &pg);
    let s = Scenario::generate(PARTITIONS, 3_000, 17);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let member = start_member(&cfg);
    let mut sink = start_sink(&cfg);
    wait_for_table(&pg, &expected_table(&s.expected, 0), 120);
    let deadline = Instant::now() + Duration::from_secs(30);
    while dead_rows(&pg) < s.expected_dead as i64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(dead_rows(&pg), s.expected_dead as i64, "dead letters");
    assert_eq!(
        dead_table(&pg),
        expected_dead_rows(&s, &[0]),
        "dead letters' content"
    );
    assert_table_matches_reference(&pg, &s);
    assert!(stop_member(member).success());

    // A replay: epoch 1 replaces every row, although its pane indexes start at 0 again.
    let out = run_tidemark("replay", &cfg, &["--to-earliest"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member = start_member(&cfg);
    wait_for_table(&pg, &expected_table(&s.expected, 1), 120);
    assert!(stop_member(member).success());
    // Dead letters of epoch 1 are kept beside those of epoch 0.
    let deadline = Instant::now() + Duration::from_secs(30);
    while dead_rows(&pg) < 2 * s.expected_dead as i64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(dead_rows(&pg), 2 * s.expected_dead as i64);
    assert_eq!(
        dead_table(&pg),
        expected_dead_rows(&s, &[0, 1]),
        "dead letters' content"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &sink.id().to_string()])
        .status();
    assert!(sink.wait().unwrap().success());
}

#[test]
fn kill_9s_of_sink_and_member_and_a_database_restart_leave_the_table_exact() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &broker.addr, &pg);
    let s = Scenario::generate(PARTITIONS, 4_000, 29);
    // About 16 s of live input.
    let producer = s.produce(&broker.addr, 50, Duration::from_millis(200));
    let mut member = start_member(&cfg);
    let mut sink = start_sink(&cfg);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    // 20 SIGKILLs, 10 of the sink and 10 of the member, alternating, with the database
    // restarted half-way.
    for i in 0..20 {
        std::thread::sleep(pause(&mut x, 500, 700));
        if i % 2 == 0 {
            kill9(&mut sink);
            sink = start_sink(&cfg);
        } else {
            kill9(&mut member);
            member = start_member(&cfg);
        }
        if i == 10 {
            pg.restart();
        }
    }
    producer.join().unwrap();
    wait_for_table(&pg, &expected_table(&s.expected, 0), 180);
    let deadline = Instant::now() + Duration::from_secs(30);
    while dead_rows(&pg) < s.expected_dead as i64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(dead_rows(&pg), s.expected_dead as i64, "dead letters");
    assert_eq!(
        dead_table(&pg),
        expected_dead_rows(&s, &[0]),
        "dead letters' content"
    );
    assert!(stop_member(member).success());
    kill9(&mut sink);
}

/// A pipeline's group that moved to membership from the log (its broker's group coordinator
/// stopped assigning partitions) takes its sinks along: two sink members in the broker's group
/// read the move record from the pipeline's claims topic, leave their group and share the
/// partitions through a roster, and the table still ends exact. The sinks start in the broker's
/// group even where the suite runs with membership from the log.
#[test]
fn sinks_follow_their_pipeline_to_membership_from_the_log() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &broker.addr, &pg);
    let s = Scenario::generate(PARTITIONS, 3_000, 23);
    // Half the input before the move, half after.
    let producing = s.produce(&broker.addr, 250, Duration::from_millis(700));
    let member = start_member(&cfg);
    let logs = [dir.path().join("sink1.log"), dir.path().join("sink2.log")];
    let mut sinks: Vec<Child> = logs
        .iter()
        .map(|log| start_logged_in_group("sink-postgres", &cfg, log))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while table(&pg).is_empty() {
        assert!(Instant::now() < deadline, "no rows within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .create()
        .unwrap();
    producer
        .send(
            BaseRecord::to("scn-claims")
                .partition(0)
                .key(tidemark::kafka::roster::MOVE_KEY)
                .payload(tidemark::kafka::roster::MOVE_VALUE),
        )
        .unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();
    for log in &logs {
        wait_for_log(log, "the sink leaves its consumer group", 1, 60);
    }
    producing.join().unwrap();
    // The roster shares the partitions: each sink has some.
    for log in &logs {
        wait_for_log(
            log,
            "membership from the log: this member's partitions",
            1,
            60,
        );
    }
    wait_for_table(&pg, &expected_table(&s.expected, 0), 120);
    assert_table_matches_reference(&pg, &s);
    assert!(stop_member(member).success());
    for sink in &mut sinks {
        signal(sink.id(), "TERM");
        assert!(sink.wait().unwrap().success());
    }
}

/// A sink's own consumer group that stops giving its partitions an owner while its pipeline's
/// group is healthy: ten SIGKILLs of the sink alone, under live input, each member started in the
/// broker's group. On a broker that keeps a killed member listed with its partitions the sink's
/// watchdog finds its partitions stalled from the stored offsets and the raw log, and moves the
/// sink's group to membership from the log by itself; on one that evicts it, the group heals.
/// Either way the table ends exact.
#[test]
fn a_sink_whose_own_group_wedges_makes_progress() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &broker.addr, &pg);
    let s = Scenario::generate(PARTITIONS, 4_000, 31);
    // About 16 s of live input.
    let producer = s.produce(&broker.addr, 50, Duration::from_millis(200));
    let member = start_logged_in_group("run", &cfg, &dir.path().join("member.log"));
    let log = |i: usize| dir.path().join(format!("sink{i}.log"));
    let mut sink = start_logged_in_group("sink postgres", &cfg, &log(0));
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 1..=10 {
        std::thread::sleep(pause(&mut x, 800, 1_000));
        kill9(&mut sink);
        sink = start_logged_in_group("sink postgres", &cfg, &log(i));
    }
    producer.join().unwrap();
    let waited = std::panic::catch_unwind(|| {
        wait_for_table(&pg, &expected_table(&s.expected, 0), 240);
    });
    if waited.is_err() {
        eprintln!("the last sink's log:\n{}", log_summary(&log(10), 40));
    }
    assert!(waited.is_ok(), "the table did not converge");
    assert_table_matches_reference(&pg, &s);
    let logs: String = (0..=10)
        .map(|i| std::fs::read_to_string(log(i)).unwrap_or_default())
        .collect();
    let count = |needle: &str| logs.lines().filter(|l| l.contains(needle)).count();
    eprintln!(
        "sink members: {} rejoined, {} moved the sink's group to membership from the log, {} followed",
        count("leaving and joining it again as a new member"),
        count("the sink's group moves to membership from the log"),
        count("another member moved the sink's group")
    );
    let member_log = std::fs::read_to_string(dir.path().join("member.log")).unwrap();
    assert!(
        !member_log.contains("moves to membership from the log"),
        "the pipeline's group moved: this test is about the sink's own group"
    );
    assert!(stop_member(member).success());
    signal(sink.id(), "TERM");
    assert!(sink.wait().unwrap().success());
}

#[test]
fn a_table_with_other_columns_is_refused_naming_the_difference() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let pg = Postgres::start();
    pg.client()
        .batch_execute("CREATE TABLE panes_pg (dedup_id text PRIMARY KEY, key integer, extra text)")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &broker.addr, &pg);
    let out = run_tidemark("sink-postgres", &cfg, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for said in [
        "column key is integer, expected text",
        "column window_start",
        "column extra is not one the sink writes",
    ] {
        assert!(err.contains(said), "{said:?} missing from: {err}");
    }
}

/// A key of several parts gets a column per part, named after each part's alias (or text), and
/// a keyless pipeline no key column; the upsert keeps the highest pane as it does for one key.
#[test]
fn a_key_of_several_parts_gets_a_column_per_part() {
    use tidemark::format::pane::PaneRecord;
    use tidemark::sink::postgres::PostgresSpec;
    use tidemark::sink::postgres::{ensure_tables, write_pane_batch};
    use tidemark::sink::{Batch, Offsets};
    use tidemark::windowing::aggregate::AggSpec;
    use tidemark::windowing::trigger::Timing;
    let pg = Postgres::start();
    let mut db = pg.client();
    let aggs = [AggSpec::new("clicks", "count", None)];
    let pane = |key: &str, dedup: &str, index: u32, count: u64| PaneRecord {
        key: key.into(),
        window_start: 0,
        window_end: 60_000,
        timing: Timing::OnTime,
        pane_index: index,
        dedup_id: dedup.into(),
        epoch: 0,
        count,
        aggregates: vec![("clicks".into(), serde_json::Value::from(count))],
    };
    for (table, key_columns, key, want) in [
        (
            "by_page_country",
            vec!["page".to_string(), "country".to_string()],
            r#"["/cart","de"]"#,
            "/cart|de",
        ),
        ("by_nothing", vec![], "", ""),
    ] {
        let spec = PostgresSpec {
            url: pg.url(),
            table: table.into(),
            dead_letter_table: None,
            create_tables: true,
            commit_interval: 1_000,
            max_batch_records: 100,
            key_columns: key_columns.clone(),
        };
        ensure_tables(&mut db, &spec, &aggs).unwrap();
        let batch = Batch::new(
            vec![pane(key, "d1", 0, 3), pane(key, "d1", 1, 5)],
            vec![],
            Offsets::from([(("panes".to_string(), 0), 2)]),
        );
        write_pane_batch(&mut db, &spec, &aggs, &batch, table).unwrap();
        let cols = if key_columns.is_empty() {
            "''".to_string()
        } else {
            key_columns
                .iter()
                .map(|c| format!("\"{c}\""))
                .collect::<Vec<_>>()
                .join(" || '|' || ")
        };
        let row = db
            .query_one(&format!("SELECT {cols}, clicks FROM {table}"), &[])
            .unwrap();
        assert_eq!(row.get::<_, String>(0), want, "{table}");
        assert_eq!(row.get::<_, i64>(1), 5, "{table}: the highest pane wins");
    }
}

/// A batch the database refuses (here a CHECK constraint no pane meets) is not retried forever:
/// the sink stops with exit status 1 and the server's reason, and commits nothing.
#[test]
fn a_batch_the_database_refuses_stops_the_sink_with_the_reason() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &broker.addr, &pg);
    // The sink's first start creates its tables; the constraint comes before any pane.
    let log = dir.path().join("sink.log");
    let mut sink = start_logged("sink postgres", &cfg, &log);
    let deadline = Instant::now() + Duration::from_secs(60);
    while pg
        .client()
        .query_one("SELECT to_regclass('panes_pg') IS NOT NULL", &[])
        .map(|r| !r.get::<_, bool>(0))
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "the sink made no table");
        std::thread::sleep(Duration::from_millis(200));
    }
    pg.client()
        .batch_execute(
            "ALTER TABLE panes_pg ADD CONSTRAINT no_panes CHECK (dedup_id = '') NOT VALID",
        )
        .unwrap();
    let s = Scenario::generate(PARTITIONS, 500, 29);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let member = start_member(&cfg);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = sink.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the sink kept retrying a refused batch"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(stop_member(member).success());
    let err = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("the destination refused a batch"), "{err}");
    assert!(
        err.contains("23514"),
        "the server's SQLSTATE is named: {err}"
    );
    let rows: i64 = pg
        .client()
        .query_one("SELECT count(*) FROM panes_pg", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
    let offsets: i64 = pg
        .client()
        .query_one("SELECT count(*) FROM tidemark_sink_offsets", &[])
        .map(|r| r.get(0))
        .unwrap_or(0);
    assert_eq!(offsets, 0, "no offsets stored for a refused batch");
}
