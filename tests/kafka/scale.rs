//! Scale steps under live load: the two-stage pipeline (null-keyed input on two topics of 6
//! partitions each, through the repartition hop) starts with one member; the group then grows to
//! 2, 4 and 6 members and shrinks back to 2 (the leaving members stop with SIGTERM), one step
//! every `TIDEMARK_SCALE_STEP` seconds, while input keeps arriving. Every pane and dead letter
//! must be committed exactly once, judged from the raw log as the hop's chaos test judges it.
//!
//! For each step it reports the **pause**: from the change to the moment every partition
//! (input and repartition) has made committed progress again, the longest time any partition
//! went without committed progress (`tidemark_records_in_total` of the members, sampled every
//! 100 ms); the **state restored**: changelog records applied by restores in the step
//! (`tidemark_restore_records_total`); and when every member first held partitions. A step
//! passes when, before the next one, every member holds partitions and every partition has
//! processed again. One line per step starts with `scale-step:`.
//!
//! `TIDEMARK_SCALE_RECORDS` (default 20,000) and `TIDEMARK_SCALE_STEP` (default 30 s: the test
//! broker once took 19.5 s to give every member partitions) set the strength;
//! `scripts/scale-steps.sh` runs it at 60,000 records and 20 s per step.

use crate::common;

use common::chaos;
use common::hop::{self, HopScenario, Keys};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

const TOPICS: [(&str, i32); 2] = [("web", 6), ("app", 6)];
/// Group sizes, in order, after the first member.
const STEPS: [usize; 4] = [2, 4, 6, 2];

struct Member {
    id: String,
    port: u16,
    child: Child,
}

fn start(dir: &Path, broker: &str, id: &str) -> Member {
    let port = common::free_port();
    let state = chaos::state_dir(dir, id, 0, true);
    let mut text = hop::pipeline(broker, &state, id, &["web", "app"], "", "");
    text.push_str(&format!("\n[metrics]\naddress = \"127.0.0.1:{port}\"\n"));
    Member {
        id: id.to_string(),
        port,
        child: chaos::spawn(dir, id, 0, &text),
    }
}

/// A member's metrics, or none when it does not answer.
fn scrape(port: u16) -> BTreeMap<String, f64> {
    match common::http_get(port, "/metrics") {
        Some((200, body)) => common::parse_metrics(&body),
        _ => BTreeMap::new(),
    }
}

/// One sample of every member: committed records per partition series (summed over members,
/// counted per member since its start) and changelog records restored.
#[derive(Debug, Default, Clone)]
struct Sample {
    /// Per (member, `records_in` series): the member's counter.
    records_in: BTreeMap<(String, String), f64>,
    restored: BTreeMap<String, f64>,
    /// Per member, the partitions it holds (`tidemark_assigned_partitions`).
    assigned: BTreeMap<String, f64>,
}

fn sample(members: &[Member]) -> Sample {
    let mut s = Sample::default();
    for m in members {
        for (k, v) in scrape(m.port) {
            if let Some(labels) = k.strip_prefix("tidemark_records_in_total") {
                s.records_in.insert((m.id.clone(), labels.to_string()), v);
            } else if k.starts_with("tidemark_restore_records_total") {
                *s.restored.entry(m.id.clone()).or_default() += v;
            } else if k == "tidemark_assigned_partitions" {
                s.assigned.insert(m.id.clone(), v);
            }
        }
    }
    s
}

/// What one step did.
struct Step {
    /// The longest time a partition went without committed progress after the change.
    pause: Duration,
    /// Changelog records restored.
    restored: f64,
    /// Whether every partition progressed after the change.
    resumed: bool,
    /// When every member first held partitions, after the change.
    balanced_after: Option<Duration>,
    /// Partitions per member at the end.
    assigned: Vec<f64>,
}

