//! Hostile records through `tidemark run`, direct (input keyed by the grouping field) and through
//! the repartition hop with two members: a grouping key longer than the hop carries, JSON nested
//! past the parser's depth, a number too large for a double, a field of the wrong type, an event
//! time out of range, bytes that are not UTF-8, a record without a value, and a record too large
//! to be carried whole in a dead letter, a string longer than the aggregations may keep, and a
//! record whose pane would be larger than a record may be. Judged from the raw log: every member
//! stays up, every window's last pane is the independent reference's and `simulate`'s, every
//! hostile record is one dead letter with its reason (the last, its pane's), and the oversized
//! one says its payload was left out.

use crate::common;

use common::hop::{self, HopScenario, Keys};
use common::{start_member_logged, stop_member, Broker};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

/// The producer's default `message.max.bytes`, which the pipeline runs with: a record of 1.01 MB
/// (under both test brokers' 1 MiB limit) cannot travel whole in a dead letter.
const MAX_RECORD: usize = 1_000_000;

/// One hostile record: its Kafka key, its value, and the reason it must be dead-lettered with.
struct Hostile {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    reason: &'static str,
}

/// The reason of the record whose pane, not itself, is dead-lettered.
const PANE_TOO_LARGE: &str = "pane too_large";

/// The catalogue, with event times inside the scenario's range (`base`), keyed as `keyed` says
/// (by the grouping field `user`, or not at all); `longest` is the longest `session` the
/// pipeline keeps.
fn catalogue(base: i64, keyed: bool, longest: usize) -> Vec<Hostile> {
    let key = |user: &str| keyed.then(|| user.as_bytes().to_vec());
    let long_user = "x".repeat(70_000);
    let mut deep = String::new();
    for _ in 0..300 {
        deep.push('[');
    }
    for _ in 0..300 {
        deep.push(']');
    }
    let v = |s: String| Some(s.into_bytes());
    vec![
        Hostile {
            key: key(&long_user),
            value: v(format!(
                r#"{{"user":"{long_user}","ts":{base},"amount":1,"session":"s"}}"#
            )),
            reason: "too_large",
        },
        Hostile {
            key: key("u1"),
            value: v(format!(
                r#"{{"user":"u1","ts":{base},"amount":{deep},"session":"s"}}"#
            )),
            reason: "malformed",
        },
        Hostile {
            key: key("u1"),
            value: v(format!(
                r#"{{"user":"u1","ts":{base},"amount":1e400,"session":"s"}}"#
            )),
            reason: "malformed",
        },
        Hostile {
            key: key("u1"),
            value: v(format!(
                r#"{{"user":"u1","ts":{base},"amount":"12","session":"s"}}"#
            )),
            reason: "malformed",
        },
        Hostile {
            key: key("u1"),
            value: v(r#"{"user":"u1","ts":9000000000000000000,"amount":1}"#.to_string()),
            reason: "malformed",
        },
        Hostile {
            key: key("u1"),
            value: Some(b"{\"user\":\"u\xff\xfe\",\"ts\":1}".to_vec()),
            reason: "malformed",
        },
        Hostile {
            key: key("u1"),
            value: None,
            reason: "malformed",
        },
        Hostile {
            key: key("u1"),
            // No grouping key: malformed, and too large to travel whole in its dead letter.
            value: v(format!(
                r#"{{"ts":{base},"pad":"{}"}}"#,
                "p".repeat(1_010_000)
            )),
            reason: "malformed",
        },
        Hostile {
            key: key("u1"),
            value: v(format!(
                r#"{{"user":"u1","ts":{base},"amount":1,"session":"{}"}}"#,
                "x".repeat(longest + 1)
            )),
            reason: "too_large",
        },
        Hostile {
            key: key("big"),
            // 100,000 control characters, each written back as six bytes in `first` and in
            // `last`: a pane of 1.2 MB from a record of 600 KB.
            value: v(format!(
                r#"{{"user":"big","ts":{base},"amount":1,"session":"{}"}}"#,
                "\\u0001".repeat(100_000)
            )),
            reason: PANE_TOO_LARGE,
        },
    ]
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// Produces the catalogue to partition 0 of `clicks` before anything else (offsets 0..n).
fn produce_catalogue(broker: &str, records: &[Hostile]) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("message.max.bytes", "2000000")
        .create()
        .unwrap();
    for h in records {
        let mut r = BaseRecord::<[u8], [u8]>::to("clicks").partition(0);
        if let Some(k) = &h.key {
            r = r.key(k.as_slice());
        }
        if let Some(v) = &h.value {
            r = r.payload(v.as_slice());
        }
        producer.send(r).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    // Delivery failures are not reported to this producer: read the catalogue back.
    let log = tidemark::kafka::raw_log::read_topic(broker, "clicks").unwrap();
    assert_eq!(
        log.committed.len(),
        records.len(),
        "the broker took every record of the catalogue"
    );
}

/// Runs the scenario over a topic of `partitions` partitions, with the catalogue before it, on
/// `members` members, and judges it.
fn hostile_run(keys: Keys, partitions: i32, members: &[&str], extra: &str) {
    let broker = Broker::start();
    let topics = [("clicks", partitions)];
    hop::create_topics(&broker, &topics);
    let s = HopScenario::generate(&topics, 2_000, keys, false, 23);
    let base = s.cutoff - 2_000 * 5 - 60_000;
    let dir = tempfile::tempdir().unwrap();
    let text = |instance: &str| {
        hop::pipeline(
            &broker.addr,
            &dir.path().join(instance),
            instance,
            &["clicks"],
            "idle_timeout = \"1s\"",
            extra,
        )
        .replacen("[kafka]\n", &format!("{}[kafka]\n", hop::FIRST_AND_LAST), 1)
    };
    let (spec, _) = tidemark::config::parse_raw(&text("m0"), Vec::new())
        .unwrap()
        .validate()
        .unwrap();
    let longest = spec.input.fields.iter().filter_map(|f| f.longest).min();
    let hostile = catalogue(base, keys == Keys::GroupingField, longest.unwrap());
    produce_catalogue(&broker.addr, &hostile);
    s.produce(&broker.addr, 500, Duration::ZERO).join().unwrap();

    let mut children: Vec<_> = members
        .iter()
        .map(|m| {
            start_member_logged(
                &write(dir.path(), m, &text(m)),
                &dir.path().join(format!("{m}.log")),
            )
        })
        .collect();
    let logs = || {
        members
            .iter()
            .map(|m| {
                std::fs::read_to_string(dir.path().join(format!("{m}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n----\n")
    };

    // What must be committed: the scenario's windows, its malformed records shifted past the
    // catalogue on partition 0, and the catalogue's dead letters.
    let (want, scenario_dead) = s.reference();
    let shift = |p: i32| if p == 0 { hostile.len() as i64 } else { 0 };
    let mut want_dead: BTreeSet<(String, i32, i64, String)> = scenario_dead
        .into_iter()
        .map(|(t, p, o, r)| (t, p, o + shift(p), r))
        .collect();
    for (o, h) in hostile.iter().enumerate() {
        want_dead.insert(match h.reason {
            // Its window's one pane, named by its key.
            PANE_TOO_LARGE => ("pane big".into(), -1, 0, "too_large".into()),
            reason => ("clicks".into(), 0, o as i64, reason.to_string()),
        });
    }

    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        for (m, c) in members.iter().zip(children.iter_mut()) {
            if let Some(status) = c.try_wait().unwrap() {
                panic!("member {m} stopped with {status}:\n{}", logs());
            }
        }
        let got = hop::committed(&broker.addr);
        let last = hop::last_panes(&got.panes);
        let windows_done = want
            .windows
            .iter()
            .all(|(k, (n, _))| last.get(k).is_some_and(|g| g.1 >= *n));
        let dead: BTreeSet<_> = got.dead.keys().cloned().collect();
        if windows_done && want_dead.is_subset(&dead) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not done: windows {windows_done}, dead letters missing {:?}\n{}",
            want_dead.difference(&dead).take(5).collect::<Vec<_>>(),
            logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // A few cycles more, so that anything extra would show.
    std::thread::sleep(Duration::from_secs(2));
    for (m, c) in members.iter().zip(children.drain(..)) {
        assert!(
            stop_member(c).success(),
            "member {m} stopped cleanly\n{}",
            logs()
        );
    }

    let got = hop::committed(&broker.addr);
    let mut problems = hop::common_problems(&got);
    let mut last = hop::last_panes(&got.panes);
    last.retain(|_, (end, _, _)| *end <= s.cutoff);
    problems.extend(common::reference::compare(&last, &want, 1_000));
    let simulated = s.simulate(&text("sim"), &["clicks"]);
    if hop::last_panes(&simulated) != last {
        problems.push("the last panes differ from simulate's".into());
    }
    let dead: BTreeSet<_> = got.dead.keys().cloned().collect();
    if dead != want_dead {
        problems.push(format!(
            "dead letters: missing {:?}, extra {:?}",
            want_dead.difference(&dead).take(5).collect::<Vec<_>>(),
            dead.difference(&want_dead).take(5).collect::<Vec<_>>()
        ));
    }
    // The oversized record's dead letter left its payload out and says so; every other one
    // kept its bytes.
    let log = tidemark::kafka::raw_log::read_topic(&broker.addr, "dead").unwrap();
    let mut dropped = BTreeMap::new();
    for r in &log.committed {
        let Some(d) = tidemark::format::dead_letter::DeadLetter::from_record(r) else {
            // The pane's dead letter: its headers name it, and it carries no value.
            let window = r.header(tidemark::format::pane::WINDOW_START_HEADER);
            let dedup = r.header(tidemark::format::pane::DEDUP_ID_HEADER);
            if r.value.is_some()
                || window.and_then(|w| w.parse::<i64>().ok()) != Some(base - base % 1_000)
                || dedup.is_none_or(str::is_empty)
                || r.header("tidemark.payload_dropped").is_none()
            {
                problems.push(format!("the pane's dead letter: {r:?}"));
            }
            continue;
        };
        if d.partition == 0 && (d.offset as usize) < hostile.len() {
            let h = &hostile[d.offset as usize];
            let said = r.header("tidemark.payload_dropped").map(str::to_string);
            if said.is_none() && r.value.as_deref() != h.value.as_deref() {
                problems.push(format!("dead letter {} changed its value", d.offset));
            }
            if d.detail.len() > 1024 {
                problems.push(format!(
                    "dead letter {} has a detail of {} bytes",
                    d.offset,
                    d.detail.len()
                ));
            }
            dropped.insert(d.offset, said);
        }
    }
    let want_dropped: BTreeMap<i64, Option<String>> = (0..hostile.len() as i64)
        .filter(|o| hostile[*o as usize].reason != PANE_TOO_LARGE)
        .map(|o| {
            let h = &hostile[o as usize];
            let size = h.key.as_ref().map_or(0, Vec::len) + h.value.as_ref().map_or(0, Vec::len);
            (
                o,
                (size > MAX_RECORD - 4096).then(|| format!("{size} bytes of key and value")),
            )
        })
        .collect();
    if dropped != want_dropped {
        problems.push(format!(
            "payloads dropped: {dropped:?}, expected {want_dropped:?}"
        ));
    }
    assert!(problems.is_empty(), "{problems:#?}\n{}", logs());
}

#[test]
fn hostile_records_are_dead_lettered_and_no_member_stops_direct() {
    // One partition: the scenario spreads each user over every partition, which only the hop
    // groups back together.
    hostile_run(Keys::GroupingField, 1, &["m1"], "repartition = false");
}

#[test]
fn hostile_records_are_dead_lettered_and_no_member_stops_through_the_hop() {
    hostile_run(Keys::Null, 2, &["m1", "m2"], "");
}
