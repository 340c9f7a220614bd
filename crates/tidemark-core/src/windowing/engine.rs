//! The windowing engine: assigns events to windows, keeps their state, and fires panes.
//!
//! One [`Engine`] runs one input partition. It is deterministic: the same calls in the same order
//! give the same panes in the same order. The caller owns time: it passes events in with
//! [`Engine::process`], moves the watermark with [`Engine::advance_watermark`] and the
//! processing-time clock with [`Engine::advance_processing_time`], and drains fired panes with
//! [`Engine::take_panes`]. State changes stay in memory until [`Engine::take_changes`] and
//! [`Engine::write_changes`] make them durable.
//!
//! Three layouts share the trigger rules (see ARCHITECTURE.md for the rules themselves):
//! * per-window: one state entry per (key, window) — tumbling windows, and sliding windows with
//!   early firings;
//! * sliced: sliding windows kept as slices of gcd(size, slide), one slice updated per event, with a
//!   per-key cursor that fires windows in order from a running aggregate;
//! * session: per-key sessions that merge, with retractions for superseded windows that had fired.

use super::aggregate::{retractable, Acc, AggSpec, Output, Value};
use super::assigner::{SliceGrid, Window, WindowKind};
use super::backend::{BackendError, StateBackend, StoredOffsets};
use super::cache::{CacheFigures, PartitionState};
use super::changes::Changes;
use super::having::Having;
use super::keystate::{Cursor, KeyState, WinState};
pub use super::rules::Layout;
use super::rules::{next_end_with_data, window_acc, window_total, Rules};
use super::spec::{CacheLimits, EngineSpec, Event};
use super::timers::TimerKind;
use super::trigger::{Accumulation, LateFiring, Timing, TriggerSpec};
use super::watermark::SourceWatermark;
use compact_str::CompactString;
use sha2::{Digest, Sha256};
use smallvec::SmallVec;
use std::sync::Arc;

/// Name of the windowing operator's column families.
pub const WINDOW_OPERATOR: &str = "window";

/// The aggregate values of a pane: one per configured aggregation, inline up to four.
pub type PaneValues = SmallVec<[Output; 4]>;

/// One emitted pane. Firing one does not allocate (for keys up to 24 bytes and up to four
/// aggregations): in the sliding benchmark, where most events fire a pane, the three allocations a
/// pane used to make (key, dedup id, values) and their frees were about a fifth of the time.
#[derive(Debug, Clone, PartialEq)]
pub struct Pane {
    /// The grouping key.
    pub key: CompactString,
    /// The window.
    pub window: Window,
    /// Why the pane fired.
    pub timing: Timing,
    /// Index of the pane within its window (restarts at 0 for a merged session).
    pub pane_index: u32,
    /// Stable id of (pipeline, key, window start, window end).
    pub dedup_id: DedupId,
    /// Elements in the pane.
    pub count: u64,
    /// One value per configured aggregation (NULL for min/max/mean of an empty pane).
    pub values: PaneValues,
}

/// A pane's deduplication id: 32 lowercase hex digits (see [`dedup_id`]), held inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DedupId([u8; 32]);

impl DedupId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }
}

impl std::ops::Deref for DedupId {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for DedupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for DedupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// What happened to an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The event was added to at least one window.
    Accepted,
    /// Every window of the event has expired (or, with late firing `none`, has passed): the event
    /// belongs in the dead-letter topic.
    Late {
        /// The watermark when the event arrived.
        watermark: i64,
    },
}

/// Errors from the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] BackendError),
    /// A partial was handed to an engine whose windows cannot take one (sessions).
    #[error("a partial aggregate cannot be merged into {0} windows")]
    PartialNotMergeable(&'static str),
}

/// Counters kept by the engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Events passed to [`Engine::process`].
    pub events: u64,
    /// Events rejected as late.
    pub late: u64,
    /// Panes emitted, by timing: EARLY, ON_TIME, LATE, RETRACT.
    pub panes: [u64; 4],
}

