//! A partition's window state: a typed write-back cache over one RocksDB column family, plus the
//! timer indexes that drive firing.
//!
//! Per-event updates change [`KeyState`]s in memory and mark the touched entries dirty. A flush
//! ([`PartitionState::take_changes`] then [`PartitionState::write`]) turns the dirty entries into
//! one list of changes — the full current value of every changed entry, or a tombstone — which is
//! both the RocksDB WriteBatch and the changelog. Nothing reaches RocksDB between flushes.
//!
//! Timers are derived state: the event-time index holds one timer per window (its end while the
//! on-time pane is pending, then end + allowed lateness for expiry) and one per sliced key; the
//! processing-time index holds pending early firings. Both are ordered sets, so firing is a range
//! scan up to the watermark (or clock). They are rebuilt from the column family when a partition is
//! opened, so they are never written to RocksDB or the changelog.

use super::aggregate::Acc;
use super::assigner::Window;
use crate::state::keys::{self, StateKey, TAG_CURSOR, TAG_SESSION, TAG_SLICE, TAG_WINDOW};
use crate::state::store::{StateStore, StoreError, StoredOffsets};
use compact_str::CompactString;
use rocksdb::{Direction, IteratorMode, WriteBatch};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

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

/// State of one window of one key.
#[derive(Debug, Clone, PartialEq)]
pub struct WinState {
    /// Everything in the window.
    pub total: Acc,
    /// What arrived since the previous pane (kept only in discarding mode).
    pub pane: Acc,
    /// Index of the next pane.
    pub next_pane: u32,
    /// Whether the watermark has passed the end (the ON_TIME point is behind us).
    pub on_time_done: bool,
    /// Processing time at which an early pane is due.
    pub early_deadline: Option<i64>,
    /// Content of the last emitted pane (sessions only, for retractions).
    pub last_emitted: Option<Acc>,
}

impl WinState {
    /// A new, empty window state.
    pub fn new(on_time_done: bool) -> WinState {
        WinState {
            total: Acc::default(),
            pane: Acc::default(),
            next_pane: 0,
            on_time_done,
            early_deadline: None,
            last_emitted: None,
        }
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let flags = (self.on_time_done as u8)
            | ((self.early_deadline.is_some() as u8) << 1)
            | ((self.last_emitted.is_some() as u8) << 2);
        out.push(1); // version
        out.push(flags);
        out.extend_from_slice(&self.next_pane.to_le_bytes());
        if let Some(d) = self.early_deadline {
            out.extend_from_slice(&d.to_le_bytes());
        }
        self.total.encode(out);
        self.pane.encode(out);
        if let Some(l) = &self.last_emitted {
            l.encode(out);
        }
    }

    fn decode(bytes: &[u8]) -> Option<WinState> {
        let (&version, rest) = bytes.split_first()?;
        if version != 1 {
            return None;
        }
        let (&flags, rest) = rest.split_first()?;
        let next_pane = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
        let mut rest = &rest[4..];
        let early_deadline = if flags & 2 != 0 {
            let d = i64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
            rest = &rest[8..];
            Some(d)
        } else {
            None
        };
        let (total, rest) = Acc::decode(rest)?;
        let (pane, rest) = Acc::decode(rest)?;
        let (last_emitted, rest) = if flags & 4 != 0 {
            let (a, r) = Acc::decode(rest)?;
            (Some(a), r)
        } else {
            (None, rest)
        };
        if !rest.is_empty() {
            return None;
        }
        Some(WinState {
            total,
            pane,
            next_pane,
            on_time_done: flags & 1 != 0,
            early_deadline,
            last_emitted,
        })
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

impl Cursor {
    /// Version 2: the late pane indexes only.
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(2);
        out.extend_from_slice(&(self.late_panes.len() as u32).to_le_bytes());
        for (end, idx) in &self.late_panes {
            out.extend_from_slice(&end.to_le_bytes());
            out.extend_from_slice(&idx.to_le_bytes());
        }
    }

    /// Decodes versions 1 (which also stored `next_fire`, now derived instead) and 2.
    fn decode(bytes: &[u8]) -> Option<Cursor> {
        let (&version, mut rest) = bytes.split_first()?;
        match version {
            1 => {
                let (&has, r) = rest.split_first()?;
                rest = if has == 1 { r.get(8..)? } else { r };
            }
            2 => {}
            _ => return None,
        }
        let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        rest = &rest[4..];
        let mut late_panes = BTreeMap::new();
        for _ in 0..n {
            let end = i64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
            let idx = u32::from_le_bytes(rest.get(8..12)?.try_into().ok()?);
            late_panes.insert(end, idx);
            rest = &rest[12..];
        }
        rest.is_empty().then_some(Cursor {
            next_fire: None,
            late_panes,
            running: None,
            scheduled: None,
        })
    }
}

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

