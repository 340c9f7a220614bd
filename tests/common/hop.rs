//! Scenarios for the repartition hop: input as most producers write it (null keys, or keys of
//! another field), on one or several topics, and the checks that do not depend on the order in
//! which several sources reach the second stage.

use super::reference::{self, Expected};
use super::Broker;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How the scenario's records are keyed on the topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No key (round-robin producers).
    Null,
    /// The `session` field, not the grouping field `user`.
    OtherField,
    /// The grouping field `user` (the fast path's promise).
    GroupingField,
}

/// One record: (topic, partition, key, value).
pub type Record = (String, i32, Option<String>, String);

/// Records for the reference fold as (source id, offset, value), and each source id's (topic,
/// partition).
type Numbered = (Vec<(i32, i64, String)>, BTreeMap<i32, (String, i32)>);

/// Records over several topics, each with its partition count.
pub struct HopScenario {
    /// The records in production order.
    pub records: Vec<Record>,
    /// Event time of the last records: windows ending by it are expected.
    pub cutoff: i64,
}

/// A pipeline file for the hop over `topics` (`application_id` "hop"), tumbling 1 s windows
/// grouped by the field `user`, out-of-orderness 300 ms, lateness 1 s; `extra` goes into the
/// `[kafka]` section and `watermark` into `[watermark]`.
pub fn pipeline(
    broker: &str,
    state: &std::path::Path,
    instance: &str,
    topics: &[&str],
    watermark: &str,
    extra: &str,
) -> String {
    let topics: Vec<String> = topics.iter().map(|t| format!("{t:?}")).collect();
    format!(
        r#"
name = "hop"
allowed_lateness = "1s"
[input]
key = "user"
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[watermark]
max_out_of_orderness = "300ms"
{watermark}
[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "total"
op = "sum"
field = "amount"
[kafka]
bootstrap_servers = "{broker}"
application_id = "hop"
instance_id = "{instance}"
static_membership = false
input_topics = [{}]
output_topic = "panes"
dead_letter_topic = "dead"
state_dir = "{}"
commit_interval = "100ms"
max_batch_records = 500
{extra}
[kafka.properties]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
{}"#,
        topics.join(", "),
        state.display(),
        super::secured::properties_toml(broker)
    )
}

/// [`pipeline`] written as SQL: the same pipeline (tumbling 1 s windows of `count` and `sum`
/// grouped by `user`, out-of-orderness 300 ms, lateness 1 s), its Kafka settings as `SET`
/// statements.
pub fn sql_pipeline(
    broker: &str,
    state: &std::path::Path,
    instance: &str,
    topics: &[&str],
) -> String {
    super::SqlTwin {
        name: "hop",
        topics,
        keyed: false,
        max_batch: 500,
    }
    .text(broker, state, instance)
}

impl HopScenario {
    /// `n` events spread over the partitions of `topics` ((name, partitions)), an hour in the
    /// past, 30 users, 10% up to 300 ms out of order, one malformed record (and, with `late`, one
    /// record a minute late) every 1,000 events, and one record far ahead per partition so every
    /// window before it fires.
    pub fn generate(
        topics: &[(&str, i32)],
        n: i64,
        keys: Keys,
        late: bool,
        seed: u64,
    ) -> HopScenario {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let base = (now - 3_600_000) / 1000 * 1000;
        let all: Vec<(String, i32)> = topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| (t.to_string(), p)))
            .collect();
        let key_of = |user: &str, session: &str| match keys {
            Keys::Null => None,
            Keys::OtherField => Some(session.to_string()),
            Keys::GroupingField => Some(user.to_string()),
        };
        let mut records = Vec::new();
        let mut used = std::collections::HashSet::new();
        let mut x = seed | 1;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let user = format!("u{}", x % 30);
            let session = format!("s{}", (x >> 12) % 7);
            let (topic, p) = all[((x >> 20) % all.len() as u64) as usize].clone();
            let jitter = if x % 10 == 0 {
                -(((x >> 8) % 300) as i64)
            } else {
                0
            };
            // Event times are unique, so that `first` and `last` have no ties to break by input
            // order (which differs between the hop and `simulate`).
            let mut ts = base + i * 5 + jitter;
            while !used.insert(ts) {
                ts += 1;
            }
            let value =
                json!({"user": user, "session": session, "ts": ts, "amount": (x % 50) as i64});
            records.push((topic, p, key_of(&user, &session), value.to_string()));
            if i % 1000 == 999 {
                let (topic, p) = all[(i / 1000) as usize % all.len()].clone();
                if late {
                    let late =
                        json!({"user": "late", "session": "s0", "ts": base - 60_000, "amount": 1});
                    records.push((topic.clone(), p, key_of("late", "s0"), late.to_string()));
                }
                records.push((topic, p, key_of("bad", "s0"), "not json at all".into()));
            }
        }
        let cutoff = base + n * 5 + 60_000;
        for (topic, p) in &all {
            let end = json!({"user": "end", "session": "s0", "ts": cutoff, "amount": 0});
            records.push((topic.clone(), *p, key_of("end", "s0"), end.to_string()));
        }
        HopScenario { records, cutoff }
    }

    /// Produces the records live, 100 at a time, spread over about `span_ms`, in a background
    /// thread.
    pub fn produce_over(&self, broker: &str, span_ms: u64) -> std::thread::JoinHandle<()> {
        let batch = 100;
        let pause = Duration::from_millis(span_ms * batch as u64 / self.records.len() as u64);
        self.produce(broker, batch, pause)
    }

    /// Produces the records in a background thread, `batch` at a time with `pause` between.
    pub fn produce(
        &self,
        broker: &str,
        batch: usize,
        pause: Duration,
    ) -> std::thread::JoinHandle<()> {
        let records = self.records.clone();
        let addr = broker.to_string();
        std::thread::spawn(move || {
            let producer: BaseProducer = super::secured::client_config(&addr).create().unwrap();
            for chunk in records.chunks(batch) {
                for (t, p, k, v) in chunk {
                    let mut r = BaseRecord::<String, String>::to(t).partition(*p).payload(v);
                    if let Some(k) = k {
                        r = r.key(k);
                    }
                    producer.send(r).unwrap();
                }
                producer.flush(Duration::from_secs(10)).unwrap();
                std::thread::sleep(pause);
            }
        })
    }

    /// The records as (source id, offset, value) for the reference fold: each (topic, partition)
    /// is its own source, offsets counted per partition from 0.
    fn with_offsets(&self) -> Numbered {
        let mut ids: BTreeMap<(String, i32), i32> = BTreeMap::new();
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        let mut out = Vec::new();
        for (t, p, _, v) in &self.records {
            let n = ids.len() as i32;
            let id = *ids.entry((t.clone(), *p)).or_insert(n);
            let o = next.entry(id).or_default();
            out.push((id, *o, v.clone()));
            *o += 1;
        }
        (out, ids.into_iter().map(|(tp, id)| (id, tp)).collect())
    }

    /// The independent reference: per window the count and sum, and the late and malformed
    /// records as (topic, partition, offset).
    pub fn reference(&self) -> (Expected, BTreeSet<(String, i32, i64, String)>) {
        let (records, ids) = self.with_offsets();
        let want = reference::tumbling(&records, 1_000, 300, 1_000, self.cutoff);
        let dead = want
            .late
            .iter()
            .map(|&(id, o)| (id, o, "late"))
            .chain(want.malformed.iter().map(|&(id, o)| (id, o, "malformed")))
            .map(|(id, o, reason)| {
                let (t, p) = &ids[&id];
                (t.clone(), *p, o, reason.to_string())
            })
            .collect();
        (want, dead)
    }

    /// What `tidemark simulate` computes with one input per topic (records in production order):
    /// the pane lines of windows ending by the cutoff.
    pub fn simulate(&self, text: &str, topics: &[&str]) -> Vec<String> {
        let raw = if super::is_sql(text) {
            tidemark::config::parse_sql(text, Vec::new()).unwrap().0
        } else {
            tidemark::config::parse_raw(text, Vec::new()).unwrap()
        };
        let (spec, _) = raw.validate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let store = tidemark::state::store::StateStore::open(tmp.path()).unwrap();
        let texts: Vec<String> = topics
            .iter()
            .map(|t| {
                self.records
                    .iter()
                    .filter(|r| r.0 == *t)
                    .map(|r| r.3.clone())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        let inputs = topics
            .iter()
            .zip(&texts)
            .map(|(t, text)| tidemark::simulate::Input::new(*t, text.as_bytes()))
            .collect();
        let (mut panes, mut dead) = (Vec::new(), Vec::new());
        tidemark::simulate::run_inputs(&spec, &store, inputs, &mut panes, &mut dead).unwrap();
        String::from_utf8(panes)
            .unwrap()
            .lines()
            .filter(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["window_end"].as_i64().unwrap() <= self.cutoff
            })
            .map(str::to_string)
            .collect()
    }
}

