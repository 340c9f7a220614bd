//! The RocksDB instance: one per process, with column families per operator and input partition.
//!
//! Each partition of each stateful operator owns the column family `{operator}.p{partition}`; its
//! entries are described in [`tidemark_core::windowing::keys`]. The `meta` column family records, per partition, the
//! input offset and changelog offset that the state was flushed at (written in the same WriteBatch
//! as the state, so they always agree), and the state's [`Lineage`]: the replay epoch and the
//! pipeline fingerprint it was written under.
//!
//! Memory is one budget for the whole database, however many column families it holds
//! ([`StoreConfig::memory`]): one block cache of that size, and a write buffer manager that charges
//! every memtable to it and flushes when they pass half of it. Column families of the partitions a
//! member may own are created when the database opens, all at once: RocksDB rewrites its OPTIONS
//! file (every column family's options) at each `create_cf` and `drop_cf`, which made a member with
//! 256 partitions spend most of its start in that file; a restore from scratch empties a column
//! family instead of dropping it.
//!
//! Writes skip RocksDB's write-ahead log and the database uses atomic flush: after a crash the
//! column families fall back together to one earlier flush point, and the stored offsets say which.
//! The Kafka changelog, not the local WAL, is what makes state durable.

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch,
    WriteBufferManager, WriteOptions,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
pub use tidemark_core::windowing::backend::StoredOffsets;
use tidemark_core::windowing::backend::{BackendError, StateBackend, Visit};
use tidemark_core::windowing::changes::Changes;

/// The RocksDB handle type tidemark uses (column families can be created through `&self`).
pub type Db = rocksdb::DBWithThreadMode<rocksdb::MultiThreaded>;

/// Name of the column family holding per-partition offsets.
pub const META_CF: &str = "meta";

/// Where a partition's state comes from: the pipeline's replay epoch and the fingerprint of the
/// pipeline definition that wrote it (`None` when unknown, e.g. state from before fingerprints).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lineage {
    /// The replay epoch (0 until the first replay).
    pub epoch: u64,
    /// The fingerprint of what shapes the state.
    pub fingerprint: Option<String>,
}

/// Errors from the state store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB reported an error.
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A column family that should exist does not.
    #[error("column family {0} is missing")]
    MissingCf(String),
    /// A stored value could not be decoded.
    #[error("corrupt state entry in {cf}: {detail}")]
    Corrupt {
        /// The column family.
        cf: String,
        /// What was wrong.
        detail: String,
    },
}

impl From<StoreError> for BackendError {
    fn from(e: StoreError) -> BackendError {
        match e {
            StoreError::Corrupt { cf, detail } => BackendError::Corrupt { cf, detail },
            other => BackendError::Store(Box::new(other)),
        }
    }
}

/// The process's RocksDB database.
#[derive(Clone)]
pub struct StateStore {
    db: Arc<Db>,
    path: PathBuf,
    shared: Arc<Shared>,
}

/// How the database is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Bytes of memory for all column families together: the block cache's size; memtables are
    /// charged to it and flushed past half of it.
    pub memory: usize,
    /// Column families to have from the start (created together when the database opens).
    pub column_families: Vec<String>,
}

/// The default memory budget: 256 MiB.
pub const DEFAULT_MEMORY: usize = 256 << 20;

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            memory: DEFAULT_MEMORY,
            column_families: Vec::new(),
        }
    }
}

/// What every column family shares: the block cache and the write buffer manager.
struct Shared {
    cache: Cache,
    buffers: WriteBufferManager,
}

impl Shared {
    fn new(memory: usize) -> Shared {
        let cache = Cache::new_lru_cache(memory);
        let buffers = WriteBufferManager::new_write_buffer_manager_with_cache(
            memory / 2,
            false,
            cache.clone(),
        );
        Shared { cache, buffers }
    }
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("path", &self.path)
            .finish()
    }
}