    /// Adds the changed windows (values) and removed ones (tombstones) to `changes`; marks all
    /// clean. Sessions (`by_start`) are stored by start, with the end in the value.
    fn take_changes(&mut self, key: &str, changes: &mut Changes, by_start: bool) {
        let no_value = None::<fn(&mut Vec<u8>)>;
        let mut removed = std::mem::take(&mut self.removed);
        removed.sort_unstable();
        removed.dedup();
        let mut last_start = None;
        for (w, legacy) in removed {
            let window_key = |out: &mut Vec<u8>| keys::put_window_key(out, key, w.start, w.end);
            if !by_start {
                // Removed and then created again since the last flush: the value below wins.
                if !self.contains_key(&w) {
                    changes.push(window_key, no_value);
                }
                continue;
            }
            if legacy {
                changes.push(window_key, no_value);
            }
            // One tombstone per start, and none when a session with that start exists (its value
            // below replaces the entry).
            if last_start != Some(w.start) && self.start_index(w.start).is_none() {
                changes.push(|out| keys::put_session_key(out, key, w.start), no_value);
            }
            last_start = Some(w.start);
        }
        for slot in self.slots.iter_mut().filter(|s| s.dirty) {
            slot.dirty = false;
            let (w, st) = (slot.window, &slot.state);
            if !by_start {
                changes.push(
                    |out| keys::put_window_key(out, key, w.start, w.end),
                    Some(|out: &mut Vec<u8>| st.encode_into(out)),
                );
                continue;
            }
            if std::mem::take(&mut slot.legacy) {
                changes.push(
                    |out| keys::put_window_key(out, key, w.start, w.end),
                    no_value,
                );
            }
            changes.push(
                |out| keys::put_session_key(out, key, w.start),
                Some(|out: &mut Vec<u8>| {
                    out.extend_from_slice(&w.end.to_le_bytes());
                    st.encode_into(out);
                }),
            );
        }
    }

    /// Index of the window starting at `start`, if any.
    fn start_index(&self, start: i64) -> Option<usize> {
        let i = self.slots.partition_point(|s| s.window.start < start);
        (i < self.slots.len() && self.slots[i].window.start == start).then_some(i)
    }

    /// Inserts a window read from the store; `legacy` marks a session in the older format, which
    /// the next flush rewrites.
    fn insert_loaded(&mut self, w: Window, st: WinState, legacy: bool) {
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
    fn has_legacy(&self) -> bool {
        self.slots.iter().any(|s| s.legacy)
    }

    /// Marks window `w` changed: its current value, or a tombstone when it no longer exists, is
    /// part of the next flush.
    fn touch(&mut self, w: Window) {
        match self.find(&w) {
            Ok(i) => self.slots[i].dirty = true,
            Err(_) if !self.removed.iter().any(|(r, _)| *r == w) => self.removed.push((w, false)),
            Err(_) => {}
        }
    }
}

/// The slices of one key, sorted by slice start. New slices come at the back and expired ones
/// leave at the front, so a sorted deque does what a B-tree map did here, with contiguous range
/// scans and no node allocations.
#[derive(Debug, Clone, Default)]
pub struct SliceMap {
    slots: VecDeque<(i64, Acc)>,
}

impl SliceMap {
    fn find(&self, start: i64) -> Result<usize, usize> {
        let i = self.lower_bound(start);
        match self.slots.get(i) {
            Some((a, _)) if *a == start => Ok(i),
            _ => Err(i),
        }
    }

    /// Whether there are no slices.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The slice starting at `start`.
    pub fn get(&self, start: &i64) -> Option<&Acc> {
        self.find(*start).ok().map(|i| &self.slots[i].1)
    }

    /// The slice starting at `start`, created empty when absent.
    pub fn get_or_default(&mut self, start: i64) -> &mut Acc {
        let i = match self.find(start) {
            Ok(i) => i,
            Err(i) => {
                self.slots.insert(i, (start, Acc::default()));
                i
            }
        };
        &mut self.slots[i].1
    }

    /// Removes the slice starting at `start`.
    pub fn remove(&mut self, start: &i64) -> Option<Acc> {
        let i = self.find(*start).ok()?;
        self.slots.remove(i).map(|(_, acc)| acc)
    }

    /// The earliest slice.
    pub fn first_key_value(&self) -> Option<(&i64, &Acc)> {
        self.slots.front().map(|(a, acc)| (a, acc))
    }

    /// Slice starts in order.
    pub fn keys(&self) -> impl Iterator<Item = &i64> + '_ {
        self.slots.iter().map(|(a, _)| a)
    }