/// Creates each topic with its partition count.
pub fn create_topics(broker: &Broker, topics: &[(&str, i32)]) {
    for (t, n) in topics {
        broker.create_topic(t, *n);
    }
}

/// What a run committed, judged from the raw log.
pub struct Committed {
    /// Pane JSON lines of the output topic.
    pub panes: Vec<String>,
    /// Problems `audit` finds in them (duplicates, pane-index gaps), as text.
    pub audit: Vec<String>,
    /// Dead letters as (source topic, partition, offset, reason), with how often each occurs.
    pub dead: BTreeMap<(String, i32, i64, String), usize>,
    /// Records of transactions still open in the output and dead-letter topics.
    pub open: usize,
}

/// Waits until the output topic holds a committed pane; panics after 90 s, saying `who` was
/// started.
pub fn wait_for_first_pane(broker: &str, who: &str) {
    let started = std::time::Instant::now();
    while committed(broker).panes.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no output within 90 s of starting {who}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What crossed the committed repartition topic of the pipeline `hop`: events one by one,
/// partials, and the input records the partials stand for. An error when the topic cannot be
/// read from its start: the members delete its consumed records every 30 s, where the broker
/// supports DeleteRecords.
pub fn crossed(
    broker: &str,
) -> Result<(usize, usize, usize), tidemark::kafka::raw_log::RawLogError> {
    use tidemark::format::repartition::{decode, HopRecord};
    let log =
        tidemark::kafka::raw_log::read_topic(super::secured::brokers(broker), "hop-repartition")?;
    if let Some((p, start)) = log.starts.iter().find(|(_, s)| **s > 0) {
        return Err(tidemark::kafka::raw_log::RawLogError::Protocol(format!(
            "hop-repartition/{p} begins at {start}: its head was deleted"
        )));
    }
    let (mut events, mut partials, mut folded) = (0, 0, 0);
    for r in &log.committed {
        match decode(r.key.as_deref(), r.value.as_deref().unwrap_or_default()) {
            Ok(HopRecord::Event(..)) => events += 1,
            Ok(HopRecord::Events(evs)) => events += evs.len(),
            Ok(HopRecord::Partials(ps)) => {
                partials += ps.len();
                folded += ps.iter().map(|p| p.events.len()).sum::<usize>();
            }
            Ok(HopRecord::Watermarks(_)) => {}
            Err(e) => panic!("a repartition record does not decode: {e}"),
        }
    }
    Ok((events, partials, folded))
}

/// Reads the output and dead-letter topics' committed records.
pub fn committed(broker: &str) -> Committed {
    committed_in(broker, None)
}

/// Reads the output and dead-letter topics' committed records of replay epoch `epoch` only (pane
/// lines with their epoch written as 0, as `simulate` writes them).
pub fn committed_epoch(broker: &str, epoch: u64) -> Committed {
    committed_in(broker, Some(epoch))
}

/// What names a committed dead letter: its source record (topic, partition, offset) and
/// reason; for a pane too large to write, `("pane <key>", -1, pane index, reason)`.
pub fn dead_letter_id(r: &tidemark::kafka::raw_log::RawRecord) -> (String, i32, i64, String) {
    if let Some(d) = tidemark::format::dead_letter::DeadLetter::from_record(r) {
        return (d.topic, d.partition, d.offset, d.reason);
    }
    let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
    let index = r
        .header(tidemark::format::pane::PANE_INDEX_HEADER)
        .and_then(|i| i.parse().ok())
        .expect("a dead letter names its source record or its pane");
    let reason = r.header("tidemark.reason").expect("a reason").to_string();
    (format!("pane {key}"), -1, index, reason)
}

fn committed_in(broker: &str, epoch: Option<u64>) -> Committed {
    let mut panes =
        tidemark::kafka::raw_log::read_topic(super::secured::brokers(broker), "panes").unwrap();
    let mut dead_log =
        tidemark::kafka::raw_log::read_topic(super::secured::brokers(broker), "dead").unwrap();
    if let Some(e) = epoch {
        panes
            .committed
            .retain(|r| tidemark::format::epoch_of(r) == e);
        dead_log
            .committed
            .retain(|r| tidemark::format::epoch_of(r) == e);
    }
    let report = tidemark::audit::check_panes(&panes.committed);
    let mut audit = Vec::new();
    for d in &report.duplicates {
        audit.push(format!("duplicate {d:?}"));
    }
    for g in &report.gaps {
        audit.push(format!("gap {g:?}"));
    }
    let mut dead = BTreeMap::new();
    for r in &dead_log.committed {
        *dead.entry(dead_letter_id(r)).or_insert(0) += 1;
    }
    Committed {
        panes: panes
            .committed
            .iter()
            .map(|r| {
                let line = String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap();
                match epoch {
                    Some(e) => line.replace(&format!("\"epoch\":{e},"), "\"epoch\":0,"),
                    None => line,
                }
            })
            .collect(),
        audit,
        dead,
        open: panes.open + dead_log.open,
    }
}

/// The last pane of every window, keyed by (key, window start), as (end, count, total).
pub fn last_panes(lines: &[String]) -> BTreeMap<(String, i64), (i64, u64, f64)> {
    reference::last_panes(lines, "total")
}

/// Problems of a run over input without late records: every window's last pane equals the
/// reference's and `simulate`'s, every pane is committed once with pane indexes without gaps, and
/// every malformed record is dead-lettered once.
pub fn judge_exact(got: &Committed, s: &HopScenario, simulated: &[String]) -> Vec<String> {
    let (want, want_dead) = s.reference();
    // Windows after the cutoff fire too once every source is idle; they are not compared.
    let mut last = last_panes(&got.panes);
    last.retain(|_, (end, _, _)| *end <= s.cutoff);
    let mut problems = reference::compare(&last, &want, 1_000);
    let sim = last_panes(simulated);
    if sim != last {
        let differ = sim
            .iter()
            .filter(|(k, v)| last.get(*k) != Some(*v))
            .take(3)
            .map(|(k, v)| format!("{k:?}: simulate {v:?}, run {:?}", last.get(k)))
            .collect::<Vec<_>>();
        problems.push(format!(
            "last panes differ from simulate ({} against {} windows): {differ:?}",
            last.len(),
            sim.len()
        ));
    }
    problems.extend(common_problems(got));
    let got_dead: BTreeSet<_> = got.dead.keys().cloned().collect();
    if got_dead != want_dead {
        let missing: Vec<_> = want_dead.difference(&got_dead).take(3).collect();
        let extra: Vec<_> = got_dead.difference(&want_dead).take(3).collect();
        problems.push(format!(
            "dead letters: {} against {} expected; missing {missing:?}, extra {extra:?}",
            got_dead.len(),
            want_dead.len()
        ));
    }
    problems
}

/// Problems of a run over input with late records, judged by what does not depend on the order
/// in which the sources reach the second stage: each record is in its window's last pane or
/// dead-lettered, once, never both (per window, the last pane's count and sum plus the late dead
/// letters' equal all its records'), every pane is committed once with pane indexes without gaps,
/// and the malformed records are dead-lettered once each.
pub fn judge_conserved(got: &Committed, s: &HopScenario) -> Vec<String> {
    let (records, ids) = s.with_offsets();
    // Every valid record counted in its window, whatever its lateness.
    let all = reference::tumbling(&records, 1_000, 300, i64::MAX / 4, s.cutoff);
    let by_coords: BTreeMap<(String, i32, i64), &str> = records
        .iter()
        .map(|(id, o, v)| {
            let (t, p) = &ids[id];
            ((t.clone(), *p, *o), v.as_str())
        })
        .collect();
    let mut in_panes: BTreeMap<(String, i64), (u64, f64)> = last_panes(&got.panes)
        .into_iter()
        .map(|(k, (_, n, sum))| (k, (n, sum)))
        .collect();
    let mut problems = common_problems(got);
    let mut malformed = BTreeSet::new();
    for (t, p, o, reason) in got.dead.keys() {
        let Some(value) = by_coords.get(&(t.clone(), *p, *o)) else {
            problems.push(format!("a dead letter for no input record: {t}/{p}@{o}"));
            continue;
        };
        match reason.as_str() {
            "malformed" => {
                malformed.insert((t.clone(), *p, *o));
            }
            "late" => {
                let v: serde_json::Value = serde_json::from_str(value).unwrap();
                let ts = v["ts"].as_i64().unwrap();
                let key = (
                    v["user"].as_str().unwrap().to_string(),
                    ts.div_euclid(1_000) * 1_000,
                );
                let e = in_panes.entry(key).or_default();
                e.0 += 1;
                e.1 += v["amount"].as_i64().unwrap() as f64;
            }
            other => problems.push(format!("dead letter reason {other} for {t}/{p}@{o}")),
        }
    }
    // Windows past the cutoff have not fired; their late records do not count either.
    in_panes.retain(|(_, start), _| start + 1_000 <= s.cutoff);
    let want: BTreeMap<(String, i64), (u64, f64)> = all.windows.clone();
    if in_panes != want {
        let differ: Vec<String> = want
            .iter()
            .filter(|(k, v)| in_panes.get(*k) != Some(*v))
            .take(3)
            .map(|(k, v)| format!("{k:?}: records {v:?}, panes + late {:?}", in_panes.get(k)))
            .collect();
        problems.push(format!(
            "records not conserved ({} windows against {}): {differ:?}",
            in_panes.len(),
            want.len()
        ));
    }
    let want_malformed: BTreeSet<(String, i32, i64)> = all
        .malformed
        .iter()
        .map(|(id, o)| {
            let (t, p) = &ids[id];
            (t.clone(), *p, *o)
        })
        .collect();
    if malformed != want_malformed {
        problems.push(format!(
            "malformed dead letters: {} against {}",
            malformed.len(),
            want_malformed.len()
        ));
    }
    problems
}

/// Duplicated or gapped panes, repeated dead letters, open transactions.
/// Session windows in the hop's scenario: the gap between a user's sessions.
pub const SESSION_GAP: i64 = 250;

/// [`pipeline`] with per-user session windows (a 250 ms gap, so most users' records make many
/// sessions) and a watermark 100 ms behind, so records up to 300 ms out of order come after
/// their sessions fired, within the allowed lateness (1 s): they merge sessions that fired,
/// which are retracted, while the final sessions stay determined by the input. Every kind of
/// operation: exact ones the independent fold checks (count, sum, count_distinct, first, last,
/// duration, top_k) and the sketches (approx_count_distinct, approx_percentile).
pub fn session_pipeline(
    broker: &str,
    state: &std::path::Path,
    instance: &str,
    topics: &[&str],
) -> String {
    let text = pipeline(broker, state, instance, topics, "", "");
    let tumbling = "type = \"tumbling\"\nsize = \"1s\"";
    assert!(text.contains(tumbling));
    let watermark = "max_out_of_orderness = \"300ms\"";
    assert!(text.contains(watermark));
    text.replace(
        tumbling,
        &format!("type = \"session\"\ngap = \"{SESSION_GAP}ms\""),
    )
    .replace(watermark, "max_out_of_orderness = \"100ms\"")
    .replace(
        "[kafka]\n",
        &format!(
            r#"[[aggregations]]
name = "sessions"
op = "count_distinct"
field = "session"
{FIRST_AND_LAST}[[aggregations]]
name = "length"
op = "duration"
[[aggregations]]
name = "top"
op = "top_k"
field = "session"
k = 2
[[aggregations]]
name = "approx_sessions"
op = "approx_count_distinct"
field = "session"
[[aggregations]]
name = "p90"
op = "approx_percentile"
field = "amount"
q = 0.9
[kafka]
"#
        ),
    )
}

/// `first` and `last` of the field `session`, as `entry` and `exit`: aggregations that keep the
/// strings they read.
pub const FIRST_AND_LAST: &str = r#"[[aggregations]]
name = "entry"
op = "first"
field = "session"
[[aggregations]]
name = "exit"
op = "last"
field = "session"
"#;

/// The final panes of session windows ending by `cutoff`: per window, its last pane's
/// aggregates (as JSON text) where that pane is not a RETRACT (a merge superseded the window).
pub fn final_sessions(lines: &[String], cutoff: i64) -> BTreeMap<(String, i64, i64), String> {
    let mut last: BTreeMap<(String, i64, i64), (i64, serde_json::Value)> = BTreeMap::new();
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).expect("a pane is JSON");
        let key = (
            v["key"].as_str().expect("a key of one part").to_string(),
            v["window_start"].as_i64().expect("window_start"),
            v["window_end"].as_i64().expect("window_end"),
        );
        let idx = v["pane_index"].as_i64().expect("pane_index");
        if last.get(&key).is_none_or(|old| old.0 < idx) {
            last.insert(key, (idx, v));
        }
    }
    last.into_iter()
        .filter(|((_, _, end), (_, v))| *end <= cutoff && v["timing"] != "RETRACT")
        .map(|(k, (_, v))| {
            let aggs: BTreeMap<&str, &serde_json::Value> = [
                "count",
                "total",
                "sessions",
                "entry",
                "exit",
                "length",
                "top",
                "approx_sessions",
                "p90",
            ]
            .iter()
            .map(|f| (*f, &v[*f]))
            .collect();
            (k, serde_json::to_string(&aggs).unwrap())
        })
        .collect()
}