/// Builds panes and counts them.
#[derive(Debug)]
struct Emitter {
    pipeline: String,
    aggregations: Arc<[AggSpec]>,
    accumulation: Accumulation,
    having: Option<Arc<Having>>,
    panes: Vec<Pane>,
    stats: EngineStats,
}

impl Emitter {
    fn push(&mut self, key: &str, window: Window, timing: Timing, pane_index: u32, content: &Acc) {
        let values: PaneValues = (0..self.aggregations.len())
            .map(|i| content.value(&self.aggregations, i))
            .collect();
        // A pane whose values fail the condition voids the window's row instead.
        let timing = match &self.having {
            Some(h) if timing != Timing::Retract && !h.keeps(&values) => Timing::Retract,
            _ => timing,
        };
        self.stats.panes[timing as usize] += 1;
        self.panes.push(Pane {
            key: CompactString::from(key),
            window,
            timing,
            pane_index,
            dedup_id: dedup_id(&self.pipeline, key, window),
            count: content.count,
            values,
        });
    }

    /// Fires what one accepted element makes due in its window (already added to `st`): a LATE
    /// pane after the window passed, as the late firing says; before, an EARLY pane once the early
    /// count is reached, or else the early deadline, counted from the pane's first element.
    #[allow(clippy::too_many_arguments)]
    fn after_element(
        &mut self,
        key: &str,
        w: Window,
        passed: bool,
        st: &mut WinState,
        keep_last: bool,
        trigger: &TriggerSpec,
        now: i64,
    ) {
        if passed {
            if trigger.late.fires_at(st.pending) {
                self.window_pane(key, w, Timing::Late, st, keep_last);
            }
        } else if trigger.early_count_reached(st.pending) {
            self.window_pane(key, w, Timing::Early, st, keep_last);
        } else if let Some(d) = trigger.early_every {
            st.early_deadline.get_or_insert(now.saturating_add(d));
        }
    }

    /// Emits the current pane of a per-window state and starts the next pane.
    fn window_pane(
        &mut self,
        key: &str,
        w: Window,
        timing: Timing,
        st: &mut WinState,
        keep_last: bool,
    ) {
        let content = match self.accumulation {
            Accumulation::Accumulating => &st.total,
            Accumulation::Discarding => &st.pane,
        };
        self.push(key, w, timing, st.next_pane, content);
        if keep_last {
            st.last_emitted = Some(content.clone());
        }
        st.next_pane += 1;
        st.pending = 0;
        st.pane.clear();
        st.early_deadline = None;
    }
}

/// The stable deduplication id of a window of a key in a pipeline: 32 hex digits of SHA-256 over
/// the length-prefixed pipeline name and key and the big-endian window bounds.
pub fn dedup_id(pipeline: &str, key: &str, w: Window) -> DedupId {
    let mut h = Sha256::new();
    h.update((pipeline.len() as u32).to_be_bytes());
    h.update(pipeline.as_bytes());
    h.update((key.len() as u32).to_be_bytes());
    h.update(key.as_bytes());
    h.update(w.start.to_be_bytes());
    h.update(w.end.to_be_bytes());
    let digest = h.finalize();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, &b) in digest[..16].iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 0xf)];
    }
    DedupId(out)
}

/// A pending change of one window's timers, applied once the key's state is no longer borrowed.
type TimerChange = (
    Window,
    Option<(i64, TimerKind)>,
    Option<(i64, TimerKind)>,
    Option<i64>,
    Option<i64>,
);

/// The windowing engine of one input partition.
pub struct Engine {
    rules: Rules,
    trigger: TriggerSpec,
    invertible: bool,
    aggs: Arc<[AggSpec]>,
    state: PartitionState,
    out: Emitter,
    wm: i64,
    now: i64,
    /// Reused buffer of timer changes, so processing an event does not allocate.
    scratch: Vec<TimerChange>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("layout", &self.rules.layout)
            .field("watermark", &self.wm)
            .finish()
    }
}