    /// The slices whose start lies in `range`, in order.
    pub fn range(
        &self,
        range: impl std::ops::RangeBounds<i64>,
    ) -> impl Iterator<Item = (&i64, &Acc)> + '_ {
        use std::ops::Bound;
        let lo = match range.start_bound() {
            Bound::Included(&a) => self.lower_bound(a),
            Bound::Excluded(&a) => self.above(a),
            Bound::Unbounded => 0,
        };
        let hi = match range.end_bound() {
            Bound::Included(&b) => self.above(b),
            Bound::Excluded(&b) => self.lower_bound(b),
            Bound::Unbounded => self.slots.len(),
        };
        self.slots.range(lo..hi.max(lo)).map(|(a, acc)| (a, acc))
    }

    /// Index of the first slice starting after `a`.
    fn above(&self, a: i64) -> usize {
        a.checked_add(1)
            .map_or(self.slots.len(), |b| self.lower_bound(b))
    }

    /// Index of the first slice starting at or after `a`. The windows that fire and the slices that
    /// expire lie near the ends, so both ends are checked first and the search gallops in from the
    /// back (a binary search over a key's slices cost a sixth of the sliding benchmark).
    fn lower_bound(&self, a: i64) -> usize {
        let n = self.slots.len();
        match (self.slots.front(), self.slots.back()) {
            (Some((first, _)), _) if *first >= a => return 0,
            (_, Some((last, _))) if *last < a => return n,
            (None, _) | (_, None) => return 0,
            _ => {}
        }
        // Now slots[0] < a <= slots[n - 1].
        let (mut hi, mut step) = (n - 1, 1);
        loop {
            let lo = hi.saturating_sub(step);
            if self.slots[lo].0 < a {
                // The answer lies in (lo, hi].
                let mut l = lo + 1;
                let mut h = hi;
                while l < h {
                    let mid = l + (h - l) / 2;
                    if self.slots[mid].0 < a {
                        l = mid + 1;
                    } else {
                        h = mid;
                    }
                }
                return l;
            }
            hi = lo;
            step *= 2;
        }
    }
}

/// The slices of a key changed since the last flush, each once. A key changes one or two slices
/// between flushes, so two live inline and only more than that allocate: a list that allocated
/// for every key at every flush cost a malloc and a free per key, and one that kept its allocation
/// cost 16 MB of peak RSS in the sliding benchmark.
#[derive(Debug, Clone, Default)]
struct DirtySlices {
    inline: [i64; 2],
    len: u8,
    more: Vec<i64>,
}

impl DirtySlices {
    fn insert(&mut self, start: i64) {
        let n = usize::from(self.len);
        if self.inline[..n].contains(&start) || self.more.contains(&start) {
            return;
        }
        if n < self.inline.len() {
            self.inline[n] = start;
            self.len += 1;
        } else {
            self.more.push(start);
        }
    }

    /// Calls `f` with each slice start and empties the list.
    fn take_each(&mut self, mut f: impl FnMut(i64)) {
        for &s in &self.inline[..usize::from(self.len)] {
            f(s);
        }
        self.len = 0;
        for s in std::mem::take(&mut self.more) {
            f(s);
        }
    }
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
    dirty_slices: DirtySlices,
    dirty_cursor: bool,
    listed: bool,
}

impl KeyState {
    /// Whether the key holds no state at all.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.slices.is_empty() && self.cursor.is_none()
    }
}

/// One change inside [`Changes`]: byte ranges of its key and value in the shared buffer.
#[derive(Debug, Clone, Copy)]
struct ChangeEntry {
    /// The key's first 16 bytes, big-endian, so most comparisons while sorting are one integer
    /// comparison instead of a memcmp.
    prefix: u128,
    key: (u32, u32),
    value: Option<(u32, u32)>,
}

/// The dirty entries of one flush, sorted by encoded key: for each, the full current value or a
/// tombstone. Keys and values live in one buffer, so a flush allocates twice, not per entry.
#[derive(Debug, Default, Clone)]
pub struct Changes {
    buf: Vec<u8>,
    entries: Vec<ChangeEntry>,
}

impl Changes {
    /// Number of changed entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The changes in key order: encoded key and new value, or `None` for a tombstone.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        let slice = |(a, b): (u32, u32)| &self.buf[a as usize..b as usize];
        self.entries
            .iter()
            .map(move |e| (slice(e.key), e.value.map(slice)))
    }

    fn push(
        &mut self,
        write_key: impl FnOnce(&mut Vec<u8>),
        write_value: Option<impl FnOnce(&mut Vec<u8>)>,
    ) {
        let k0 = self.buf.len() as u32;
        write_key(&mut self.buf);
        let k1 = self.buf.len() as u32;
        let mut head = [0u8; 16];
        let key_bytes = &self.buf[k0 as usize..k1 as usize];
        let n = key_bytes.len().min(16);
        head[..n].copy_from_slice(&key_bytes[..n]);
        let prefix = u128::from_be_bytes(head);
        let value = write_value.map(|w| {
            w(&mut self.buf);
            (k1, self.buf.len() as u32)
        });
        self.entries.push(ChangeEntry {
            prefix,
            key: (k0, k1),
            value,
        });
    }

    fn sort(&mut self) {
        let buf = &self.buf;
        self.entries.sort_unstable_by(|a, b| {
            a.prefix.cmp(&b.prefix).then_with(|| {
                buf[a.key.0 as usize..a.key.1 as usize]
                    .cmp(&buf[b.key.0 as usize..b.key.1 as usize])
            })
        });
    }
}

