//! Group behaviour against a real broker: fencing of a zombie with the same transactional id, and
//! members joining, leaving and dying while input flows. Output stays complete and exactly-once.
//! Members are dynamic (see `common::dynamic`); static membership is exercised by kafka_crash.rs
//! (one member restarted with its group.instance.id) and measured by benches/restart.rs.

mod common;

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
fn members_join_leave_and_die_without_loss_or_duplicates() {
    let broker = Broker::start();
    broker.create_topic("events", 3);
    let s = Scenario::generate(3, 8_000, 23);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str| {
        let p = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &p,
            dynamic(pipeline(
                &broker.addr,
                &dir.path().join(name),
                Some(name),
                "",
            )),
        )
        .unwrap();
        p
    };
    let producer = s.produce(&broker.addr, 100, Duration::from_millis(150));
    let m1 = start_member(&write("m1"));
    let mut seen = wait_for(&broker.addr, "panes", 1, 60);
    assert!(seen > 0, "m1 produced nothing");
    let m2 = start_member(&write("m2"));
    seen = wait_for(&broker.addr, "panes", seen + 50, 60);
    let mut m3 = start_member(&write("m3"));
    seen = wait_for(&broker.addr, "panes", seen + 50, 60);
    assert!(stop_member(m2).success(), "m2 should leave cleanly");
    seen = wait_for(&broker.addr, "panes", seen + 50, 60);
    m3.kill().unwrap(); // SIGKILL
    m3.wait().unwrap();
    eprintln!("after join, join, leave and kill: {seen} panes committed");
    producer.join().unwrap();
    wait_for(&broker.addr, "panes", s.expected.len(), 120);
    assert!(stop_member(m1).success());
    assert_exactly_once(&broker.addr, &s);
}
