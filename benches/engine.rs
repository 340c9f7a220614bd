//! Engine benchmark: the windowing core alone (no Kafka; no decoding but in the `-json` cases) with
//! RocksDB state and a state flush every 100,000 events, over 100,000 keys, events in event-time
//! order with 1% disorder. The `-json` cases write each event as a JSON line and decode it with
//! the pipeline's decoder first (the formatting is in their figures too), one with a plain key,
//! one with a filter and a two-part key, one with a count and a sum, one with six more
//! aggregations (sum, mean, a DDSketch percentile, an exact and a HyperLogLog distinct count,
//! `last`), so their CPU per event (`cpu_us/ev`, user and system time of the scenario's process
//! over its events) compares what expressions and aggregations cost.
//!
//! Run: `cargo bench --bench engine` (or `scripts/bench-engine.sh`). Each scenario runs in its own
//! child process so its peak RSS is its own. Figures are printed as a table; nothing is asserted.
//!
//! Environment: `TIDEMARK_BENCH_EVENTS` (default 5,000,000; 20,000,000 for the global-window
//! counters, so each of their keys reaches its count of 100 twice), `TIDEMARK_BENCH_KEYS` (100,000),
//! `TIDEMARK_BENCH_RATE` (event-time events per second; by default 20,000 for tumbling windows, so
//! 1-minute windows fire several times; 100,000 for sliding windows, each key about once a second,
//! so a key fires about one pane per event; 100 for sessions: a key's events come about 1,000 s of
//! event time apart, so about one gap in six is longer than the 30-minute gap and sessions open,
//! grow, merge, fire and expire all through the run, over about 14 hours of event time; 20,000
//! for the global-window counters, whose panes fire by count whatever the event time),
//! `TIDEMARK_BENCH_ONLY` (run one scenario by name).

use std::process::Command;
use std::time::Instant;
use tidemark::config::parse_raw;
use tidemark::input::Event;
use tidemark::state::store::StateStore;
use tidemark::windowing::engine::{Engine, Layout};
use tidemark::windowing::spec::CacheLimits;
use tidemark::windowing::watermark::WatermarkTracker;

const FLUSH_EVERY: u64 = 100_000;

struct Scenario {
    name: &'static str,
    window: &'static str,
    layout: Option<&'static str>,
    /// Event-time density: events per second of event time across all keys.
    rate: u64,
    /// Overrides of (events, keys) for the naive comparison runs.
    small: bool,
    /// The `[trigger]` section's lines.
    trigger: &'static str,
    /// Events when `TIDEMARK_BENCH_EVENTS` is not set.
    events: u64,
    /// For the cases that decode: the `[input]` section's lines. Each event is then written as
    /// a JSON line and read back through the pipeline's decoder (filter, key parts, time)
    /// before the engine sees it.
    input: Option<&'static str>,
    /// `[[aggregations]]` tables besides the count every scenario has.
    aggs: &'static str,
}

/// The `[input]` lines of the decoded cases with a plain one-field key.
const PLAIN_KEY: &str = "key = \"k\"\ntimestamp = \"t\"";

/// Tumbling 1-minute windows over the tumbling events, undecoded: the first scenario, and the
/// base of the decoded ones.
const TUMBLING: Scenario = Scenario {
    name: "tumbling-1m",
    rate: 20_000,
    window: "type = \"tumbling\"\nsize = \"1m\"",
    layout: None,
    small: false,
    trigger: "",
    events: 5_000_000,
    input: None,
    aggs: "",
};

/// The tumbling case over the same events written as JSON lines and read back through the
/// pipeline's decoder with these `[input]` lines and aggregations.
const fn decoded(name: &'static str, input: &'static str, aggs: &'static str) -> Scenario {
    Scenario {
        name,
        input: Some(input),
        aggs,
        ..TUMBLING
    }
}