/// Default number of keys kept in memory before clean entries are evicted after a flush.
pub const DEFAULT_CACHE_KEYS: usize = 2_000_000;

/// The write-back cache and timer indexes of one operator partition.
pub struct PartitionState {
    store: StateStore,
    cf: String,
    /// Keys up to 24 bytes are stored inline, so a lookup compares within the table instead of
    /// following a pointer to the heap (a cache miss per event with many keys).
    keys: FxHashMap<CompactString, KeyState>,
    dirty_keys: Vec<CompactString>,
    /// True while every entry of the column family is in `keys`, so a miss means "absent".
    complete: bool,
    max_keys: usize,
    /// Whether windows are sessions, stored by start (see [`keys::TAG_SESSION`]).
    sessions: bool,
    event_timers: BTreeSet<Timer>,
    proc_timers: BTreeSet<(i64, CompactString, Window)>,
    /// The watermark as last noted, and whether it changed since the last flush.
    watermark: Option<i64>,
    watermark_dirty: bool,
    /// The watermark of the last flush: every timer due at or before it had run when the state it
    /// wrote was taken, which is what a key loaded from the store is rebuilt from.
    flushed_watermark: Option<i64>,
    /// Bytes and entries of the last flush's changes.
    last_flush: (usize, usize),
}

impl std::fmt::Debug for PartitionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionState")
            .field("cf", &self.cf)
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// Hooks that compute derived timers from loaded state; supplied by the engine.
pub trait TimerRules {
    /// The event-time timer of a window state (there is always exactly one).
    fn window_timer(&self, window: &Window, st: &WinState) -> (i64, TimerKind);
    /// The service time of a sliced key, if it needs one.
    fn key_service_time(&self, ks: &KeyState) -> Option<i64>;
    /// Rebuilds the memory-only parts of a key loaded from the store, given the watermark of the
    /// flush that wrote it (`None` before any).
    fn restore_key(&self, ks: &mut KeyState, flushed_watermark: Option<i64>);
    /// Whether windows are sessions, stored by start because their end moves.
    fn sessions(&self) -> bool;
}

impl PartitionState {
    /// Opens operator `operator`'s partition `partition`: loads its column family into memory (up to
    /// `max_keys` keys) and rebuilds the timer indexes.
    pub fn open(
        store: &StateStore,
        operator: &str,
        partition: i32,
        max_keys: usize,
        rules: &dyn TimerRules,
    ) -> Result<PartitionState, StoreError> {
        let cf = StateStore::cf_name(operator, partition);
        store.ensure_cf(&cf)?;
        let mut st = PartitionState {
            store: store.clone(),
            cf,
            keys: FxHashMap::default(),
            dirty_keys: Vec::new(),
            complete: true,
            max_keys,
            sessions: rules.sessions(),
            event_timers: BTreeSet::new(),
            proc_timers: BTreeSet::new(),
            watermark: None,
            watermark_dirty: false,
            flushed_watermark: None,
            last_flush: (0, 0),
        };
        st.load_all(rules)?;
        Ok(st)
    }

