//! `tidemark replay` against a real broker: a replay recomputes the output in a new epoch equal to
//! `simulate` over the replayed input, exactly once; targets by time and by offsets reprocess
//! exactly the records at or after them; a replay is refused while a member runs (naming it), or
//! waits for it to leave with `--wait`, `--dry-run`
//! changes nothing, and a replay killed before its commit leaves the old position. A changed
//! pipeline definition is refused at start; a Kafka-only change is not.

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tidemark::changelog::committed_now;
use tidemark::state::store::Lineage;

const PARTITIONS: i32 = 3;

fn replay(cfg: &Path, args: &[&str]) -> Output {
    run_tidemark("replay", cfg, args)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Per changelog partition: the committed input offset and lineage, from the raw log.
fn position(broker: &str) -> BTreeMap<i32, (Option<i64>, Lineage)> {
    (0..PARTITIONS)
        .map(|p| {
            (
                p,
                committed_now(&broker.into(), "scn-changelog", p).unwrap(),
            )
        })
        .collect()
}

/// Committed records of a topic (count), from the raw log.
fn committed_count(broker: &str, topic: &str) -> usize {
    tidemark::kafka::raw_log::read_topic(broker, topic)
        .unwrap()
        .committed
        .len()
}

/// Committed pane lines of `epoch`, sorted, with the epoch written as 0 (to compare with
/// `simulate`, which always runs epoch 0).
fn panes_of_epoch(broker: &str, epoch: u64) -> Vec<String> {
    let mut out: Vec<String> = committed_values(broker, "panes")
        .into_iter()
        .filter(|l| l.contains(&format!("\"epoch\":{epoch},")))
        .map(|l| l.replace(&format!("\"epoch\":{epoch},"), "\"epoch\":0,"))
        .collect();
    out.sort();
    out
}

/// Runs a member until `topic` holds `n` committed records of `epoch`, then stops it cleanly.
fn run_until(broker: &str, cfg: &Path, epoch: u64, n: usize) {
    let member = start_member(cfg);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = panes_of_epoch(broker, epoch).len();
        if got >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "epoch {epoch}: {got} of {n} panes after 120 s"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Give the dead letters of the last batch a commit cycle to land.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        stop_member(member).success(),
        "the member did not stop cleanly"
    );
}

/// The dead letters of replay epoch `epoch` as (partition, offset, reason); each once.
fn dead_of_epoch(broker: &str, epoch: u64) -> std::collections::BTreeSet<(i32, i64, String)> {
    let mut out = std::collections::BTreeSet::new();
    for r in tidemark::kafka::raw_log::read_topic(broker, "dead")
        .unwrap()
        .committed
        .iter()
        .filter(|r| tidemark::format::epoch_of(r) == epoch)
    {
        let d = tidemark::format::dead_letter::DeadLetter::from_record(r).expect("a dead letter");
        assert!(
            out.insert((d.partition, d.offset, d.reason)),
            "dead-lettered twice in epoch {epoch}: {}/{}",
            d.partition,
            d.offset
        );
    }
    out
}

