//! Group behaviour against a real broker: fencing of a zombie with the same transactional id,
//! members joining, leaving and dying while input flows, and a group whose leader assigns nothing
//! (noticed, left and rejoined; when that stays so, the group moves to membership from the log).
//! Output stays complete and exactly-once.
//! Members are dynamic (see `common::dynamic`); static membership is exercised by tests/kafka/crash_recovery.rs
//! (one member restarted with its group.instance.id) and measured by benches/restart.rs.

use crate::common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn a_fenced_member_exits_non_zero_and_nothing_is_duplicated() {
    let broker = Broker::start();
    broker.create_topic("events", 3);
    let s = Scenario::generate(3, 4_000, 11);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str| {
        let p = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &p,
            dynamic(pipeline(
                &broker.addr,
                &dir.path().join(name),
                Some("same"),
                "",
            )),
        )
        .unwrap();
        p
    };
    // Input flows for about 16 s: a fenced producer learns of its fencing at its next
    // transactional call, so the old member must still have records to commit when the new one
    // starts (under load, the first pane can take several seconds).
    let producer = s.produce(&broker.addr, 50, Duration::from_millis(200));
    let mut old = start_member(&write("old"));
    assert!(
        wait_for(&broker.addr, "panes", 1, 60) > 0,
        "the first member produced nothing"
    );
    // A second process with the same transactional id fences the first.
    let new = start_member(&write("new"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = old.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the fenced member did not stop");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        !status.success(),
        "the fenced member must exit non-zero, got {status}"
    );
    // Nothing the fenced member or the newcomer committed is duplicated or has holes.
    //
    // Completeness is not judged here: on Tansu, a member that leaves while another member's first
    // JoinGroup is pending wedges the group (seen here: no member of that group is assigned
    // partitions again, not even a fresh member started afterwards and given 120 s — tried
    // 2026-11-30, 362 of 602 panes; Apache Kafka completes the join). The scale-out test below judges
    // completeness with members joining, leaving and dying.
    let newcomer_status = stop_member(new);
    producer.join().unwrap();
    let log = tidemark::kafka::raw_log::read_topic(&broker.addr, "panes").unwrap();
    let report = tidemark::audit::check_panes(&log.committed);
    assert!(report.panes > 0, "nothing was committed");
    assert!(
        report.duplicates.is_empty(),
        "duplicates: {:?}",
        report.duplicates
    );
    assert!(report.gaps.is_empty(), "gaps: {:?}", report.gaps);
    assert!(
        newcomer_status.success(),
        "the newcomer should stop cleanly, got {newcomer_status}"
    );
}

#[test]
fn members_join_leave_and_die_without_loss_or_duplicates_with_range() {
    join_leave_and_die("range", false);
}

#[test]
fn members_join_leave_and_die_without_loss_or_duplicates_with_roundrobin() {
    join_leave_and_die("roundrobin", false);
}

#[test]
fn members_join_leave_and_die_without_loss_or_duplicates_with_cooperative_sticky() {
    join_leave_and_die("cooperative-sticky", false);
}

#[test]
fn members_sharing_partitions_through_the_log_join_leave_and_die_without_loss_or_duplicates() {
    join_leave_and_die("range", true);
}

/// Members using the assignor `strategy` join, leave and die while input flows; every pane and
/// dead letter is committed exactly once, and the group makes progress throughout (on a broker
/// where a cooperative rebalance does not complete, the group falls back to the eager protocol).
/// With `log`, the members share the partitions through the log (`kafka.membership = "log"`)
/// instead of the broker's consumer group.
fn join_leave_and_die(strategy: &str, log: bool) {
    let broker = Broker::start();
    broker.create_topic("events", 3);
    let s = Scenario::generate(3, 8_000, 23);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str| {
        let p = dir.path().join(format!("{name}.toml"));
        let mut text = dynamic(pipeline(
            &broker.addr,
            &dir.path().join(name),
            Some(name),
            &format!("\"partition.assignment.strategy\" = \"{strategy}\""),
        ));
        if log {
            text = text.replace("[kafka]\n", "[kafka]\nmembership = \"log\"\n");
        }
        std::fs::write(&p, text).unwrap();
        p
    };
    // Each member logs at info level into its own file; a run that falls short prints the
    // members' warnings and last lines, which name what held the group up.
    let logs: Vec<_> = ["m1", "m2", "m3"]
        .iter()
        .map(|m| dir.path().join(format!("{m}.log")))
        .collect();
    let start = |i: usize| start_member_logged(&write(&format!("m{}", i + 1)), &logs[i]);
    let producer = s.produce(&broker.addr, 100, Duration::from_millis(150));
    let m1 = start(0);
    let mut seen = wait_for(&broker.addr, "panes", 1, 60);
    assert!(seen > 0, "m1 produced nothing");
    let m2 = start(1);
    seen = wait_for(&broker.addr, "panes", seen + 50, 60);
    let mut m3 = start(2);
    seen = wait_for(&broker.addr, "panes", seen + 50, 60);
    assert!(stop_member(m2).success(), "m2 should leave cleanly");
    seen = wait_for(&broker.addr, "panes", seen + 50, 60);
    m3.kill().unwrap(); // SIGKILL
    m3.wait().unwrap();
    let killed = Instant::now();
    eprintln!("after join, join, leave and kill: {seen} panes committed");
    producer.join().unwrap();
    // On a broker that never evicts the killed member, the group heals only by moving to
    // membership from the log, about a minute after the kill on a quiet machine; on a loaded one
    // (two suites side by side) it took longer than two.
    let got = wait_for(&broker.addr, "panes", s.expected.len(), 240);
    eprintln!(
        "{strategy}: {got} of {} panes {:?} after the kill",
        s.expected.len(),
        killed.elapsed()
    );
    if got < s.expected.len() {
        for log in &logs {
            eprintln!("{}", common::log_summary(log, 40));
        }
    }
    assert!(stop_member(m1).success());
    assert_exactly_once(&broker.addr, &s);
}

