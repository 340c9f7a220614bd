//! Property tests of the windowing engine:
//! * sliced sliding windows give exactly the panes of a naive copy-per-window layout;
//! * session results do not depend on arrival order once the watermark has passed, and equal a
//!   reference computed by sorting;
//! * state flushed, closed and reopened (with a tiny cache, so keys are evicted and reloaded) gives
//!   the same panes as an uninterrupted run, on RocksDB and on the core's in-memory store;
//! * no input line makes `simulate` fail or panic;
//! * with any trigger (counts, processing-time delays, late firings) and window kind, no accepted
//!   element ends in zero panes: every element accepted is in the panes once the input ends;
//! * partials (events folded per key and set of windows, as the repartition hop's first stage
//!   folds them) give exactly the panes and late counts of their events one by one.

use proptest::prelude::*;
use tidemark::config::{parse_raw, PipelineSpec};
use tidemark::input::Event;
use tidemark::state::store::StateStore;
use tidemark::windowing::aggregate::{Output, Value};
use tidemark::windowing::assigner::SliceGrid;
use tidemark::windowing::backend::{MemoryBackend, StateBackend};
use tidemark::windowing::engine::{Admission, Engine, Layout, Pane};
use tidemark::windowing::spec::CacheLimits;
use tidemark::windowing::trigger::Timing;

fn spec(window: &str, extra_top: &str, trigger: &str, aggs: &str) -> PipelineSpec {
    let text = format!(
        "name = \"p\"\n{extra_top}\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\n{window}\n[trigger]\n{trigger}\n{aggs}\n"
    );
    parse_raw(&text, Vec::new()).unwrap().validate().unwrap().0
}

const COUNT_SUM: &str = "[[aggregations]]\nname = \"n\"\nop = \"count\"\n[[aggregations]]\nname = \"s\"\nop = \"sum\"\nfield = \"v\"\n";
const ALL: &str = "[[aggregations]]\nname = \"n\"\nop = \"count\"\n[[aggregations]]\nname = \"s\"\nop = \"sum\"\nfield = \"v\"\n[[aggregations]]\nname = \"lo\"\nop = \"min\"\nfield = \"v\"\n[[aggregations]]\nname = \"hi\"\nop = \"max\"\nfield = \"v\"\n";

/// Aggregations that are exact whatever the grouping and can all retract: sliced sliding
/// windows move a running aggregate with them.
const RETRACTING: &str = "[[aggregations]]\nname = \"n\"\nop = \"count\"\n[[aggregations]]\nname = \"s\"\nop = \"sum\"\nfield = \"v\"\n[[aggregations]]\nname = \"m\"\nop = \"mean\"\nfield = \"v\"\n";

/// Every operation (the sketches and moments among them, so nothing retracts).
const EVERY: &str = "[[aggregations]]\nname = \"n\"\nop = \"count\"\n[[aggregations]]\nname = \"s\"\nop = \"sum\"\nfield = \"v\"\n[[aggregations]]\nname = \"hi\"\nop = \"max\"\nfield = \"v\"\n[[aggregations]]\nname = \"d\"\nop = \"count_distinct\"\nfield = \"v\"\n[[aggregations]]\nname = \"hll\"\nop = \"approx_count_distinct\"\nfield = \"v\"\n[[aggregations]]\nname = \"p50\"\nop = \"approx_percentile\"\nfield = \"v\"\nq = 0.5\n[[aggregations]]\nname = \"f\"\nop = \"first\"\nfield = \"v\"\n[[aggregations]]\nname = \"l\"\nop = \"last\"\nfield = \"v\"\n[[aggregations]]\nname = \"sd\"\nop = \"stddev_samp\"\nfield = \"v\"\n[[aggregations]]\nname = \"top\"\nop = \"top_k\"\nfield = \"v\"\n[[aggregations]]\nname = \"dur\"\nop = \"duration\"\n";

