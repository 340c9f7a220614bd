//! The windowing core: pure and deterministic, with no Kafka types.
//!
//! * [`time`] — milliseconds, durations, alignment.
//! * [`assigner`] — windows, window kinds, slice grids.
//! * [`watermark`] — the bounded out-of-orderness watermark with idleness.
//! * [`trigger`] — trigger settings and pane timings.
//! * [`aggregate`] — mergeable accumulators.
//! * [`spec`] — what the core runs ([`spec::EngineSpec`]) and what it consumes ([`spec::Event`]);
//!   the config layer converts a pipeline file into these.
//! * [`cache`] — a partition's typed write-back cache of window state and its timer indexes over
//!   the state store; flushing it yields the changelog of the flush.
//! * [`engine`] — the engine that ties them to state and fires panes.

pub mod aggregate;
pub mod assigner;
pub mod cache;
pub mod engine;
pub mod spec;
pub mod time;
pub mod trigger;
pub mod watermark;
