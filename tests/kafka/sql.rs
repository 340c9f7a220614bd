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
    member_of(
        "examples/sql/clicks_per_minute.sql",
        broker,
        state,
        log,
        direct,
    )
}

/// `tidemark run --sql` on the example file `sql` (a path under the project).
fn member_of(sql: &str, broker: &str, state: &Path, log: &Path, direct: bool) -> Child {
    member_batching(sql, broker, state, log, direct, 50)
}

/// [`member_of`] committing at most `max_batch` records a transaction.
fn member_batching(
    sql: &str,
    broker: &str,
    state: &Path,
    log: &Path,
    direct: bool,
    max_batch: u32,
) -> Child {
    let log = std::fs::File::create(log).unwrap();
    common::adopt(
        Command::new(common::tidemark_bin())
            .args(["run", "--sql"])
            .env(
                "TIDEMARK__KAFKA__REPARTITION",
                if direct { "false" } else { "true" },
            )
            .arg(root().join(sql))
            .env("TIDEMARK__KAFKA__BOOTSTRAP_SERVERS", broker)
            .env("TIDEMARK__KAFKA__STATE_DIR", state)
            .env("TIDEMARK__KAFKA__INSTANCE_ID", "m1")
            .env("TIDEMARK__KAFKA__COMMIT_INTERVAL", "100ms")
            .env("TIDEMARK__KAFKA__MAX_BATCH_RECORDS", max_batch.to_string())
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

/// Waits until `done` holds while member `m` (logging to `log`) runs; fails with the log when
/// the member stops or `within` passes, saying how far it got (`progress`).
fn wait_while_running(
    m: &mut Child,
    log: &Path,
    within: Duration,
    progress: impl Fn() -> String,
    mut done: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + within;
    while !done() {
        let log = || std::fs::read_to_string(log).unwrap_or_default();
        assert!(
            m.try_wait().unwrap().is_none(),
            "the member stopped:\n{}",
            log()
        );
        assert!(
            Instant::now() < deadline,
            "{} within {within:?}:\n{}",
            progress(),
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let want = produce_clicks(&broker, direct);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("m1.log");
    let mut m = member(&broker.addr, &dir.path().join("state"), &log, direct);
    // Killed as soon as some panes are committed, then started again.
    wait_while_running(
        &mut m,
        &log,
        Duration::from_secs(60),
        || "no pane".into(),
        || !committed(&broker.addr).0.is_empty(),
    );
    m.kill().unwrap();
    m.wait().unwrap();
    let mut m = member(&broker.addr, &dir.path().join("state"), &log, direct);
    wait_while_running(
        &mut m,
        &log,
        Duration::from_secs(90),
        || {
            let got = committed(&broker.addr).0;
            format!("{} of {} windows", got.len(), want.len())
        },
        || {
            let (got, _) = committed(&broker.addr);
            want.keys().all(|k| got.contains_key(k))
        },
    );
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

/// Writes the example's events to a new one-partition topic `clicks` (keyed by user when
/// `direct`); Flink's rows for the windows the last watermark (the latest event time less 5 s)
/// passes, by (user, window start).
fn produce_clicks(
    broker: &common::Broker,
    direct: bool,
) -> BTreeMap<(String, i64), (f64, f64, f64)> {
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
    let watermark = last_ts - 5_000;
    let want: BTreeMap<_, _> = flink_rows()
        .into_iter()
        .filter(|((_, start), _)| start + 60_000 <= watermark)
        .collect();
    assert!(want.len() > 20, "{} windows to judge", want.len());
    want
}

/// The PostgreSQL table's rows of replay epoch `epoch` by (user, window start): (clicks,
/// revenue, max price).
fn pg_rows(pg: &common::Postgres, epoch: i64) -> BTreeMap<(String, i64), (f64, f64, f64)> {
    let Ok(rows) = pg.client().query(
        "SELECT key, (extract(epoch from window_start) * 1000)::bigint, clicks::float8, \
         revenue, max_price FROM clicks_per_minute WHERE epoch = $1",
        &[&epoch],
    ) else {
        return BTreeMap::new(); // not created yet
    };
    rows.iter()
        .map(|r| {
            (
                (r.get::<_, String>(0), r.get::<_, i64>(1)),
                (r.get(2), r.get(3), r.get(4)),
            )
        })
        .collect()
}

/// `examples/sql/sinks/clicks_to_postgres.sql`: one SQL file for `run --sql`, `sink postgres
/// --sql` and `replay --sql`, its table a Flink JDBC table; the PostgreSQL table ends with Flink's
/// rows, and again after a replay from the earliest offsets, every row of the new epoch.
#[test]
fn a_sql_file_with_a_postgresql_table_fills_it_with_flinks_rows() {
    let broker = common::Broker::start();
    let want = produce_clicks(&broker, true);
    let pg = common::Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let sql = "examples/sql/sinks/clicks_to_postgres.sql";
    let log = dir.path().join("m1.log");
    let m = member_of(sql, &broker.addr, &dir.path().join("state"), &log, true);
    let sink_log = dir.path().join("sink.log");
    let sink = common::adopt(
        Command::new(common::tidemark_bin())
            .args(["sink", "postgres", "--sql"])
            .arg(root().join(sql))
            .env("TIDEMARK__KAFKA__BOOTSTRAP_SERVERS", &broker.addr)
            .env("TIDEMARK__SINK__POSTGRES__URL", pg.url())
            .env("TIDEMARK__SINK__POSTGRES__COMMIT_INTERVAL", "200ms")
            .env("TIDEMARK__KAFKA__PROPERTIES__SESSION.TIMEOUT.MS", "'6000'")
            .env("TIDEMARK_LOG", "info")
            .stderr(std::fs::File::create(&sink_log).unwrap())
            .spawn()
            .unwrap(),
    );
    let judge = |epoch: i64| {
        let deadline = Instant::now() + Duration::from_secs(120);
        let got = loop {
            let got = pg_rows(&pg, epoch);
            if want.keys().all(|k| got.contains_key(k)) {
                break got;
            }
            assert!(
                Instant::now() < deadline,
                "epoch {epoch}: not every window in the table within 120 s: {} of {}\nmember:\n{}\nsink:\n{}",
                got.len(),
                want.len(),
                std::fs::read_to_string(&log).unwrap_or_default(),
                std::fs::read_to_string(&sink_log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(300));
        };
        let wrong: Vec<String> = want
            .iter()
            .filter(|(k, row)| got.get(*k) != Some(row))
            .map(|(k, row)| format!("{k:?}: Flink {row:?}, table {:?}", got.get(k)))
            .collect();
        assert!(wrong.is_empty(), "epoch {epoch}: {wrong:#?}");
        let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
        assert!(
            extra.is_empty(),
            "epoch {epoch}: rows Flink's final rows do not have: {extra:?}"
        );
    };
    judge(0);
    assert!(common::stop_member(m).success());
    // A replay from the earliest offsets, from the same SQL file: a new epoch replaces every row.
    let out = Command::new(common::tidemark_bin())
        .args(["replay", "--to-earliest", "--sql"])
        .arg(root().join(sql))
        // The member's topology: input keyed by the grouping key, no hop.
        .env("TIDEMARK__KAFKA__REPARTITION", "false")
        .env("TIDEMARK__KAFKA__BOOTSTRAP_SERVERS", &broker.addr)
        .env("TIDEMARK__KAFKA__STATE_DIR", dir.path().join("state"))
        .env("TIDEMARK__KAFKA__INSTANCE_ID", "m1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "replay --sql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = member_of(sql, &broker.addr, &dir.path().join("state"), &log, true);
    judge(1);
    assert!(common::stop_member(m).success());
    assert!(common::stop_member(sink).success());
    let old = pg_rows(&pg, 0);
    assert!(old.is_empty(), "rows of epoch 0 left: {}", old.len());
}

/// Nexmark q1 over the sample events as a pipeline of rows (no window, no state): `run --sql`
/// on three input partitions, killed with SIGKILL twice as soon as rows have committed, and
/// started again. Judged from the raw log: every bid's row is committed exactly once (one per
/// dedup id, the record's coordinates), the rows are Flink's rows for the query, the filtered
/// events (persons, auctions) give no row, and no transaction is left open.
#[test]
fn a_sql_query_without_a_window_writes_each_row_exactly_once() {
    let broker = common::Broker::start();
    broker.create_topic("nexmark", 3);
    let events = std::fs::read_to_string(root().join("examples/sql/nexmark/events.jsonl")).unwrap();
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .create()
        .unwrap();
    for (i, line) in events.lines().enumerate() {
        let record = BaseRecord::<[u8], str>::to("nexmark")
            .partition((i % 3) as i32)
            .payload(line);
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    // The example's query, written to a Kafka table.
    let query =
        std::fs::read_to_string(root().join("examples/sql/nexmark/q1_currency_conversion.sql"))
            .unwrap();
    let at = query.rfind("SELECT auction").unwrap();
    let sql = format!(
        "SET 'name' = 'bids-in-euros';\n{}CREATE TABLE euros WITH ('connector' = 'kafka', 'topic' = 'euros');\nINSERT INTO euros {}",
        &query[..at],
        &query[at..]
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q1.sql");
    std::fs::write(&file, sql).unwrap();
    let log = dir.path().join("m1.log");
    let rows = |broker: &str| -> (Vec<(String, String)>, usize) {
        let Ok(log) = read_topic(broker, "euros") else {
            return (Vec::new(), 0);
        };
        let rows = log
            .committed
            .iter()
            .map(|r| {
                let id = r
                    .headers
                    .iter()
                    .find(|(k, _)| k == "tidemark.dedup_id")
                    .and_then(|(_, v)| v.as_deref())
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                let row = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
                (id, row.into_owned())
            })
            .collect();
        (rows, log.open)
    };
    let want_rows = std::fs::read_to_string(
        root().join("tests/golden/sql/nexmark/q1_currency_conversion.rows"),
    )
    .unwrap();
    let want = want_rows.lines().count();
    // Ten records a transaction: about 180 commits, so that kills land among them.
    let start = || {
        member_batching(
            file.to_str().unwrap(),
            &broker.addr,
            &dir.path().join("state"),
            &log,
            true,
            10,
        )
    };
    let mut m = start();
    let mut kills = 0;
    for round in 0..2 {
        // Killed once some more rows have committed, and not all; a round that finds every row
        // committed has nothing left to kill.
        let floor = rows(&broker.addr).0.len();
        wait_while_running(
            &mut m,
            &log,
            Duration::from_secs(60),
            || format!("no new row (round {round})"),
            || {
                let n = rows(&broker.addr).0.len();
                n > floor || n >= want
            },
        );
        if rows(&broker.addr).0.len() >= want {
            break;
        }
        m.kill().unwrap();
        m.wait().unwrap();
        kills += 1;
        m = start();
    }
    assert!(kills > 0, "every row committed before the first kill");
    println!("rows: kills={kills}");
    wait_while_running(
        &mut m,
        &log,
        Duration::from_secs(90),
        || format!("{} rows of {want}", rows(&broker.addr).0.len()),
        || rows(&broker.addr).0.len() >= want,
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(common::stop_member(m).success());
    let (got, open) = rows(&broker.addr);
    assert_eq!(open, 0, "open transactions");
    let mut ids: Vec<&String> = got.iter().map(|(id, _)| id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), got.len(), "a row committed twice");
    let got_text: Vec<&str> = got.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(
        common::sorted_rows(&got_text.join("\n")),
        common::sorted_rows(&want_rows)
    );
}
