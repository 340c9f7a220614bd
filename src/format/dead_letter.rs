//! Dead-letter records.
//!
//! A dead letter stands for one input record tidemark could not use. Under JSON output it keeps
//! the original key and value bytes untouched; under Avro output its value is a `DeadLetter`
//! envelope holding them ([`super::avro`]). Either way it says why in headers:
//! `tidemark.reason` (`late`, `malformed`, `future_timestamp`, `key_mismatch`),
//! `tidemark.source_topic`, `tidemark.source_partition`, `tidemark.source_offset`,
//! `tidemark.detail` and `tidemark.epoch`, and `tidemark.watermark` and `tidemark.late_by_ms`
//! when they are known. A source record is dead-lettered at most once per replay epoch.
//!
//! A pane too large for one record is dead-lettered too (`too_large`), without a payload: its
//! headers are the pane's own ([`pane_headers`]), so its dedup id names it.

use super::pane::EPOCH_HEADER;
use crate::kafka::raw_log::RawRecord;
use crate::windowing::engine::Pane;
use rdkafka::message::{Header, OwnedHeaders};

/// Header of the reason.
pub const REASON_HEADER: &str = "tidemark.reason";
/// Header of the source record's topic.
pub const SOURCE_TOPIC_HEADER: &str = "tidemark.source_topic";
/// Header of the source record's partition.
pub const SOURCE_PARTITION_HEADER: &str = "tidemark.source_partition";
/// Header of the source record's offset.
pub const SOURCE_OFFSET_HEADER: &str = "tidemark.source_offset";
/// Header of the explanation for people.
pub const DETAIL_HEADER: &str = "tidemark.detail";
/// Header of the watermark when the record arrived.
pub const WATERMARK_HEADER: &str = "tidemark.watermark";
/// Header of how late a late record was, in ms.
pub const LATE_BY_HEADER: &str = "tidemark.late_by_ms";
/// Header present when the dead letter does not carry the source record's key and value because
/// they would make it larger than the producer may write; it says how large they were. The
/// source coordinates still name the record.
pub const DROPPED_HEADER: &str = "tidemark.payload_dropped";

/// The longest detail a dead letter carries, in bytes; a longer one is cut at a character
/// boundary and ends with an ellipsis.
pub const MAX_DETAIL_BYTES: usize = 1024;

/// `detail` cut to at most [`MAX_DETAIL_BYTES`] bytes.
pub fn bounded_detail(mut detail: String) -> String {
    if detail.len() > MAX_DETAIL_BYTES {
        let mut end = MAX_DETAIL_BYTES - '…'.len_utf8();
        while !detail.is_char_boundary(end) {
            end -= 1;
        }
        detail.truncate(end);
        detail.push('…');
    }
    detail
}

/// What a dead letter says about the input record it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// `late`, `malformed`, `future_timestamp` or `key_mismatch`.
    pub reason: String,
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// Watermark when the record arrived (`None` before any).
    pub watermark: Option<i64>,
    /// How late the record was, in ms (late records only).
    pub late_by_ms: Option<i64>,
    /// A human-readable explanation.
    pub detail: String,
    /// The pipeline's replay epoch.
    pub epoch: u64,
}

impl DeadLetter {
    /// The record's headers.
    pub fn headers(&self) -> OwnedHeaders {
        let mut h = OwnedHeaders::new_with_capacity(8)
            .insert(Header {
                key: REASON_HEADER,
                value: Some(self.reason.as_str()),
            })
            .insert(Header {
                key: SOURCE_TOPIC_HEADER,
                value: Some(self.topic.as_str()),
            })
            .insert(Header {
                key: SOURCE_PARTITION_HEADER,
                value: Some(&self.partition.to_string()),
            })
            .insert(Header {
                key: SOURCE_OFFSET_HEADER,
                value: Some(&self.offset.to_string()),
            })
            .insert(Header {
                key: DETAIL_HEADER,
                value: Some(self.detail.as_str()),
            })
            .insert(Header {
                key: EPOCH_HEADER,
                value: Some(&self.epoch.to_string()),
            });
        if let Some(w) = self.watermark {
            h = h.insert(Header {
                key: WATERMARK_HEADER,
                value: Some(&w.to_string()),
            });
        }
        if let Some(l) = self.late_by_ms {
            h = h.insert(Header {
                key: LATE_BY_HEADER,
                value: Some(&l.to_string()),
            });
        }
        h
    }