impl HopScenario {
    /// The independent reference for [`session_pipeline`]: per user, the well-formed records
    /// sorted by event time and cut where one starts at or after the running session's end
    /// (its latest time plus the gap); per session ending by the cutoff, the exact aggregates as
    /// `final_sessions` writes them (the sketches left out).
    pub fn session_reference(&self) -> BTreeMap<(String, i64, i64), serde_json::Value> {
        let mut by_user: BTreeMap<String, Vec<(i64, String, i64)>> = BTreeMap::new();
        for (_, _, _, v) in &self.records {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(v) else {
                continue; // malformed: dead-lettered
            };
            by_user
                .entry(v["user"].as_str().unwrap().to_string())
                .or_default()
                .push((
                    v["ts"].as_i64().unwrap(),
                    v["session"].as_str().unwrap().to_string(),
                    v["amount"].as_i64().unwrap(),
                ));
        }
        let mut out = BTreeMap::new();
        for (user, mut evs) in by_user {
            evs.sort();
            let mut cut: Vec<Vec<(i64, String, i64)>> = Vec::new();
            for e in evs {
                match cut.last_mut() {
                    Some(cur) if e.0 < cur.iter().map(|c| c.0).max().unwrap() + SESSION_GAP => {
                        cur.push(e)
                    }
                    _ => cut.push(vec![e]),
                }
            }
            for s in cut {
                let (start, last) = (s[0].0, s[s.len() - 1].0);
                let end = last + SESSION_GAP;
                if end > self.cutoff {
                    continue;
                }
                let distinct: BTreeSet<&str> = s.iter().map(|e| e.1.as_str()).collect();
                let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
                for e in &s {
                    *counts.entry(e.1.as_str()).or_default() += 1;
                }
                let mut top: Vec<(&str, u64)> = counts.into_iter().collect();
                top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                top.truncate(2);
                out.insert(
                    (user.clone(), start, end),
                    serde_json::json!({
                        "count": s.len(),
                        "total": s.iter().map(|e| e.2).sum::<i64>() as f64,
                        "sessions": distinct.len(),
                        "entry": s[0].1,
                        "exit": s[s.len() - 1].1,
                        "length": last - start,
                        "top": top.iter().map(|(v, n)| serde_json::json!({"value": v, "count": n})).collect::<Vec<_>>(),
                    }),
                );
            }
        }
        out
    }
}