    fn corrupt(&self, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            cf: self.cf.clone(),
            detail: detail.into(),
        }
    }

    fn load_all(&mut self, rules: &dyn TimerRules) -> Result<(), StoreError> {
        let db = self.store.db();
        let handle = db
            .cf_handle(&self.cf)
            .ok_or_else(|| StoreError::MissingCf(self.cf.clone()))?;
        // Keys whose state was not kept in memory still need their timers: gather them per key.
        let mut partial: FxHashMap<String, KeyState> = FxHashMap::default();
        for item in db.iterator_cf(&handle, IteratorMode::Start) {
            let (k, v) = item?;
            let decoded = keys::decode_state_key(&k).map_err(|e| self.corrupt(e.to_string()))?;
            let key = match &decoded {
                StateKey::Window { key, .. }
                | StateKey::Session { key, .. }
                | StateKey::Slice { key, .. }
                | StateKey::Cursor { key } => key.clone(),
                StateKey::Watermark => {
                    let raw: [u8; 8] = v.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                        cf: self.cf.clone(),
                        detail: "watermark value".into(),
                    })?;
                    self.watermark = Some(i64::from_be_bytes(raw));
                    continue;
                }
            };
            let in_memory = self.keys.contains_key(key.as_str()) || self.keys.len() < self.max_keys;
            if !in_memory {
                self.complete = false;
            }
            let ks = if in_memory {
                self.keys.entry(CompactString::from(key)).or_default()
            } else {
                partial.entry(key).or_default()
            };
            apply_entry(ks, decoded, &v, self.sessions).ok_or_else(|| StoreError::Corrupt {
                cf: self.cf.clone(),
                detail: "undecodable value".into(),
            })?;
        }
        // Sessions in the older format are rewritten by the next flush (a key loaded later, on a
        // miss, is listed by `key_mut`).
        if self.sessions {
            for (key, ks) in self.keys.iter_mut() {
                if !ks.listed && ks.windows.has_legacy() {
                    ks.listed = true;
                    self.dirty_keys.push(key.clone());
                }
            }
        }
        self.flushed_watermark = self.watermark;
        for ks in self.keys.values_mut().chain(partial.values_mut()) {
            rules.restore_key(ks, self.watermark);
        }
        let mut event_timers = BTreeSet::new();
        let mut proc_timers = BTreeSet::new();
        let in_memory = self.keys.iter().map(|(k, ks)| (k.as_str(), ks));
        for (key, ks) in in_memory.chain(partial.iter().map(|(k, ks)| (k.as_str(), ks))) {
            index_key(&mut event_timers, &mut proc_timers, key, ks, rules);
        }
        self.event_timers = event_timers;
        self.proc_timers = proc_timers;
        for ks in self.keys.values_mut() {
            let t = rules.key_service_time(ks);
            if let Some(c) = ks.cursor.as_mut() {
                c.scheduled = t;
            }
        }
        Ok(())
    }

    /// The watermark stored with this partition's state, if any.
    pub fn stored_watermark(&self) -> Option<i64> {
        self.watermark
    }

    /// Records the partition's watermark; the next flush persists it with the state.
    pub fn note_watermark(&mut self, wm: i64) {
        if self.watermark != Some(wm) {
            self.watermark = Some(wm);
            self.watermark_dirty = true;
        }
    }

    /// The column family name.
    pub fn cf(&self) -> &str {
        &self.cf
    }

    /// The store this partition lives in.
    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// Number of keys held in memory.
    pub fn cached_keys(&self) -> usize {
        self.keys.len()
    }

    /// Number of pending event-time timers (one per open window or sliced key).
    pub fn pending_timers(&self) -> usize {
        self.event_timers.len()
    }

    /// The state of `key`, loading it from RocksDB on a miss; marks the key dirty.
    pub fn key_mut(
        &mut self,
        key: &str,
        rules: &dyn TimerRules,
    ) -> Result<&mut KeyState, StoreError> {
        if !self.keys.contains_key(key) {
            let ks = if self.complete {
                KeyState::default()
            } else {
                self.load_key(key, rules)?
            };
            self.keys.insert(CompactString::from(key), ks);
        }
        let ks = self.keys.get_mut(key).expect("inserted above");
        if !ks.listed {
            ks.listed = true;
            self.dirty_keys.push(CompactString::from(key));
        }
        Ok(ks)
    }

    fn load_key(&self, key: &str, rules: &dyn TimerRules) -> Result<KeyState, StoreError> {
        let db = self.store.db();
        let handle = db
            .cf_handle(&self.cf)
            .ok_or_else(|| StoreError::MissingCf(self.cf.clone()))?;
        let mut ks = KeyState::default();
        for tag in [TAG_WINDOW, TAG_SLICE, TAG_CURSOR, TAG_SESSION] {
            let prefix = keys::key_prefix(tag, key);
            for item in db.iterator_cf(&handle, IteratorMode::From(&prefix, Direction::Forward)) {
                let (k, v) = item?;
                if !k.starts_with(&prefix) {
                    break;
                }
                let decoded =
                    keys::decode_state_key(&k).map_err(|e| self.corrupt(e.to_string()))?;
                apply_entry(&mut ks, decoded, &v, self.sessions)
                    .ok_or_else(|| self.corrupt("undecodable value"))?;
            }
        }
        rules.restore_key(&mut ks, self.flushed_watermark);
        // A loaded cursor's timer is already in the index, computed from this same stored state.
        let t = rules.key_service_time(&ks);
        if let Some(c) = ks.cursor.as_mut() {
            c.scheduled = t;
        }
        Ok(ks)
    }

    /// Marks a window entry of `key` dirty (call after changing or removing it).
    pub fn touch_window(ks: &mut KeyState, w: Window) {
        ks.windows.touch(w);
    }

    /// Marks a slice entry dirty.
    pub fn touch_slice(ks: &mut KeyState, start: i64) {
        ks.dirty_slices.insert(start);
    }

    /// Marks the cursor's stored part (its late pane indexes) changed.
    pub fn touch_cursor(ks: &mut KeyState) {
        ks.dirty_cursor = true;
    }

    /// Replaces a window's event-time timer.
    pub fn set_event_timer(
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
            self.event_timers.remove(&Timer {
                time,
                kind,
                key: CompactString::from(key),
                window: w,
            });
        }
        if let Some((time, kind)) = new {
            self.event_timers.insert(Timer {
                time,
                kind,
                key: CompactString::from(key),
                window: w,
            });
        }
    }

    /// Replaces a window's processing-time (early firing) timer.
    pub fn set_proc_timer(&mut self, key: &str, w: Window, old: Option<i64>, new: Option<i64>) {
        if old == new {
            return;
        }
        if let Some(t) = old {
            self.proc_timers.remove(&(t, CompactString::from(key), w));
        }
        if let Some(t) = new {
            self.proc_timers.insert((t, CompactString::from(key), w));
        }
    }

    /// Removes and returns the earliest event-time timer due at or before `wm`.
    pub fn pop_event_timer(&mut self, wm: i64) -> Option<Timer> {
        if self.event_timers.first()?.time <= wm {
            self.event_timers.pop_first()
        } else {
            None
        }
    }

    /// Removes and returns the earliest processing-time timer due at or before `now`.
    pub fn pop_proc_timer(&mut self, now: i64) -> Option<(i64, CompactString, Window)> {
        if self.proc_timers.first()?.0 <= now {
            self.proc_timers.pop_first()
        } else {
            None
        }
    }

    /// Collects every dirty entry as a change (value or tombstone) and marks everything clean.
    pub fn take_changes(&mut self) -> Changes {
        // Sized like the last flush: growing the buffers by doubling copied them over and over.
        let mut changes = Changes {
            buf: Vec::with_capacity(self.last_flush.0),
            entries: Vec::with_capacity(self.last_flush.1),
        };
        let mut dirty = std::mem::take(&mut self.dirty_keys);
        let sessions = self.sessions;
        if dirty.len() * 2 >= self.keys.len() {
            // Most keys changed: one pass over the table in memory order is cheaper than a
            // lookup (a cache miss) per changed key.
            self.keys.retain(|key, ks| {
                if ks.listed {
                    key_changes(key, ks, &mut changes, sessions);
                }
                !ks.is_empty()
            });
        } else {
            for key in &dirty {
                let Some(ks) = self.keys.get_mut(key) else {
                    continue;
                };
                key_changes(key, ks, &mut changes, sessions);
                if ks.is_empty() {
                    self.keys.remove(key);
                }
            }
        }
        dirty.clear();
        self.dirty_keys = dirty;
        self.flushed_watermark = self.watermark;
        if std::mem::take(&mut self.watermark_dirty) {
            if let Some(wm) = self.watermark {
                changes.push(
                    |out| out.push(keys::TAG_WATERMARK),
                    Some(|out: &mut Vec<u8>| out.extend_from_slice(&wm.to_be_bytes())),
                );
            }
        }
        // In key order: RocksDB's memtable inserts sorted keys far faster (it reuses its splice),
        // and the changelog is then in key order too.
        changes.sort();
        self.last_flush = (changes.buf.len(), changes.entries.len());
        changes
    }

    /// Writes changes (and optionally the partition's offsets) to RocksDB in one WriteBatch, then
    /// evicts clean keys if the cache has grown past its limit.
    pub fn write(
        &mut self,
        changes: &Changes,
        offsets: Option<StoredOffsets>,
    ) -> Result<(), StoreError> {
        let db = self.store.db();
        let handle = db
            .cf_handle(&self.cf)
            .ok_or_else(|| StoreError::MissingCf(self.cf.clone()))?;
        let mut batch = WriteBatch::default();
        for (k, v) in changes.iter() {
            match v {
                Some(v) => batch.put_cf(&handle, k, v),
                None => batch.delete_cf(&handle, k),
            }
        }
        if let Some(o) = offsets {
            self.store.put_offsets(&mut batch, &self.cf, o)?;
        }
        drop(handle);
        self.store.write(batch)?;
        if self.keys.len() > self.max_keys && self.dirty_keys.is_empty() {
            self.keys.clear();
            self.complete = false;
        }
        Ok(())
    }
}

