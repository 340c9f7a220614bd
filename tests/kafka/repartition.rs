//! The repartition hop against a real broker: `tidemark run` groups by `[input] key` whatever the
//! records' Kafka keys are (none, another field's), from several topics, through the
//! `<application_id>-repartition` topic, exactly once, judged from the raw log:
//!
//! * a null-keyed topic and a topic keyed by another field: every window's last pane equals the
//!   independent reference's and `simulate`'s, every malformed record is dead-lettered once, and
//!   after a replay of both stages the new epoch equals `simulate` again;
//! * two topics of 3 and 5 partitions with late records: each record in a pane or dead-lettered,
//!   once, never both, before and after a replay;
//! * a source partition that stalls holds ON_TIME panes back; one that goes idle does not stall
//!   them beyond the idle timeout;
//! * a pipeline with a filter, a key of two parts (one computed) and the Kafka record's own
//!   timestamp, over null-keyed input, through the hop with two members: every window's last
//!   pane is the fold of the records the filter keeps, each pane committed once;
//! * processing time through the hop: windows by arrival fire as the clock passes them, and
//!   every record is counted once;
//! * the hop places keys where Kafka's default partitioner does (murmur2);
//! * `repartition = false` dead-letters a record whose key is not its grouping key
//!   (`key_mismatch`), and a repartition topic with another partition count is refused.

use crate::common;

use common::hop::{self, HopScenario, Keys};
use common::{run_tidemark, start_member_logged, stop_member, wait_for_log, Broker};
use std::path::Path;
use std::time::{Duration, Instant};

