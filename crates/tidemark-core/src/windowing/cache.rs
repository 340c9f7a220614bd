//! A partition's window state: a typed write-back cache over one partition of the state store
//! ([`super::backend`]), plus the timer indexes that drive firing.
//!
//! Per-event updates change [`KeyState`]s in memory and mark the touched entries dirty. A flush
//! ([`PartitionState::take_changes`] then [`PartitionState::write`]) turns the dirty entries into
//! one list of changes — the full current value of every changed entry, or a tombstone — which is
//! both the store's batch and the changelog. Nothing reaches the store between flushes. What
//! the entries look like is [`super::entry`]'s business; which timers a loaded key needs is
//! [`super::rules`]'.
//!
//! Timers are derived state ([`super::timers`]): they are rebuilt from the column family when a
//! partition is opened, so they are never written to RocksDB or the changelog.

use super::aggregate::AggSpec;
use super::backend::{partition_name, BackendError, StateBackend, StoredOffsets};
use super::changes::Changes;
use super::entry::{self, StateKey, TAG_CURSOR, TAG_SESSION, TAG_SLICE, TAG_WINDOW};
use super::keystate::KeyState;
use super::rules::Rules;
use super::spec::CacheLimits;
use super::timers::Timers;
use super::watermark::Valve;
use compact_str::CompactString;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// What a partition's cache holds, as of its last flush.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheFigures {
    /// Keys in memory.
    pub keys: usize,
    /// Bytes of their state, measured when each was loaded or last flushed.
    pub bytes: usize,
    /// The largest state of one key written by the last flush.
    pub largest_key: usize,
    /// Times the cache dropped its clean keys for being over a limit.
    pub evictions: u64,
    /// The cache's limit of bytes.
    pub byte_limit: usize,
}

/// The write-back cache and timer indexes of one operator partition.
pub struct PartitionState {
    store: Arc<dyn StateBackend>,
    cf: String,
    /// Keys up to 24 bytes are stored inline, so a lookup compares within the table instead of
    /// following a pointer to the heap (a cache miss per event with many keys).
    keys: FxHashMap<CompactString, KeyState>,
    dirty_keys: Vec<CompactString>,
    /// True while every entry of the column family is in `keys`, so a miss means "absent".
    complete: bool,
    limits: CacheLimits,
    /// Bytes of the keys in memory, as measured ([`KeyState::size`]) when each was loaded or last
    /// flushed.
    bytes: usize,
    largest_key: usize,
    evictions: u64,
    /// Whether windows are sessions, stored by start (see [`entry::TAG_SESSION`]).
    sessions: bool,
    /// The aggregations, which decode the accumulators of loaded entries.
    aggs: Arc<[AggSpec]>,
    timers: Timers,
    /// The watermark sources' reports (kept with the state, flushed when they change).
    sources: Valve,
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

impl PartitionState {
    /// Opens operator `operator`'s partition `partition` in `store`: loads its entries into memory
    /// (up to `limits.keys` keys) and rebuilds the timer indexes.
    pub fn open(
        store: Arc<dyn StateBackend>,
        operator: &str,
        partition: i32,
        limits: CacheLimits,
        rules: &Rules,
        idle_timeout: Option<i64>,
        aggs: Arc<[AggSpec]>,
    ) -> Result<PartitionState, BackendError> {
        let cf = partition_name(operator, partition);
        store.ensure_partition(&cf)?;
        let mut st = PartitionState {
            store,
            cf,
            keys: FxHashMap::default(),
            dirty_keys: Vec::new(),
            complete: true,
            limits,
            bytes: 0,
            largest_key: 0,
            evictions: 0,
            sessions: rules.sessions(),
            aggs,
            timers: Timers::default(),
            sources: Valve::new(idle_timeout),
            watermark: None,
            watermark_dirty: false,
            flushed_watermark: None,
            last_flush: (0, 0),
        };
        st.load_all(rules)?;
        Ok(st)
    }

    fn corrupt(&self, detail: impl Into<String>) -> BackendError {
        BackendError::Corrupt {
            cf: self.cf.clone(),
            detail: detail.into(),
        }
    }

