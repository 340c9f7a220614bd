//! Restart benchmark: how long after a `kill -9` the same partitions commit output again, with
//! static membership (`instance_id` set and `static_membership = true`, so it is the consumer's
//! `group.instance.id`) and without
//! (a generated instance id: the restarted process is a new member, and the group waits for the
//! dead one's session to time out before it rebalances).
//!
//! One member of a group on a local Tansu broker processes a live input (3 partitions). It is
//! killed at a random moment after it has committed output and restarted at once; the figure is
//! the time from the kill to the first pane committed by the new process, read from the raw log.
//! `session.timeout.ms` is 6,000 as in the broker tests. Run: `./scripts/bench-restart.sh`
//! (= `cargo bench --bench restart`); `TIDEMARK_RESTART_ROUNDS` sets the kills per mode (5).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn member(dir: &Path, broker: &str, instance: Option<&str>, round: usize) -> Child {
    let cfg = dir.join(format!("member-{round}.toml"));
    // The state directory is kept, so the restart measures the group, not a restore.
    let mut text = common::pipeline(broker, &dir.join("state"), instance, "");
    if instance.is_some() {
        // Members are dynamic by default: the static mode is turned on explicitly.
        text = text.replacen("[kafka]\n", "[kafka]\nstatic_membership = true\n", 1);
    }
    std::fs::write(&cfg, text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["run", "--config"])
        .arg(&cfg)
        .env("TIDEMARK_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn committed_panes(broker: &str) -> usize {
    common::committed_values(broker, "panes").len()
}

/// Kills and restarts one member `rounds` times; returns the kill → first new commit times.
fn measure(instance: Option<&str>, rounds: usize) -> Vec<Duration> {
    let broker = common::Broker::start();
    broker.create_topic("events", 3);
    let dir = tempfile::tempdir().unwrap();
    let text = common::pipeline(&broker.addr, Path::new("/unused"), instance, "");
    // Enough live input for every round: 1,000 records/s.
    let secs = 20 + rounds as i64 * 20;
    let scenario = common::Scenario::generate_for(&text, 3, secs * 1_000, 11);
    let producer = scenario.produce(&broker.addr, 100, Duration::from_millis(100));
    let mut child = member(dir.path(), &broker.addr, instance, 0);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::new();
    for round in 1..=rounds {
        // Wait until the current process commits output, then kill it a moment later.
        let before = committed_panes(&broker.addr);
        let deadline = Instant::now() + Duration::from_secs(60);
        while committed_panes(&broker.addr) <= before {
            assert!(Instant::now() < deadline, "no output within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(500 + seed % 1_000));
        child.kill().unwrap();
        child.wait().unwrap();
        let killed = Instant::now();
        let at_kill = committed_panes(&broker.addr);
        child = member(dir.path(), &broker.addr, instance, round);
        while committed_panes(&broker.addr) <= at_kill {
            assert!(
                killed.elapsed() < Duration::from_secs(90),
                "no output 90 s after a kill"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        out.push(killed.elapsed());
    }
    common::stop_member(child);
    producer.join().unwrap();
    out
}

fn summary(name: &str, mut d: Vec<Duration>) {
    d.sort();
    let ms: Vec<String> = d.iter().map(|x| x.as_millis().to_string()).collect();
    println!(
        "{name:<40} median {:>6} ms   min {:>6} ms   max {:>6} ms   (each: {})",
        d[d.len() / 2].as_millis(),
        d[0].as_millis(),
        d[d.len() - 1].as_millis(),
        ms.join(", ")
    );
}

fn main() {
    let rounds = std::env::var("TIDEMARK_RESTART_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    println!("kill -9 -> first pane committed by the restarted member (session.timeout.ms 6000, {rounds} kills each)");
    summary(
        "static membership (instance_id = \"a\")",
        measure(Some("a"), rounds),
    );
    summary("dynamic membership (no instance_id)", measure(None, rounds));
}