/// What one call adds to a key's windows: one event's input values, or a partial (the events of
/// one key and one set of windows, folded before the repartition hop; see [`super::fold`]).
#[derive(Debug, Clone, Copy)]
enum Element<'a> {
    One(&'a [Value]),
    Folded(&'a Acc),
}

impl Element<'_> {
    /// Adds the element (or every event of the partial) to `acc`; `ts` is an event's time.
    fn add_to(self, acc: &mut Acc, aggs: &[AggSpec], ts: i64) {
        match self {
            Element::One(values) => acc.add(aggs, values, ts),
            Element::Folded(partial) => acc.merge(partial),
        }
    }

    /// How many events it holds.
    fn count(self) -> u64 {
        match self {
            Element::One(_) => 1,
            Element::Folded(partial) => partial.count,
        }
    }
}

/// Adds an element to a window and counts its events as pending (not yet in a pane).
fn add(st: &mut WinState, aggs: &[AggSpec], el: Element<'_>, ts: i64, acc: Accumulation) {
    el.add_to(&mut st.total, aggs, ts);
    if acc == Accumulation::Discarding {
        el.add_to(&mut st.pane, aggs, ts);
    }
    let n = u32::try_from(el.count()).unwrap_or(u32::MAX);
    st.pending = st.pending.saturating_add(n);
}

