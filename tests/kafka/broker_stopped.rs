//! The broker itself stopped under a live pipeline, and a member told to stop while its broker is
//! gone.
//!
//! A broker that keeps its log on disk (noida-db with a data directory here) is stopped and
//! started again on the same data while a member commits. A client-only check first shows
//! whether the broker keeps what it acknowledged across a SIGKILL: noida-db does not (it writes
//! its log to disk every second or so, after acknowledging; `kafka::quirks::ACKED_WRITES_LOST_ON_KILL`),
//! so the exactly-once judgement bounces it with SIGTERM, and the SIGKILL run is judged on what
//! a broker that lost acknowledged input still allows: no pane twice, no gap in a key's panes,
//! and progress afterwards, with every window after the kill exactly as a failure-free run
//! commits it.
//!
//! Brokers that keep their log in memory (Tansu's memory storage) lose every topic when they
//! stop: the durable tests end early there, saying so.

use crate::common;

use common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};
use tidemark::kafka::quirks;

/// How long `tidemark run` may take to exit after SIGTERM when its broker is unreachable: the
/// documented bound on a stop, and 5 s for a busy machine.
const SHUTDOWN_WITHOUT_BROKER: Duration =
    Duration::from_secs(tidemark::cli::STOP_BOUND.as_secs() + 5);

/// Asserts that the broker keeps its log across a restart: these tests apply to such a broker
/// only, and `scripts/test.sh` runs them there; run elsewhere, they fail rather than pass
/// having judged nothing.
fn durable(kind: BrokerKind) {
    assert_eq!(
        kind,
        BrokerKind::Noida,
        "this test needs a broker that keeps its log across a restart; {}'s storage here is \
         memory (run it with TIDEMARK_TEST_BROKER=noida)",
        kind.name()
    );
}