const SCENARIOS: &[Scenario] = &[
    TUMBLING,
    Scenario {
        name: "sliding-1h-1s",
        rate: 100_000,
        window: "type = \"sliding\"\nsize = \"1h\"\nslide = \"1s\"",
        ..TUMBLING
    },
    Scenario {
        name: "session-30m",
        rate: 100,
        window: "type = \"session\"\ngap = \"30m\"",
        ..TUMBLING
    },
    Scenario {
        name: "sliding-1h-1s-sliced-small",
        rate: 1_000,
        window: "type = \"sliding\"\nsize = \"1h\"\nslide = \"1s\"",
        small: true,
        ..TUMBLING
    },
    Scenario {
        name: "sliding-1h-1s-naive-small",
        rate: 1_000,
        window: "type = \"sliding\"\nsize = \"1h\"\nslide = \"1s\"",
        layout: Some("per-window"),
        small: true,
        ..TUMBLING
    },
    // The Dataflow model's "real-time counter": a global window per key firing every 100
    // elements. Without an idle expiry its one timer per key never moves; with one, every event
    // moves its key's expiry timer.
    Scenario {
        name: "global-count-100",
        window: "type = \"global\"",
        trigger: "early_count = 100",
        // 200 events per key, so each key fires its count twice.
        events: 20_000_000,
        ..TUMBLING
    },
    Scenario {
        name: "global-count-100-idle-1h",
        window: "type = \"global\"\nidle_expiry = \"1h\"",
        trigger: "early_count = 100",
        // 200 events per key, so each key fires its count twice.
        events: 20_000_000,
        ..TUMBLING
    },
    // The same events as tumbling-1m, decoded from JSON: first with a plain one-field key, then
    // with a filter that keeps every record and a key of two parts, one computed (as many groups
    // as before, since a key's country never changes). Their CPU per event compares what the
    // filter and the key expressions cost.
    decoded("tumbling-1m-json", PLAIN_KEY, ""),
    decoded(
        "tumbling-1m-json-filter-2key",
        "filter = \"kind = 'click' AND price >= 0\"\nkey = [\"k\", \"lower(geo.country)\"]\ntimestamp = \"t\"",
        "",
    ),
    // With a sum of the price besides the count: the reference that the six aggregations below
    // are compared with.
    decoded(
        "tumbling-1m-json-sum",
        PLAIN_KEY,
        "[[aggregations]]\nname = \"revenue\"\nop = \"sum\"\nfield = \"price\"\n",
    ),
    // With six more aggregations: a sum, a mean, a p99 (DDSketch), a distinct count of countries
    // (exact) and of prices (HyperLogLog), and the last kind. Its CPU per event against
    // tumbling-1m-json-sum's is what those operations cost.
    decoded("tumbling-1m-json-aggs", PLAIN_KEY, "[[aggregations]]\nname = \"revenue\"\nop = \"sum\"\nfield = \"price\"\n[[aggregations]]\nname = \"avg\"\nop = \"mean\"\nfield = \"price\"\n[[aggregations]]\nname = \"p99\"\nop = \"approx_percentile\"\nfield = \"price\"\nq = 0.99\n[[aggregations]]\nname = \"countries\"\nop = \"count_distinct\"\nfield = \"geo.country\"\n[[aggregations]]\nname = \"prices\"\nop = \"approx_count_distinct\"\nfield = \"price\"\n[[aggregations]]\nname = \"last_kind\"\nop = \"last\"\nfield = \"kind\"\n"),
];

/// CPU seconds (user and system) this process has used, from `/proc/self/stat`.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses): utime and stime are the 12th and
    // 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// xorshift64*: a fast deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Writes the name of key `k`, `user-` and six digits (more for `k` ≥ 1,000,000), into `out`.
