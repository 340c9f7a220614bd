//! A key's windows: a deque sorted by window, each window with its own dirty flag.

use super::WinState;
use crate::windowing::assigner::Window;
use std::collections::VecDeque;

/// One window of a [`WindowMap`], with whether it changed since the last flush.
#[derive(Debug, Clone)]
struct WindowSlot {
    window: Window,
    state: WinState,
    dirty: bool,
    /// A session loaded from an entry of the older format (tag 1, end in the key): the next
    /// flush moves it to the session format and deletes the old entry.
    legacy: bool,
}

/// The windows of one key, sorted by window. Most keys have one to a few open windows, so a
/// sorted deque is far smaller than a B-tree node (which holds room for 11) and needs no allocation
/// per flush to track what changed: each window carries its own dirty flag, and removed windows are
/// listed until the next flush. New windows come at the back and expired ones leave at the front,
/// which a deque does in O(1).
#[derive(Debug, Clone, Default)]
pub struct WindowMap {
    slots: VecDeque<WindowSlot>,
    /// Removed windows, and whether each was stored in the older session format.
    removed: Vec<(Window, bool)>,
}

impl WindowMap {
    fn find(&self, w: &Window) -> Result<usize, usize> {
        self.slots.binary_search_by(|s| s.window.cmp(w))
    }

    /// Whether there are no windows.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Number of windows.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The state of window `w`.
    pub fn get(&self, w: &Window) -> Option<&WinState> {
        self.find(w).ok().map(|i| &self.slots[i].state)
    }

    /// The state of window `w`, mutably.
    pub fn get_mut(&mut self, w: &Window) -> Option<&mut WinState> {
        self.find(w).ok().map(|i| &mut self.slots[i].state)
    }

    /// Whether window `w` exists.
    pub fn contains_key(&self, w: &Window) -> bool {
        self.find(w).is_ok()
    }

    fn insert_at(&mut self, i: usize, w: Window, st: WinState) {
        // Grow one slot at a time while small (most keys hold one or two windows), then as usual.
        if self.slots.len() == self.slots.capacity() && self.slots.len() < 4 {
            self.slots.reserve_exact(1);
        }
        self.slots.insert(
            i,
            WindowSlot {
                window: w,
                state: st,
                dirty: false,
                legacy: false,
            },
        );
    }

    /// Inserts or replaces window `w`; returns the previous state.
    pub fn insert(&mut self, w: Window, st: WinState) -> Option<WinState> {
        match self.find(&w) {
            Ok(i) => Some(std::mem::replace(&mut self.slots[i].state, st)),
            Err(i) => {
                self.insert_at(i, w, st);
                None
            }
        }
    }

    /// The state of window `w`, inserting `f()` when it is absent.
    pub fn get_or_insert_with(&mut self, w: Window, f: impl FnOnce() -> WinState) -> &mut WinState {
        let i = match self.find(&w) {
            Ok(i) => i,
            Err(i) => {
                self.insert_at(i, w, f());
                i
            }
        };
        &mut self.slots[i].state
    }

    /// The state of window `w`, inserting `f()` when it is absent, marked changed (part of the
    /// next flush), and whether it existed: one search where `contains_key`,
    /// `get_or_insert_with` and a touch take three.
    pub fn upsert_changed(
        &mut self,
        w: Window,
        f: impl FnOnce() -> WinState,
    ) -> (bool, &mut WinState) {
        let (existed, i) = match self.find(&w) {
            Ok(i) => (true, i),
            Err(i) => {
                self.insert_at(i, w, f());
                (false, i)
            }
        };
        let slot = &mut self.slots[i];
        slot.dirty = true;
        (existed, &mut slot.state)
    }

    /// Removes window `w` (the next flush writes its tombstone); returns its state.
    pub fn remove(&mut self, w: &Window) -> Option<WinState> {
        let i = self.find(w).ok()?;
        let slot = self.slots.remove(i)?;
        self.removed.push((*w, slot.legacy));
        Some(slot.state)
    }

    /// The windows in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Window, &WinState)> + '_ {
        self.slots.iter().map(|s| (&s.window, &s.state))
    }

    /// The windows ordered before `bound`, in order (iterate `.rev()` for the nearest first).
    pub fn before(
        &self,
        bound: Window,
    ) -> impl DoubleEndedIterator<Item = (&Window, &WinState)> + '_ {
        let end = self.slots.partition_point(|s| s.window < bound);
        self.slots.range(..end).map(|s| (&s.window, &s.state))
    }

    /// The removed windows since the last flush, each with whether it was stored in the older
    /// session format; the list is emptied.
    pub(in crate::windowing) fn take_removed(&mut self) -> Vec<(Window, bool)> {
        std::mem::take(&mut self.removed)
    }

    /// Calls `f` with each window changed since the last flush and whether it awaits rewriting
    /// from the older session format; marks every window clean.
    pub(in crate::windowing) fn take_dirty(&mut self, mut f: impl FnMut(Window, &WinState, bool)) {
        for slot in self.slots.iter_mut().filter(|s| s.dirty) {
            slot.dirty = false;
            f(slot.window, &slot.state, std::mem::take(&mut slot.legacy));
        }
    }

    /// Whether some window starts at `start`.
    pub(in crate::windowing) fn has_start(&self, start: i64) -> bool {
        self.start_index(start).is_some()
    }

    /// Index of the window starting at `start`, if any.
    fn start_index(&self, start: i64) -> Option<usize> {
        let i = self.slots.partition_point(|s| s.window.start < start);
        (i < self.slots.len() && self.slots[i].window.start == start).then_some(i)
    }

    /// Inserts a window read from the store; `legacy` marks a session in the older format, which
    /// the next flush rewrites.
    pub(in crate::windowing) fn insert_loaded(&mut self, w: Window, st: WinState, legacy: bool) {
        let i = match self.find(&w) {
            Ok(i) => {
                self.slots[i].state = st;
                i
            }
            Err(i) => {
                self.insert_at(i, w, st);
                i
            }
        };
        let slot = &mut self.slots[i];
        slot.legacy |= legacy;
        slot.dirty |= legacy;
    }

    /// Whether any window awaits rewriting from the older session format.
    pub(in crate::windowing) fn has_legacy(&self) -> bool {
        self.slots.iter().any(|s| s.legacy)
    }

    /// Marks window `w` changed: its current value, or a tombstone when it no longer exists, is
    /// part of the next flush.
    pub(in crate::windowing) fn touch(&mut self, w: Window) {
        match self.find(&w) {
            Ok(i) => self.slots[i].dirty = true,
            Err(_) if !self.removed.iter().any(|(r, _)| *r == w) => self.removed.push((w, false)),
            Err(_) => {}
        }
    }
}
