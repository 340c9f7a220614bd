//! A key's windows, sorted: a small vector with its first window inline, or a deque when there
//! are many; each window with its own dirty flag.

use super::WinState;
use crate::windowing::assigner::Window;
use smallvec::SmallVec;
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
/// sorted vector is far smaller than a B-tree node (which holds room for 11) and needs no
/// allocation per flush to track what changed: each window carries its own dirty flag, and removed
/// windows are listed until the next flush.
///
/// Up to [`SPILL_AT`] windows are a small vector whose first window is inline: a key with one
/// window (a global window, or a tumbling one between boundaries) is read without following a
/// pointer, where a deque's buffer cost a cache miss per event and another per flushed key (about
/// a fifth of a global-window counter's time over 100,000 keys). Beyond that (sliding windows kept
/// per window hold size/slide of them) the windows move to a deque, where expired windows leave
/// the front in O(1) instead of shifting the rest.
#[derive(Debug, Clone, Default)]
pub struct WindowMap {
    /// The windows while there are few; empty once they moved to `spill`.
    slots: SmallVec<[WindowSlot; 1]>,
    /// The windows once there were more than [`SPILL_AT`]; empty before.
    spill: VecDeque<WindowSlot>,
    /// Removed windows, and whether each was stored in the older session format.
    removed: Vec<(Window, bool)>,
}

/// How many windows a key holds in its small vector before they move to a deque.
pub const SPILL_AT: usize = 8;

impl WindowMap {
    fn spilled(&self) -> bool {
        !self.spill.is_empty()
    }

    fn find(&self, w: &Window) -> Result<usize, usize> {
        if self.spilled() {
            self.spill.binary_search_by(|s| s.window.cmp(w))
        } else {
            self.slots.binary_search_by(|s| s.window.cmp(w))
        }
    }

    fn slot(&self, i: usize) -> &WindowSlot {
        if self.spilled() {
            &self.spill[i]
        } else {
            &self.slots[i]
        }
    }

    fn slot_mut(&mut self, i: usize) -> &mut WindowSlot {
        if self.spilled() {
            &mut self.spill[i]
        } else {
            &mut self.slots[i]
        }
    }

    fn remove_at(&mut self, i: usize) -> WindowSlot {
        if self.spilled() {
            self.spill.remove(i).expect("index from find")
        } else {
            self.slots.remove(i)
        }
    }

    fn partition_point(&self, pred: impl FnMut(&WindowSlot) -> bool) -> usize {
        if self.spilled() {
            self.spill.partition_point(pred)
        } else {
            self.slots.partition_point(pred)
        }
    }

