//! Window state in RocksDB: the store behind the windowing core's state seam
//! ([`crate::windowing::backend::StateBackend`]). Nothing here knows windows or aggregates.
//!
//! * [`store`] — the RocksDB instance, column families and stored offsets, and its
//!   implementation of the core's state seam.
//! * [`changelog`] — changelog records and the restore rule.

pub mod changelog;
pub mod store;
