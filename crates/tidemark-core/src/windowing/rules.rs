//! The rules timers follow, derived from the spec and a key's state, and the arithmetic of
//! sliced sliding windows. The cache rebuilds timers with them when it loads state, and the
//! engine sets timers with them as it goes: both call down into this module, which calls nothing
//! back.

use super::aggregate::Acc;
use super::assigner::Window;
use super::assigner::{SliceGrid, WindowKind};
use super::keystate::slice_map::SliceMap;
use super::keystate::{Cursor, KeyState, Running, WinState};
use super::spec::EngineSpec;
use super::timers::{TimerKind, Timers};

/// How window state is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One entry per (key, window).
    PerWindow,
    /// Sliding windows as slices.
    Sliced(SliceGrid),
    /// Merging per-key sessions.
    Session {
        /// Inactivity gap.
        gap: i64,
        /// Whether sessions that touch merge (see [`WindowKind::Session`]).
        merge_touching: bool,
    },
}

impl Layout {
    /// The layout tidemark uses for a pipeline.
    pub fn for_spec(spec: &EngineSpec) -> Layout {
        match spec.window {
            WindowKind::Tumbling { .. } | WindowKind::Cumulate { .. } => Layout::PerWindow,
            WindowKind::Sliding {
                size,
                slide,
                offset,
            } if spec.trigger.early_every.is_none() && !spec.trigger.counts() => {
                Layout::Sliced(SliceGrid::new(size, slide, offset))
            }
            WindowKind::Sliding { .. } => Layout::PerWindow,
            WindowKind::Session {
                gap,
                merge_touching,
            } => Layout::Session {
                gap,
                merge_touching,
            },
            WindowKind::Global { .. } => Layout::PerWindow,
        }
    }
}

/// Spec-derived parameters that timers depend on.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// The window kind.
    pub window: WindowKind,
    /// How state is laid out.
    pub layout: Layout,
    /// Allowed lateness in ms.
    pub lateness: i64,
}

impl Rules {
    /// Adds the timers of `key`'s state, loaded from the store, to `timers`: one event-time
    /// timer per window that needs one, its early deadline, and the key's service time.
    pub fn index_key(&self, timers: &mut Timers, key: &str, ks: &KeyState) {
        for (w, st) in ks.windows.iter() {
            if let Some((time, kind)) = self.window_timer(w, st) {
                timers.insert_event(time, kind, key, *w);
            }
            if let Some(d) = st.early_deadline {
                timers.insert_proc(d, key, *w);
            }
        }
        if ks.cursor.is_some() {
            if let Some(time) = self.key_service_time(ks) {
                timers.insert_event(time, TimerKind::KeyService, key, Window::new(0, 0));
            }
        }
    }

    /// The event-time timer of a window state: its end while the ON_TIME pane is pending, then
    /// its end plus the allowed lateness, when it expires. A global window's end is never reached
    /// (only `finish` fires it); with an idle expiry it expires that long after its latest
    /// element, and once its aggregates were dropped it needs no timer.
    pub fn window_timer(&self, w: &Window, st: &WinState) -> Option<(i64, TimerKind)> {
        if let WindowKind::Global {
            idle_expiry: Some(idle),
        } = self.window
        {
            return st
                .last_ts
                .map(|t| (t.saturating_add(idle), TimerKind::Expire));
        }
        Some(if st.on_time_done {
            (w.end.saturating_add(self.lateness), TimerKind::Expire)
        } else {
            (w.end, TimerKind::Fire)
        })
    }

    /// Whether windows are global ones.
    pub fn global(&self) -> bool {
        matches!(self.window, WindowKind::Global { .. })
    }

    /// The service time of a sliced key: its next ON_TIME firing or the expiry of its first
    /// slice, whichever comes first; `None` when it needs none.
    pub fn key_service_time(&self, ks: &KeyState) -> Option<i64> {
        let Layout::Sliced(g) = self.layout else {
            return None;
        };
        let c = ks.cursor.as_ref()?;
        let expiry = ks
            .slices
            .keys()
            .next()
            .map(|&a| g.last_end(a).saturating_add(self.lateness));
        match (c.next_fire, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether windows are sessions, stored by start because their end moves.
    pub fn sessions(&self) -> bool {
        matches!(self.layout, Layout::Session { .. })
    }

    /// Rebuilds the memory-only parts of a key loaded from the store (a sliced key's next
    /// firing), given the watermark of the flush that wrote it (`None` before any).
    pub fn restore_key(&self, ks: &mut KeyState, flushed_watermark: Option<i64>) {
        let Layout::Sliced(g) = self.layout else {
            return;
        };
        if ks.slices.is_empty() {
            ks.cursor = None;
            return;
        }
        let cursor = ks.cursor.get_or_insert_with(Cursor::default);
        cursor.next_fire = first_end_with_data_after(&ks.slices, g, flushed_watermark);
    }
}

/// The end of the first sliced window with data that ends after `wm` (`None`: before any
/// watermark). Every window ending at or before the watermark has fired, so this is a key's next
/// ON_TIME firing.
fn first_end_with_data_after(slices: &SliceMap, g: SliceGrid, wm: Option<i64>) -> Option<i64> {
    match wm {
        None => slices.first_key_value().map(|(&a, _)| g.first_end(a)),
        // Far from any real time (the start of time, or after `finish`): no grid arithmetic.
        Some(wm) if wm < i64::MIN / 2 => slices.first_key_value().map(|(&a, _)| g.first_end(a)),
        Some(wm) if wm > i64::MAX / 2 => None,
        // The first window end after the watermark is `end_after(wm)`, the one after the end
        // before it.
        Some(wm) => next_end_with_data(slices, g, g.end_after(wm) - g.slide),
    }
}

/// Content of the sliced window ending at `e`: moves the running aggregate when the aggregates are
/// invertible and the windows overlap, otherwise combines the window's slices.
pub fn window_acc(
    running: &mut Option<Running>,
    slices: &SliceMap,
    g: SliceGrid,
    e: i64,
    invertible: bool,
) -> Acc {
    let start = e - g.size;
    // Recompute from slices once per window length so floating-point sums cannot drift.
    let resync_every = (g.size / g.slide).max(1) as u32;
    if invertible {
        if let Some(r) = running.as_mut() {
            if r.end <= e && r.end > start && r.advances < resync_every {
                for (_, s) in slices.range(r.end..e) {
                    r.acc.merge(s);
                }
                if r.lo < start {
                    for (_, s) in slices.range(r.lo..start) {
                        r.acc.retract(s);
                    }
                    r.lo = start;
                }
                r.end = e;
                r.advances += 1;
                return r.acc.clone();
            }
        }
    }
    let acc = window_total(slices, start, e);
    *running = invertible.then(|| Running {
        end: e,
        lo: start,
        acc: acc.clone(),
        advances: 0,
    });
    acc
}

/// The aggregate of a key's slices in `[start, end)`.
pub fn window_total(slices: &SliceMap, start: i64, end: i64) -> Acc {
    let mut total = Acc::default();
    for (_, s) in slices.range(start..end) {
        total.merge(s);
    }
    total
}

/// The end of the first window after the one ending at `e` that holds at least one slice.
pub fn next_end_with_data(slices: &SliceMap, g: SliceGrid, e: i64) -> Option<i64> {
    let from = e + g.slide - g.size;
    let (&a0, _) = slices.range(from..).next()?;
    Some((e + g.slide).max(g.first_end(a0)))
}