///
/// The names are formatted in place rather than read from a table of strings: reading one of
/// 100,000 heap strings at random cost a cache miss per event, which the profile charged to the
/// harness, not the engine (about a fifth of the tumbling run).
fn set_key(out: &mut String, k: u64) {
    let mut digits = [b'0'; 20];
    let (mut n, mut i) = (k, digits.len());
    while n > 0 {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    let width = (digits.len() - i).max(6);
    out.clear();
    out.push_str("user-");
    out.push_str(std::str::from_utf8(&digits[digits.len() - width..]).expect("ascii digits"));
}

fn run_one(sc: &Scenario) {
    let (mut events, mut keys) = (
        env_u64("TIDEMARK_BENCH_EVENTS", sc.events),
        env_u64("TIDEMARK_BENCH_KEYS", 100_000),
    );
    let rate = env_u64("TIDEMARK_BENCH_RATE", sc.rate);
    if sc.small {
        // The naive layout writes size/slide = 3,600 window copies per event; keep it to a size
        // that finishes, and run the sliced layout on the very same data beside it.
        events = env_u64("TIDEMARK_BENCH_SMALL_EVENTS", 10_000);
        keys = 1_000;
    }
    let text = format!(
        "name = \"bench\"\n[input]\n{}\n[window]\n{}\n[watermark]\nmax_out_of_orderness = \"2s\"\n[trigger]\n{}\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n{}",
        sc.input.unwrap_or("key = \"k\"\ntimestamp = \"t\""),
        sc.window,
        sc.trigger,
        sc.aggs
    );
    let (spec, _) = parse_raw(&text, Vec::new()).unwrap().validate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path()).unwrap();
    let layout = match sc.layout {
        Some("per-window") => Layout::PerWindow,
        _ => Layout::for_spec(&spec.engine),
    };
    let mut engine = Engine::open_with_layout(
        &spec.engine,
        &store,
        0,
        layout,
        CacheLimits::keys(4_000_000),
    )
    .unwrap();
    let mut tracker = WatermarkTracker::new(spec.engine.watermark);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let t0: i64 = 1_700_000_000_000;
    let mut ev = Event {
        key: String::new(),
        ts: 0,
        values: Vec::new(),
    };
    let mut panes: u64 = 0;
    let mut flush_secs = 0.0;
    let mut take_secs = 0.0;
    let mut flushed_entries: u64 = 0;
    let decoder = sc
        .input
        .map(|_| tidemark::input::JsonDecoder::new(spec.input.clone()));
    let mut line = String::new();
    let mut user = String::new();
    const COUNTRIES: [&str; 4] = ["DE", "Fr", "us", "JP"];
    let cpu0 = cpu_secs();
    let start = Instant::now();
    for i in 0..events {
        let mut ts = t0 + (i as i64 * 1000) / rate as i64;
        let r = rng.next();
        if r % 100 == 0 {
            ts -= ((r >> 8) % 2_000) as i64; // 1% of events up to 2 s out of order
        }
        let k = (r >> 20) % keys;
        match &decoder {
            None => {
                set_key(&mut ev.key, k);
                ev.ts = ts;
            }
            Some(d) => {
                use std::fmt::Write as _;
                set_key(&mut user, k);
                line.clear();
                let _ = write!(
                    line,
                    r#"{{"k":"{user}","t":{ts},"kind":"click","price":{}.5,"geo":{{"country":"{}"}}}}"#,
                    r % 50,
                    COUNTRIES[(k % 4) as usize]
                );
                ev = d
                    .decode(line.as_bytes(), tidemark::input::Meta::default())
                    .unwrap()
                    .expect("the filter keeps every record");
            }
        }
        engine.process(&ev).unwrap();
        let wm = tracker.on_record(ts, 0);
        engine.advance_watermark(wm).unwrap();
        panes += engine.take_panes().len() as u64;
        if (i + 1) % FLUSH_EVERY == 0 {
            let f = Instant::now();
            let changes = engine.take_changes();
            let taken = f.elapsed().as_secs_f64();
            engine.write_changes(&changes, None).unwrap();
            flush_secs += f.elapsed().as_secs_f64();
            take_secs += taken;
            flushed_entries += changes.len() as u64;
        }
    }
    engine.flush().unwrap();
    let secs = start.elapsed().as_secs_f64();
    let cpu_us = (cpu_secs() - cpu0) * 1e6 / events as f64;
    store.flush().unwrap();
    let db_mb = store.size_bytes() as f64 / 1e6;
    let timers = engine.pending_timers();
    let stats = engine.stats();
    println!(
        "{:<28} {:>10} {:>6} {:>8.2} {:>12.0} {:>8.3} {:>10} {:>9.1} {:>9.1} {:>10} {:>7.1}%",
        sc.name,
        events,
        keys,
        secs,
        events as f64 / secs,
        cpu_us,
        panes,
        db_mb,
        peak_rss_mb(),
        timers,
        100.0 * flush_secs / secs,
    );
    if std::env::var("TIDEMARK_BENCH_DETAIL").is_ok() {
        eprintln!(
            "  {}: take_changes {:.3}s, write {:.3}s, {} entries written",
            sc.name,
            take_secs,
            flush_secs - take_secs,
            flushed_entries
        );
    }
    assert_eq!(
        stats.late, 0,
        "the benchmark data should have no late events"
    );
}

fn main() {
    for k in [0, 7, 123_456, 99_999, 1_234_567] {
        let mut name = String::new();
        set_key(&mut name, k);
        assert_eq!(name, format!("user-{k:06}"), "key names as before");
    }
    if let Ok(name) = std::env::var("TIDEMARK_BENCH_CHILD") {
        let sc = SCENARIOS
            .iter()
            .find(|s| s.name == name)
            .expect("known scenario");
        run_one(sc);
        return;
    }
    let only = std::env::var("TIDEMARK_BENCH_ONLY").ok();
    println!(
        "{:<28} {:>10} {:>6} {:>8} {:>12} {:>8} {:>10} {:>9} {:>9} {:>10} {:>8}",
        "scenario",
        "events",
        "keys",
        "secs",
        "events/s",
        "cpu_us/ev",
        "panes",
        "db_MB",
        "rss_MB",
        "timers",
        "flush"
    );
    let exe = std::env::current_exe().unwrap();
    for sc in SCENARIOS {
        if only.as_deref().is_some_and(|o| o != sc.name) {
            continue;
        }
        let status = Command::new(&exe)
            .env("TIDEMARK_BENCH_CHILD", sc.name)
            .status()
            .unwrap();
        assert!(status.success(), "scenario {} failed", sc.name);
    }
    println!("(panes are those fired while the watermark advanced; the final drain at end of input is not timed)");
}