/// Adds a changed key's dirty entries to `changes` and marks the key clean.
fn key_changes(key: &str, ks: &mut KeyState, changes: &mut Changes, sessions: bool) {
    ks.listed = false;
    ks.windows.take_changes(key, changes, sessions);
    let KeyState {
        slices,
        dirty_slices,
        ..
    } = ks;
    dirty_slices.take_each(|s| {
        changes.push(
            |out| keys::put_slice_key(out, key, s),
            slices.get(&s).map(|a| |out: &mut Vec<u8>| a.encode(out)),
        );
    });
    if std::mem::take(&mut ks.dirty_cursor) {
        changes.push(
            |out| keys::put_cursor_key(out, key),
            ks.cursor
                .as_ref()
                .filter(|c| !c.late_panes.is_empty())
                .map(|c| |out: &mut Vec<u8>| c.encode_into(out)),
        );
    }
}

fn index_key(
    event_timers: &mut BTreeSet<Timer>,
    proc_timers: &mut BTreeSet<(i64, CompactString, Window)>,
    key: &str,
    ks: &KeyState,
    rules: &dyn TimerRules,
) {
    for (w, st) in ks.windows.iter() {
        let (time, kind) = rules.window_timer(w, st);
        event_timers.insert(Timer {
            time,
            kind,
            key: CompactString::from(key),
            window: *w,
        });
        if let Some(d) = st.early_deadline {
            proc_timers.insert((d, CompactString::from(key), *w));
        }
    }
    if ks.cursor.is_some() {
        if let Some(time) = rules.key_service_time(ks) {
            event_timers.insert(Timer {
                time,
                kind: TimerKind::KeyService,
                key: CompactString::from(key),
                window: Window::new(0, 0),
            });
        }
    }
}