/// The sum of a metric's series in a `/metrics` body (0 when absent).
fn metric(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `rogue` has led a generation, then starts a member of its group with a metrics
/// port and a log file, and waits until it was given an assignment by the rogue. Returns the
/// member's directory, metrics port, log and process.
fn member_beside(
    rogue: &rogue::Rogue,
    broker: &Broker,
) -> (
    tempfile::TempDir,
    u16,
    std::path::PathBuf,
    std::process::Child,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while rogue.led.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the rogue never led the group");
        std::thread::sleep(Duration::from_millis(100));
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("m.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}\n[metrics]\naddress = \"127.0.0.1:{port}\"\n",
            dynamic(pipeline(
                &broker.addr,
                &dir.path().join("state"),
                Some("m1"),
                ""
            ))
        ),
    )
    .unwrap();
    let log = dir.path().join("m1.log");
    let member = start_member_logged(&cfg, &log);
    common::wait_for_log(&log, "rebalance: assigning", 1, 30);
    (dir, port, log, member)
}

#[test]
fn a_group_whose_leader_assigns_nothing_is_noticed_and_rejoined() {
    // A rogue member leads the group and assigns nothing while records wait in every partition.
    // The member, holding nothing, must notice it after the bound (three session timeouts of
    // 6 s), log it, count it, turn /readyz false and rejoin. Where the broker's group
    // descriptions carry the assignments, the watchdog reads that no member owns a partition;
    // where they carry none (Tansu's), it judges from the log: no committed offset moves while
    // records wait. (A member that holds nothing while the others make progress must not rejoin:
    // the scale-step test would see its rebalances as pauses.)
    let broker = Broker::start();
    broker.create_topic("events", 3);
    let s = Scenario::generate(3, 2_000, 17);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let rogue = rogue::Rogue::start(&broker.addr, "scn", &["events"]);
    let (_dir, port, log, member) = member_beside(&rogue, &broker);
    let started = Instant::now();
    common::wait_for_log(&log, "leaving and joining it again", 1, 90);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(14),
        "rejoined {waited:?} after the watchdog started: before the bound"
    );
    let body = http_get(port, "/metrics").expect("metrics").1;
    assert!(metric(&body, "tidemark_group_wedges_total") >= 1.0);
    assert_eq!(metric(&body, "tidemark_assigned_partitions"), 0.0);
    let ready = http_get(port, "/readyz").expect("readyz").0;
    assert_ne!(
        ready, 200,
        "/readyz answers ready while the group is wedged"
    );
    assert!(committed_values(&broker.addr, "panes").is_empty());
    // What happens after the rogue leaves is the broker's business: on Tansu, in one CI run the
    // member took every partition and finished the input; in another no partition was assigned
    // again within 120 s (its group wedges when a member leaves while another's join is pending,
    // see the first test). So completeness is not judged here.
    rogue.leave();
    assert!(stop_member(member).success());
}

