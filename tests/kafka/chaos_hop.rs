//! Chaos for the two-stage pipeline (the repartition hop): three members of one group read
//! null-keyed input on two topics (3 partitions each), grouped by a field, while random members
//! are killed with SIGKILL at random moments and restarted at once, alternately on their old
//! state directory and on an empty one. Each member runs both stages: it owns some input
//! partitions and some repartition partitions, and commits both stages' work in one transaction
//! per cycle.
//!
//! The judge reads everything from the raw log (transactions resolved from COMMIT/ABORT markers):
//! every pane is committed once with pane indexes without gaps; every window's last pane equals
//! a failure-free run's (`simulate` over the same input, and an independent fold); every
//! malformed record is dead-lettered once; no transaction is left open in any topic the members
//! write; every member exits cleanly on SIGTERM; and at least one kill hit a member holding
//! partitions. With `TIDEMARK_CHAOS_LATE=1` the input also holds late records, and the judge
//! takes what does not depend on the order in which the sources reach the second stage: every
//! record is in its window's last pane or dead-lettered (late), once, never both.
//!
//! A third run is the first's pipeline written as SQL (`tidemark run --sql`), judged the same way.
//!
//! A second run does the same with per-user session windows and every kind of aggregation
//! (`count_distinct`, `first`, `last`, `duration`, `top_k` and the sketches besides count and
//! sum): its final sessions must equal `simulate`'s and an independent fold's. Sessions cross the
//! hop record by record (partials do not apply to them); the tumbling run's records cross as
//! partial aggregates. The two runs take turns, never overlapping.
//!
//! `TIDEMARK_CHAOS_KILLS` (default 8, CI's short variant), `TIDEMARK_CHAOS_RECORDS` (default
//! 20,000), `TIDEMARK_CHAOS_SEED` and `TIDEMARK_CHAOS_STATIC=1` as for `tests/kafka/chaos_direct.rs`;
//! `scripts/chaos.sh` runs both. Each run prints one summary line starting with `chaos-hop:`.

use crate::common;

use common::chaos;
use common::hop::{self, HopScenario, Keys};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

const TOPICS: [(&str, i32); 2] = [("web", 3), ("app", 3)];
const MEMBERS: usize = 3;

/// The two runs of this file take turns: each is three members and a broker at full load.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The pipeline a run's members (and `simulate`) run: tumbling windows or sessions.
#[derive(Clone, Copy, PartialEq)]
enum Windows {
    Tumbling,
    Sessions,
    /// The tumbling pipeline written as SQL (`hop::sql_pipeline`), judged as the tumbling one.
    Sql,
}

fn text(windows: Windows, broker: &str, state: &Path, id: &str) -> String {
    match windows {
        Windows::Tumbling => hop::pipeline(broker, state, id, &["web", "app"], "", ""),
        Windows::Sessions => hop::session_pipeline(broker, state, id, &["web", "app"]),
        Windows::Sql => hop::sql_pipeline(broker, state, id, &["web", "app"]),
    }
}

fn start(
    windows: Windows,
    dir: &Path,
    broker: &str,
    id: &str,
    incarnation: usize,
    keep_state: bool,
) -> Child {
    let state = chaos::state_dir(dir, id, incarnation, keep_state);
    let mut text = text(windows, broker, &state, id);
    if chaos::static_members() {
        text = text.replace("static_membership = false", "static_membership = true");
    }
    chaos::spawn(dir, id, incarnation, &text)
}

/// Records of transactions still open in `topic` (from where its log begins: the members delete
/// the repartition topic's consumed records where the broker can). A topic that cannot be read
/// fails the test rather than count as none open.
fn open_in(broker: &str, topic: &str) -> usize {
    tidemark::kafka::raw_log::read_topic(common::secured::brokers(broker), topic)
        .unwrap_or_else(|e| panic!("reading {topic}: {e}"))
        .open
}

#[test]
fn the_two_stage_pipeline_under_repeated_kill_9_commits_everything_exactly_once() {
    chaos_run(Windows::Tumbling);
}

#[test]
fn sessions_with_every_kind_of_aggregation_under_repeated_kill_9_equal_a_fold() {
    chaos_run(Windows::Sessions);
}

#[test]
fn a_sql_pipeline_under_repeated_kill_9_commits_everything_exactly_once() {
    chaos_run(Windows::Sql);
}

/// The tumbling run on a secured broker: every connection of the members, of the producer and
/// of the judge speaks SASL_SSL with SCRAM-SHA-512 (`common::secured`).
#[test]
fn over_sasl_ssl_the_two_stage_pipeline_under_repeated_kill_9_commits_everything_exactly_once() {
    chaos_run_on(Windows::Tumbling, true);
}

fn chaos_run(windows: Windows) {
    chaos_run_on(windows, false);
}

