//! Window state in RocksDB: the store behind the windowing core's state seam
//! ([`tidemark_core::windowing::backend::StateBackend`]). Nothing here knows windows, aggregates
//! or Kafka: column families per operator and partition, batches of changes written together
//! with the offsets they commit, and the lineage of a state directory.
//!
//! * [`store`] — the RocksDB instance, column families and stored offsets, and its
//!   implementation of the core's state seam.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod store;