#[test]
fn a_group_that_stays_wedged_moves_to_membership_from_the_log_and_finishes_the_input() {
    // The rogue leads every generation and assigns nothing, so the member's rejoin after the
    // first wedge (18 s) does not heal the group. At the second wedge (after twice the bound)
    // the member writes the move record into the claims topic, leaves the consumer group and
    // takes every partition through membership from the log: the input is finished, exactly
    // once, with the rogue still leading the broker's group.
    let broker = Broker::start();
    broker.create_topic("events", 3);
    let s = Scenario::generate(3, 2_000, 31);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let rogue = rogue::Rogue::start(&broker.addr, "scn", &["events"]);
    let (_dir, port, log, member) = member_beside(&rogue, &broker);
    let started = Instant::now();
    common::wait_for_log(&log, "leaving and joining it again", 1, 90);
    common::wait_for_log(&log, "the group moves to membership from the log", 1, 150);
    let waited = started.elapsed();
    eprintln!("moved {waited:?} after the watchdog started");
    assert!(
        waited >= Duration::from_secs(40),
        "moved {waited:?} after the watchdog started: before the second wedge (18 s + 36 s)"
    );
    let got = wait_for(&broker.addr, "panes", s.expected.len(), 120);
    assert_eq!(got, s.expected.len(), "the moved member did not finish");
    assert!(
        rogue.led.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "the rogue led the generation after the rejoin too"
    );
    let body = http_get(port, "/metrics").expect("metrics").1;
    assert!(metric(&body, "tidemark_membership_moves_total") >= 1.0);
    let moves: usize = common::dump_topic(&broker.addr, "scn-claims")
        .unwrap()
        .into_iter()
        .filter(|(r, _)| r.is_data())
        .filter(|(r, _)| {
            tidemark::kafka::roster::is_move_to_log(
                r.key.as_deref().unwrap_or_default(),
                r.value.as_deref().unwrap_or_default(),
            )
        })
        .count();
    assert_eq!(moves, 1, "one move record in the claims topic");
    // A member started now reads the record and joins no consumer group; the two share the
    // partitions.
    let dir2 = tempfile::tempdir().unwrap();
    let cfg2 = dir2.path().join("m2.toml");
    let text2 = dynamic(pipeline(
        &broker.addr,
        &dir2.path().join("state"),
        Some("m2"),
        "",
    ));
    std::fs::write(&cfg2, text2).unwrap();
    let log2 = dir2.path().join("m2.log");
    let second = start_member_logged(&cfg2, &log2);
    common::wait_for_log(&log2, "joining no consumer group", 1, 30);
    common::wait_for_log(&log2, "membership from the log: taking", 1, 60);
    assert!(stop_member(second).success());
    assert!(stop_member(member).success());
    rogue.leave();
    assert_exactly_once(&broker.addr, &s);
}

#[test]
fn a_member_holding_partitions_rejoins_when_another_sits_on_a_partition_for_twice_the_bound() {
    // The test broker once gave a partition to a member that never took it up while every live
    // member held others, and nobody acted: a member that holds partitions used to leave the
    // judgement to members that hold none. Here a rogue leads the group, keeps partition 0 for
    // itself (never consuming it) and gives 1 and 2 to the member. The member makes progress on
    // its own; partition 0's committed offset stays put while records wait. Holding partitions,
    // the member must act after twice the bound (2 x 3 session timeouts of 6 s = 36 s), not
    // after the bound, and never on its own partitions.
    let broker = Broker::start();
    // `scripts/test.sh` runs this test only on a broker whose group descriptions carry no
    // assignments; elsewhere the watchdog reads ownership from them instead.
    assert!(
        broker.reports_no_assignments("a partition held by a live member that never consumes it"),
        "this test needs a broker whose group descriptions carry no assignments"
    );
    broker.create_topic("events", 3);
    let s = Scenario::generate(3, 3_000, 29);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let rogue = rogue::Rogue::keeping(&broker.addr, "scn", &["events"], 3, &[0]);
    let (_dir, port, log, member) = member_beside(&rogue, &broker);
    assert!(
        wait_for(&broker.addr, "panes", 1, 60) > 0,
        "the member made no progress on the partitions the rogue gave it"
    );
    let progress = Instant::now();
    let body = http_get(port, "/metrics").expect("metrics").1;
    assert_eq!(
        metric(&body, "tidemark_assigned_partitions"),
        2.0,
        "the rogue should have given the member partitions 1 and 2"
    );
    common::wait_for_log(&log, "leaving and joining it again", 1, 150);
    let waited = progress.elapsed();
    eprintln!("the member rejoined {waited:?} after its first pane");
    assert!(
        waited >= Duration::from_secs(25),
        "rejoined {waited:?} after its first pane: a member holding partitions waits twice the \
         bound (36 s)"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let judged = text
        .lines()
        .find(|l| l.contains("partitions this member does not hold made no progress"))
        .expect("the watchdog's judgement is logged");
    assert!(
        judged.contains("(\"events\", 0)") && !judged.contains("(\"events\", 1)"),
        "only the rogue's partition counts: {judged}"
    );
    let body = http_get(port, "/metrics").expect("metrics").1;
    assert!(metric(&body, "tidemark_group_wedges_total") >= 1.0);
    // Nothing committed is duplicated or has holes (the rogue's partition is never processed, so
    // completeness is not judged).
    let panes = tidemark::kafka::raw_log::read_topic(&broker.addr, "panes").unwrap();
    let report = tidemark::audit::check_panes(&panes.committed);
    assert!(report.duplicates.is_empty(), "{:?}", report.duplicates);
    rogue.leave();
    assert!(stop_member(member).success());
}
