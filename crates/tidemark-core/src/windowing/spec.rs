//! What the windowing core runs and what it consumes, in its own types.
//!
//! The config layer validates a pipeline file and converts it into an [`EngineSpec`]; the codecs
//! decode records into [`Event`]s. The core depends on neither.

use super::aggregate::{AggSpec, Aggregate, SavedSize, Value};
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
    /// A condition on each pane's values (SQL's `HAVING`): a pane that fails it is emitted as a
    /// RETRACT. It shapes what is written, not the state.
    pub having: Option<std::sync::Arc<super::having::Having>>,
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

/// What a record's headers and framing may take besides its key and value.
pub const RECORD_HEADROOM: usize = 4096;

/// The bytes of one Kafka record a pipeline may write when nothing says otherwise: the
/// producer's default `message.max.bytes` (1,000,000) less [`RECORD_HEADROOM`].
pub const DEFAULT_RECORD_BYTES: usize = 1_000_000 - RECORD_HEADROOM;

/// The most events one partial holds ([`super::fold::Partial`]); a key's further events of the
/// same slot open another.
pub const MAX_PARTIAL_EVENTS: usize = 8_192;

/// The most bytes a partial writes per event (an offset and an event time, each a varint).
const PARTIAL_EVENT_BYTES: usize = 20;

/// What a state entry, a pane or a partial takes besides its key and its aggregations' states:
/// window bounds, counts, triggers, lengths.
const FRAMING_BYTES: usize = 8 << 10;

/// The fewest bytes an aggregation that keeps values may be given: room for `count_distinct`'s
/// sketch (16 KiB) twice over.
pub const MIN_SHARE: usize = 32 << 10;

/// How one Kafka record's bytes are shared by a window's state, so that every state entry (a
/// changelog record), every partial crossing the hop and every event fits one record: the
/// grouping key takes at most [`MAX_KEY_BYTES`], a partial's events at most
/// [`MAX_PARTIAL_EVENTS`] times 20 bytes, the framing 8 KiB, the operations of fixed size what
/// they say ([`SavedSize::AtMost`]), and the operations that keep values share the rest equally.
/// A record whose string is too long for an operation that reads it
/// ([`RecordBudget::longest_value`]) is dead-lettered `too_large`, in `simulate` as in `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBudget {
    /// The bytes of a record.
    pub record_bytes: usize,
    /// The bytes each operation that keeps values may take (`usize::MAX` when there are none).
    pub share: usize,
}

/// A record too small for a pipeline's aggregations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a record of {record_bytes} bytes leaves {left} bytes for the aggregations' states after \
     the key, the hop's events and the framing; they need {fixed} for the fixed-size ones and \
     {MIN_SHARE} for each of the {keepers} that keep values: raise the producer's \
     message.max.bytes or use fewer aggregations"
)]
pub struct BudgetError {
    /// The bytes of a record.
    pub record_bytes: usize,
    /// What is left for states.
    pub left: usize,
    /// What the fixed-size operations need.
    pub fixed: usize,
    /// How many operations keep values.
    pub keepers: usize,
}

impl RecordBudget {
    /// Shares a record of `record_bytes` between `ops`; an error when they cannot fit.
    pub fn new<'a>(
        record_bytes: usize,
        ops: impl IntoIterator<Item = &'a dyn Aggregate>,
    ) -> Result<RecordBudget, BudgetError> {
        let (mut fixed, mut keepers) = (0usize, 0usize);
        for op in ops {
            match op.saved_size() {
                SavedSize::AtMost(n) => fixed = fixed.saturating_add(n + 8),
                SavedSize::Share { .. } => keepers += 1,
            }
        }
        let left = record_bytes
            .saturating_sub(MAX_KEY_BYTES)
            .saturating_sub(MAX_PARTIAL_EVENTS * PARTIAL_EVENT_BYTES)
            .saturating_sub(FRAMING_BYTES);
        let error = BudgetError {
            record_bytes,
            left,
            fixed,
            keepers,
        };
        let Some(rest) = left.checked_sub(fixed) else {
            return Err(error);
        };
        let share = match keepers {
            0 => usize::MAX,
            n => rest / n,
        };
        if share < MIN_SHARE {
            return Err(error);
        }
        Ok(RecordBudget {
            record_bytes,
            share,
        })
    }

    /// The longest string `op` may read (its share over its `value_divisor`, less 64 bytes);
    /// `None` when it keeps no values.
    pub fn longest_value(&self, op: &dyn Aggregate) -> Option<usize> {
        match op.saved_size() {
            SavedSize::AtMost(_) => None,
            SavedSize::Share { value_divisor } => {
                Some((self.share / value_divisor.max(1)).saturating_sub(64))
            }
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windowing::aggregate::{operation, Params};

    #[test]
    fn a_record_is_shared_by_the_operations_that_keep_values() {
        let ops: Vec<_> = ["count", "sum", "first", "last", "top_k"]
            .iter()
            .map(|n| operation(n, &Params::default()).unwrap())
            .collect();
        let b = RecordBudget::new(DEFAULT_RECORD_BYTES, ops.iter().map(|o| &**o)).unwrap();
        let fixed = 2 * (32 + 8);
        let left = DEFAULT_RECORD_BYTES
            - MAX_KEY_BYTES
            - MAX_PARTIAL_EVENTS * PARTIAL_EVENT_BYTES
            - FRAMING_BYTES;
        assert_eq!(b.share, (left - fixed) / 3);
        assert_eq!(b.longest_value(&*ops[0]), None);
        assert_eq!(b.longest_value(&*ops[2]), Some(b.share - 64));
        assert_eq!(b.longest_value(&*ops[4]), Some(b.share / 4 - 64));
        // Too many value-keeping operations for a small record: refused, saying why.
        let err =
            RecordBudget::new(300_000, ops.iter().cycle().take(40).map(|o| &**o)).unwrap_err();
        assert_eq!(err.keepers, 24);
        assert!(err.to_string().contains("message.max.bytes"), "{err}");
    }
}