/// One step of a scripted run.
#[derive(Debug, Clone)]
enum Op {
    Event {
        key: u8,
        ts: i64,
        v: i64,
    },
    Watermark(i64),
    /// Moves the processing-time clock forward by this much.
    Proc(i64),
}

fn ops(max_ts: i64) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => (0u8..3, -20i64..max_ts, -50i64..50).prop_map(|(key, ts, v)| Op::Event { key, ts, v }),
            1 => (-20i64..max_ts).prop_map(Op::Watermark),
        ],
        0..60,
    )
}

/// Like [`ops`], with moves of the processing-time clock among them.
fn ops_with_clock(max_ts: i64) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            6 => (0u8..3, -20i64..max_ts, -50i64..50).prop_map(|(key, ts, v)| Op::Event { key, ts, v }),
            1 => (-20i64..max_ts).prop_map(Op::Watermark),
            2 => (1i64..8).prop_map(Op::Proc),
        ],
        0..80,
    )
}

fn drive(engine: &mut Engine, ops: &[Op]) -> Vec<Pane> {
    let mut panes = Vec::new();
    for op in ops {
        match *op {
            Op::Event { key, ts, v } => {
                let ev = Event {
                    key: format!("k{key}"),
                    ts,
                    values: vec![Value::Float(v as f64)],
                };
                engine.process(&ev).unwrap();
            }
            Op::Watermark(w) => engine.advance_watermark(w).unwrap(),
            Op::Proc(d) => engine
                .advance_processing_time(engine.processing_time() + d)
                .unwrap(),
        }
        panes.extend(engine.take_panes());
    }
    engine.finish().unwrap();
    panes.extend(engine.take_panes());
    panes
}

fn sorted(mut panes: Vec<Pane>) -> Vec<String> {
    let mut out: Vec<String> = panes
        .drain(..)
        .map(|p| {
            format!(
                "{:?}",
                (p.key, p.window, p.timing, p.pane_index, p.count, p.values)
            )
        })
        .collect();
    out.sort();
    out
}

/// The panes with every double value rounded to 12 significant digits.
fn rounded(mut panes: Vec<Pane>) -> Vec<Pane> {
    for p in &mut panes {
        for v in p.values.iter_mut() {
            if let Output::Value(Value::Float(f)) = v {
                *f = format!("{f:.11e}").parse().unwrap();
            }
        }
    }
    panes
}

fn open(spec: &PipelineSpec, layout: Layout, cache: usize) -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path()).unwrap();
    let engine =
        Engine::open_with_layout(&spec.engine, &store, 0, layout, CacheLimits::keys(cache))
            .unwrap();
    (dir, engine)
}

/// Runs `ops`, flushing after each and closing and reopening the engine (with a 1-key cache, so
/// keys are evicted and reloaded) every `cut_every` ops on the store `store` gives; the panes.
fn reopening<S: StateBackend + Clone + 'static>(
    s: &PipelineSpec,
    layout: Layout,
    ops: &[Op],
    cut_every: usize,
    store: impl Fn() -> S,
) -> Vec<Pane> {
    let mut got = Vec::new();
    let (mut wm, mut now) = (i64::MIN, 0);
    for chunk in ops.chunks(cut_every) {
        let mut e =
            Engine::open_with_layout(&s.engine, &store(), 0, layout, CacheLimits::keys(1)).unwrap();
        e.advance_watermark(wm).unwrap();
        e.advance_processing_time(now).unwrap();
        assert!(e.take_panes().is_empty(), "reopening fired panes");
        for op in chunk {
            match *op {
                Op::Event { key, ts, v } => {
                    let values = vec![Value::Float(v as f64)];
                    e.process(&Event {
                        key: format!("k{key}"),
                        ts,
                        values,
                    })
                    .unwrap();
                }
                Op::Watermark(w) => e.advance_watermark(w).unwrap(),
                Op::Proc(d) => e.advance_processing_time(e.processing_time() + d).unwrap(),
            }
            got.extend(e.take_panes());
            e.flush().unwrap();
        }
        (wm, now) = (e.watermark(), e.processing_time());
    }
    let mut e =
        Engine::open_with_layout(&s.engine, &store(), 0, layout, CacheLimits::keys(1)).unwrap();
    e.advance_watermark(wm).unwrap();
    e.finish().unwrap();
    got.extend(e.take_panes());
    got
}

