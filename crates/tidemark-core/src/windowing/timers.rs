//! Timer indexes: the event-time timers (one per window, its end while the ON_TIME pane is pending
//! and then its expiry; one service timer per sliced key) and the processing-time timers of early
//! firings. Both are ordered sets, so firing is a range scan up to the watermark (or clock), one
//! timer at a time in (time, kind, key, window) order. Timers are derived state: they are rebuilt
//! from a partition's entries when it opens (`Rules::index_key`) and never stored.

use super::assigner::Window;
use compact_str::CompactString;
use std::collections::BTreeSet;

/// Kinds of event-time timers, in the order they run when due at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimerKind {
    /// Fire a window's ON_TIME pane.
    Fire = 0,
    /// Delete a window's state (end + allowed lateness).
    Expire = 1,
    /// Service a sliced key: fire its next window and expire old slices.
    KeyService = 2,
}

/// One timer: due at `time`; ordered by time, then kind, key and window.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer {
    /// When the timer is due.
    pub time: i64,
    /// What it does.
    pub kind: TimerKind,
    /// The grouping key (inline up to 24 bytes: timer sets compare keys on every insert).
    pub key: CompactString,
    /// The window (for `KeyService`, `[0, 0)`).
    pub window: Window,
}

/// The event-time and processing-time timers of one partition.
#[derive(Debug, Default)]
pub struct Timers {
    event: BTreeSet<Timer>,
    proc: BTreeSet<(i64, CompactString, Window)>,
}

impl Timers {
    /// Number of pending event-time timers.
    pub fn len(&self) -> usize {
        self.event.len()
    }

    /// Whether no event-time timer is pending.
    pub fn is_empty(&self) -> bool {
        self.event.is_empty()
    }

    /// Replaces a window's event-time timer.
    pub fn set_event(
        &mut self,
        key: &str,
        w: Window,
        old: Option<(i64, TimerKind)>,
        new: Option<(i64, TimerKind)>,
    ) {
        if old == new {
            return;
        }
        if let Some((time, kind)) = old {
            self.event.remove(&Timer {
                time,
                kind,
                key: CompactString::from(key),
                window: w,
            });
        }
        if let Some((time, kind)) = new {
            self.event.insert(Timer {
                time,
                kind,
                key: CompactString::from(key),
                window: w,
            });
        }
    }

    /// Replaces a window's processing-time (early firing) timer.
    pub fn set_proc(&mut self, key: &str, w: Window, old: Option<i64>, new: Option<i64>) {
        if old == new {
            return;
        }
        if let Some(t) = old {
            self.proc.remove(&(t, CompactString::from(key), w));
        }
        if let Some(t) = new {
            self.proc.insert((t, CompactString::from(key), w));
        }
    }

    /// Removes and returns the earliest event-time timer due at or before `wm`.
    pub fn pop_event(&mut self, wm: i64) -> Option<Timer> {
        if self.event.first()?.time <= wm {
            self.event.pop_first()
        } else {
            None
        }
    }

    /// Removes and returns the earliest processing-time timer due at or before `now`.
    pub fn pop_proc(&mut self, now: i64) -> Option<(i64, CompactString, Window)> {
        if self.proc.first()?.0 <= now {
            self.proc.pop_first()
        } else {
            None
        }
    }

    /// Adds an event-time timer of `kind` at `time` for `key`'s window `window` (at rebuild).
    pub fn insert_event(&mut self, time: i64, kind: TimerKind, key: &str, window: Window) {
        self.event.insert(Timer {
            time,
            kind,
            key: CompactString::from(key),
            window,
        });
    }

    /// Adds a processing-time timer at `deadline` for `key`'s window `window` (at rebuild).
    pub fn insert_proc(&mut self, deadline: i64, key: &str, window: Window) {
        self.proc
            .insert((deadline, CompactString::from(key), window));
    }
}
