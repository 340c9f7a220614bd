//! Chaos: three members of one group process live input while random members are killed with
//! SIGKILL at random moments and restarted at once, alternately on their old state directory and
//! on an empty one. At the end every expected pane — computed by `tidemark simulate` over each
//! partition's input as committed in the log — and every dead letter must be committed exactly
//! once, with equal values, and no transaction may be left open (changelog included). The last
//! pane of every window and the dead letters are also checked against an independent reference,
//! a plain fold over the committed input with no engine code (`tests/common/reference.rs`), so an
//! engine bug that `simulate` shares cannot pass. A run passes only if at least one kill hit a
//! member holding partitions. Everything is judged from the raw log (transactions resolved from
//! COMMIT/ABORT markers), never from the broker's read_committed filtering. A second run is the
//! same pipeline written as SQL (`tidemark run --sql`, `'partitioned-by-key' = 'true'`), judged
//! the same way.
//!
//! `TIDEMARK_CHAOS_KILLS` (default 8, CI's short variant) and `TIDEMARK_CHAOS_RECORDS` (default
//! 20,000) set the strength; `scripts/chaos.sh` runs it with 24 kills. `TIDEMARK_CHAOS_SEED` repeats
//! a run's random choices; `TIDEMARK_CHAOS_STATIC=1` makes the members static (see `start`). It
//! prints one summary line starting with `chaos:`.

use crate::common;

use common::chaos;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 6;
const MEMBERS: usize = 3;

fn start(
    dir: &Path,
    broker: &str,
    id: &str,
    incarnation: usize,
    keep_state: bool,
    sql: bool,
) -> Child {
    let state = chaos::state_dir(dir, id, incarnation, keep_state);
    if sql {
        return chaos::spawn(
            dir,
            id,
            incarnation,
            &common::sql_pipeline(broker, &state, id),
        );
    }
    let text = common::pipeline(broker, &state, Some(id), "");
    // Tansu wedges the group when static members are killed and rejoin in quick succession
    // (restarted members were never assigned again, for minutes), so members are dynamic (the
    // default) unless TIDEMARK_CHAOS_STATIC=1. Their instance ids, and so their transactional
    // ids, stay stable.
    let text = if chaos::static_members() {
        text.replacen("[kafka]\n", "[kafka]\nstatic_membership = true\n", 1)
    } else {
        common::dynamic(text)
    };
    chaos::spawn(dir, id, incarnation, &text)
}

/// Multiset difference: lines of `a` not matched by a line of `b`.
fn missing_from(a: &[String], b: &[String]) -> usize {
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for x in b {
        *counts.entry(x).or_default() += 1;
    }
    a.iter()
        .filter(|x| {
            let c = counts.entry(x).or_default();
            *c -= 1;
            *c < 0
        })
        .count()
}

#[test]
fn three_members_under_repeated_kill_9_commit_everything_exactly_once() {
    chaos_run(false);
}

/// The same pipeline written as SQL (`common::sql_pipeline`), judged the same way.
#[test]
fn a_sql_pipeline_on_keyed_input_under_repeated_kill_9_commits_everything_exactly_once() {
    chaos_run(true);
}