    /// Reads a dead letter's headers back; `None` when the record lacks the reason or the source
    /// coordinates (it is not a dead letter).
    pub fn from_record(r: &RawRecord) -> Option<DeadLetter> {
        let num = |h: &str| r.header(h).and_then(|s| s.parse::<i64>().ok());
        Some(DeadLetter {
            reason: r.header(REASON_HEADER)?.to_string(),
            topic: r.header(SOURCE_TOPIC_HEADER)?.to_string(),
            partition: r
                .header(SOURCE_PARTITION_HEADER)
                .and_then(|s| s.parse().ok())?,
            offset: num(SOURCE_OFFSET_HEADER)?,
            watermark: num(WATERMARK_HEADER),
            late_by_ms: num(LATE_BY_HEADER),
            detail: r.header(DETAIL_HEADER).unwrap_or_default().to_string(),
            epoch: super::epoch_of(r),
        })
    }
}

/// The detail of a pane whose key and value take `bytes`, when that is more than the
/// `record_bytes` one record may take; `None` when the pane fits. `simulate` and `run` both
/// dead-letter such a pane as `too_large` instead of writing it.
pub fn pane_too_large(bytes: usize, record_bytes: usize) -> Option<String> {
    (bytes > record_bytes).then(|| {
        format!(
            "the pane's key and value take {bytes} bytes, more than the {record_bytes} one \
             output record may take (the producer's message.max.bytes less 4 KiB)"
        )
    })
}

/// The headers of the dead letter of pane `p` of epoch `epoch`, too large to write: the pane's
/// own headers (dedup id, pane index, epoch, window, timing), which name it as its record
/// would have, the reason `too_large`, `detail`, and the bytes left out.
pub fn pane_headers(p: &Pane, epoch: u64, detail: &str, bytes: usize) -> OwnedHeaders {
    super::pane::headers(p, epoch)
        .insert(Header {
            key: REASON_HEADER,
            value: Some(crate::pipeline::Reason::TooLarge.as_str()),
        })
        .insert(Header {
            key: DETAIL_HEADER,
            value: Some(detail),
        })
        .insert(Header {
            key: DROPPED_HEADER,
            value: Some(&format!("{bytes} bytes of key and value")),
        })
}

/// Whether a committed record is a dead letter (it has a reason header).
pub fn is_dead_letter(r: &RawRecord) -> bool {
    r.header(REASON_HEADER).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use rdkafka::message::Headers;

    #[test]
    fn a_dead_letter_reads_back_from_its_headers() {
        let d = DeadLetter {
            reason: "late".into(),
            topic: "clicks".into(),
            partition: 2,
            offset: 41,
            watermark: Some(9_000),
            late_by_ms: Some(1_500),
            detail: "every window has expired".into(),
            epoch: 3,
        };
        let h = d.headers();
        let headers = (0..h.count())
            .map(|i| {
                let x = h.get(i);
                (x.key.to_string(), x.value.map(Bytes::copy_from_slice))
            })
            .collect();
        let r = RawRecord {
            partition: 0,
            offset: 0,
            producer_id: 1,
            transactional: true,
            epoch: 0,
            marker: None,
            timestamp: 0,
            key: None,
            value: None,
            headers,
        };
        assert!(is_dead_letter(&r));
        assert_eq!(DeadLetter::from_record(&r), Some(d));
        let mut not_one = r.clone();
        not_one.headers.retain(|(k, _)| k != REASON_HEADER);
        assert_eq!(DeadLetter::from_record(&not_one), None);
    }
}
