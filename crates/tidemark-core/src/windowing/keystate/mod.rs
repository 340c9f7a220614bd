//! The typed state of one grouping key in one partition: its windows, the slices of sliced
//! sliding windows and their cursor, with what changed since the last flush. It knows nothing of
//! how it is stored ([`super::entry`] does) or of timers ([`super::rules`]).
//!
//! * [`window_map`] — a key's windows, sorted, each with its dirty flag;
//! * [`slice_map`] — a key's slices, sorted, and the list of slices changed since the last flush.

pub mod slice_map;
pub mod window_map;

use super::aggregate::Acc;
use slice_map::{DirtySlices, SliceMap};
use std::collections::BTreeMap;
use window_map::WindowMap;

/// State of one window of one key.
#[derive(Debug, Clone, PartialEq)]
pub struct WinState {
    /// Everything in the window.
    pub total: Acc,
    /// What arrived since the previous pane (kept only in discarding mode).
    pub pane: Acc,
    /// Index of the next pane.
    pub next_pane: u32,
    /// Elements accepted since the window's last pane (or since it opened): what count triggers
    /// count, and what must fire before the window's state is dropped.
    pub pending: u32,
    /// The latest event time among the window's elements (global windows with an idle expiry
    /// only; `None` once a global window's aggregates were dropped).
    pub last_ts: Option<i64>,
    /// Whether the watermark has passed the end (the ON_TIME point is behind us).
    pub on_time_done: bool,
    /// Processing time at which an early pane is due.
    pub early_deadline: Option<i64>,
    /// Content of the last emitted pane (sessions only, for retractions).
    pub last_emitted: Option<Acc>,
}

impl WinState {
    /// The bytes of memory the window's state holds, itself included.
    pub fn size(&self) -> usize {
        let acc = std::mem::size_of::<Acc>();
        std::mem::size_of::<WinState>() + self.total.size() - acc + self.pane.size() - acc
            + self.last_emitted.as_ref().map_or(0, Acc::size)
    }

    /// A new, empty window state.
    pub fn new(on_time_done: bool) -> WinState {
        WinState {
            total: Acc::default(),
            pane: Acc::default(),
            next_pane: 0,
            pending: 0,
            last_ts: None,
            on_time_done,
            early_deadline: None,
            last_emitted: None,
        }
    }
}

/// A running aggregate over the last fired sliced window (not persisted; rebuilt on demand).
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    /// End of the window the aggregate describes.
    pub end: i64,
    /// Slices at or after `lo` (and before `end`) are included.
    pub lo: i64,
    /// The aggregate.
    pub acc: Acc,
    /// Incremental moves since the last full recomputation.
    pub advances: u32,
}

/// Per-key bookkeeping of sliced sliding windows.
///
/// Only `late_panes` is stored. `next_fire` is derived when a key is loaded: every window that ended
/// at or before the watermark of the last flush had fired by then, so the next window to fire is the
/// first one with data that ends after it (see [`TimerRules::restore_key`]). Not storing it saves a
/// write per key per flush, since it moves every time a window fires.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cursor {
    /// End of the next window with data whose ON_TIME pane is pending (memory only).
    pub next_fire: Option<i64>,
    /// Next pane index of windows that emitted LATE panes, by window end.
    pub late_panes: BTreeMap<i64, u32>,
    /// Running aggregate (memory only).
    pub running: Option<Running>,
    /// Time of the key's scheduled service timer (memory only).
    pub scheduled: Option<i64>,
}

/// All state of one grouping key in one partition.
#[derive(Debug, Clone, Default)]
pub struct KeyState {
    /// Per-window state (tumbling, per-window sliding, sessions).
    pub windows: WindowMap,
    /// Slices of sliced sliding windows, by slice start.
    pub slices: SliceMap,
    /// Cursor of sliced sliding windows.
    pub cursor: Option<Cursor>,
    /// Slices changed since the last flush, each once.
    pub(in crate::windowing) dirty_slices: DirtySlices,
    /// Whether the cursor's stored part (its late pane indexes) changed since the last flush.
    pub(in crate::windowing) dirty_cursor: bool,
    /// Whether the key is in its partition's list of keys changed since the last flush.
    pub(in crate::windowing) listed: bool,
    /// What [`KeyState::size`] was when the cache last measured it.
    pub(in crate::windowing) measured: usize,
}

impl KeyState {
    /// The bytes of memory the key's state holds, itself included: its windows, slices and
    /// cursor, each with its aggregations' states ([`Acc::size`]). An estimate, as DataFusion's
    /// `Accumulator::size` is: what was allocated, counted by capacity where it is known.
    pub fn size(&self) -> usize {
        let cursor = self.cursor.as_ref().map_or(0, |c| {
            std::mem::size_of::<Cursor>()
                + c.late_panes.len() * 12 * 3 / 2
                + c.running.as_ref().map_or(0, |r| r.acc.size())
        });
        std::mem::size_of::<KeyState>()
            + self.windows.heap_size()
            + self.slices.heap_size()
            + self.dirty_slices.heap_size()
            + cursor
    }

    /// Whether the key holds no state at all.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.slices.is_empty() && self.cursor.is_none()
    }

    /// Marks window `w` changed (call after changing or removing it): its value, or a tombstone,
    /// is part of the next flush.
    pub fn touch_window(&mut self, w: super::assigner::Window) {
        self.windows.touch(w);
    }

    /// Marks the slice starting at `start` changed.
    pub fn touch_slice(&mut self, start: i64) {
        self.dirty_slices.insert(start);
    }

    /// Marks the cursor's stored part (its late pane indexes) changed.
    pub fn touch_cursor(&mut self) {
        self.dirty_cursor = true;
    }
}
