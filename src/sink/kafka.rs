//! Kafka records for panes and dead letters.
//!
//! A pane record has the grouping key as key, the pane JSON (see [`super::json`]) as value, and the
//! headers `tidemark.dedup_id`, `tidemark.pane_index`, `tidemark.epoch`, `tidemark.window_start`,
//! `tidemark.window_end` and `tidemark.timing`. A dead letter keeps the original key and value
//! bytes untouched and says why in headers: `tidemark.reason` (`late`, `malformed`,
//! `future_timestamp`), `tidemark.source_topic`, `tidemark.source_partition`,
//! `tidemark.source_offset`, `tidemark.watermark`, `tidemark.late_by_ms`, `tidemark.detail` and
//! `tidemark.epoch`.
//!
//! The epoch is the pipeline's replay epoch (0 until the first `tidemark replay`); a record without
//! the header is of epoch 0.

use crate::windowing::engine::Pane;
use rdkafka::message::{Header, OwnedHeaders};

/// Header of the replay epoch on panes and dead letters (the same header as on changelog markers).
pub use crate::state::changelog::EPOCH_HEADER;

/// Headers of a pane record of replay epoch `epoch`.
pub fn pane_headers(p: &Pane, epoch: u64) -> OwnedHeaders {
    OwnedHeaders::new_with_capacity(6)
        .insert(Header {
            key: "tidemark.dedup_id",
            value: Some(p.dedup_id.as_str()),
        })
        .insert(Header {
            key: "tidemark.pane_index",
            value: Some(&p.pane_index.to_string()),
        })
        .insert(Header {
            key: EPOCH_HEADER,
            value: Some(&epoch.to_string()),
        })
        .insert(Header {
            key: "tidemark.window_start",
            value: Some(&p.window.start.to_string()),
        })
        .insert(Header {
            key: "tidemark.window_end",
            value: Some(&p.window.end.to_string()),
        })
        .insert(Header {
            key: "tidemark.timing",
            value: Some(p.timing.as_str()),
        })
}

/// Why a record became a dead letter, with what is known about it.
#[derive(Debug, Clone)]
pub struct DeadLetterInfo {
    /// `late`, `malformed` or `future_timestamp`.
    pub reason: &'static str,
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// Watermark of the partition when the record arrived (`None` before any).
    pub watermark: Option<i64>,
    /// How late the record was, in ms (late records only).
    pub late_by_ms: Option<i64>,
    /// A human-readable explanation.
    pub detail: String,
    /// The pipeline's replay epoch.
    pub epoch: u64,
}

/// Headers of a dead-letter record.
pub fn dead_letter_headers(d: &DeadLetterInfo) -> OwnedHeaders {
    let mut h = OwnedHeaders::new_with_capacity(7)
        .insert(Header {
            key: "tidemark.reason",
            value: Some(d.reason),
        })
        .insert(Header {
            key: "tidemark.source_topic",
            value: Some(d.topic.as_str()),
        })
        .insert(Header {
            key: "tidemark.source_partition",
            value: Some(&d.partition.to_string()),
        })
        .insert(Header {
            key: "tidemark.source_offset",
            value: Some(&d.offset.to_string()),
        })
        .insert(Header {
            key: "tidemark.detail",
            value: Some(d.detail.as_str()),
        })
        .insert(Header {
            key: EPOCH_HEADER,
            value: Some(&d.epoch.to_string()),
        });
    if let Some(w) = d.watermark {
        h = h.insert(Header {
            key: "tidemark.watermark",
            value: Some(&w.to_string()),
        });
    }
    if let Some(l) = d.late_by_ms {
        h = h.insert(Header {
            key: "tidemark.late_by_ms",
            value: Some(&l.to_string()),
        });
    }
    h
}