/// Problems of a session run over input without late records: its final sessions equal
/// `simulate`'s (every aggregate, sketches included) and the independent fold's (the exact
/// aggregates), every pane is committed once with pane indexes without gaps, and every
/// malformed record is dead-lettered once.
pub fn judge_sessions(got: &Committed, s: &HopScenario, simulated: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let run = final_sessions(&got.panes, s.cutoff);
    let sim = final_sessions(simulated, s.cutoff);
    if run != sim {
        let differ: Vec<String> = sim
            .iter()
            .filter(|(k, v)| run.get(*k) != Some(*v))
            .chain(run.iter().filter(|(k, _)| !sim.contains_key(*k)))
            .take(3)
            .map(|(k, v)| {
                format!(
                    "{k:?}: simulate {:?}, run {:?}",
                    sim.get(k),
                    run.get(k).or(Some(v))
                )
            })
            .collect();
        problems.push(format!(
            "final sessions differ from simulate ({} against {}): {differ:?}",
            run.len(),
            sim.len()
        ));
    }
    let want = s.session_reference();
    if want.len() < 10 {
        problems.push(format!(
            "the fold has {} sessions: too few to judge",
            want.len()
        ));
    }
    if want.len() != run.len() {
        problems.push(format!(
            "{} final sessions, the fold has {}",
            run.len(),
            want.len()
        ));
    }
    for (k, w) in want.iter().take(100_000) {
        let Some(got) = run.get(k) else {
            problems.push(format!("{k:?}: no final pane (want {w})"));
            continue;
        };
        let got: serde_json::Value = serde_json::from_str(got).unwrap();
        for (field, value) in w.as_object().unwrap() {
            let same = match (value.as_f64(), got[field].as_f64()) {
                (Some(a), Some(b)) => a == b,
                _ => &got[field] == value,
            };
            if !same {
                problems.push(format!(
                    "{k:?}: {field} is {}, the fold says {value}",
                    got[field]
                ));
            }
        }
        if problems.len() > 20 {
            break;
        }
    }
    problems.extend(common_problems(got));
    let (_, want_dead) = s.reference();
    let got_dead: BTreeSet<_> = got.dead.keys().cloned().collect();
    if got_dead != want_dead {
        problems.push(format!(
            "dead letters: {} against {} expected",
            got_dead.len(),
            want_dead.len()
        ));
    }
    problems
}