#[test]
fn a_cache_bounded_in_bytes_evicts_after_a_flush_and_gives_the_same_panes() {
    let s = spec("type = \"tumbling\"\nsize = \"100ms\"", "", "", EVERY);
    let run = |limits: CacheLimits| {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let mut e =
            Engine::open_with_layout(&s.engine, &store, 0, Layout::PerWindow, limits).unwrap();
        let (mut panes, mut figures) = (Vec::new(), Vec::new());
        for round in 0..20i64 {
            for key in 0..50 {
                for j in 0..5 {
                    let values = vec![Value::Float((round * 7 + key * 3 + j) as f64)];
                    e.process(&Event {
                        key: format!("k{key}"),
                        ts: round * 10 + j,
                        values,
                    })
                    .unwrap();
                }
            }
            e.flush().unwrap();
            figures.push(e.cache_figures());
            panes.extend(e.take_panes());
        }
        e.finish().unwrap();
        panes.extend(e.take_panes());
        (rounded(panes), figures)
    };
    let (free, free_figures) = run(CacheLimits::keys(1 << 20));
    let (bounded, bounded_figures) = run(CacheLimits {
        keys: 1 << 20,
        bytes: 16 * 1024,
    });
    assert!(!free.is_empty());
    assert_eq!(sorted(bounded), sorted(free));
    // Unbounded, the cache holds every key and measures them; bounded, it was over its bytes
    // after flushes and dropped its keys, and after each flush it is back within them.
    let last = free_figures.last().unwrap();
    assert_eq!((last.keys, last.evictions), (50, 0));
    assert!(last.bytes > 50 * 200 && last.largest_key > 200, "{last:?}");
    let last = bounded_figures.last().unwrap();
    assert!(last.evictions >= 10, "{bounded_figures:?}");
    assert!(
        bounded_figures.iter().all(|f| f.bytes <= 16 * 1024),
        "{bounded_figures:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn sliced_sliding_equals_copy_per_window(
        ops in ops(120),
        size_mul in 1i64..5, slide in 1i64..8, offset in 0i64..8,
        lateness in prop_oneof![Just(0i64), 1i64..30],
        late_none in any::<bool>(), discarding in any::<bool>(), aggs in 0u8..3,
    ) {
        // Sizes that divide evenly and sizes that do not.
        let size = slide * size_mul + (offset % 3);
        let offset = offset % slide;
        let window = format!("type = \"sliding\"\nsize = \"{size}ms\"\nslide = \"{slide}ms\"\noffset = \"{offset}ms\"");
        let trigger = format!(
            "late = \"{}\"\naccumulation = \"{}\"",
            if late_none { "none" } else { "every_element" },
            if discarding { "discarding" } else { "accumulating" }
        );
        let s = spec(&window, &format!("allowed_lateness = \"{lateness}ms\""), &trigger, [COUNT_SUM, ALL, RETRACTING][aggs as usize]);
        let (_d1, mut sliced) = open(&s, Layout::Sliced(SliceGrid::new(size, slide, offset)), 1 << 20);
        let (_d2, mut naive) = open(&s, Layout::PerWindow, 1 << 20);
        prop_assert_eq!(sorted(drive(&mut sliced, &ops)), sorted(drive(&mut naive, &ops)));
        prop_assert_eq!(sliced.stats().late, naive.stats().late);
    }

    #[test]
    fn sessions_do_not_depend_on_arrival_order(
        events in prop::collection::vec((0u8..3, 0i64..200, -20i64..20), 0..40),
        gap in 1i64..30,
        seed in any::<u64>(),
        touching in any::<bool>(),
    ) {
        let s = spec(
            &format!("type = \"session\"\ngap = \"{gap}ms\"\nmerge_touching = {touching}"),
            "",
            "",
            COUNT_SUM,
        );
        let as_ops = |evs: &[(u8, i64, i64)]| -> Vec<Op> {
            evs.iter().map(|&(key, ts, v)| Op::Event { key, ts, v }).collect()
        };
        let mut shuffled = events.clone();
        // A deterministic shuffle from the seed.
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let layout = Layout::Session { gap, merge_touching: touching };
        let (_d1, mut a) = open(&s, layout, 1 << 20);
        let (_d2, mut b) = open(&s, layout, 1 << 20);
        let pa = sorted(drive(&mut a, &as_ops(&events)));
        let pb = sorted(drive(&mut b, &as_ops(&shuffled)));
        prop_assert_eq!(&pa, &pb);

        // Reference: sort each key's events and cut where an event starts at or after the running end.
        let mut reference = Vec::new();
        for key in 0u8..3 {
            let mut mine: Vec<(i64, i64)> = events.iter().filter(|e| e.0 == key).map(|e| (e.1, e.2)).collect();
            mine.sort();
            let mut cur: Option<(i64, i64, u64, f64)> = None;
            for (ts, v) in mine {
                cur = match cur {
                    Some((st, end, n, sum)) if ts < end || (touching && ts == end) => {
                        Some((st, end.max(ts + gap), n + 1, sum + v as f64))
                    }
                    other => {
                        if let Some(c) = other { reference.push((key, c)); }
                        Some((ts, ts + gap, 1, v as f64))
                    }
                };
            }
            if let Some(c) = cur { reference.push((key, c)); }
        }
        let mut want: Vec<String> = reference
            .into_iter()
            .map(|(key, (st, end, n, sum))| {
                format!("{:?}", (format!("k{key}"), tidemark::windowing::assigner::Window::new(st, end),
                    tidemark::windowing::trigger::Timing::OnTime, 0u32, n,
                    vec![Output::Value(Value::Int(n as i64)), Output::Value(Value::Float(sum))]))
            })
            .collect();
        want.sort();
        prop_assert_eq!(pa, want);
    }

    #[test]
    fn reopening_flushed_state_changes_nothing(
        ops in ops_with_clock(150),
        cut_every in 1usize..12,
        kind in 0u8..5,
        lateness in 0i64..40,
        counts in 0u8..5,
        every in any::<bool>(),
    ) {
        let window = match kind {
            0 => "type = \"tumbling\"\nsize = \"10ms\"",
            1 => "type = \"sliding\"\nsize = \"20ms\"\nslide = \"5ms\"",
            2 => "type = \"session\"\ngap = \"7ms\"",
            4 => "type = \"cumulate\"\nsize = \"20ms\"\nstep = \"5ms\"",
            _ => "type = \"global\"\nidle_expiry = \"30ms\"",
        };
        // Pending counts and latest element times are part of the stored state.
        // So are early deadlines, in processing time, which a restarted process carries on.
        let trigger = match (kind, counts) {
            (3, 4) => "early_count = 4\nearly_every = \"5ms\"",
            (3, _) => "early_count = 2",
            (_, 0) => "",
            (_, 1) => "late_count = 3",
            (_, 2) => "early_count = 2",
            (_, 3) => "early_count = 2\nlate_count = 2",
            _ => "early_every = \"5ms\"\nearly_count = 3\nlate_count = 2",
        };
        let lateness = if kind == 3 { 0 } else { lateness };
        // Every operation's state is saved and loaded bit for bit.
        let aggs = if every { EVERY } else { ALL };
        let s = spec(window, &format!("allowed_lateness = \"{lateness}ms\""), trigger, aggs);
        let layout = Layout::for_spec(&s.engine);
        let (_d1, mut straight) = open(&s, layout, 1 << 20);
        let want = drive(&mut straight, &ops);

        // Same ops, but flush, close and reopen every `cut_every` ops with a 1-key cache, on
        // RocksDB and on the core's in-memory store.
        let dir = tempfile::tempdir().unwrap();
        let on_disk = reopening(&s, layout, &ops, cut_every, || StateStore::open(dir.path()).unwrap());
        prop_assert_eq!(on_disk, want.clone());
        let memory = MemoryBackend::new();
        prop_assert_eq!(reopening(&s, layout, &ops, cut_every, || memory.clone()), want);
    }

    #[test]
    fn no_accepted_element_is_in_zero_panes(
        ops in ops_with_clock(150),
        kind in 0u8..4,
        early_count in prop::option::of(1u32..5),
        early_every in prop::option::of(1i64..10),
        late in 0u32..5,
        lateness in 0i64..40,
        discarding in any::<bool>(),
    ) {
        let window = match kind {
            0 => "type = \"tumbling\"\nsize = \"10ms\"",
            1 => "type = \"session\"\ngap = \"7ms\"",
            2 => "type = \"global\"",
            _ => "type = \"global\"\nidle_expiry = \"30ms\"",
        };
        let global = kind >= 2;
        // Sessions are checked accumulating (a merged session's first pane repeats what the
        // retracted ones held); a global window with idle expiry discarding (a key that comes
        // back starts a new aggregate under the same dedup id).
        let discarding = match kind {
            1 => false,
            3 => true,
            _ => discarding,
        };
        let mut trigger = String::new();
        if let Some(n) = early_count.or(global.then_some(3)) {
            trigger += &format!("early_count = {n}\n");
        }
        if let Some(d) = early_every {
            trigger += &format!("early_every = \"{d}ms\"\n");
        }
        if !global {
            trigger += match late {
                0 => "late = \"none\"\n".to_string(),
                n => format!("late_count = {n}\n"),
            }
            .as_str();
        }
        trigger += if discarding { "accumulation = \"discarding\"" } else { "accumulation = \"accumulating\"" };
        let top = if global { String::new() } else { format!("allowed_lateness = \"{lateness}ms\"") };
        let s = spec(window, &top, &trigger, COUNT_SUM);
        let (_d, mut engine) = open(&s, Layout::for_spec(&s.engine), 1 << 20);
        let mut accepted = std::collections::BTreeMap::<String, u64>::new();
        let mut panes = Vec::new();
        for op in &ops {
            match *op {
                Op::Event { key, ts, v } => {
                    let ev = Event { key: format!("k{key}"), ts, values: vec![Value::Float(v as f64)] };
                    if engine.process(&ev).unwrap() == Admission::Accepted {
                        *accepted.entry(ev.key).or_default() += 1;
                    }
                }
                Op::Watermark(w) => engine.advance_watermark(w).unwrap(),
                Op::Proc(d) => engine.advance_processing_time(engine.processing_time() + d).unwrap(),
            }
            panes.extend(engine.take_panes());
        }
        engine.finish().unwrap();
        panes.extend(engine.take_panes());
        let mut in_panes = std::collections::BTreeMap::<String, u64>::new();
        if discarding {
            // Each element is in exactly one pane of its window.
            for p in &panes {
                *in_panes.entry(p.key.to_string()).or_default() += p.count;
            }
        } else {
            // The last pane of each window holds all of it, unless a merge retracted the window.
            let mut last = std::collections::BTreeMap::new();
            for p in &panes {
                last.insert((p.key.to_string(), p.window), p);
            }
            for ((key, _), p) in last {
                if p.timing != Timing::Retract {
                    *in_panes.entry(key).or_default() += p.count;
                }
            }
        }
        accepted.retain(|_, n| *n > 0);
        in_panes.retain(|_, n| *n > 0);
        prop_assert_eq!(in_panes, accepted, "{}", trigger);
    }

    #[test]
    fn simulate_never_fails_on_any_line(
        lines in prop::collection::vec(
            prop_oneof![
                "\\PC{0,30}",
                (any::<i64>(), -3i64..3).prop_map(|(t, v)| format!("{{\"k\":\"a\",\"t\":{t},\"v\":{v}}}")),
                (-100i64..100, any::<i32>()).prop_map(|(t, v)| format!("{{\"k\":{v},\"t\":{t},\"v\":1e308}}")),
                any::<i64>().prop_map(|w| format!("{{\"$watermark\":{w}}}")),
                any::<i64>().prop_map(|w| format!("{{\"$advance_processing_time\":{w}}}")),
                Just("{\"k\":\"a\",\"t\":\"2024-02-30T00:00:00Z\",\"v\":1}".to_string()),
            ],
            0..40,
        ),
        kind in 0u8..4,
    ) {
        let window = ["type = \"tumbling\"\nsize = \"1d\"", "type = \"sliding\"\nsize = \"1h\"\nslide = \"7m\"",
            "type = \"session\"\ngap = \"10000d\"", "type = \"tumbling\"\nsize = \"1ms\""][kind as usize];
        let s = spec(window, "allowed_lateness = \"10000d\"", "early_every = \"1ms\"", ALL);
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let input = lines.join("\n");
        let (mut p, mut d) = (Vec::new(), Vec::new());
        let summary = tidemark::simulate::run(&s, &store, input.as_bytes(), &mut p, &mut d);
        prop_assert!(summary.is_ok(), "{:?}", summary.err());
    }
}