fn db_options(shared: &Shared) -> Options {
    let mut o = Options::default();
    o.set_write_buffer_manager(&shared.buffers);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&shared.cache);
    o.set_block_based_table_factory(&table);
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_atomic_flush(true);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    // 8 MB memtables: each flush's sorted batch inserts into a skiplist that stays closer to the
    // caches. Against 32 MB, interleaved: engine bench tumbling 1.00M/1.01M -> 1.12M/1.18M
    // events/s with less CPU in total (background flushes included) and 25 MB less peak RSS;
    // restore 1.50M/1.49M -> 1.65M/1.82M records/s.
    o.set_write_buffer_size(8 << 20);
    // A memtable's arena grows in blocks of this size, and the write buffer manager charges every
    // block: with RocksDB's default (an eighth of the write buffer, 1 MB), each column family
    // that holds a few entries costs a whole megabyte of the budget, so 256 partitions' memtables
    // passed half the budget with little data in them, and every write past it flushed all
    // column families at once (atomic flush): hundreds of tiny tables per flush.
    o.set_arena_block_size(ARENA_BLOCK);
    o
}

/// The memtable arena's block size (see [`db_options`]).
const ARENA_BLOCK: usize = 64 << 10;

impl StateStore {
    /// Opens (or creates) the database at `path` with all its existing column families and the
    /// default memory budget.
    pub fn open(path: &Path) -> Result<StateStore, StoreError> {
        Self::open_with(path, &StoreConfig::default())
    }

    /// Opens (or creates) the database at `path` with all its existing column families and those
    /// `config` lists, within `config`'s memory budget.
    pub fn open_with(path: &Path, config: &StoreConfig) -> Result<StateStore, StoreError> {
        let shared = Arc::new(Shared::new(config.memory));
        let opts = db_options(&shared);
        let mut names = Db::list_cf(&opts, path).unwrap_or_default();
        let wanted = ["default", META_CF]
            .into_iter()
            .chain(config.column_families.iter().map(String::as_str));
        for required in wanted {
            if !names.iter().any(|n| n == required) {
                names.push(required.to_string());
            }
        }
        let cfs = names
            .iter()
            .map(|n| ColumnFamilyDescriptor::new(n, db_options(&shared)));
        let db = Db::open_cf_descriptors(&opts, path, cfs)?;
        Ok(StateStore {
            db: Arc::new(db),
            path: path.to_path_buf(),
            shared,
        })
    }

    /// Bytes the memtables of every column family hold now (charged to the budget).
    pub fn memtable_bytes(&self) -> usize {
        self.shared.buffers.get_usage()
    }

    /// Bytes the block cache holds now, memtable charges included.
    pub fn cache_bytes(&self) -> usize {
        self.shared.cache.get_usage()
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw database, for iteration by the state modules.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Column family name of an operator's partition.
    pub fn cf_name(operator: &str, partition: i32) -> String {
        tidemark_core::windowing::backend::partition_name(operator, partition)
    }

    /// Creates the column family if it does not exist.
    pub fn ensure_cf(&self, name: &str) -> Result<(), StoreError> {
        if self.db.cf_handle(name).is_none() {
            self.db.create_cf(name, &db_options(&self.shared))?;
        }
        Ok(())
    }

    /// Empties a column family and removes its offsets (before a restore from scratch). The
    /// column family stays: dropping and creating it again would rewrite RocksDB's OPTIONS file
    /// twice per partition.
    pub fn clear_cf(&self, name: &str) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        if let Some(cf) = self.db.cf_handle(name) {
            let mut it = self.db.raw_iterator_cf(&cf);
            it.seek_to_last();
            if let Some(last) = it.key() {
                // Every key sorts at or after the empty key and before the last key + 0x00.
                let mut end = last.to_vec();
                end.push(0);
                batch.delete_range_cf(&cf, &[][..], &end[..]);
            }
            it.status()?;
        }
        let meta = self.meta_cf()?;
        batch.delete_cf(&meta, meta_key(name, "input"));
        batch.delete_cf(&meta, meta_key(name, "changelog"));
        batch.delete_cf(&meta, meta_key(name, "epoch"));
        batch.delete_cf(&meta, meta_key(name, "fingerprint"));
        self.write(batch)
    }