/// Applies one stored entry to a key state; `None` if the value does not decode.
fn apply_entry(ks: &mut KeyState, decoded: StateKey, value: &[u8], sessions: bool) -> Option<()> {
    match decoded {
        StateKey::Window { start, end, .. } => {
            ks.windows
                .insert_loaded(Window::new(start, end), WinState::decode(value)?, sessions);
        }
        StateKey::Session { start, .. } => {
            let end = i64::from_le_bytes(value.get(..8)?.try_into().ok()?);
            let st = WinState::decode(&value[8..])?;
            ks.windows.insert_loaded(Window::new(start, end), st, false);
        }
        StateKey::Slice { start, .. } => {
            let (acc, rest) = Acc::decode(value)?;
            if !rest.is_empty() {
                return None;
            }
            *ks.slices.get_or_default(start) = acc;
        }
        StateKey::Cursor { .. } => ks.cursor = Some(Cursor::decode(value)?),
        StateKey::Watermark => {}
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut v = Vec::new();
        f(&mut v);
        v
    }

    /// (window start, tombstone?) of each change a window map yields, in key order.
    fn flushed(m: &mut WindowMap) -> Vec<(i64, bool)> {
        let mut c = Changes::default();
        m.take_changes("k", &mut c, false);
        c.sort();
        c.iter()
            .map(|(k, v)| {
                let StateKey::Window { start, .. } = keys::decode_state_key(k).unwrap() else {
                    panic!("not a window key")
                };
                (start, v.is_none())
            })
            .collect()
    }

    #[test]
    fn window_map_flushes_values_and_tombstones_once() {
        let w = |s: i64| Window::new(s, s + 10);
        let mut m = WindowMap::default();
        for s in [20, 0, 10] {
            m.get_or_insert_with(w(s), || WinState::new(false));
        }
        assert_eq!(
            m.iter().map(|(w, _)| w.start).collect::<Vec<_>>(),
            [0, 10, 20],
            "sorted"
        );
        assert!(flushed(&mut m).is_empty(), "nothing touched yet");
        m.touch(w(10));
        m.touch(w(0));
        assert_eq!(flushed(&mut m), [(0, false), (10, false)]);
        assert!(flushed(&mut m).is_empty(), "clean after a flush");
        // Touched, then removed: a tombstone, once (remove records it; a later touch adds nothing).
        m.touch(w(20));
        m.remove(&w(20));
        m.touch(w(20));
        assert_eq!(flushed(&mut m), [(20, true)]);
        // Removed, then created again and touched: only the value.
        m.remove(&w(0));
        m.get_or_insert_with(w(0), || WinState::new(true));
        m.touch(w(0));
        assert_eq!(flushed(&mut m), [(0, false)]);
        assert_eq!(m.len(), 2);
        assert_eq!(
            m.before(w(10)).map(|(w, _)| w.start).collect::<Vec<_>>(),
            [0]
        );
    }

    #[test]
    fn slice_map_keeps_slices_in_order_and_ranges_like_a_b_tree() {
        let mut m = SliceMap::default();
        let mut b = BTreeMap::new();
        // In order, out of order, repeated, and removed from the front.
        for (i, a) in [10i64, 20, 30, 15, 20, 5, 40].into_iter().enumerate() {
            m.get_or_default(a).add(&[i as f64]);
            b.entry(a).or_insert_with(Acc::default).add(&[i as f64]);
        }
        assert_eq!(m.remove(&5), b.remove(&5));
        assert_eq!(m.remove(&7), None);
        let pairs = |it: Vec<(&i64, &Acc)>| {
            it.into_iter()
                .map(|(a, acc)| (*a, acc.clone()))
                .collect::<Vec<_>>()
        };
        for (lo, hi) in [(0, 100), (10, 30), (11, 31), (15, 15), (40, 41), (50, 60)] {
            assert_eq!(
                pairs(m.range(lo..hi).collect()),
                pairs(b.range(lo..hi).collect()),
                "{lo}..{hi}"
            );
            assert_eq!(
                pairs(m.range(lo..).collect()),
                pairs(b.range(lo..).collect()),
                "{lo}.."
            );
        }
        assert_eq!(m.first_key_value().map(|(a, _)| *a), Some(10));
        assert_eq!(
            m.keys().copied().collect::<Vec<_>>(),
            b.keys().copied().collect::<Vec<_>>()
        );
        assert_eq!(m.get(&20).map(|a| a.count), Some(2));
    }

    #[test]
    fn dirty_slices_lists_each_start_once() {
        let mut d = DirtySlices::default();
        for s in [5, 5, 7, 9, 7, 11, 9, 5] {
            d.insert(s);
        }
        let mut got = Vec::new();
        d.take_each(|s| got.push(s));
        assert_eq!(got, [5, 7, 9, 11]);
        let mut again = Vec::new();
        d.take_each(|s| again.push(s));
        assert!(again.is_empty(), "empty after a take");
        d.insert(1);
        d.take_each(|s| again.push(s));
        assert_eq!(again, [1]);
    }

    proptest::proptest! {
        #[test]
        fn slice_map_ranges_equal_a_b_tree(
            starts in proptest::collection::vec(-50i64..50, 0..40),
            bounds in proptest::collection::vec((-60i64..60, -60i64..60), 1..20),
        ) {
            let mut m = SliceMap::default();
            let mut b = BTreeMap::new();
            for a in starts {
                m.get_or_default(a).add(&[]);
                b.entry(a).or_insert_with(Acc::default).add(&[]);
            }
            let keys = |it: Vec<(&i64, &Acc)>| it.into_iter().map(|(a, acc)| (*a, acc.count)).collect::<Vec<_>>();
            use std::ops::Bound::{Excluded, Included};
            for (lo, hi) in bounds {
                proptest::prop_assert_eq!(keys(m.range(lo..hi.max(lo)).collect()), keys(b.range(lo..hi.max(lo)).collect()));
                proptest::prop_assert_eq!(keys(m.range(lo..).collect()), keys(b.range(lo..).collect()));
                proptest::prop_assert_eq!(keys(m.range(..hi).collect()), keys(b.range(..hi).collect()));
                proptest::prop_assert_eq!(keys(m.range(lo..=hi.max(lo)).collect()), keys(b.range(lo..=hi.max(lo)).collect()));
                let r = (Excluded(lo), Included(hi.max(lo + 1)));
                proptest::prop_assert_eq!(keys(m.range(r).collect()), keys(b.range(r).collect()));
            }
            proptest::prop_assert_eq!(keys(m.range(i64::MIN..=i64::MAX).collect()), keys(b.range(..).collect()));
        }
    }

    #[test]
    fn win_state_round_trips() {
        let mut st = WinState::new(true);
        st.total.add(&[1.0, 2.0]);
        st.next_pane = 3;
        st.early_deadline = Some(-5);
        st.last_emitted = Some(st.total.clone());
        assert_eq!(
            WinState::decode(&enc(|o| st.encode_into(o))),
            Some(st.clone())
        );
        let plain = WinState::new(false);
        assert_eq!(
            WinState::decode(&enc(|o| plain.encode_into(o))),
            Some(plain)
        );
        assert_eq!(WinState::decode(&[9, 9]), None);
    }

    #[test]
    fn cursor_round_trips() {
        let mut c = Cursor::default();
        c.late_panes.insert(10, 2);
        c.late_panes.insert(-10, 0);
        assert_eq!(Cursor::decode(&enc(|o| c.encode_into(o))), Some(c.clone()));
        // Version 1 also held next_fire, which is now derived on load: it is skipped.
        let mut v1 = vec![1, 1];
        v1.extend_from_slice(&42i64.to_le_bytes());
        v1.extend_from_slice(&enc(|o| c.encode_into(o))[1..]);
        assert_eq!(Cursor::decode(&v1), Some(c.clone()));
        assert_eq!(Cursor::decode(&[1, 0, 0, 0, 0, 0]), Some(Cursor::default()));
        assert_eq!(Cursor::decode(&[3, 0, 0, 0, 0]), None);
    }
}