/// One commit cycle of the repartition hop's first stage, as the partials test scripts it: its
/// events, then how far the watermark and the processing-time clock move after it.
type Cycle = (Vec<(u8, i64, i64)>, i64, i64);

fn cycles(max_ts: i64) -> impl Strategy<Value = Vec<Cycle>> {
    prop::collection::vec(
        (
            prop::collection::vec((0u8..3, -20i64..max_ts, -50i64..50), 0..25),
            -20i64..max_ts,
            0i64..6,
        ),
        0..8,
    )
}

/// Runs cycles through `engine`: with `fold`, the events a [`Folder`] admits at the watermark
/// before the cycle are folded and merged as partials after the cycle's other events, as the
/// hop's two stages do; without, every event is processed alone. No partial may be late.
fn drive_cycles(
    engine: &mut Engine,
    spec: &PipelineSpec,
    cycles: &[Cycle],
    fold: bool,
) -> Vec<Pane> {
    use tidemark::windowing::fold::Folder;
    let mut folder = Folder::new(&spec.engine).filter(|_| fold);
    let mut panes = Vec::new();
    for (events, wm, proc) in cycles {
        let bound = engine.watermark();
        for (position, &(key, ts, v)) in events.iter().enumerate() {
            let key = format!("k{key}");
            let values = vec![Value::Float(v as f64)];
            match folder.as_mut().filter(|f| f.admits(ts, bound)) {
                Some(f) => f.fold(&key, ts, &values, position as i64, 0),
                None => {
                    engine.process(&Event { key, ts, values }).unwrap();
                }
            }
            panes.extend(engine.take_panes());
        }
        for p in folder.as_mut().map(|f| f.take()).unwrap_or_default() {
            let admission = engine.merge_partial(&p.key, p.ts, &p.acc).unwrap();
            assert_eq!(admission, Admission::Accepted, "a partial was late");
            panes.extend(engine.take_panes());
        }
        engine.advance_watermark(*wm).unwrap();
        panes.extend(engine.take_panes());
        engine
            .advance_processing_time(engine.processing_time() + proc)
            .unwrap();
        panes.extend(engine.take_panes());
    }
    engine.finish().unwrap();
    panes.extend(engine.take_panes());
    panes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn partials_give_the_panes_of_their_events(
        cycles in cycles(120),
        kind in 0u8..4,
        lateness in prop_oneof![Just(0i64), 1i64..30],
        late_none in any::<bool>(), discarding in any::<bool>(), early in any::<bool>(),
    ) {
        let window = match kind {
            0 => "type = \"tumbling\"\nsize = \"10ms\"",
            1 => "type = \"sliding\"\nsize = \"12ms\"\nslide = \"4ms\"\noffset = \"1ms\"",
            2 => "type = \"sliding\"\nsize = \"9ms\"\nslide = \"3ms\"",
            _ => "type = \"global\"\nidle_expiry = \"30ms\"",
        };
        let early = early || kind == 3;
        let trigger = format!(
            "{}late = \"{}\"\naccumulation = \"{}\"",
            if early { "early_every = \"3ms\"\n" } else { "" },
            if late_none { "none" } else { "every_element" },
            if discarding { "discarding" } else { "accumulating" }
        );
        let lateness = if kind == 3 { 0 } else { lateness };
        let s = spec(window, &format!("allowed_lateness = \"{lateness}ms\""), &trigger, EVERY);
        let layout = Layout::for_spec(&s.engine);
        let (_d1, mut alone) = open(&s, layout, 1 << 20);
        let (_d2, mut folded) = open(&s, layout, 1 << 20);
        // Doubles are compared to 12 significant digits: a partial adds its events' values up
        // before they meet the window's, so sums of doubles and moments round differently in
        // their last bits (as any parallel aggregation's do); everything else is exact.
        let want = sorted(rounded(drive_cycles(&mut alone, &s, &cycles, false)));
        prop_assert_eq!(sorted(rounded(drive_cycles(&mut folded, &s, &cycles, true))), want);
        prop_assert_eq!(folded.stats(), alone.stats());
    }
}

