//! What the two chaos tests share: their knobs from the environment, the seeded randomness, the
//! member processes and the kill loop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The environment variable `name` parsed, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The run's seed: `TIDEMARK_CHAOS_SEED`, or one from the clock (odd, as xorshift needs non-zero).
pub fn seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    env_or("TIDEMARK_CHAOS_SEED", now | 1)
}

/// xorshift64: the tests' only source of randomness, so a seed repeats a run's choices.
pub fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Whether the members are static (`TIDEMARK_CHAOS_STATIC=1`); dynamic by default.
pub fn static_members() -> bool {
    std::env::var("TIDEMARK_CHAOS_STATIC").is_ok_and(|v| v == "1")
}

/// One member slot: a stable instance id (as a StatefulSet or compose host name gives) and its
/// current process.
pub struct Member {
    /// The instance id (and so the transactional id), the same across restarts.
    pub id: String,
    /// The running process.
    pub child: Child,
    /// How many times this slot was restarted.
    pub incarnation: usize,
}

/// The state directory of an incarnation: the slot's own one when the state is kept, otherwise an
/// empty one, from which the incarnation restores everything from the changelog.
pub fn state_dir(dir: &Path, id: &str, incarnation: usize, keep_state: bool) -> PathBuf {
    if keep_state {
        dir.join(format!("state-{id}"))
    } else {
        dir.join(format!("state-{id}-{incarnation}"))
    }
}

/// Writes the incarnation's pipeline `text` (TOML, or SQL) and runs `tidemark run` on it, logging at info to
/// `{id}-{incarnation}.log` in `dir`.
pub fn spawn(dir: &Path, id: &str, incarnation: usize, text: &str) -> Child {
    let sql = super::is_sql(text);
    let cfg = dir.join(format!(
        "{id}-{incarnation}.{}",
        if sql { "sql" } else { "toml" }
    ));
    std::fs::write(&cfg, text).unwrap();
    let log = std::fs::File::create(dir.join(format!("{id}-{incarnation}.log"))).unwrap();
    super::adopt(
        Command::new(super::tidemark_bin())
            .args(["run", if sql { "--sql" } else { "--config" }])
            .arg(&cfg)
            .env("TIDEMARK_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

/// Whether incarnation `incarnation` of member `id` had partitions: its log holds `restored`, the
/// line a restore writes.
pub fn had_partitions(dir: &Path, id: &str, incarnation: usize, restored: &str) -> bool {
    std::fs::read_to_string(dir.join(format!("{id}-{incarnation}.log")))
        .unwrap_or_default()
        .contains(restored)
}

/// What the kills did.
#[derive(Debug, Default)]
pub struct Kills {
    /// Restarts on the slot's own state directory.
    pub kept: usize,
    /// Restarts on an empty state directory.
    pub empty: usize,
    /// Kills of a member that held partitions.
    pub working: usize,
}

/// The kills: `kills` times, a random member at a random moment, 1-4 s apart, killed with SIGKILL
/// and restarted at once by `start(id, incarnation, keep_state)`, on its old state directory or
/// on an empty one, alternately. `restored` is the log line that shows a member held partitions.
pub fn kill_loop(
    kills: usize,
    seed: &mut u64,
    members: &mut [Member],
    dir: &Path,
    restored: &str,
    mut start: impl FnMut(&str, usize, bool) -> Child,
) -> Kills {
    let mut out = Kills::default();
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(1_000 + next(seed) % 3_000));
        let n = members.len() as u64;
        let m = &mut members[(next(seed) % n) as usize];
        m.child.kill().unwrap(); // SIGKILL
        m.child.wait().unwrap();
        if had_partitions(dir, &m.id, m.incarnation, restored) {
            out.working += 1;
        }
        m.incarnation += 1;
        let keep = k % 2 == 0;
        if keep {
            out.kept += 1;
        } else {
            out.empty += 1;
        }
        m.child = start(&m.id, m.incarnation, keep);
    }
    out
}

/// Counts member log lines that contain `needle`.
pub fn count_in_logs(dir: &Path, needle: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(needle))
                .count()
        })
        .sum()
}

/// The line a member logs when it moves the group, or follows it, from the broker's consumer
/// group to membership from the log.
pub const MOVED: &str = "the group moves to membership from the log";

/// The line the repartition reader logs when a fetch answer skipped offsets of the log.
pub const HOLE: &str = "a fetch answer skipped offsets of the log";

/// The line the repartition reader logs when it gave up waiting at a hole.
pub const HOLE_UNFILLED: &str = "the hole in the log did not fill";