    fn load_all(&mut self, rules: &Rules) -> Result<(), BackendError> {
        // Keys whose state was not kept in memory still need their timers: gather them per key.
        let mut partial: FxHashMap<String, KeyState> = FxHashMap::default();
        let (store, cf) = (self.store.clone(), self.cf.clone());
        store.scan(&cf, &[], &mut |k, v| {
            self.load_entry(k, v, &mut partial)?;
            Ok(true)
        })?;
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
        let mut timers = Timers::default();
        let in_memory = self.keys.iter().map(|(k, ks)| (k.as_str(), ks));
        for (key, ks) in in_memory.chain(partial.iter().map(|(k, ks)| (k.as_str(), ks))) {
            rules.index_key(&mut timers, key, ks);
        }
        self.timers = timers;
        for ks in self.keys.values_mut() {
            let t = rules.key_service_time(ks);
            if let Some(c) = ks.cursor.as_mut() {
                c.scheduled = t;
            }
            ks.measured = ks.size();
            self.bytes += ks.measured;
        }
        Ok(())
    }

    /// Takes one stored entry into the key states in memory, or into `partial` (keys past the
    /// cache's size, kept only for their timers), or into the watermark and its sources.
    fn load_entry(
        &mut self,
        k: &[u8],
        v: &[u8],
        partial: &mut FxHashMap<String, KeyState>,
    ) -> Result<(), BackendError> {
        let decoded = entry::decode_state_key(k).map_err(|e| self.corrupt(e.to_string()))?;
        let key = match &decoded {
            StateKey::Window { key, .. }
            | StateKey::Session { key, .. }
            | StateKey::Slice { key, .. }
            | StateKey::Cursor { key } => key.clone(),
            StateKey::Watermark => {
                let wm = entry::get_watermark(v).ok_or_else(|| self.corrupt("watermark value"))?;
                self.watermark = Some(wm);
                return Ok(());
            }
            StateKey::Source { name } => {
                let report = entry::get_source(v)
                    .ok_or_else(|| self.corrupt(format!("watermark source {name:?}")))?;
                self.sources.load(name, report);
                return Ok(());
            }
        };
        let in_memory = self.keys.contains_key(key.as_str()) || self.keys.len() < self.limits.keys;
        if !in_memory {
            self.complete = false;
        }
        let ks = if in_memory {
            self.keys.entry(CompactString::from(key)).or_default()
        } else {
            partial.entry(key).or_default()
        };
        entry::apply_entry(ks, decoded, v, self.sessions, &self.aggs).ok_or_else(|| {
            BackendError::Corrupt {
                cf: self.cf.clone(),
                detail: "undecodable value".into(),
            }
        })
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

    /// Number of keys held in memory.
    pub fn cached_keys(&self) -> usize {
        self.keys.len()
    }

    /// What the cache holds, as of its last flush.
    pub fn figures(&self) -> CacheFigures {
        CacheFigures {
            keys: self.keys.len(),
            bytes: self.bytes,
            largest_key: self.largest_key,
            evictions: self.evictions,
            byte_limit: self.limits.bytes,
        }
    }

    /// Number of pending event-time timers (one per open window or sliced key).
    pub fn pending_timers(&self) -> usize {
        self.timers.len()
    }

    /// The state of `key`, loading it from the store on a miss; marks the key dirty.
    pub fn key_mut(&mut self, key: &str, rules: &Rules) -> Result<&mut KeyState, BackendError> {
        if !self.keys.contains_key(key) {
            let mut ks = if self.complete {
                KeyState::default()
            } else {
                self.load_key(key, rules)?
            };
            ks.measured = ks.size();
            self.bytes += ks.measured;
            self.keys.insert(CompactString::from(key), ks);
        }
        let ks = self.keys.get_mut(key).expect("inserted above");
        if !ks.listed {
            ks.listed = true;
            self.dirty_keys.push(CompactString::from(key));
        }
        Ok(ks)
    }

    fn load_key(&self, key: &str, rules: &Rules) -> Result<KeyState, BackendError> {
        let mut ks = KeyState::default();
        for tag in [TAG_WINDOW, TAG_SLICE, TAG_CURSOR, TAG_SESSION] {
            let prefix = entry::key_prefix(tag, key);
            self.store.scan(&self.cf, &prefix, &mut |k, v| {
                let decoded =
                    entry::decode_state_key(k).map_err(|e| self.corrupt(e.to_string()))?;
                entry::apply_entry(&mut ks, decoded, v, self.sessions, &self.aggs)
                    .ok_or_else(|| self.corrupt("undecodable value"))?;
                Ok(true)
            })?;
        }
        rules.restore_key(&mut ks, self.flushed_watermark);
        // A loaded cursor's timer is already in the index, computed from this same stored state.
        let t = rules.key_service_time(&ks);
        if let Some(c) = ks.cursor.as_mut() {
            c.scheduled = t;
        }
        Ok(ks)
    }

    /// The partition's timers.
    pub fn timers(&mut self) -> &mut Timers {
        &mut self.timers
    }

    /// The partition's watermark sources.
    pub fn sources(&mut self) -> &mut Valve {
        &mut self.sources
    }

    /// Collects every dirty entry as a change (value or tombstone) and marks everything clean.
    pub fn take_changes(&mut self) -> Changes {
        // Sized like the last flush: growing the buffers by doubling copied them over and over.
        let mut changes = Changes::with_capacity(self.last_flush.0, self.last_flush.1);
        let mut dirty = std::mem::take(&mut self.dirty_keys);
        let sessions = self.sessions;
        // Every changed key is measured again: the cache's bytes follow what the flush wrote.
        let (mut bytes, mut largest) = (self.bytes, 0);
        let mut measure = |ks: &mut KeyState| {
            let now = if ks.is_empty() { 0 } else { ks.size() };
            bytes = bytes - ks.measured.min(bytes) + now;
            ks.measured = now;
            largest = largest.max(now);
        };
        if dirty.len() * 2 >= self.keys.len() {
            // Most keys changed: one pass over the table in memory order is cheaper than a
            // lookup (a cache miss) per changed key.
            self.keys.retain(|key, ks| {
                if ks.listed {
                    entry::key_changes(key, ks, &mut changes, sessions);
                    measure(ks);
                }
                !ks.is_empty()
            });
        } else {
            for key in &dirty {
                let Some(ks) = self.keys.get_mut(key) else {
                    continue;
                };
                entry::key_changes(key, ks, &mut changes, sessions);
                measure(ks);
                if ks.is_empty() {
                    self.keys.remove(key);
                }
            }
        }
        self.bytes = bytes;
        self.largest_key = largest;
        dirty.clear();
        self.dirty_keys = dirty;
        self.flushed_watermark = self.watermark;
        if std::mem::take(&mut self.watermark_dirty) {
            if let Some(wm) = self.watermark {
                changes.push(
                    |out| out.extend_from_slice(&entry::WATERMARK_KEY),
                    Some(|out: &mut Vec<u8>| out.extend_from_slice(&entry::watermark_value(wm))),
                );
            }
        }
        for (name, report) in self.sources.take_dirty() {
            changes.push(
                |out| entry::put_source_key(out, &name),
                Some(|out: &mut Vec<u8>| entry::put_source(out, &report)),
            );
        }
        // In key order: RocksDB's memtable inserts sorted keys far faster (it reuses its splice),
        // and the changelog is then in key order too.
        changes.sort();
        self.last_flush = changes.sizes();
        changes
    }

    /// Writes changes (and optionally the partition's offsets) to the store in one atomic batch,
    /// then evicts clean keys if the cache has grown past its limit.
    pub fn write(
        &mut self,
        changes: &Changes,
        offsets: Option<StoredOffsets>,
    ) -> Result<(), BackendError> {
        self.store.write_changes(&self.cf, changes, offsets)?;
        let over = self.keys.len() > self.limits.keys || self.bytes > self.limits.bytes;
        if over && self.dirty_keys.is_empty() {
            self.keys.clear();
            self.bytes = 0;
            self.complete = false;
            self.evictions += 1;
        }
        Ok(())
    }
}