/// Sessions stored in the older format (tag 1, the end in the key) still load, give the same
/// panes, and are moved to the session format (tag 5, by start) by the next flush.
#[test]
fn sessions_in_the_older_format_load_and_are_rewritten() {
    use tidemark::windowing::entry::{self as keys, StateKey};
    let s = spec("type = \"session\"\ngap = \"10ms\"", "", "", COUNT_SUM);
    let layout = Layout::Session {
        gap: 10,
        merge_touching: false,
    };
    let ev = |key: &str, ts: i64| Event {
        key: key.into(),
        ts,
        values: vec![Value::Float(1.0)],
    };
    let first = [ev("a", 0), ev("a", 5), ev("b", 3)];
    let later = [ev("a", 12), ev("b", 40)];
    let (_d, mut straight) = open(&s, layout, 1 << 20);
    for e in first.iter().chain(&later) {
        straight.process(e).unwrap();
    }
    straight.finish().unwrap();
    let want = straight.take_panes();

    let entries = |store: &StateStore| -> Vec<StateKey> {
        let db = store.db();
        let cf = db.cf_handle(&StateStore::cf_name("window", 0)).unwrap();
        db.iterator_cf(&cf, rocksdb::IteratorMode::Start)
            .map(|kv| keys::decode_state_key(&kv.unwrap().0).unwrap())
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    {
        let store = StateStore::open(dir.path()).unwrap();
        let mut e =
            Engine::open_with_layout(&s.engine, &store, 0, layout, CacheLimits::keys(1 << 20))
                .unwrap();
        for x in &first {
            e.process(x).unwrap();
        }
        e.flush().unwrap();
        // Rewrite every session entry the way the older format stored it.
        let db = store.db();
        let cf = db.cf_handle(&StateStore::cf_name("window", 0)).unwrap();
        let stored: Vec<_> = db
            .iterator_cf(&cf, rocksdb::IteratorMode::Start)
            .map(|kv| kv.unwrap())
            .collect();
        let mut sessions = 0;
        for (k, v) in stored {
            if let StateKey::Session { key, start } = keys::decode_state_key(&k).unwrap() {
                let end = i64::from_le_bytes(v[..8].try_into().unwrap());
                db.delete_cf(&cf, &k).unwrap();
                db.put_cf(&cf, keys::window_key(&key, start, end), &v[8..])
                    .unwrap();
                sessions += 1;
            }
        }
        assert_eq!(sessions, 2, "one session per key");
    }
    let store = StateStore::open(dir.path()).unwrap();
    let mut e =
        Engine::open_with_layout(&s.engine, &store, 0, layout, CacheLimits::keys(1 << 20)).unwrap();
    assert!(entries(&store)
        .iter()
        .any(|k| matches!(k, StateKey::Window { .. })));
    e.flush().unwrap();
    let after = entries(&store);
    assert!(
        !after.iter().any(|k| matches!(k, StateKey::Window { .. })),
        "old entries deleted: {after:?}"
    );
    assert_eq!(
        after
            .iter()
            .filter(|k| matches!(k, StateKey::Session { .. }))
            .count(),
        2
    );
    for x in &later {
        e.process(x).unwrap();
    }
    e.finish().unwrap();
    assert_eq!(e.take_panes(), want);
}

/// A partial behind the watermark (an input back from idleness behind the others) is merged
/// whole: within the allowed lateness it fires one LATE pane holding all its events; expired, it
/// is late as a whole, every event counted late.
#[test]
fn a_partial_behind_the_watermark_fires_one_late_pane_or_is_late_whole() {
    use tidemark::windowing::fold::Folder;
    let s = spec(
        "type = \"tumbling\"\nsize = \"10ms\"",
        "allowed_lateness = \"20ms\"",
        "",
        COUNT_SUM,
    );
    let (_d, mut engine) = open(&s, Layout::for_spec(&s.engine), 1 << 20);
    let mut folder = Folder::new(&s.engine).unwrap();
    engine
        .process(&Event {
            key: "k".into(),
            ts: 1,
            values: vec![Value::Float(1.0)],
        })
        .unwrap();
    engine.advance_watermark(15).unwrap();
    let on_time = engine.take_panes();
    assert_eq!(on_time.len(), 1);
    assert_eq!(on_time[0].timing, Timing::OnTime);
    for (i, ts) in [2, 5, 9].into_iter().enumerate() {
        folder.fold("k", ts, &[Value::Float(10.0)], i as i64, 0);
    }
    for p in folder.take() {
        assert_eq!(
            engine.merge_partial(&p.key, p.ts, &p.acc).unwrap(),
            Admission::Accepted
        );
    }
    let late = engine.take_panes();
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(
        (late[0].timing, late[0].pane_index, late[0].count),
        (Timing::Late, 1, 4)
    );
    assert_eq!(late[0].values[1], Output::Value(Value::Float(31.0)));
    // Past the allowed lateness: late as a whole.
    engine.advance_watermark(40).unwrap();
    engine.take_panes();
    for ts in [3, 4] {
        folder.fold("k", ts, &[Value::Float(1.0)], 0, 0);
    }
    let p = folder.take().pop().unwrap();
    assert!(matches!(
        engine.merge_partial(&p.key, p.ts, &p.acc).unwrap(),
        Admission::Late { watermark: 40 }
    ));
    assert!(engine.take_panes().is_empty());
    assert_eq!(engine.stats().late, 2);
    assert_eq!(engine.stats().events, 6);
}

#[test]
fn sessions_that_touch_merge_in_either_order_when_asked() {
    for touching in [false, true] {
        let s = spec(
            &format!("type = \"session\"\ngap = \"26ms\"\nmerge_touching = {touching}"),
            "",
            "",
            COUNT_SUM,
        );
        let layout = Layout::Session {
            gap: 26,
            merge_touching: touching,
        };
        let ev = |ts| Op::Event { key: 2, ts, v: 0 };
        let (_d1, mut a) = open(&s, layout, 1 << 20);
        let (_d2, mut b) = open(&s, layout, 1 << 20);
        let pa = sorted(drive(&mut a, &[ev(143), ev(169)]));
        let pb = sorted(drive(&mut b, &[ev(169), ev(143)]));
        assert_eq!(pa, pb, "touching = {touching}");
        assert_eq!(pa.len(), if touching { 1 } else { 2 }, "{pa:?}");
    }
}
