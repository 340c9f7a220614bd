//! Window state in RocksDB.
//!
//! * [`keys`] — order-preserving byte encodings of state keys.
//! * [`store`] — the RocksDB instance, column families and stored offsets.
//! * [`changelog`] — changelog records and the restore rule.
//! * [`cache`] — a partition's typed write-back cache and timer indexes; flushing it yields the
//!   changelog of the flush.

pub mod cache;
pub mod changelog;
pub mod keys;
pub mod store;
