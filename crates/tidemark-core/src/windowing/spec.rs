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
    /// How much state each partition keeps in memory (not part of what the state means: a
    /// pipeline's state is the same under any limits).
    pub cache: CacheLimits,
}

/// Default number of keys kept in memory before clean entries are evicted after a flush.
pub const DEFAULT_CACHE_KEYS: usize = 2_000_000;

/// Default bytes of window state a partition keeps in memory before clean entries are evicted
/// after a flush: 64 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// How much window state a partition keeps in memory. Between flushes every key a record
/// touched stays (its changes are not written yet); after a flush, when the cache holds more
/// keys or more bytes ([`super::keystate::KeyState::size`]) than these, the clean keys are dropped and read back
/// from the store on their next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Keys.
    pub keys: usize,
    /// Bytes of key state, as the states measure themselves.
    pub bytes: usize,
}

impl Default for CacheLimits {
    fn default() -> CacheLimits {
        CacheLimits {
            keys: DEFAULT_CACHE_KEYS,
            bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

impl CacheLimits {
    /// A limit of `keys` keys and no limit of bytes (benchmarks and tests that size the cache
    /// by keys).
    pub fn keys(keys: usize) -> CacheLimits {
        CacheLimits {
            keys,
            bytes: usize::MAX,
        }
    }
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
