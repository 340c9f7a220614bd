//! The windowing core: pure and deterministic, with no Kafka types.
//!
//! * [`time`] — milliseconds, durations, alignment.
//! * [`assigner`] — windows, window kinds, slice grids.
//! * [`watermark`] — the bounded out-of-orderness watermark with idleness.
//! * [`trigger`] — trigger settings and pane timings.
//! * [`aggregate`] — mergeable accumulators.
//! * [`engine`] — the engine that ties them to state and fires panes.

pub mod aggregate;
pub mod assigner;
pub mod engine;
pub mod time;
pub mod trigger;
pub mod watermark;
