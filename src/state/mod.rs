//! Window state in RocksDB: the generic layer under the engine's typed cache
//! ([`crate::windowing::cache`]). Nothing here knows windows or aggregates.
//!
//! * [`keys`] — order-preserving byte encodings of state keys.
//! * [`store`] — the RocksDB instance, column families and stored offsets.
//! * [`changelog`] — changelog records and the restore rule.

pub mod changelog;
pub mod keys;
pub mod store;
