//! The core of tidemark: SQL expressions over one record, the event-time windowing engine and
//! the record step. It is pure and deterministic: no Kafka, no RocksDB, no async runtime and
//! no wall clock. Time comes in with the records and the control calls; state goes out through
//! its own seam ([`windowing::backend::StateBackend`]), which the state crate implements on
//! RocksDB and [`windowing::backend::MemoryBackend`] in memory. So the same code runs from a
//! file in `simulate`, in the tests and in the Kafka runtime.
//!
//! * [`expr`] — SQL expressions over one input record (parsed with `sqlparser`, compiled once
//!   to field slots): the filter, the key parts, the event time and the aggregations' inputs.
//! * [`windowing`] — time arithmetic, window assigners, watermarks, triggers, mergeable
//!   aggregates, the saved state format, the typed state cache and the
//!   [`windowing::engine::Engine`] that fires panes.
//! * [`pipeline`] — what happens to one record, in two halves: [`pipeline::Front`] (one per
//!   source) and [`pipeline::Back`] (one per engine partition), joined by [`pipeline::Step`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod expr;
pub mod pipeline;
pub mod windowing;