    fn meta_cf(&self) -> Result<Arc<rocksdb::BoundColumnFamily<'_>>, StoreError> {
        self.db
            .cf_handle(META_CF)
            .ok_or_else(|| StoreError::MissingCf(META_CF.into()))
    }

    /// Reads the offsets stored with a column family's state.
    pub fn offsets(&self, cf: &str) -> Result<StoredOffsets, StoreError> {
        let meta = self.meta_cf()?;
        let read = |what: &str| -> Result<Option<i64>, StoreError> {
            Ok(self
                .db
                .get_cf(&meta, meta_key(cf, what))?
                .and_then(|v| v.as_slice().try_into().ok().map(i64::from_be_bytes)))
        };
        Ok(StoredOffsets {
            input: read("input")?,
            changelog: read("changelog")?,
        })
    }

    /// Adds the offsets of a column family to a batch.
    pub fn put_offsets(
        &self,
        batch: &mut WriteBatch,
        cf: &str,
        offsets: StoredOffsets,
    ) -> Result<(), StoreError> {
        let meta = self.meta_cf()?;
        if let Some(o) = offsets.input {
            batch.put_cf(&meta, meta_key(cf, "input"), o.to_be_bytes());
        }
        if let Some(o) = offsets.changelog {
            batch.put_cf(&meta, meta_key(cf, "changelog"), o.to_be_bytes());
        }
        Ok(())
    }

    /// Reads the lineage stored with a column family's state.
    pub fn lineage(&self, cf: &str) -> Result<Lineage, StoreError> {
        let meta = self.meta_cf()?;
        let epoch = self
            .db
            .get_cf(&meta, meta_key(cf, "epoch"))?
            .and_then(|v| v.as_slice().try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(0);
        let fingerprint = self
            .db
            .get_cf(&meta, meta_key(cf, "fingerprint"))?
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        Ok(Lineage { epoch, fingerprint })
    }

    /// Adds the lineage of a column family to a batch.
    pub fn put_lineage(
        &self,
        batch: &mut WriteBatch,
        cf: &str,
        lineage: &Lineage,
    ) -> Result<(), StoreError> {
        let meta = self.meta_cf()?;
        batch.put_cf(&meta, meta_key(cf, "epoch"), lineage.epoch.to_be_bytes());
        match &lineage.fingerprint {
            Some(f) => batch.put_cf(&meta, meta_key(cf, "fingerprint"), f.as_bytes()),
            None => batch.delete_cf(&meta, meta_key(cf, "fingerprint")),
        }
        Ok(())
    }

    /// Writes a batch atomically, without the write-ahead log (see the module docs).
    pub fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        self.db.write_opt(batch, &wo)?;
        Ok(())
    }

    /// Flushes every memtable to disk (all column families at once).
    pub fn flush(&self) -> Result<(), StoreError> {
        let names = Db::list_cf(&Options::default(), &self.path).unwrap_or_default();
        let handles: Vec<_> = names.iter().filter_map(|n| self.db.cf_handle(n)).collect();
        let refs: Vec<&Arc<rocksdb::BoundColumnFamily<'_>>> = handles.iter().collect();
        self.db
            .flush_cfs_opt(&refs, &rocksdb::FlushOptions::default())?;
        Ok(())
    }

    /// RocksDB's estimate of the number of keys in a column family (0 when it is missing).
    pub fn estimate_keys(&self, cf: &str) -> u64 {
        self.db
            .cf_handle(cf)
            .and_then(|h| {
                self.db
                    .property_int_value_cf(&h, "rocksdb.estimate-num-keys")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0)
    }

    /// Live bytes: SST files plus memtables, summed over column families.
    pub fn size_bytes(&self) -> u64 {
        let names = Db::list_cf(&Options::default(), &self.path).unwrap_or_default();
        names
            .iter()
            .filter_map(|n| self.db.cf_handle(n))
            .map(|cf| {
                let p = |name: &str| {
                    self.db
                        .property_int_value_cf(&cf, name)
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                };
                p("rocksdb.total-sst-files-size") + p("rocksdb.cur-size-all-mem-tables")
            })
            .sum()
    }
}