/// Duplicated or gapped panes, repeated dead letters, open transactions.
pub fn common_problems(got: &Committed) -> Vec<String> {
    let mut problems = got.audit.clone();
    for (d, n) in &got.dead {
        if *n > 1 {
            problems.push(format!("dead-lettered {n} times: {d:?}"));
        }
    }
    if got.open > 0 {
        problems.push(format!("{} records in open transactions", got.open));
    }
    problems
}

/// Writes every record of `topics` (markers included, with producer id, epoch and what the
/// resolver made of each) to `<dir>/dump-<topic>.txt`; repartition records are decoded (a pack's
/// events as key, event time and input coordinates). For diagnosing a failed run while its broker
/// is still up.
pub fn dump(broker: &str, dir: &std::path::Path, topics: &[&str]) {
    use std::fmt::Write as _;
    for topic in topics {
        let records = match super::dump_topic(broker, topic) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("dump of {topic} failed: {e}");
                continue;
            }
        };
        let mut text = String::new();
        for (r, fate) in &records {
            let _ = write!(
                text,
                "{} {} pid={} epoch={} ts={} {fate}",
                r.partition, r.offset, r.producer_id, r.epoch, r.timestamp
            );
            if let Some(c) = r.marker {
                let _ = writeln!(text, " {}", if c == 1 { "COMMIT" } else { "ABORT" });
                continue;
            }
            for (k, v) in &r.headers {
                let v = v
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                let _ = write!(text, " h:{k}={v}");
            }
            let key = r.key.as_deref().map(String::from_utf8_lossy);
            let _ = write!(text, " key={key:?}");
            let value = r.value.as_deref().unwrap_or_default();
            if topic.ends_with("-repartition") {
                match tidemark::format::repartition::decode(r.key.as_deref(), value) {
                    Ok(tidemark::format::repartition::HopRecord::Events(evs)) => {
                        let _ = write!(text, " events={}:", evs.len());
                        for (ev, o) in evs {
                            let _ = write!(
                                text,
                                " [{} {} t{}/{}@{}]",
                                ev.key, ev.ts, o.topic, o.partition, o.offset
                            );
                        }
                    }
                    Ok(tidemark::format::repartition::HopRecord::Event(ev, o)) => {
                        let _ = write!(
                            text,
                            " event [{} {} t{}/{}@{}]",
                            ev.key, ev.ts, o.topic, o.partition, o.offset
                        );
                    }
                    Ok(tidemark::format::repartition::HopRecord::Partials(partials)) => {
                        let _ = write!(text, " partials={}:", partials.len());
                        for p in partials {
                            let _ = write!(
                                text,
                                " [{} {} t{}/{}@{:?}]",
                                p.key,
                                p.ts,
                                p.origin.topic,
                                p.origin.partition,
                                p.events.iter().map(|e| e.0).collect::<Vec<_>>()
                            );
                        }
                    }
                    Ok(tidemark::format::repartition::HopRecord::Watermarks(reports)) => {
                        let _ = write!(text, " watermarks:");
                        for (o, w) in reports {
                            let _ = write!(
                                text,
                                " [t{}/{} wm={} idle={:?}]",
                                o.topic, o.partition, w.watermark, w.idle_at
                            );
                        }
                    }
                    Err(e) => {
                        let _ = write!(text, " undecodable: {e}");
                    }
                }
            } else if let Ok(v) = std::str::from_utf8(value) {
                let _ = write!(text, " value={v}");
            } else {
                let _ = write!(text, " value=<{} bytes>", value.len());
            }
            text.push('\n');
        }
        let path = dir.join(format!("dump-{topic}.txt"));
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("writing {}: {e}", path.display());
        }
    }
}