/// Writes 5,000 acknowledged records and one committed transaction of 100 to a new topic.
fn write_acknowledged(broker: &Broker, topic: &str) {
    broker.create_topic(topic, 1);
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("acks", "all")
        .create()
        .unwrap();
    for i in 0..5_000 {
        p.send(
            BaseRecord::to(topic)
                .partition(0)
                .key("k")
                .payload(&format!("{i}")),
        )
        .unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
    let t: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("transactional.id", topic)
        .create()
        .unwrap();
    t.init_transactions(Duration::from_secs(30)).unwrap();
    t.begin_transaction().unwrap();
    for i in 0..100 {
        t.send(
            BaseRecord::to(topic)
                .partition(0)
                .key("k")
                .payload(&format!("t{i}")),
        )
        .unwrap();
    }
    t.commit_transaction(Duration::from_secs(30)).unwrap();
}

/// The committed records of `topic` and its high watermark, read from the raw log once the
/// restarted broker serves the topic again (at most 30 s).
fn read_back(broker: &Broker, topic: &str) -> (usize, i64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .create()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the restarted broker never answers"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // A topic the broker lost altogether holds nothing.
    let Ok((_, high)) = c.fetch_watermarks(topic, 0, Duration::from_secs(10)) else {
        return (0, 0);
    };
    let log = tidemark::kafka::raw_log::read_topic(&broker.addr, topic).unwrap();
    (log.committed.len(), high)
}

#[test]
fn the_broker_keeps_what_it_acknowledged_across_a_sigterm() {
    durable(BrokerKind::from_env());
    let mut broker = Broker::start();
    write_acknowledged(&broker, "d");
    broker.terminate();
    broker.restart();
    let (records, high) = read_back(&broker, "d");
    assert_eq!(
        records, 5_100,
        "records read back after SIGTERM and a restart"
    );
    assert_eq!(
        high, 5_101,
        "the log's end: the records and one commit marker"
    );
}

#[test]
fn whether_the_broker_keeps_what_it_acknowledged_across_a_sigkill() {
    durable(BrokerKind::from_env());
    let mut broker = Broker::start();
    let quirk = quirks::ACKED_WRITES_LOST_ON_KILL;
    let loses = quirk.seen_on(broker.kind.name());
    // Killed as soon as the last write is acknowledged. A broker that persists before it
    // acknowledges keeps all 5,100; one that persists on a timer loses what came after its last
    // write to disk, unless the timer fired in the moment between: three tries.
    let mut seen = Vec::new();
    for attempt in 0..3 {
        let topic = format!("d{attempt}");
        write_acknowledged(&broker, &topic);
        broker.kill9();
        broker.restart();
        let (records, _) = read_back(&broker, &topic);
        seen.push(records);
        if !loses || records < 5_100 {
            break;
        }
    }
    eprintln!(
        "records read back after a SIGKILL (5,100 acknowledged): {seen:?}; {}: {}",
        quirk.name,
        if loses { "expected" } else { "not expected" }
    );
    if loses {
        assert!(
            seen.iter().any(|&n| n < 5_100),
            "{} is listed for {} but every acknowledged record survived: {seen:?}",
            quirk.name,
            broker.kind.name()
        );
    } else {
        assert_eq!(seen, [5_100], "acknowledged records lost on SIGKILL");
    }
}

/// Waits until `done` holds for the committed panes, restarting the member (as a supervisor
/// would) when it exits; returns the exits seen.
fn supervise(
    broker: &Broker,
    member: &mut Child,
    cfg: &Path,
    log_dir: &Path,
    done: &Done,
    secs: u64,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut exits = Vec::new();
    loop {
        let panes = committed_values(&broker.addr, "panes");
        let Err(short) = done(&panes) else {
            return exits;
        };
        if let Some(status) = member.try_wait().unwrap() {
            exits.push(status.to_string());
            let log = log_dir.join(format!("member-{}.log", exits.len()));
            *member = start_member_logged(cfg, &log);
        }
        if Instant::now() > deadline {
            let log = log_dir.join(match exits.len() {
                0 => "member-0.log".to_string(),
                n => format!("member-{n}.log"),
            });
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            panic!(
                "{short} after {secs} s; member exits: {exits:?}; the member's last lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// When a run with the broker stopped has committed enough: `Ok` once it has, otherwise what is
/// still missing.
type Done = dyn Fn(&[String]) -> Result<(), String>;

/// Every pane a failure-free run commits.
fn all_panes(s: &Scenario) -> Box<Done> {
    let n = s.expected.len();
    Box::new(move |panes| {
        if panes.len() >= n {
            Ok(())
        } else {
            Err(format!("{} of {n} panes", panes.len()))
        }
    })
}

/// The window start of a committed pane.
fn window_start(pane: &str) -> i64 {
    let v: serde_json::Value = serde_json::from_str(pane).unwrap();
    v["window_start"].as_i64().unwrap()
}

/// The first window start of the last quarter of a failure-free run's panes: those windows
/// began well after the broker stopped (the second half's input).
fn last_quarter_from(s: &Scenario) -> i64 {
    let mut starts: Vec<i64> = s.expected.iter().map(|p| window_start(p)).collect();
    starts.sort();
    starts[starts.len() * 3 / 4]
}

/// The panes of a failure-free run whose windows are among the last quarter.
fn last_quarter(s: &Scenario) -> Vec<String> {
    let from = last_quarter_from(s);
    s.expected
        .iter()
        .filter(|p| window_start(p) >= from)
        .cloned()
        .collect()
}

/// A pipeline over 8,000 records with the broker stopped by `stop` after the first half has
/// been read and some panes committed; returns the broker, the scenario and the time of the
/// stop, once `done(scenario)` holds for the committed panes.
fn run_with_broker_stopped(
    stop: fn(&mut Broker),
    done: fn(&Scenario) -> Box<Done>,
) -> (Broker, Scenario, tempfile::TempDir) {
    let mut broker = Broker::start();
    broker.create_topic("events", 3);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pipeline.toml");
    let text = pipeline(&broker.addr, &dir.path().join("state"), None, "");
    std::fs::write(&cfg, &text).unwrap();
    let s = Scenario::generate_for(&text, 3, 8_000, 41);
    let (first, second) = s.records.split_at(s.records.len() / 2);
    let half = |records: &[(i32, String, String)]| Scenario {
        records: records.to_vec(),
        expected: Vec::new(),
        expected_dead: 0,
        expected_dead_letters: Default::default(),
        cutoff: s.cutoff,
    };
    let mut member = start_member_logged(&cfg, &dir.path().join("member-0.log"));
    half(first)
        .produce(&broker.addr, 200, Duration::from_millis(100))
        .join()
        .unwrap();
    assert!(
        wait_for(&broker.addr, "panes", 1, 60) > 0,
        "nothing committed before the broker stopped"
    );
    // The member is committing when its broker stops.
    let before = committed_values(&broker.addr, "panes").len();
    stop(&mut broker);
    std::thread::sleep(Duration::from_secs(2));
    broker.restart();
    let restarted = Instant::now();
    half(second)
        .produce(&broker.addr, 200, Duration::from_millis(50))
        .join()
        .unwrap();
    let exits = supervise(&broker, &mut member, &cfg, dir.path(), &done(&s), 180);
    eprintln!(
        "broker stopped after {before} panes; {} of {} panes committed {:?} after its restart \
         ({} of {} input records kept); member exits on the way: {exits:?}",
        committed_values(&broker.addr, "panes").len(),
        s.expected.len(),
        restarted.elapsed(),
        committed_values(&broker.addr, "events").len(),
        s.records.len()
    );
    assert!(stop_member(member).success(), "the member stops cleanly");
    (broker, s, dir)
}

#[test]
fn a_pipeline_whose_broker_is_bounced_commits_everything_exactly_once() {
    durable(BrokerKind::from_env());
    let (broker, s, _dir) = run_with_broker_stopped(Broker::terminate, all_panes);
    assert_exactly_once(&broker.addr, &s);
}

#[test]
fn a_pipeline_whose_broker_is_killed_commits_no_pane_twice_and_goes_on() {
    durable(BrokerKind::from_env());
    // The broker loses acknowledged input (and committed transactions) when it is killed, so
    // windows near the kill may hold fewer records than a failure-free run's, or none at all:
    // the run is done when every window after the kill is committed.
    let after_kill = |s: &Scenario| -> Box<Done> {
        let after = last_quarter(s);
        Box::new(move |panes| {
            let missing = after.iter().filter(|p| !panes.contains(p)).count();
            match missing {
                0 => Ok(()),
                _ => Err(format!(
                    "{missing} of the {} panes after the kill missing or different",
                    after.len()
                )),
            }
        })
    };
    let (broker, s, _dir) = run_with_broker_stopped(Broker::kill9, after_kill);
    // What the broker kept must still be committed once, without a gap, and the windows after
    // the kill exactly as a failure-free run commits them.
    let log = tidemark::kafka::raw_log::read_topic(&broker.addr, "panes").unwrap();
    let report = tidemark::audit::check_panes(&log.committed);
    assert!(
        report.duplicates.is_empty(),
        "duplicates: {:?}",
        report.duplicates
    );
    assert!(report.gaps.is_empty(), "gaps: {:?}", report.gaps);
    let got = committed_values(&broker.addr, "panes");
    let after_from = last_quarter_from(&s);
    let unexpected: Vec<&String> = got
        .iter()
        .filter(|p| !s.expected.contains(p))
        .filter(|p| window_start(p) >= after_from)
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} panes after the kill that a failure-free run does not commit, for example {:?}",
        unexpected.len(),
        unexpected.first()
    );
}

#[test]
fn a_member_told_to_stop_while_its_broker_is_gone_exits_within_the_bound() {
    let mut broker = Broker::start();
    broker.create_topic("events", 3);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pipeline.toml");
    let text = pipeline(&broker.addr, &dir.path().join("state"), None, "");
    std::fs::write(&cfg, &text).unwrap();
    let s = Scenario::generate_for(&text, 3, 20_000, 43);
    let member = start_member_logged(&cfg, &dir.path().join("member.log"));
    // Input keeps coming while the broker dies, so the member has a transaction open; the
    // producer thread is left to fail on its own.
    let _producer = s.produce(&broker.addr, 200, Duration::from_millis(20));
    assert!(wait_for(&broker.addr, "panes", 1, 60) > 0);
    broker.kill9();
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    signal(member.id(), "TERM");
    let mut member = member;
    let status = loop {
        if let Some(status) = member.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > SHUTDOWN_WITHOUT_BROKER + Duration::from_secs(30) {
            let _ = member.kill();
            panic!("no exit 45 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    eprintln!("SIGTERM with the broker gone: {status} after {took:?}");
    assert!(
        took <= SHUTDOWN_WITHOUT_BROKER,
        "exited {took:?} after SIGTERM, more than {SHUTDOWN_WITHOUT_BROKER:?}"
    );
}
