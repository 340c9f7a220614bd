//! What the windowing core runs and what it consumes, in its own types.
//!
//! The config layer validates a pipeline file and converts it into an [`EngineSpec`]; the codecs
//! decode records into [`Event`]s. The core depends on neither.

use super::aggregate::{AggSpec, Value};
use super::assigner::WindowKind;
use super::trigger::TriggerSpec;
use super::watermark::WatermarkSpec;

/// Everything that shapes the engine's windows, firings and state.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSpec {
    /// Pipeline name; part of every pane's deduplication id.
    pub name: String,
    /// The window.
    pub window: WindowKind,
    /// Allowed lateness in milliseconds.
    pub allowed_lateness: i64,
    /// The watermark strategy.
    pub watermark: WatermarkSpec,
    /// The trigger.
    pub trigger: TriggerSpec,
    /// The aggregations, in output order.
    pub aggregations: Vec<AggSpec>,
}

/// The longest grouping key, in bytes (UTF-8). The repartition hop writes a key's length in two
/// bytes; a record whose key is longer is dead-lettered as `too_large` before it reaches the
/// engine or the hop, in `simulate` as in `run`.
pub const MAX_KEY_BYTES: usize = u16::MAX as usize;

/// A decoded event: what the windowing core consumes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Event {
    /// The grouping key.
    pub key: String,
    /// Event time in epoch milliseconds.
    pub ts: i64,
    /// The aggregations' input values, in the order the aggregations refer to them by index.
    pub values: Vec<Value>,
}
