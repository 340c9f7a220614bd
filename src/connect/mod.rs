//! Connectors that run beside a pipeline, as their own consumer groups, and carry its committed
//! output elsewhere exactly once.
//!
//! * [`postgres`] — `tidemark sink-postgres`: panes (and dead letters) into PostgreSQL tables,
//!   with the offsets in the same database transaction.

pub mod postgres;