fn meta_key(cf: &str, what: &str) -> Vec<u8> {
    format!("{cf}/{what}").into_bytes()
}

/// The windowing core's partitions are column families; a flush is one WriteBatch with the
/// partition's offsets in `meta`.
impl StateBackend for StateStore {
    fn ensure_partition(&self, cf: &str) -> Result<(), BackendError> {
        Ok(self.ensure_cf(cf)?)
    }

    fn scan(&self, cf: &str, prefix: &[u8], f: &mut Visit<'_>) -> Result<(), BackendError> {
        let handle = self
            .db
            .cf_handle(cf)
            .ok_or_else(|| StoreError::MissingCf(cf.to_string()))?;
        let mode = if prefix.is_empty() {
            IteratorMode::Start
        } else {
            IteratorMode::From(prefix, Direction::Forward)
        };
        for item in self.db.iterator_cf(&handle, mode) {
            let (k, v) = item.map_err(StoreError::Rocks)?;
            if !k.starts_with(prefix) || !f(&k, &v)? {
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
        let handle = self
            .db
            .cf_handle(cf)
            .ok_or_else(|| StoreError::MissingCf(cf.to_string()))?;
        let mut batch = WriteBatch::default();
        for (k, v) in changes.iter() {
            match v {
                Some(v) => batch.put_cf(&handle, k, v),
                None => batch.delete_cf(&handle, k),
            }
        }
        if let Some(o) = offsets {
            self.put_offsets(&mut batch, cf, o)?;
        }
        drop(handle);
        Ok(self.write(batch)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clearing_a_column_family_empties_it_and_forgets_its_offsets_but_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            memory: 32 << 20,
            column_families: vec!["window.p0".into(), "window.p1".into()],
        };
        let store = StateStore::open_with(dir.path(), &config).unwrap();
        // The listed column families exist from the start.
        for cf in &config.column_families {
            assert!(store.db().cf_handle(cf).is_some(), "{cf}");
        }
        let keys: [&[u8]; 4] = [b"", b"a", b"\xff\xff\xff", b"\xff\xff\xff\xff\x00"];
        for cf in ["window.p0", "window.p1"] {
            let handle = store.db().cf_handle(cf).unwrap();
            let mut batch = WriteBatch::default();
            for k in keys {
                batch.put_cf(&handle, k, b"v");
            }
            drop(handle);
            let offsets = StoredOffsets {
                input: Some(7),
                changelog: Some(9),
            };
            store.put_offsets(&mut batch, cf, offsets).unwrap();
            store.write(batch).unwrap();
        }
        store.clear_cf("window.p0").unwrap();
        let count = |cf: &str| {
            let handle = store.db().cf_handle(cf).unwrap();
            store
                .db()
                .iterator_cf(&handle, rocksdb::IteratorMode::Start)
                .count()
        };
        assert_eq!(count("window.p0"), 0);
        assert_eq!(
            store.offsets("window.p0").unwrap(),
            StoredOffsets::default()
        );
        // The other column family is untouched.
        assert_eq!(count("window.p1"), keys.len());
        assert_eq!(store.offsets("window.p1").unwrap().input, Some(7));
        // Clearing one that does not exist is no error.
        store.clear_cf("window.p9").unwrap();
        // Reopened with a smaller list, the column families made before are still there.
        drop(store);
        let store = StateStore::open(dir.path()).unwrap();
        assert!(store.db().cf_handle("window.p1").is_some());
        assert!(store.memtable_bytes() <= DEFAULT_MEMORY);
    }
}