fn write_config(dir: &Path, name: &str, text: String) -> std::path::PathBuf {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn replay_to_earliest_recomputes_everything_in_a_new_epoch_exactly_once() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let s = Scenario::generate(PARTITIONS, 3_000, 21);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "p",
        dynamic(pipeline(
            &broker.addr,
            &dir.path().join("state"),
            Some("m1"),
            "",
        )),
    );
    run_until(&broker.addr, &cfg, 0, s.expected.len());
    assert_exactly_once(&broker.addr, &s);
    let epoch0_ids: std::collections::BTreeSet<String> = panes_of_epoch(&broker.addr, 0)
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["dedup_id"].to_string())
        .collect();

    // A replay while a member runs is refused and changes nothing. The member is stopped only
    // once it is assigned (/readyz): on Tansu, a member that leaves while its JoinGroup is pending
    // wedges the group for the next one.
    let port = free_port();
    let watched = write_config(
        dir.path(),
        "watched",
        format!(
            "{}\n[metrics]\naddress = \"127.0.0.1:{port}\"\n",
            std::fs::read_to_string(&cfg).unwrap()
        ),
    );
    let member = start_member(&watched);
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_get(port, "/readyz").map(|(s, _)| s) != Some(200) {
        assert!(Instant::now() < deadline, "the member never became ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    loop {
        let o = replay(&cfg, &["--to-earliest", "--dry-run"]);
        if o.status.code() == Some(2) {
            // The refusal names the member and says when a stopped one leaves.
            let t = text(&o);
            assert!(t.contains("active members"), "{t}");
            assert!(t.contains("  member "), "{t}");
            assert!(t.contains("members are dynamic"), "{t}");
            assert!(t.contains("session.timeout.ms = 6000"), "{t}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the member never showed in the group"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let before = (
        position(&broker.addr),
        committed_count(&broker.addr, "scn-changelog"),
    );
    let o = replay(&cfg, &["--to-earliest"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // --wait D: refused after D while the member stays; done once it leaves.
    let t0 = Instant::now();
    let o = replay(&cfg, &["--to-earliest", "--dry-run", "--wait", "2s"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(t0.elapsed() >= Duration::from_secs(2), "it did not wait");
    assert!(text(&o).contains("Waited 2 s."), "{}", text(&o));
    let waiting = common::adopt(
        Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args([
                "replay",
                "--to-earliest",
                "--dry-run",
                "--wait",
                "60s",
                "--config",
            ])
            .arg(&cfg)
            .env("TIDEMARK_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(stop_member(member).success());
    let o = waiting.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("waiting up to 60 s"), "{}", text(&o));
    assert!(
        text(&o).contains("dry run: nothing changed"),
        "{}",
        text(&o)
    );
    assert_eq!(
        (
            position(&broker.addr),
            committed_count(&broker.addr, "scn-changelog")
        ),
        before,
        "a refused replay changed the changelog"
    );

    // --dry-run prints the plan and changes nothing: changelog, group offsets, local state.
    let state_before = {
        let store = tidemark::state::store::StateStore::open(&dir.path().join("state")).unwrap();
        (0..PARTITIONS)
            .map(|p| {
                let cf = tidemark::state::store::StateStore::cf_name("window", p);
                (store.offsets(&cf).unwrap(), store.lineage(&cf).unwrap())
            })
            .collect::<Vec<_>>()
    };
    let changelog_records = committed_count(&broker.addr, "scn-changelog");
    let o = replay(&cfg, &["--to-earliest", "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let plan = text(&o);
    assert!(plan.contains("into epoch 1"), "{plan}");
    for p in 0..PARTITIONS {
        let committed = before.0[&p].0.unwrap();
        assert!(
            plan.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()[..3]
                    == [
                        format!("events/{p}"),
                        committed.to_string(),
                        "0".to_string()
                    ]
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()[..]),
            "partition {p} row (committed {committed}, target 0) missing:\n{plan}"
        );
    }
    assert_eq!(
        position(&broker.addr),
        before.0,
        "dry run moved the position"
    );
    assert_eq!(
        committed_count(&broker.addr, "scn-changelog"),
        changelog_records
    );
    let store = tidemark::state::store::StateStore::open(&dir.path().join("state")).unwrap();
    let state_after: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let cf = tidemark::state::store::StateStore::cf_name("window", p);
            (store.offsets(&cf).unwrap(), store.lineage(&cf).unwrap())
        })
        .collect();
    drop(store);
    assert_eq!(state_after, state_before, "dry run touched local state");

    // The replay: every partition back to 0 in epoch 1, in one committed transaction.
    let o = replay(&cfg, &["--to-earliest"]);
    assert!(o.status.success(), "{}", text(&o));
    for (p, (committed, lineage)) in position(&broker.addr) {
        assert_eq!(committed, Some(0), "partition {p}");
        assert_eq!(lineage.epoch, 1, "partition {p}");
    }

    // The member restarts on its kept local state: state written before the reset is dropped,
    // and epoch 1 equals simulate over the whole input, exactly once.
    run_until(&broker.addr, &cfg, 1, s.expected.len());
    assert_eq!(panes_of_epoch(&broker.addr, 1), s.expected);
    assert_eq!(dead_of_epoch(&broker.addr, 1), s.expected_dead_letters);
    let log = tidemark::kafka::raw_log::read_topic(&broker.addr, "panes").unwrap();
    let report = tidemark::audit::check_panes(&log.committed);
    assert!(report.duplicates.is_empty(), "{:?}", report.duplicates);
    assert!(report.gaps.is_empty(), "{:?}", report.gaps);
    assert_eq!(report.by_epoch[&1].0, s.expected.len());
    let epoch1_ids: std::collections::BTreeSet<String> = panes_of_epoch(&broker.addr, 1)
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["dedup_id"].to_string())
        .collect();
    assert_eq!(
        epoch1_ids, epoch0_ids,
        "every window of epoch 0 is recomputed"
    );
}

#[test]
fn replay_by_time_by_duration_and_by_offsets_reprocess_exactly_the_records_after_the_target() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let s = Scenario::generate(PARTITIONS, 3_000, 5);
    // Two phases of input, a second apart: the replay time falls between them.
    let half = s.records.len() / 2;
    let (a, b) = s.records.split_at(half);
    let phase = |records: &[(i32, String, String)]| Scenario {
        records: records.to_vec(),
        expected: Vec::new(),
        expected_dead: 0,
        expected_dead_letters: Default::default(),
        cutoff: s.cutoff,
    };
    phase(a)
        .produce(&broker.addr, 500, Duration::ZERO)
        .join()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    let at = chrono::Utc::now();
    std::thread::sleep(Duration::from_millis(1_500));
    phase(b)
        .produce(&broker.addr, 500, Duration::ZERO)
        .join()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text_cfg = dynamic(pipeline(
        &broker.addr,
        &dir.path().join("state"),
        Some("m1"),
        "",
    ));
    let cfg = write_config(dir.path(), "p", text_cfg.clone());
    run_until(&broker.addr, &cfg, 0, s.expected.len());

    // By time: each partition restarts at its first record of phase b.
    let o = replay(&cfg, &["--to-datetime", &at.to_rfc3339()]);
    assert!(o.status.success(), "{}", text(&o));
    let in_a = |p: i32| a.iter().filter(|r| r.0 == p).count() as i64;
    for (p, (committed, lineage)) in position(&broker.addr) {
        assert_eq!(committed, Some(in_a(p)), "partition {p}: {}", text(&o));
        assert_eq!(lineage.epoch, 1);
    }
    let (expected_b, dead_b) = simulate_expected(&text_cfg, b, s.cutoff);
    run_until(&broker.addr, &cfg, 1, expected_b.len());
    assert_eq!(panes_of_epoch(&broker.addr, 1), expected_b);
    let dead_b: std::collections::BTreeSet<_> = dead_b
        .into_iter()
        .map(|(p, o, reason)| (p, o + in_a(p), reason))
        .collect();
    assert_eq!(dead_of_epoch(&broker.addr, 1), dead_b);

    // By duration: the same moment, given as "now minus D" (D measured just before the call; the
    // few milliseconds until replay reads its clock are far inside the 1.5 s on either side).
    let d = (chrono::Utc::now() - at).num_milliseconds();
    let o = replay(&cfg, &["--by-duration", &format!("{d}ms")]);
    assert!(o.status.success(), "{}", text(&o));
    for (p, (committed, lineage)) in position(&broker.addr) {
        assert_eq!(committed, Some(in_a(p)), "partition {p}: {}", text(&o));
        assert_eq!(lineage.epoch, 2);
    }
    run_until(&broker.addr, &cfg, 2, expected_b.len());
    assert_eq!(panes_of_epoch(&broker.addr, 2), expected_b);

    // By offsets: partition 0 from its 100th record; the others stay where they are.
    let before = position(&broker.addr);
    let o = replay(&cfg, &["--to-offsets", "0:100"]);
    assert!(o.status.success(), "{}", text(&o));
    let after = position(&broker.addr);
    assert_eq!(after[&0].0, Some(100));
    for p in 1..PARTITIONS {
        assert_eq!(after[&p].0, before[&p].0, "partition {p} moved");
    }
    assert!(after.values().all(|(_, l)| l.epoch == 3));
    let p0: Vec<(i32, String, String)> = s
        .records
        .iter()
        .filter(|r| r.0 == 0)
        .skip(100)
        .cloned()
        .collect();
    let (expected_p0, _) = simulate_expected(&text_cfg, &p0, s.cutoff);
    run_until(&broker.addr, &cfg, 3, expected_p0.len());
    assert_eq!(
        panes_of_epoch(&broker.addr, 3),
        expected_p0,
        "epoch 3 is partition 0 from offset 100, and nothing else"
    );
}

#[test]
fn a_killed_replay_leaves_the_old_position_and_definitions_are_guarded() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let s = Scenario::generate(PARTITIONS, 1_500, 9);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = dynamic(pipeline(
        &broker.addr,
        &dir.path().join("state"),
        Some("m1"),
        "",
    ));
    let cfg = write_config(dir.path(), "p", base.clone());
    run_until(&broker.addr, &cfg, 0, s.expected.len());
    let before = position(&broker.addr);

    // SIGKILL between producing the markers and committing them.
    let mut child = common::adopt(
        Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["replay", "--to-earliest", "--config"])
            .arg(&cfg)
            .env(tidemark::replay::PAUSE_ENV, "60000")
            .env("TIDEMARK_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = BufReader::new(child.stderr.take().unwrap());
    for line in stderr.lines() {
        if line.unwrap().contains("markers produced") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        position(&broker.addr),
        before,
        "the killed replay's markers must not count"
    );
    // The member still starts from the old position: nothing is reprocessed, nothing new. The
    // check waits for the member to hold every partition (restored and assigned), then gives it
    // several commit cycles to reprocess anything it would.
    let log = dir.path().join("after-killed-replay.log");
    let member = start_member_logged(&cfg, &log);
    wait_for_log(
        &log,
        "partition restored from the changelog",
        PARTITIONS as usize,
        60,
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(stop_member(member).success());
    assert_eq!(panes_of_epoch(&broker.addr, 0).len(), s.expected.len());
    assert_eq!(panes_of_epoch(&broker.addr, 1).len(), 0);

    // A Kafka-only change (commit interval, batch size) runs on the same state.
    let kafka_only = write_config(
        dir.path(),
        "kafka-only",
        base.replace("commit_interval = \"100ms\"", "commit_interval = \"250ms\"")
            .replace("max_batch_records = 200", "max_batch_records = 500"),
    );
    let member = start_member(&kafka_only);
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        stop_member(member).success(),
        "a Kafka-only change must not trip the fingerprint"
    );

    // A changed definition is refused, on the kept state and on an empty state directory.
    let changed = base.replace("size = \"1s\"", "size = \"2s\"");
    for (name, state) in [("changed", "state"), ("changed-fresh", "fresh")] {
        let body = changed.replace(
            &dir.path().join("state").display().to_string(),
            &dir.path().join(state).display().to_string(),
        );
        let path = write_config(dir.path(), name, body);
        let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["run", "--config"])
            .arg(&path)
            .env("TIDEMARK_LOG", "warn")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
        assert!(
            text(&out).contains("tidemark replay"),
            "{name}: {}",
            text(&out)
        );
    }

    // After the killed one, a replay with the changed definition succeeds (epoch 1, not 2), and
    // the changed pipeline then runs.
    let changed_cfg = write_config(dir.path(), "changed", changed.clone());
    let o = replay(&changed_cfg, &["--to-earliest"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(position(&broker.addr)
        .values()
        .all(|(c, l)| *c == Some(0) && l.epoch == 1));
    let (expected, _) = simulate_expected(&changed, &s.records, s.cutoff);
    run_until(&broker.addr, &changed_cfg, 1, expected.len());
    assert_eq!(panes_of_epoch(&broker.addr, 1), expected);
}

#[test]
fn with_membership_from_the_log_a_replay_is_refused_while_a_member_heartbeats() {
    let broker = Broker::start();
    broker.create_topic("events", PARTITIONS);
    let s = Scenario::generate(PARTITIONS, 1_000, 27);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dynamic(pipeline(
        &broker.addr,
        &dir.path().join("state"),
        Some("m1"),
        "",
    ))
    .replace("[kafka]\n", "[kafka]\nmembership = \"log\"\n");
    let cfg = write_config(dir.path(), "p", config);
    let member = start_member(&cfg);
    assert!(wait_for(&broker.addr, "panes", 1, 60) > 0, "no pane");
    let o = replay(&cfg, &["--to-earliest", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("(membership from the log)"),
        "the refusal names the live process: {}",
        text(&o)
    );
    // A member that stops says so in the claims topic: the replay may go on at once.
    assert!(stop_member(member).success());
    let o = replay(&cfg, &["--to-earliest", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