fn chaos_run_on(windows: Windows, secured: bool) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let kills: usize = chaos::env_or("TIDEMARK_CHAOS_KILLS", 8);
    let records: i64 = chaos::env_or("TIDEMARK_CHAOS_RECORDS", 20_000);
    let seed0 = chaos::seed();
    let mut seed = seed0;

    let broker = if secured {
        common::Broker::start_secured()
    } else {
        common::Broker::start()
    };
    hop::create_topics(&broker, &TOPICS);
    let dir = tempfile::tempdir().unwrap();
    // Without late records (the default) every window's last pane is determined: it must equal
    // a failure-free run's (`simulate`'s, and an independent fold's). With
    // TIDEMARK_CHAOS_LATE=1 a record a minute late every 1,000 events makes what is late depend
    // on the order the sources reach the second stage; the judge then requires each record in
    // its window's last pane or dead-lettered, once.
    // Sessions are judged exactly only: without late records.
    let late_records = windows == Windows::Tumbling && chaos::env_or("TIDEMARK_CHAOS_LATE", 0) == 1;
    let scenario = HopScenario::generate(&TOPICS, records, Keys::Null, late_records, seed0);
    let simulated = (!late_records).then(|| {
        let text = text(
            windows,
            &broker.addr,
            &dir.path().join("simulate"),
            "simulate",
        );
        scenario.simulate(&text, &["web", "app"])
    });
    let judge = |got: &hop::Committed| match (&simulated, windows) {
        (Some(sim), Windows::Tumbling | Windows::Sql) => hop::judge_exact(got, &scenario, sim),
        (Some(sim), Windows::Sessions) => hop::judge_sessions(got, &scenario, sim),
        (None, _) => hop::judge_conserved(got, &scenario),
    };

    let mut members: Vec<chaos::Member> = (0..MEMBERS)
        .map(|i| {
            let id = format!("m{}", i + 1);
            chaos::Member {
                child: start(windows, dir.path(), &broker.addr, &id, 0, true),
                id,
                incarnation: 0,
            }
        })
        .collect();
    // Live input spread over about the time the kills take (2.5 s apart on average).
    let producer = scenario.produce_over(&broker.addr, (kills as u64 * 2_500).max(10_000));
    hop::wait_for_first_pane(&broker.addr, "three members");

    // The kills: a random member at a random moment, 1-4 s apart, restarted at once on its old
    // state directory or on an empty one, alternately.
    let chaos::Kills {
        kept,
        empty,
        working,
    } = chaos::kill_loop(
        kills,
        &mut seed,
        &mut members,
        dir.path(),
        "restored from the",
        |id, incarnation, keep| start(windows, dir.path(), &broker.addr, id, incarnation, keep),
    );
    producer.join().unwrap();

    // Let the group finish the input (every record in a pane or a dead letter), then stop every
    // member with SIGTERM.
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut problems = judge(&hop::committed(&broker.addr));
    while !problems.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        problems = judge(&hop::committed(&broker.addr));
    }
    let statuses: Vec<_> = members
        .into_iter()
        .map(|m| common::stop_member(m.child))
        .collect();

    let got = hop::committed(&broker.addr);
    let problems = judge(&got);
    let open: usize = [
        "panes",
        "dead",
        "hop-changelog",
        "hop-repartition",
        "hop-offsets",
    ]
    .iter()
    .map(|t| open_in(&broker.addr, t))
    .sum();
    let input: usize = TOPICS
        .iter()
        .map(|(t, _)| {
            tidemark::kafka::raw_log::read_topic(common::secured::brokers(&broker.addr), t)
                .unwrap()
                .committed
                .len()
        })
        .sum();
    let failed_exits = statuses.iter().filter(|s| !s.success()).count();
    let moves = chaos::count_in_logs(dir.path(), chaos::MOVED);
    let holes = chaos::count_in_logs(dir.path(), chaos::HOLE);
    let unfilled = chaos::count_in_logs(dir.path(), chaos::HOLE_UNFILLED);
    let late = got.dead.keys().filter(|d| d.3 == "late").count();
    let malformed = got.dead.keys().filter(|d| d.3 == "malformed").count();
    let retractions = got
        .panes
        .iter()
        .filter(|p| p.contains("\"RETRACT\""))
        .count();
    // Members delete the repartition topic's consumed records (where the broker can): what
    // crossed is then unknown, which says nothing about the run.
    let crossed = match hop::crossed(&broker.addr) {
        Ok((events, partials, folded)) => {
            format!("(events {events}, partials {partials} of {folded} records)")
        }
        Err(e) => format!("unknown ({e})"),
    };
    let pass = problems.is_empty()
        && open == 0
        && failed_exits == 0
        && input == scenario.records.len()
        && working > 0;
    for p in problems.iter().take(10) {
        eprintln!("problem: {p}");
    }
    println!(
        "chaos-hop: windows={}{} seed={seed0} kills={kills} (kept state {kept}, empty {empty}; {working} hit members holding partitions) input={input} panes={} (retractions {retractions}) crossed={crossed} problems={} dead_letters={} (late {late}, malformed {malformed}) open_txn_records={open} membership_moves={moves} holes={holes} (unfilled {unfilled}) failed_exits={failed_exits} result={}",
        match windows {
            Windows::Tumbling => "tumbling",
            Windows::Sessions => "sessions",
            Windows::Sql => "tumbling-sql",
        },
        if secured { " (SASL_SSL)" } else { "" },
        got.panes.len(),
        problems.len(),
        got.dead.len(),
        if pass { "PASS" } else { "FAIL" }
    );
    if !pass {
        // Every topic's raw log, for finding where a record went, while the broker is up.
        hop::dump(
            &broker.addr,
            dir.path(),
            &[
                "hop-repartition",
                "hop-changelog",
                "hop-offsets",
                "hop-claims",
                "panes",
                "dead",
                "web",
                "app",
            ],
        );
        let kept_dir: PathBuf = dir.keep();
        panic!(
            "chaos run failed (seed {seed0}); member logs and state kept in {}",
            kept_dir.display()
        );
    }
}