impl Engine {
    /// Opens the engine for `partition`, restoring its state from `store`.
    pub fn open<S: StateBackend + Clone + 'static>(
        spec: &EngineSpec,
        store: &S,
        partition: i32,
    ) -> Result<Engine, EngineError> {
        Self::open_with_layout(spec, store, partition, Layout::for_spec(spec), spec.cache)
    }

    /// Opens the engine with an explicit layout and cache limits (benchmarks compare layouts).
    pub fn open_with_layout<S: StateBackend + Clone + 'static>(
        spec: &EngineSpec,
        store: &S,
        partition: i32,
        layout: Layout,
        cache: CacheLimits,
    ) -> Result<Engine, EngineError> {
        let aggs: Arc<[AggSpec]> = spec.aggregations.clone().into();
        let rules = Rules {
            window: spec.window,
            layout,
            lateness: spec.allowed_lateness,
        };
        let state = PartitionState::open(
            Arc::new(store.clone()),
            WINDOW_OPERATOR,
            partition,
            cache,
            &rules,
            spec.watermark.idle_timeout,
            aggs.clone(),
        )?;
        // Every timer at or before the stored watermark had fired before that state was flushed.
        let wm = state.stored_watermark().unwrap_or(i64::MIN);
        Ok(Engine {
            rules,
            trigger: spec.trigger,
            invertible: retractable(&spec.aggregations),
            aggs: aggs.clone(),
            state,
            out: Emitter {
                pipeline: spec.name.clone(),
                aggregations: aggs,
                accumulation: spec.trigger.accumulation,
                having: spec.having.clone(),
                panes: Vec::new(),
                stats: EngineStats::default(),
            },
            wm,
            now: 0,
            scratch: Vec::new(),
        })
    }

    /// The layout in use.
    pub fn layout(&self) -> Layout {
        self.rules.layout
    }

    /// The current watermark (`i64::MIN` before any); a reopened engine resumes from the watermark
    /// stored with its state.
    pub fn watermark(&self) -> i64 {
        self.wm
    }

    /// The current processing time.
    pub fn processing_time(&self) -> i64 {
        self.now
    }

    /// Counters.
    pub fn stats(&self) -> EngineStats {
        self.out.stats
    }

    /// Pending event-time timers (about one per open window, or per key for sliced windows).
    pub fn pending_timers(&self) -> usize {
        self.state.pending_timers()
    }

    /// What the state cache holds (keys, bytes, the largest key's state), as of the last flush.
    pub fn cache_figures(&self) -> CacheFigures {
        self.state.figures()
    }

    /// Removes and returns the panes fired so far, in firing order.
    pub fn take_panes(&mut self) -> Vec<Pane> {
        std::mem::take(&mut self.out.panes)
    }

    /// Collects every state change since the last flush (the changelog of this flush).
    pub fn take_changes(&mut self) -> Changes {
        self.state.take_changes()
    }

    /// Writes changes, with optional offsets, to the store in one atomic batch.
    pub fn write_changes(
        &mut self,
        changes: &Changes,
        offsets: Option<StoredOffsets>,
    ) -> Result<(), EngineError> {
        Ok(self.state.write(changes, offsets)?)
    }

    /// Takes and writes all changes at once; returns how many entries changed.
    pub fn flush(&mut self) -> Result<usize, EngineError> {
        let changes = self.take_changes();
        self.write_changes(&changes, None)?;
        Ok(changes.len())
    }

    /// Adds an event to its windows, firing LATE panes as the trigger says.
    pub fn process(&mut self, ev: &Event) -> Result<Admission, EngineError> {
        self.out.stats.events += 1;
        let one = Element::One(&ev.values);
        let admission = match self.rules.layout {
            Layout::PerWindow => self.process_per_window(&ev.key, ev.ts, one)?,
            Layout::Sliced(g) => self.process_sliced(&ev.key, ev.ts, one, g)?,
            Layout::Session {
                gap,
                merge_touching,
            } => self.process_session(ev, gap, merge_touching)?,
        };
        if let Admission::Late { .. } = admission {
            self.out.stats.late += 1;
        }
        Ok(admission)
    }

    /// Merges a partial of `key` into its windows: the events of one set of windows, folded in
    /// input order, the latest at event time `ts` (see [`super::fold`]). It is admitted or late
    /// as a whole, as each of its events would be: they share their windows. A partial whose
    /// windows the watermark has passed fires one LATE pane where its events would have fired
    /// one each. Session windows take no partials.
    pub fn merge_partial(
        &mut self,
        key: &str,
        ts: i64,
        partial: &Acc,
    ) -> Result<Admission, EngineError> {
        self.out.stats.events += partial.count;
        let folded = Element::Folded(partial);
        let admission = match self.rules.layout {
            Layout::PerWindow => self.process_per_window(key, ts, folded)?,
            Layout::Sliced(g) => self.process_sliced(key, ts, folded, g)?,
            Layout::Session { .. } => return Err(EngineError::PartialNotMergeable("session")),
        };
        if let Admission::Late { .. } = admission {
            self.out.stats.late += partial.count;
        }
        Ok(admission)
    }

    fn late(&self) -> Admission {
        Admission::Late { watermark: self.wm }
    }

    fn apply_timer_changes(&mut self, key: &str, mut changes: Vec<TimerChange>) {
        for (w, old_ev, new_ev, old_proc, new_proc) in changes.drain(..) {
            self.state.timers().set_event(key, w, old_ev, new_ev);
            self.state.timers().set_proc(key, w, old_proc, new_proc);
        }
        self.scratch = changes;
    }

    fn process_per_window(
        &mut self,
        key: &str,
        ts: i64,
        el: Element<'_>,
    ) -> Result<Admission, EngineError> {
        let aggs = self.aggs.clone();
        let (wm, now, l) = (self.wm, self.now, self.rules.lateness);
        let trigger = self.trigger;
        let rules = self.rules;
        let mut timers = std::mem::take(&mut self.scratch);
        let ks = self.state.key_mut(key, &rules)?;
        let mut accepted = false;
        let idle_expiry = matches!(
            rules.window,
            WindowKind::Global {
                idle_expiry: Some(_)
            }
        );
        for w in rules.window.assign(ts) {
            if wm >= w.end.saturating_add(l) {
                continue; // expired
            }
            let passed = wm >= w.end;
            // With late firing `none` a window fires once: a passed window in state has fired
            // (ON_TIME, or LATE once), and its pane was final. One that never received an
            // element still owes its one firing, below.
            if passed && trigger.late == LateFiring::None && ks.windows.contains_key(&w) {
                continue;
            }
            accepted = true;
            let (existed, st) = ks.windows.upsert_changed(w, || WinState::new(passed));
            let old_ev = if existed {
                rules.window_timer(&w, st)
            } else {
                None
            };
            let old_proc = st.early_deadline;
            add(st, &aggs, el, ts, trigger.accumulation);
            if w.is_global() && idle_expiry {
                st.last_ts = Some(st.last_ts.map_or(ts, |t| t.max(ts)));
            }
            if passed && !existed {
                // The window's first element came after the watermark passed its end: its
                // on-time trigger is satisfied, so it fires a LATE pane at once (Beam Java and
                // Python agree); `late_count` governs the late panes after that one.
                self.out.window_pane(key, w, Timing::Late, st, false);
            } else {
                self.out
                    .after_element(key, w, passed, st, false, &trigger, now);
            }
            // A global window's idle expiry moves with nearly every element; its timer stays
            // where it is, at or before the expiry, and `on_expire` moves it on when it comes
            // due early (one timer move per idle expiry instead of one per element).
            let new_ev = if idle_expiry && old_ev.is_some() {
                old_ev
            } else {
                rules.window_timer(&w, st)
            };
            timers.push((w, old_ev, new_ev, old_proc, st.early_deadline));
        }
        self.apply_timer_changes(key, timers);
        Ok(if accepted {
            Admission::Accepted
        } else {
            self.late()
        })
    }

    fn process_session(
        &mut self,
        ev: &Event,
        gap: i64,
        merge_touching: bool,
    ) -> Result<Admission, EngineError> {
        let aggs = self.aggs.clone();
        let (wm, now, l) = (self.wm, self.now, self.rules.lateness);
        let trigger = self.trigger;
        let rules = self.rules;
        let proto = Window::new(ev.ts, ev.ts + gap);
        if wm >= proto.end.saturating_add(l) {
            return Ok(self.late());
        }
        let ks = self.state.key_mut(&ev.key, &rules)?;
        // Sessions of a key never overlap, so sorted by start their ends are sorted too. With
        // `merge_touching`, a session that ends where the new one starts, or starts where it
        // ends, merges too.
        let touch = i64::from(merge_touching);
        let overlapping: Vec<Window> = ks
            .windows
            .before(Window::new(proto.end.saturating_add(touch), i64::MIN))
            .rev()
            .take_while(|(w, _)| w.end.saturating_add(touch) > proto.start)
            .map(|(w, _)| *w)
            .collect();
        let merged = overlapping.iter().fold(proto, |m, w| m.span(w));
        let passed = wm >= merged.end;
        // With late firing `none`, sessions the event would merge with have passed, so they
        // fired their final pane; a new session that has passed never fired and owes its one
        // (LATE) firing.
        if passed && trigger.late == LateFiring::None && !overlapping.is_empty() {
            return Ok(self.late());
        }
        let mut timers = std::mem::take(&mut self.scratch);
        if overlapping.len() == 1 && overlapping[0] == merged {
            // The event falls inside an existing session without extending it.
            let st = ks.windows.get_mut(&merged).expect("listed above");
            let old = (rules.window_timer(&merged, st), st.early_deadline);
            add(
                st,
                &aggs,
                Element::One(&ev.values),
                ev.ts,
                trigger.accumulation,
            );
            self.out
                .after_element(&ev.key, merged, passed, st, true, &trigger, now);
            timers.push((
                merged,
                old.0,
                rules.window_timer(&merged, st),
                old.1,
                st.early_deadline,
            ));
            ks.touch_window(merged);
        } else {
            let mut st = WinState::new(passed);
            let mut deadline: Option<i64> = None;
            let discarding = trigger.accumulation == Accumulation::Discarding;
            for w in overlapping.iter().rev() {
                let old = ks.windows.remove(w).expect("listed above");
                ks.touch_window(*w);
                timers.push((
                    *w,
                    rules.window_timer(w, &old),
                    None,
                    old.early_deadline,
                    None,
                ));
                // Accumulating panes each hold the whole window: a superseded window that
                // emitted is retracted, and the merged window's panes hold everything.
                // Discarding panes each hold what is new: what the superseded windows emitted
                // stands, and the merged window's panes hold only what none of them fired.
                if old.next_pane > 0 && !discarding {
                    let content = old.last_emitted.clone().unwrap_or_default();
                    self.out
                        .push(&ev.key, *w, Timing::Retract, old.next_pane, &content);
                }
                st.total.merge(&old.total);
                if discarding {
                    st.pane.merge(&old.pane);
                }
                // The merged window owes a pane for whatever the superseded ones had not fired.
                st.pending = st.pending.saturating_add(old.pending);
                if !old.on_time_done {
                    deadline = match (deadline, old.early_deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
            add(
                &mut st,
                &aggs,
                Element::One(&ev.values),
                ev.ts,
                trigger.accumulation,
            );
            if !passed {
                // The earliest deadline of the merged windows' open panes carries over.
                st.early_deadline = deadline;
            }
            if passed && overlapping.is_empty() {
                // A new session the watermark has passed never fired: its on-time trigger is
                // satisfied, so it fires a LATE pane at once, as a fixed window's first late
                // element does; the late trigger governs its panes after that one.
                self.out
                    .window_pane(&ev.key, merged, Timing::Late, &mut st, true);
            } else {
                self.out
                    .after_element(&ev.key, merged, passed, &mut st, true, &trigger, now);
            }
            timers.push((
                merged,
                None,
                rules.window_timer(&merged, &st),
                None,
                st.early_deadline,
            ));
            ks.windows.insert(merged, st);
            ks.touch_window(merged);
        }
        self.apply_timer_changes(&ev.key, timers);
        Ok(Admission::Accepted)
    }

    fn process_sliced(
        &mut self,
        key: &str,
        ts: i64,
        el: Element<'_>,
        g: SliceGrid,
    ) -> Result<Admission, EngineError> {
        let aggs = self.aggs.clone();
        let (wm, l) = (self.wm, self.rules.lateness);
        let trigger = self.trigger;
        let rules = self.rules;
        let a = g.slice_start(ts);
        let (first_end, last_end) = (g.first_end(a), g.last_end(a));
        if wm >= last_end.saturating_add(l) {
            return Ok(self.late());
        }
        // The first window of this slice whose end the watermark has not reached.
        let open_from = if wm < first_end {
            first_end
        } else {
            g.end_after(wm)
        };
        let has_open = open_from <= last_end;
        let ks = self.state.key_mut(key, &rules)?;
        // The passed, unexpired windows of this slice: with late firing `none` only those without
        // any element yet fire (once, LATE); the others fired their final pane.
        let passed = (wm >= first_end).then(|| {
            (
                first_end.max(g.end_at_or_after(wm - l + 1)),
                last_end.min(wm),
            )
        });
        let passed_ends = move || {
            passed
                .into_iter()
                .flat_map(move |(lo, hi)| (lo..=hi).step_by(g.slide as usize))
        };
        if trigger.late == LateFiring::None
            && !has_open
            && !passed_ends().any(|e| window_total(&ks.slices, e - g.size, e).count == 0)
        {
            return Ok(self.late());
        }
        el.add_to(ks.slices.get_or_default(a), &aggs, ts);
        ks.touch_slice(a);
        let cursor = ks.cursor.get_or_insert_with(Cursor::default);
        let mut late_fired = false;
        if let Some(r) = cursor.running.as_mut() {
            if r.lo <= a && a < r.end {
                el.add_to(&mut r.acc, &aggs, ts);
            }
        }
        if has_open {
            cursor.next_fire = Some(cursor.next_fire.map_or(open_from, |n| n.min(open_from)));
        }
        // LATE panes for the passed, unexpired windows of this slice: each element with
        // `every_element`; with `none`, a window's first and only firing.
        for e in passed_ends() {
            let w = Window::new(e - g.size, e);
            let total = window_total(&ks.slices, w.start, w.end);
            // The element is in the slices already: a count of its own means it is the first.
            if trigger.late == LateFiring::None && total.count != el.count() {
                continue;
            }
            let cursor = ks.cursor.as_mut().expect("created above");
            let index = cursor
                .late_panes
                .get(&e)
                .copied()
                .unwrap_or(if total.count > el.count() { 1 } else { 0 });
            let content = match trigger.accumulation {
                Accumulation::Accumulating => total,
                Accumulation::Discarding => {
                    let mut one = Acc::default();
                    el.add_to(&mut one, &aggs, ts);
                    one
                }
            };
            self.out.push(key, w, Timing::Late, index, &content);
            cursor.late_panes.insert(e, index + 1);
            late_fired = true;
        }
        // The cursor entry is rewritten only when its stored part (the late pane indexes) changes.
        if late_fired {
            ks.touch_cursor();
        }
        let service = rules.key_service_time(ks);
        let cursor = ks.cursor.as_mut().expect("created above");
        let old = std::mem::replace(&mut cursor.scheduled, service);
        self.set_service_timer(key, old, service);
        Ok(Admission::Accepted)
    }

    fn set_service_timer(&mut self, key: &str, old: Option<i64>, new: Option<i64>) {
        let none = Window::new(0, 0);
        self.state.timers().set_event(
            key,
            none,
            old.map(|t| (t, TimerKind::KeyService)),
            new.map(|t| (t, TimerKind::KeyService)),
        );
    }

    /// Registers the watermark sources this partition must hear from before its watermark can
    /// pass them (a source already known keeps its report).
    pub fn expect_sources<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        let valve = self.state.sources();
        for n in names {
            valve.expect(n);
        }
    }

    /// Takes a watermark source's report; it is kept with the state (and changelog) from the
    /// next flush on. The watermark moves only with [`Engine::advance_to_sources`].
    pub fn report_source(&mut self, name: &str, report: SourceWatermark) {
        self.state.sources().update(name, report);
    }

    /// The watermark sources and their last reports.
    pub fn sources(&mut self) -> Vec<(String, SourceWatermark)> {
        self.state
            .sources()
            .sources()
            .map(|(n, s)| (n.to_string(), *s))
            .collect()
    }

    /// Moves the watermark to what the sources say at processing time `now` (never back) and
    /// fires every due timer; nothing moves while the sources say nothing.
    pub fn advance_to_sources(&mut self, now: i64) -> Result<(), EngineError> {
        match self.state.sources().current(now) {
            Some(wm) => self.advance_watermark(wm),
            None => Ok(()),
        }
    }

    /// Moves the watermark forward (never back) and fires every due timer in order.
    pub fn advance_watermark(&mut self, wm: i64) -> Result<(), EngineError> {
        if wm <= self.wm {
            return Ok(());
        }
        self.wm = wm;
        self.state.note_watermark(wm);
        while let Some(t) = self.state.timers().pop_event(wm) {
            match t.kind {
                TimerKind::Fire => self.on_fire(&t.key, t.window)?,
                TimerKind::Expire => self.on_expire(&t.key, t.window, t.time)?,
                TimerKind::KeyService => self.on_key_service(&t.key, t.time)?,
            }
        }
        Ok(())
    }

    /// Moves the processing-time clock forward and fires due early panes.
    pub fn advance_processing_time(&mut self, now: i64) -> Result<(), EngineError> {
        if now <= self.now {
            return Ok(());
        }
        self.now = now;
        let rules = self.rules;
        let keep_last = matches!(rules.layout, Layout::Session { .. });
        while let Some((_, key, w)) = self.state.timers().pop_proc(now) {
            let ks = self.state.key_mut(&key, &rules)?;
            if let Some(st) = ks.windows.get_mut(&w) {
                if !st.on_time_done {
                    self.out.window_pane(&key, w, Timing::Early, st, keep_last);
                    ks.touch_window(w);
                }
            }
        }
        Ok(())
    }

    /// Moves the watermark to plus infinity: every remaining window fires ON_TIME and expires.
    pub fn finish(&mut self) -> Result<(), EngineError> {
        self.advance_watermark(i64::MAX)
    }

    fn on_fire(&mut self, key: &str, w: Window) -> Result<(), EngineError> {
        let rules = self.rules;
        let wm = self.wm;
        let keep_last = matches!(rules.layout, Layout::Session { .. });
        let ks = self.state.key_mut(key, &rules)?;
        let Some(st) = ks.windows.get_mut(&w) else {
            return Ok(());
        };
        let old_proc = st.early_deadline;
        // A global window reaches its end only when the input ends: it fires if anything is
        // unfired (its EARLY panes showed the rest).
        if !(w.is_global() && st.pending == 0) {
            self.out.window_pane(key, w, Timing::OnTime, st, keep_last);
        }
        st.on_time_done = true;
        let next = rules.window_timer(&w, st);
        ks.touch_window(w);
        match next {
            Some(next) if wm < next.0 => self.state.timers().set_event(key, w, None, Some(next)),
            _ => {
                ks.windows.remove(&w);
            }
        }
        self.state.timers().set_proc(key, w, old_proc, None);
        Ok(())
    }

    /// Expires a window: elements accepted into it that no pane holds yet fire one final pane
    /// first (Beam Java's FIRE_IF_NON_EMPTY; LATE, or ON_TIME for a global window's idle
    /// expiry). Then its state goes; a global window keeps only its next pane index, so a key that
    /// comes back continues its panes' indexes under the same dedup id. A timer due (`at`)
    /// before the window's expiry, a global window's left behind its moving idle expiry, moves on
    /// to it instead.
    fn on_expire(&mut self, key: &str, w: Window, at: i64) -> Result<(), EngineError> {
        let rules = self.rules;
        let keep_last = rules.sessions();
        let ks = self.state.key_mut(key, &rules)?;
        let Some(st) = ks.windows.get_mut(&w) else {
            return Ok(());
        };
        if let Some(due) = rules.window_timer(&w, st).filter(|&(t, _)| t > at) {
            // A global window's timer that stayed behind its moving idle expiry: put where the
            // expiry is now, so it fires (in this advance, if due) in the order an exact timer
            // would have.
            self.state.timers().set_event(key, w, None, Some(due));
            return Ok(());
        }
        let old_proc = st.early_deadline;
        if st.pending > 0 {
            let timing = if w.is_global() {
                Timing::OnTime
            } else {
                Timing::Late
            };
            self.out.window_pane(key, w, timing, st, keep_last);
        }
        if w.is_global() {
            *st = WinState {
                next_pane: st.next_pane,
                ..WinState::new(false)
            };
        } else {
            ks.windows.remove(&w);
        }
        ks.touch_window(w);
        self.state.timers().set_proc(key, w, old_proc, None);
        Ok(())
    }

    fn on_key_service(&mut self, key: &str, t: i64) -> Result<(), EngineError> {
        let rules = self.rules;
        let Layout::Sliced(g) = rules.layout else {
            return Ok(());
        };
        let l = rules.lateness;
        let invertible = self.invertible;
        let ks = self.state.key_mut(key, &rules)?;
        let mut expired_slices = Vec::new();
        let late_panes_changed;
        {
            let KeyState { slices, cursor, .. } = &mut *ks;
            let Some(cursor) = cursor.as_mut() else {
                return Ok(());
            };
            cursor.scheduled = None;
            if let Some(e) = cursor.next_fire.filter(|&e| e <= t) {
                let acc = window_acc(&mut cursor.running, slices, g, e, invertible);
                self.out
                    .push(key, Window::new(e - g.size, e), Timing::OnTime, 0, &acc);
                cursor.next_fire = next_end_with_data(slices, g, e);
            }
            while let Some((&a, _)) = slices.first_key_value() {
                if g.last_end(a).saturating_add(l) > t {
                    break;
                }
                let acc = slices.remove(&a).expect("first key");
                expired_slices.push(a);
                if let Some(r) = cursor.running.as_mut() {
                    if r.lo <= a && a < r.end {
                        r.acc.retract(&acc);
                        r.lo = a + g.slice;
                    }
                }
            }
            let before = cursor.late_panes.len();
            cursor.late_panes.retain(|&e, _| e.saturating_add(l) > t);
            late_panes_changed = cursor.late_panes.len() != before;
        }
        for a in expired_slices {
            ks.touch_slice(a);
        }
        if late_panes_changed {
            ks.touch_cursor();
        }
        let service = if ks.slices.is_empty() {
            // A tombstone, once per key when its last slice expires (cheap, and it also clears a
            // cursor stored by an older version, which always stored one).
            ks.cursor = None;
            ks.touch_cursor();
            None
        } else {
            let s = rules.key_service_time(ks);
            if let Some(c) = ks.cursor.as_mut() {
                c.scheduled = s;
            }
            s
        };
        self.set_service_timer(key, None, service);
        Ok(())
    }
}
