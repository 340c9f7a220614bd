//! Where a partition's window state is kept: the core's one seam to storage.
//!
//! The typed cache ([`super::cache`]) reads a partition's entries at open and on a miss, and
//! writes each flush's changes with the partition's offsets in one atomic batch. It asks nothing
//! else of storage, and names no storage engine: `run` and `simulate` hand it the RocksDB store
//! of the state layer, which implements [`StateBackend`]; [`MemoryBackend`] keeps partitions in
//! memory, so the core runs deterministically from a file with no storage engine at all.

use super::changes::Changes;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

/// Offsets stored with a partition's state, in the same batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoredOffsets {
    /// Next input offset to read (the state reflects every record before it).
    pub input: Option<i64>,
    /// Next changelog offset to read when restoring on top of this state.
    pub changelog: Option<i64>,
}

/// Why the state store failed, or what it holds does not decode.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The store itself failed.
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
    /// A stored entry does not decode.
    #[error("corrupt state entry in {cf}: {detail}")]
    Corrupt {
        /// The partition's name in the store.
        cf: String,
        /// What was wrong.
        detail: String,
    },
}

/// What [`StateBackend::scan`] calls with each entry (key, value): `false` stops the scan.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool, BackendError> + 'a;

/// The name in the store of operator `operator`'s partition `partition`.
pub fn partition_name(operator: &str, partition: i32) -> String {
    format!("{operator}.p{partition}")
}

/// A store of partitions' entries: byte keys to byte values, sorted bytewise, per partition.
pub trait StateBackend: Send + Sync {
    /// Makes sure partition `cf` exists (empty when new).
    fn ensure_partition(&self, cf: &str) -> Result<(), BackendError>;

    /// Calls `f` with each entry of partition `cf` whose key starts with `prefix`, in key order,
    /// until `f` returns `false` or an error.
    fn scan(&self, cf: &str, prefix: &[u8], f: &mut Visit<'_>) -> Result<(), BackendError>;

    /// Writes `changes` (values and tombstones) to partition `cf`, with `offsets` when given,
    /// atomically.
    fn write_changes(
        &self,
        cf: &str,
        changes: &Changes,
        offsets: Option<StoredOffsets>,
    ) -> Result<(), BackendError>;
}

/// Partitions in memory: each a sorted map of entries, with its stored offsets. Clones share the
/// same partitions, as clones of a store handle do.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    partitions: Arc<Mutex<HashMap<String, MemoryPartition>>>,
}

/// One partition of a [`MemoryBackend`].
#[derive(Debug, Default)]
struct MemoryPartition {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
    offsets: StoredOffsets,
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }

    /// The offsets last written with partition `cf`'s state.
    pub fn offsets(&self, cf: &str) -> StoredOffsets {
        let parts = self
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        parts.get(cf).map(|p| p.offsets).unwrap_or_default()
    }
}

impl StateBackend for MemoryBackend {
    fn ensure_partition(&self, cf: &str) -> Result<(), BackendError> {
        let mut parts = self
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        parts.entry(cf.to_string()).or_default();
        Ok(())
    }

    fn scan(&self, cf: &str, prefix: &[u8], f: &mut Visit<'_>) -> Result<(), BackendError> {
        // The entries are copied out first, so that `f` may call back into the store.
        let entries: Vec<(Vec<u8>, Vec<u8>)> = {
            let parts = self
                .partitions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(p) = parts.get(cf) else {
                return Err(BackendError::Store(
                    format!("partition {cf} does not exist").into(),
                ));
            };
            p.entries
                .range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        for (k, v) in &entries {
            if !f(k, v)? {
                break;
            }
        }
        Ok(())
    }

    fn write_changes(
        &self,
        cf: &str,
        changes: &Changes,
        offsets: Option<StoredOffsets>,
    ) -> Result<(), BackendError> {
        let mut parts = self
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let p = parts.entry(cf.to_string()).or_default();
        for (k, v) in changes.iter() {
            match v {
                Some(v) => p.entries.insert(k.to_vec(), v.to_vec()),
                None => p.entries.remove(k),
            };
        }
        if let Some(o) = offsets {
            // As the RocksDB store does: an offset not given keeps its stored value.
            p.offsets.input = o.input.or(p.offsets.input);
            p.offsets.changelog = o.changelog.or(p.offsets.changelog);
        }
        Ok(())
    }
}