/// Runs the chaos test on the TOML pipeline, or on its SQL twin when `sql`.
fn chaos_run(sql: bool) {
    let kills: usize = chaos::env_or("TIDEMARK_CHAOS_KILLS", 8);
    let records: i64 = chaos::env_or("TIDEMARK_CHAOS_RECORDS", 20_000);
    let seed0 = chaos::seed();
    let mut seed = seed0;

    let broker = common::Broker::start();
    broker.create_topic("events", PARTITIONS);
    let dir = tempfile::tempdir().unwrap();
    let text = if sql {
        common::sql_pipeline(&broker.addr, Path::new("/unused"), "m")
    } else {
        common::pipeline(&broker.addr, Path::new("/unused"), Some("m"), "")
    };
    let scenario = common::Scenario::generate_for(&text, PARTITIONS, records, seed0);

    // Live input spread over about the time the kills take (2.5 s apart on average).
    let batch = 100;
    let span_ms = (kills as u64 * 2_500).max(10_000);
    let pause = Duration::from_millis(span_ms * batch as u64 / scenario.records.len() as u64);
    let producer = scenario.produce(&broker.addr, batch, pause);

    let mut members: Vec<chaos::Member> = (0..MEMBERS)
        .map(|i| {
            let id = format!("m{}", i + 1);
            chaos::Member {
                child: start(dir.path(), &broker.addr, &id, 0, true, sql),
                id,
                incarnation: 0,
            }
        })
        .collect();
    let first_output = Instant::now();
    while common::committed_values(&broker.addr, "panes").is_empty() {
        assert!(
            first_output.elapsed() < Duration::from_secs(90),
            "no output within 90 s of starting three members"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

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
        "partition restored from the changelog",
        |id, incarnation, keep| start(dir.path(), &broker.addr, id, incarnation, keep, sql),
    );
    producer.join().unwrap();

    // Let the group finish the input, then stop every member with SIGTERM.
    common::wait_for(&broker.addr, "panes", scenario.expected.len(), 240);
    let statuses: Vec<_> = members
        .into_iter()
        .map(|m| common::stop_member(m.child))
        .collect();

    // The judge. Expected output comes from simulate over each partition's input as committed in
    // the log, in offset order; a dead letter's line number maps back to its input offset.
    let (spec, _) = common::raw_of(&text).validate().unwrap();
    let input = tidemark::kafka::raw_log::read_topic(&broker.addr, "events").unwrap();
    let mut by_partition: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for r in &input.committed {
        let v = String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap();
        by_partition
            .entry(r.partition)
            .or_default()
            .push((r.offset, v));
    }
    let mut expected = Vec::new();
    let mut expected_dead = BTreeSet::new();
    for (p, recs) in &by_partition {
        let lines: Vec<String> = recs.iter().map(|(_, v)| v.clone()).collect();
        let (panes, dead) = common::simulate_partition(&spec, &lines);
        for l in panes {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            if v["window_end"].as_i64().unwrap() <= scenario.cutoff {
                expected.push(l);
            }
        }
        for d in dead {
            let line = d["line"].as_u64().unwrap() as usize;
            let reason = d["reason"].as_str().unwrap().to_string();
            expected_dead.insert((*p, recs[line - 1].0, reason));
        }
    }
    expected.sort();

    let panes = tidemark::kafka::raw_log::read_topic(&broker.addr, "panes").unwrap();
    let report = tidemark::audit::check_panes(&panes.committed);
    let mut got: Vec<String> = panes
        .committed
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap())
        .collect();
    got.sort();
    let missing = missing_from(&expected, &got);
    let extra = missing_from(&got, &expected);

    let dead = tidemark::kafka::raw_log::read_topic(&broker.addr, "dead").unwrap();
    let dead_report = tidemark::audit::check_dead_letters(&dead.committed);
    let got_dead: BTreeSet<(i32, i64, String)> = dead
        .committed
        .iter()
        .map(|r| {
            (
                r.header("tidemark.source_partition")
                    .unwrap()
                    .parse()
                    .unwrap(),
                r.header("tidemark.source_offset").unwrap().parse().unwrap(),
                r.header("tidemark.reason").unwrap_or_default().to_string(),
            )
        })
        .collect();
    // The independent reference: a plain fold over the committed input (no engine code), for the
    // last pane of every window and for which records are late or malformed.
    let input_records: Vec<(i32, i64, String)> = by_partition
        .iter()
        .flat_map(|(p, recs)| recs.iter().map(|(o, v)| (*p, *o, v.clone())))
        .collect();
    let reference = common::reference::tumbling(&input_records, 1_000, 300, 1_000, scenario.cutoff);
    let mut reference_problems = common::reference::compare(
        &common::reference::last_panes(&got, "total"),
        &reference,
        1_000,
    );
    let reference_dead: BTreeSet<(i32, i64, String)> = reference
        .late
        .iter()
        .map(|&(p, o)| (p, o, "late".to_string()))
        .chain(
            reference
                .malformed
                .iter()
                .map(|&(p, o)| (p, o, "malformed".to_string())),
        )
        .collect();
    if reference_dead != got_dead {
        reference_problems.push(format!(
            "dead letters: {} against the reference's {}",
            got_dead.len(),
            reference_dead.len()
        ));
    }
    for p in reference_problems.iter().take(10) {
        eprintln!("reference: {p}");
    }
    let changelog_open = tidemark::kafka::raw_log::read_topic(&broker.addr, "scn-changelog")
        .unwrap()
        .open;
    let dead_missing = expected_dead.difference(&got_dead).count();
    let dead_extra = got_dead.difference(&expected_dead).count();
    let open = panes.open + dead.open + changelog_open;
    let mismatches = chaos::count_in_logs(dir.path(), "disagrees with the changelog");
    let restores = chaos::count_in_logs(dir.path(), "partition restored from the changelog");
    let moves = chaos::count_in_logs(dir.path(), chaos::MOVED);
    let failed_exits = statuses.iter().filter(|s| !s.success()).count();
    let input_ok = input.committed.len() == scenario.records.len();

    let pass = missing == 0
        && extra == 0
        && report.duplicates.is_empty()
        && report.gaps.is_empty()
        && dead_missing == 0
        && dead_extra == 0
        && dead_report.duplicates.is_empty()
        && dead.committed.len() == expected_dead.len()
        && open == 0
        && failed_exits == 0
        && input_ok
        && reference_problems.is_empty()
        // A run whose kills all hit idle members proves nothing about restores.
        && working > 0;
    println!(
        "chaos: seed={seed0} kills={kills} (kept state {kept}, empty {empty}; {working} hit members holding partitions) input={} panes={}/{} missing={missing} extra={extra} duplicates={} gaps={} dead_letters={}/{} dead_missing={dead_missing} dead_duplicates={} reference_mismatches={} open_txn_records={open} aborted_records={} restores={restores} group_offset_mismatches={mismatches} membership_moves={moves} failed_exits={failed_exits} result={}",
        input.committed.len(),
        report.panes,
        expected.len(),
        report.duplicates.len(),
        report.gaps.len(),
        dead.committed.len(),
        expected_dead.len(),
        dead_report.duplicates.len(),
        reference_problems.len(),
        panes.aborted + dead.aborted,
        if pass { "PASS" } else { "FAIL" }
    );
    if !pass {
        let kept_dir: PathBuf = dir.keep();
        // The broker keeps its log in memory: write it out, each record with its producer, epoch
        // and fate, so a failure can be worked out after the broker is gone.
        common::hop::dump(
            &broker.addr,
            &kept_dir,
            &["panes", "dead", "scn-changelog", "events", "scn-claims"],
        );
        panic!(
            "chaos run failed (seed {seed0}); member logs, state and the topics' raw logs (dump-*.txt) kept in {}",
            kept_dir.display()
        );
    }
}