/// Watches progress after a change until `until`: per partition, when it last made progress, and
/// when every member holds partitions.
fn watch_step(members: &[Member], partitions: usize, until: Instant) -> Step {
    let change = Instant::now();
    let first = sample(members);
    let restored_before: f64 = first.restored.values().sum();
    let mut last_progress: BTreeMap<String, Instant> = BTreeMap::new();
    let mut longest = Duration::ZERO;
    let mut prev = first;
    let mut all_back = false;
    let mut balanced_after = None;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        let cur = sample(members);
        for ((member, series), v) in &cur.records_in {
            let before = prev
                .records_in
                .get(&(member.clone(), series.clone()))
                .copied()
                .unwrap_or(0.0);
            if *v > before {
                // The series' labels name the partition (topic and partition).
                let since = last_progress.get(series).copied().unwrap_or(change);
                longest = longest.max(now - since);
                last_progress.insert(series.clone(), now);
            }
        }
        if balanced_after.is_none()
            && cur.assigned.len() == members.len()
            && cur.assigned.values().all(|n| *n > 0.0)
        {
            balanced_after = Some(change.elapsed());
        }
        prev = cur;
        if !all_back && last_progress.len() >= partitions {
            all_back = true;
        }
    }
    // A partition that never progressed again stalled for the whole step.
    if !all_back {
        longest = longest.max(until - change);
    }
    let restored: f64 = prev.restored.values().sum::<f64>() - restored_before;
    Step {
        pause: longest,
        restored: restored.max(0.0),
        resumed: all_back,
        balanced_after,
        assigned: prev.assigned.values().copied().collect(),
    }
}

#[test]
fn the_group_grows_to_six_members_and_shrinks_to_two_under_load_exactly_once() {
    let records: i64 = chaos::env_or("TIDEMARK_SCALE_RECORDS", 20_000);
    let step_s: u64 = chaos::env_or("TIDEMARK_SCALE_STEP", 30);
    let seed = chaos::seed();
    let broker = common::Broker::start();
    hop::create_topics(&broker, &TOPICS);
    let dir = tempfile::tempdir().unwrap();
    let scenario = HopScenario::generate(&TOPICS, records, Keys::Null, true, seed);

    let mut members = vec![start(dir.path(), &broker.addr, "m1")];
    // Live input over the steps and more (the first output takes a while).
    let producer = scenario.produce_over(&broker.addr, (STEPS.len() as u64 + 2) * step_s * 1000);
    hop::wait_for_first_pane(&broker.addr, "one member");

    // Input partitions and repartition partitions (as many as the largest input).
    let partitions = TOPICS.iter().map(|(_, n)| *n as usize).sum::<usize>() + 6;
    let mut lines = Vec::new();
    let mut all_resumed = true;
    let mut next_id = 2;
    for &size in &STEPS {
        let from = members.len();
        while members.len() < size {
            members.push(start(dir.path(), &broker.addr, &format!("m{next_id}")));
            next_id += 1;
        }
        while members.len() > size {
            let m = members.pop().unwrap();
            let asked = Instant::now();
            let status = common::stop_member(m.child);
            println!(
                "scale-stop: {} stopped in {:.1} s: {status}",
                m.id,
                asked.elapsed().as_secs_f64()
            );
            if !status.success() {
                let kept = dir.keep();
                panic!(
                    "{} did not stop cleanly ({status}); member logs kept in {}",
                    m.id,
                    kept.display()
                );
            }
        }
        let step = watch_step(
            &members,
            partitions,
            Instant::now() + Duration::from_secs(step_s),
        );
        all_resumed &= step.resumed && step.balanced_after.is_some();
        let line = format!(
            "scale-step: {from} -> {size} members: every member holding partitions after {}, pause {:.1} s, restored {:.0} changelog records, every partition processing again: {}, partitions per member {:?}",
            step.balanced_after
                .map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "never".into()),
            step.pause.as_secs_f64(),
            step.restored,
            step.resumed,
            step.assigned
        );
        println!("{line}");
        lines.push(line);
    }
    producer.join().unwrap();

    // Let the group finish the input, then stop every member with SIGTERM.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut problems = hop::judge_conserved(&hop::committed(&broker.addr), &scenario);
    while !problems.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        problems = hop::judge_conserved(&hop::committed(&broker.addr), &scenario);
    }
    let failed_exits = members
        .into_iter()
        .map(|m| common::stop_member(m.child))
        .filter(|s| !s.success())
        .count();
    let got = hop::committed(&broker.addr);
    let problems = hop::judge_conserved(&got, &scenario);
    let pass = problems.is_empty() && failed_exits == 0 && all_resumed;
    println!(
        "scale: seed={seed} records={} panes={} problems={} failed_exits={failed_exits} result={}",
        scenario.records.len(),
        got.panes.len(),
        problems.len(),
        if pass { "PASS" } else { "FAIL" }
    );
    for p in &problems {
        println!("problem: {p}");
    }
    if !pass {
        let kept = dir.keep();
        panic!(
            "scale run failed (seed {seed}); member logs kept in {}",
            kept.display()
        );
    }
}