/// Writes a pipeline file and returns its path.
fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// Waits until the output's last panes cover every window of the reference, or `secs` pass.
fn wait_for_windows(broker: &str, s: &HopScenario, secs: u64) {
    let (want, _) = s.reference();
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let got = hop::last_panes(&hop::committed(broker).panes);
        let done = want
            .windows
            .iter()
            .all(|(k, (n, _))| got.get(k).is_some_and(|g| g.1 >= *n));
        if done || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Runs a scenario through one member and judges it against `simulate`; returns what crossed
/// the repartition topic (see [`hop::crossed`]).
fn exactly(
    broker: &Broker,
    topics: &[(&str, i32)],
    keys: Keys,
    seed: u64,
    replay: bool,
    extra: &str,
) -> (usize, usize, usize) {
    hop::create_topics(broker, topics);
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<&str> = topics.iter().map(|(t, _)| *t).collect();
    let text = hop::pipeline(
        &broker.addr,
        &dir.path().join("state"),
        "m1",
        &names,
        "idle_timeout = \"1s\"",
        extra,
    );
    let cfg = write(dir.path(), "pipeline", &text);
    let s = HopScenario::generate(topics, 3_000, keys, false, seed);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let log = dir.path().join("member.log");
    let member = start_member_logged(&cfg, &log);
    wait_for_windows(&broker.addr, &s, 120);
    // A few more cycles for the dead letters of the last batch.
    std::thread::sleep(Duration::from_secs(1));
    assert!(stop_member(member).success(), "the member stopped cleanly");
    let got = hop::committed(&broker.addr);
    let simulated = s.simulate(&text, &names);
    let problems = hop::judge_exact(&got, &s, &simulated);
    assert!(
        problems.is_empty(),
        "{problems:#?}\nmember log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(!got.panes.is_empty());
    // The run is shorter than the 30 s after which members delete consumed records.
    let crossed = hop::crossed(&broker.addr).expect("the repartition topic, read whole");
    if !replay {
        return crossed;
    }
    // A replay of both stages: the new epoch equals simulate again.
    let out = run_tidemark("replay", &cfg, &["--to-earliest"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member = start_member_logged(&cfg, &dir.path().join("replay.log"));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let problems = hop::judge_exact(&hop::committed_epoch(&broker.addr, 1), &s, &simulated);
        if problems.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "epoch 1: {problems:#?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(stop_member(member).success());
    crossed
}

#[test]
fn a_null_keyed_topic_is_grouped_by_the_field_and_a_replay_equals_simulate_again() {
    let broker = Broker::start();
    let (events, partials, folded) = exactly(&broker, &[("clicks", 3)], Keys::Null, 11, true, "");
    eprintln!("crossed: {events} events, {partials} partials of {folded} records");
    // The backlog is read in full cycles: most records cross folded, many to a partial.
    assert!(
        partials > 0 && folded > events && folded > partials,
        "events {events}, partials {partials} of {folded} records"
    );
}

#[test]
fn a_topic_keyed_by_another_field_is_grouped_by_the_grouping_field() {
    let broker = Broker::start();
    exactly(&broker, &[("clicks", 4)], Keys::OtherField, 12, false, "");
}

#[test]
fn with_combine_off_records_cross_the_hop_one_by_one_with_the_same_panes() {
    let broker = Broker::start();
    let (events, partials, folded) = exactly(
        &broker,
        &[("clicks", 3)],
        Keys::Null,
        11,
        false,
        "combine = false",
    );
    assert_eq!((partials, folded), (0, 0), "{events} events crossed");
    assert!(events > 0);
}

#[test]
fn two_topics_of_3_and_5_partitions_conserve_every_record_before_and_after_a_replay() {
    let broker = Broker::start();
    let topics = [("web", 3), ("app", 5)];
    hop::create_topics(&broker, &topics);
    let dir = tempfile::tempdir().unwrap();
    let text = hop::pipeline(
        &broker.addr,
        &dir.path().join("state"),
        "m1",
        &["web", "app"],
        "idle_timeout = \"1s\"",
        "",
    );
    let cfg = write(dir.path(), "pipeline", &text);
    let s = HopScenario::generate(&topics, 4_000, Keys::Null, true, 13);
    let log = dir.path().join("member.log");
    let member = start_member_logged(&cfg, &log);
    // Live input: every source moves along, so the late records are late for the combined
    // watermark too.
    wait_for_log(&log, "restored", 1, 60);
    s.produce(&broker.addr, 100, Duration::from_millis(40))
        .join()
        .unwrap();
    wait_for_windows(&broker.addr, &s, 120);
    std::thread::sleep(Duration::from_secs(1));
    assert!(stop_member(member).success());
    let got = hop::committed(&broker.addr);
    let problems = hop::judge_conserved(&got, &s);
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        got.dead.keys().any(|d| d.3 == "late"),
        "the scenario has late records"
    );

    // A replay of both stages: the new epoch conserves every record again.
    let out = run_tidemark("replay", &cfg, &["--to-earliest"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member = start_member_logged(&cfg, &dir.path().join("replay.log"));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let problems = hop::judge_conserved(&hop::committed_epoch(&broker.addr, 1), &s);
        if problems.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "epoch 1: {problems:#?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(stop_member(member).success());
}

/// Produces `n` null-keyed events of 5 users to `topic`/`p`, 10 ms of event time apart from
/// `from`.
fn produce_run(broker: &str, topic: &str, p: i32, from: i64, n: i64) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker)
        .create()
        .unwrap();
    for i in 0..n {
        let v =
            serde_json::json!({"user": format!("u{}", i % 5), "ts": from + i * 10, "amount": 1})
                .to_string();
        producer
            .send(BaseRecord::<(), String>::to(topic).partition(p).payload(&v))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// Ten minutes ago on a whole second, epoch ms: the event time a test's input starts at.
fn ten_minutes_ago() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    (now - 600_000) / 1000 * 1000
}

/// The latest window end among the committed panes.
fn max_end(broker: &str) -> i64 {
    hop::committed(broker)
        .panes
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["window_end"]
                .as_i64()
                .unwrap()
        })
        .max()
        .unwrap_or(i64::MIN)
}

/// An input partition back from idleness behind the others: the second stage's watermark went on
/// without it, so what its first stage folds after its first report as an active source can be
/// late there (the one case the first stage's bound does not cover). Every such record is still
/// dead-lettered as late, once, by its own input coordinates and event time.
#[test]
fn records_folded_behind_the_watermark_after_idleness_are_dead_lettered_one_by_one() {
    let broker = Broker::start();
    hop::create_topics(&broker, &[("live", 1), ("quiet", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let base = ten_minutes_ago();
    let text = hop::pipeline(
        &broker.addr,
        &dir.path().join("state"),
        "m1",
        &["live", "quiet"],
        "idle_timeout = \"3s\"",
        "",
    );
    let cfg = write(dir.path(), "pipeline", &text);
    let log = dir.path().join("member.log");
    let member = start_member_logged(&cfg, &log);
    wait_for_log(&log, "restored", 1, 60);
    // The live source moves event time on by 2 s every 200 ms for 12 s; the quiet one is idle,
    // so the watermark follows the live one alone.
    let addr = broker.addr.clone();
    let live = std::thread::spawn(move || {
        for step in 0..60 {
            produce_run(&addr, "live", 0, base + 60_000 + step * 2_000, 200);
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    std::thread::sleep(Duration::from_secs(6));
    // Then two bursts of records a minute behind, one second apart: the first crosses record by
    // record (the quiet source's report was idle), the second after its report as an active
    // source, whose watermark is far behind the second stage's.
    produce_run(&broker.addr, "quiet", 0, base, 50);
    std::thread::sleep(Duration::from_secs(1));
    produce_run(&broker.addr, "quiet", 0, base + 1_000, 50);
    live.join().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(stop_member(member).success());
    let got = hop::committed(&broker.addr);
    let late: Vec<i64> = got
        .dead
        .iter()
        .filter(|((t, _, _, reason), _)| t == "quiet" && reason == "late")
        .map(|((_, _, o, _), n)| {
            assert_eq!(*n, 1, "offset {o} dead-lettered {n} times");
            *o
        })
        .collect();
    assert_eq!(
        late,
        (0..100).collect::<Vec<_>>(),
        "every quiet record, late, once"
    );
    let folded = tidemark::kafka::raw_log::read_topic(&broker.addr, "dead")
        .unwrap()
        .committed
        .iter()
        .filter(|r| {
            r.headers.iter().any(|(k, v)| {
                k == "tidemark.detail"
                    && v.as_deref()
                        .is_some_and(|v| String::from_utf8_lossy(v).contains("folded with"))
            })
        })
        .count();
    assert!(
        folded > 0,
        "no record of the second burst was folded: the case is not made"
    );
}

#[test]
fn a_stalled_source_holds_panes_back_and_an_idle_one_lets_them_go() {
    let broker = Broker::start();
    hop::create_topics(&broker, &[("live", 2), ("quiet", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let base = ten_minutes_ago();
    // The quiet source has records up to base + 3 s only; the live ones go on to base + 30 s.
    produce_run(&broker.addr, "quiet", 0, base, 300);
    for p in 0..2 {
        produce_run(&broker.addr, "live", p, base, 3_000);
    }
    // Without an idle timeout the quiet source holds back every window after its watermark.
    let text = hop::pipeline(
        &broker.addr,
        &dir.path().join("s1"),
        "m1",
        &["live", "quiet"],
        "",
        "",
    );
    let cfg = write(dir.path(), "stalled", &text);
    let member = start_member_logged(&cfg, &dir.path().join("stalled.log"));
    let started = Instant::now();
    while max_end(&broker.addr) < base + 2_000 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the windows the quiet source covers did not fire"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(4));
    assert!(stop_member(member).success());
    let held = max_end(&broker.addr);
    assert!(
        held <= base + 3_000,
        "windows ended up to {} ms past base, beyond the quiet source's watermark",
        held - base
    );

    // With an idle timeout of 2 s, the quiet source is set aside once it is caught up and silent
    // that long, while the live sources go on: their windows fire. (Another idle timeout is
    // another pipeline definition: a new application id.)
    let text = hop::pipeline(
        &broker.addr,
        &dir.path().join("s2"),
        "m1",
        &["live", "quiet"],
        "idle_timeout = \"2s\"",
        "",
    )
    .replace("application_id = \"hop\"", "application_id = \"hop-idle\"");
    let cfg = write(dir.path(), "idle", &text);
    let member = start_member_logged(&cfg, &dir.path().join("idle.log"));
    let addr = broker.addr.clone();
    let live = std::thread::spawn(move || {
        // 12 s more of live input, produced as it happens, so the live sources never go idle.
        for step in 0..24 {
            for p in 0..2 {
                produce_run(&addr, "live", p, base + 30_000 + step * 500, 50);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let started = Instant::now();
    while max_end(&broker.addr) < base + 29_000 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "windows up to {} ms past base only; member log:\n{}",
            max_end(&broker.addr) - base,
            std::fs::read_to_string(dir.path().join("idle.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    live.join().unwrap();
    assert!(stop_member(member).success());
}

#[test]
fn a_filter_a_two_part_key_and_record_timestamps_through_the_hop_with_two_members() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use std::collections::BTreeMap;
    let broker = Broker::start();
    hop::create_topics(&broker, &[("clicks", 4)]);
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let base = (now - 3_600_000) / 1000 * 1000;
    // Null-keyed records whose only time is their CreateTime: 3 of 4 are clicks, users in two
    // spellings of case, 5 ms apart over 20 s; then one click per partition 60 s ahead, so every
    // window before it fires.
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .create()
        .unwrap();
    let mut want: BTreeMap<(String, i64), (u64, f64)> = BTreeMap::new();
    let n = 4_000i64;
    for i in 0..n {
        let ts = base + i * 5;
        let (kind, page, user) = (
            if i % 4 == 3 { "view" } else { "click" },
            ["/", "/cart", "/search"][(i % 3) as usize],
            if i % 2 == 0 {
                format!("U{}", i % 5)
            } else {
                format!("u{}", i % 5)
            },
        );
        let v = serde_json::json!({"kind": kind, "page": page, "user": user, "amount": i % 7});
        if kind == "click" {
            let key = serde_json::json!([page, user.to_lowercase()]).to_string();
            let e = want.entry((key, ts.div_euclid(1000) * 1000)).or_default();
            e.0 += 1;
            e.1 += (i % 7) as f64;
        }
        producer
            .send(
                BaseRecord::<(), String>::to("clicks")
                    .partition((i % 4) as i32)
                    .timestamp(ts)
                    .payload(&v.to_string()),
            )
            .unwrap();
    }
    for p in 0..4 {
        let v = serde_json::json!({"kind": "click", "page": "/end", "user": "end", "amount": 0});
        producer
            .send(
                BaseRecord::<(), String>::to("clicks")
                    .partition(p)
                    .timestamp(base + 60_000)
                    .payload(&v.to_string()),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let config = |instance: &str| {
        let text = hop::pipeline(
            &broker.addr,
            &dir.path().join(instance),
            instance,
            &["clicks"],
            "",
            "",
        )
        .replace(
            "key = \"user\"\ntimestamp = \"ts\"",
            "filter = \"kind = 'click'\"\nkey = [\"page\", \"lower(user)\"]\ntimestamp = \"$record_timestamp\"",
        );
        assert!(text.contains("$record_timestamp"));
        write(dir.path(), instance, &text)
    };
    let members = [
        start_member_logged(&config("m1"), &dir.path().join("m1.log")),
        start_member_logged(&config("m2"), &dir.path().join("m2.log")),
    ];
    let deadline = Instant::now() + Duration::from_secs(150);
    let last = loop {
        let mut last = hop::last_panes(&hop::committed(&broker.addr).panes);
        last.retain(|(_, start), _| *start < base + 60_000);
        let done = want
            .iter()
            .all(|(k, (n, _))| last.get(k).is_some_and(|g| g.1 >= *n));
        if done || Instant::now() > deadline {
            break last;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    for m in members {
        assert!(stop_member(m).success(), "a member stopped cleanly");
    }
    let got = hop::committed(&broker.addr);
    let logs = || {
        ["m1", "m2"]
            .iter()
            .map(|m| {
                std::fs::read_to_string(dir.path().join(format!("{m}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(got.audit.is_empty(), "{:?}", got.audit);
    assert_eq!(got.open, 0);
    assert!(got.dead.is_empty(), "{:?}", got.dead);
    let last: BTreeMap<(String, i64), (u64, f64)> =
        last.into_iter().map(|(k, (_, n, s))| (k, (n, s))).collect();
    if last != want {
        let differ: Vec<_> = want
            .iter()
            .filter(|(k, v)| last.get(*k) != Some(*v))
            .take(5)
            .map(|(k, v)| format!("{k:?}: fold {v:?}, panes {:?}", last.get(k)))
            .collect();
        panic!(
            "{} windows against {} in the fold: {differ:?}\nlogs:\n{}",
            last.len(),
            want.len(),
            logs()
        );
    }
}

#[test]
fn processing_time_windows_fire_by_the_clock_and_count_every_record_once() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let broker = Broker::start();
    hop::create_topics(&broker, &[("arrivals", 2)]);
    let dir = tempfile::tempdir().unwrap();
    let text = hop::pipeline(
        &broker.addr,
        &dir.path().join("state"),
        "m1",
        &["arrivals"],
        "",
        "",
    )
    .replace("timestamp = \"ts\"", "time = \"processing\"")
    .replace("max_out_of_orderness = \"300ms\"\n", "")
    .replace("allowed_lateness = \"1s\"\n", "");
    let cfg = write(dir.path(), "pipeline", &text);
    let log = dir.path().join("member.log");
    let member = start_member_logged(&cfg, &log);
    wait_for_log(&log, "restored", 1, 60);
    // Records without any time field, produced over about 3 s of the clock.
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .create()
        .unwrap();
    let n = 600u64;
    for i in 0..n {
        let v = serde_json::json!({"user": format!("u{}", i % 3), "amount": 1});
        producer
            .send(BaseRecord::<(), String>::to("arrivals").payload(&v.to_string()))
            .unwrap();
        if i % 100 == 99 {
            producer.flush(Duration::from_secs(10)).unwrap();
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    // Every window closes once the clock passes its end: no record after these is needed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let total = loop {
        let got = hop::committed(&broker.addr);
        let total: u64 = hop::last_panes(&got.panes)
            .values()
            .map(|(_, n, _)| n)
            .sum();
        if total >= n || Instant::now() > deadline {
            break total;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(stop_member(member).success());
    let got = hop::committed(&broker.addr);
    assert!(got.audit.is_empty(), "{:?}", got.audit);
    assert!(
        got.dead.is_empty(),
        "nothing is late under processing time: {:?}",
        got.dead
    );
    assert_eq!(
        total,
        n,
        "every record in one window's last pane, once; member log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let windows = hop::last_panes(&got.panes).len();
    assert!(
        windows >= 3 * 2,
        "the records spread over several 1-s windows: {windows}"
    );
}

#[test]
fn the_hop_places_keys_where_kafkas_default_partitioner_does() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let broker = Broker::start();
    broker.create_topic("placed", 7);
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("partitioner", "murmur2")
        .create()
        .unwrap();
    let keys: Vec<String> = (0..200).map(|i| format!("user-{i}")).collect();
    for k in &keys {
        producer
            .send(BaseRecord::<String, str>::to("placed").key(k).payload(""))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let log = tidemark::kafka::raw_log::read_topic(&broker.addr, "placed").unwrap();
    assert_eq!(log.committed.len(), keys.len());
    for r in &log.committed {
        let key = r.key.as_deref().unwrap();
        assert_eq!(
            tidemark::format::repartition::partition_for(key, 7),
            r.partition,
            "{}",
            String::from_utf8_lossy(key)
        );
    }
}

#[test]
fn a_record_key_that_is_not_the_grouping_key_is_dead_lettered() {
    let broker = Broker::start();
    hop::create_topics(&broker, &[("clicks", 2)]);
    let dir = tempfile::tempdir().unwrap();
    let text = hop::pipeline(
        &broker.addr,
        &dir.path().join("state"),
        "m1",
        &["clicks"],
        "idle_timeout = \"1s\"",
        "repartition = false",
    );
    let cfg = write(dir.path(), "pipeline", &text);
    let s = HopScenario::generate(&[("clicks", 2)], 1_000, Keys::OtherField, false, 14);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();
    let member = start_member_logged(&cfg, &dir.path().join("member.log"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let expected = s.records.len();
    loop {
        let got = hop::committed(&broker.addr);
        let mismatched = got.dead.keys().filter(|d| d.3 == "key_mismatch").count();
        let malformed = got.dead.keys().filter(|d| d.3 == "malformed").count();
        if mismatched + malformed == expected {
            // Nothing was grouped under a key it does not belong to: no pane at all.
            assert!(got.panes.is_empty(), "{:?}", &got.panes[..1]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{mismatched} key_mismatch + {malformed} malformed of {expected}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(stop_member(member).success());
}

#[test]
fn a_repartition_topic_with_another_partition_count_is_refused() {
    let broker = Broker::start();
    hop::create_topics(&broker, &[("clicks", 3)]);
    broker.create_topic("hop-repartition", 5);
    let dir = tempfile::tempdir().unwrap();
    let text = hop::pipeline(
        &broker.addr,
        &dir.path().join("state"),
        "m1",
        &["clicks"],
        "",
        "",
    );
    let cfg = write(dir.path(), "pipeline", &text);
    let out = run_tidemark("run", &cfg, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has 5 partitions") && err.contains("needs 3"),
        "{err}"
    );
}