    /// The first `end` windows, in order.
    fn first(&self, end: usize) -> impl DoubleEndedIterator<Item = &WindowSlot> + '_ {
        let (small, spill) = if self.spilled() {
            (&self.slots[..0], self.spill.range(..end))
        } else {
            (&self.slots[..end], self.spill.range(..0))
        };
        small.iter().chain(spill)
    }

    /// Whether there are no windows.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.spill.is_empty()
    }

    /// The heap bytes the windows hold beyond the map itself, their states included.
    pub fn heap_size(&self) -> usize {
        let slot = std::mem::size_of::<WindowSlot>();
        let inline = if self.slots.spilled() {
            self.slots.capacity() * slot
        } else {
            0
        };
        let states: usize = self
            .iter()
            .map(|(_, st)| st.size() - std::mem::size_of::<super::WinState>())
            .sum();
        inline
            + self.spill.capacity() * slot
            + self.removed.capacity() * std::mem::size_of::<(Window, bool)>()
            + states
    }

    /// The number of windows.
    pub fn len(&self) -> usize {
        self.slots.len() + self.spill.len()
    }

    /// The state of window `w`.
    pub fn get(&self, w: &Window) -> Option<&WinState> {
        self.find(w).ok().map(|i| &self.slot(i).state)
    }

    /// The state of window `w`, mutably.
    pub fn get_mut(&mut self, w: &Window) -> Option<&mut WinState> {
        self.find(w).ok().map(|i| &mut self.slot_mut(i).state)
    }

    /// Whether window `w` exists.
    pub fn contains_key(&self, w: &Window) -> bool {
        self.find(w).is_ok()
    }

    fn insert_at(&mut self, i: usize, w: Window, st: WinState) {
        let slot = WindowSlot {
            window: w,
            state: st,
            dirty: false,
            legacy: false,
        };
        if !self.spilled() && self.slots.len() >= SPILL_AT {
            self.spill = self.slots.drain(..).collect();
        }
        if self.spilled() {
            self.spill.insert(i, slot);
            return;
        }
        // Grow one slot at a time while small (most keys hold one or two windows), then as usual.
        if self.slots.len() == self.slots.capacity() && self.slots.len() < 4 {
            self.slots.reserve_exact(1);
        }
        self.slots.insert(i, slot);
    }

    /// Inserts or replaces window `w`; returns the previous state.
    pub fn insert(&mut self, w: Window, st: WinState) -> Option<WinState> {
        match self.find(&w) {
            Ok(i) => Some(std::mem::replace(&mut self.slot_mut(i).state, st)),
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
        &mut self.slot_mut(i).state
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
        let slot = self.slot_mut(i);
        slot.dirty = true;
        (existed, &mut slot.state)
    }

    /// Removes window `w` (the next flush writes its tombstone); returns its state.
    pub fn remove(&mut self, w: &Window) -> Option<WinState> {
        let i = self.find(w).ok()?;
        let slot = self.remove_at(i);
        self.removed.push((*w, slot.legacy));
        Some(slot.state)
    }

    /// The windows in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Window, &WinState)> + '_ {
        self.slots
            .iter()
            .chain(&self.spill)
            .map(|s| (&s.window, &s.state))
    }

    /// The windows ordered before `bound`, in order (iterate `.rev()` for the nearest first).
    pub fn before(
        &self,
        bound: Window,
    ) -> impl DoubleEndedIterator<Item = (&Window, &WinState)> + '_ {
        let end = self.partition_point(|s| s.window < bound);
        self.first(end).map(|s| (&s.window, &s.state))
    }

    /// The removed windows since the last flush, each with whether it was stored in the older
    /// session format; the list is emptied.
    pub(in crate::windowing) fn take_removed(&mut self) -> Vec<(Window, bool)> {
        std::mem::take(&mut self.removed)
    }

    /// Calls `f` with each window changed since the last flush and whether it awaits rewriting
    /// from the older session format; marks every window clean.
    pub(in crate::windowing) fn take_dirty(&mut self, mut f: impl FnMut(Window, &WinState, bool)) {
        for slot in self
            .slots
            .iter_mut()
            .chain(&mut self.spill)
            .filter(|s| s.dirty)
        {
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
        let i = self.partition_point(|s| s.window.start < start);
        (i < self.len() && self.slot(i).window.start == start).then_some(i)
    }

    /// Inserts a window read from the store; `legacy` marks a session in the older format, which
    /// the next flush rewrites.
    pub(in crate::windowing) fn insert_loaded(&mut self, w: Window, st: WinState, legacy: bool) {
        let i = match self.find(&w) {
            Ok(i) => {
                self.slot_mut(i).state = st;
                i
            }
            Err(i) => {
                self.insert_at(i, w, st);
                i
            }
        };
        let slot = self.slot_mut(i);
        slot.legacy |= legacy;
        slot.dirty |= legacy;
    }

    /// Whether any window awaits rewriting from the older session format.
    pub(in crate::windowing) fn has_legacy(&self) -> bool {
        self.slots.iter().chain(&self.spill).any(|s| s.legacy)
    }

    /// Marks window `w` changed: its current value, or a tombstone when it no longer exists, is
    /// part of the next flush.
    pub(in crate::windowing) fn touch(&mut self, w: Window) {
        match self.find(&w) {
            Ok(i) => self.slot_mut(i).dirty = true,
            Err(_) if !self.removed.iter().any(|(r, _)| *r == w) => self.removed.push((w, false)),
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map agrees with a B-tree map through growth past [`SPILL_AT`], removals from the
    /// front and the middle, and shrinking back to nothing.
    #[test]
    fn a_map_that_spills_to_a_deque_stays_sorted_and_complete() {
        let mut map = WindowMap::default();
        let mut model = std::collections::BTreeMap::new();
        let w = |s: i64| Window::new(s, s + 10);
        let check = |map: &WindowMap, model: &std::collections::BTreeMap<Window, u32>| {
            let got: Vec<(Window, u32)> = map.iter().map(|(w, s)| (*w, s.next_pane)).collect();
            let want: Vec<(Window, u32)> = model.iter().map(|(w, n)| (*w, *n)).collect();
            assert_eq!(got, want);
            assert_eq!(map.len(), model.len());
            for bound in [0, 35, 70, 1_000] {
                let got: Vec<Window> = map.before(w(bound)).rev().map(|(w, _)| *w).collect();
                let want: Vec<Window> = model.range(..w(bound)).rev().map(|(w, _)| *w).collect();
                assert_eq!(got, want, "before {bound}");
            }
        };
        for (n, s) in [50, 10, 90, 0, 30, 70, 20, 80, 40, 60, 100, 5]
            .into_iter()
            .enumerate()
        {
            let (existed, st) = map.upsert_changed(w(s), || WinState::new(false));
            assert!(!existed);
            st.next_pane = n as u32;
            model.insert(w(s), n as u32);
            check(&map, &model);
        }
        assert!(map.spilled(), "12 windows are past SPILL_AT");
        assert!(map.has_start(30) && !map.has_start(31));
        for s in [0, 5, 50, 10, 100] {
            assert!(map.remove(&w(s)).is_some());
            model.remove(&w(s));
            check(&map, &model);
        }
        let mut dirty = Vec::new();
        map.take_dirty(|w, _, _| dirty.push(w.start));
        assert_eq!(dirty, [20, 30, 40, 60, 70, 80, 90]);
        for s in [20, 30, 40, 60, 70, 80, 90] {
            map.remove(&w(s));
            model.remove(&w(s));
            check(&map, &model);
        }
        assert!(map.is_empty() && !map.spilled());
        map.get_or_insert_with(w(7), || WinState::new(true));
        assert_eq!(map.len(), 1);
        assert!(map.get(&w(7)).unwrap().on_time_done);
    }
}
