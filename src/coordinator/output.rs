//! What the member writes for its users: panes to the output topic and dead letters to the
//! dead-letter topic, encoded (JSON or Avro) and produced into the open transaction; and
//! [`Out`], what every path that produces output writes with.

use super::errors::{Cause, CycleError};
use super::telemetry::Telemetry;
use super::transaction::Transaction;
use crate::config::KafkaSpec;
use crate::format::dead_letter::{bounded_detail, DeadLetter, DROPPED_HEADER};
use crate::format::{pane, Encoder};
use crate::windowing::engine::Pane;
use rdkafka::message::Header;
use rdkafka::producer::BaseRecord;

/// The producer's default `message.max.bytes`.
const DEFAULT_MAX_RECORD_BYTES: usize = 1_000_000;

/// What a dead letter's headers and the record's framing may take besides its key and value.
const DEAD_LETTER_OVERHEAD: usize = 4 * 1024;

/// The encoder of panes and dead letters, and the topics they go to.
pub(super) struct Output {
    encoder: Encoder,
    output_topic: String,
    dead_letter_topic: String,
    /// The largest key plus value a dead letter carries: the producer's `message.max.bytes`
    /// less room for its headers.
    max_payload: usize,
}

impl Output {
    /// Writes with `encoder` to the output and dead-letter topics `k` names.
    pub(super) fn new(encoder: Encoder, k: &KafkaSpec) -> Output {
        Output {
            encoder,
            output_topic: k.output_topic.clone(),
            dead_letter_topic: k.dead_letter_topic.clone(),
            max_payload: k
                .properties
                .get("message.max.bytes")
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(DEFAULT_MAX_RECORD_BYTES)
                .saturating_sub(DEAD_LETTER_OVERHEAD),
        }
    }
}

/// The open transaction, the reports, and the output: what a path that produces output writes
/// with.
pub(super) struct Out<'a> {
    pub(super) txn: &'a mut Transaction,
    pub(super) telemetry: &'a mut Telemetry,
    pub(super) output: &'a Output,
}

impl Out<'_> {
    /// Produces panes of replay epoch `epoch` into the open transaction; `fired_at` is the
    /// append time of what fired them (for the latency histogram).
    pub(super) fn panes(
        &mut self,
        panes: Vec<Pane>,
        epoch: u64,
        fired_at: i64,
    ) -> Result<(), CycleError> {
        for p in panes {
            let value = self
                .output
                .encoder
                .pane(&p, epoch)
                .map_err(|e| CycleError::Fatal(Cause::part("encoding a pane", e)))?;
            let record = BaseRecord::with_opaque_to(&self.output.output_topic, 0usize)
                .key(p.key.as_bytes())
                .payload(value.as_slice())
                .headers(pane::headers(&p, epoch));
            self.txn.send(record)?;
            self.telemetry.pane(p.timing, fired_at);
            self.txn.touch();
        }
        Ok(())
    }

    /// Produces a dead letter into the open transaction: under JSON output the record keeps
    /// `key` and `value` untouched; under Avro output its value is the envelope holding them.
    /// A key and value too large for the producer to write are left out, and a header says so,
    /// so that no input record can make the transaction fail on every attempt.
    pub(super) fn dead_letter(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        mut letter: DeadLetter,
        reason: &'static str,
    ) -> Result<(), CycleError> {
        letter.detail = bounded_detail(std::mem::take(&mut letter.detail));
        let size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        let (key, value, dropped) = if size > self.output.max_payload {
            (None, None, Some(format!("{size} bytes of key and value")))
        } else {
            (key, value, None)
        };
        let mut headers = letter.headers();
        if let Some(d) = &dropped {
            headers = headers.insert(Header {
                key: DROPPED_HEADER,
                value: Some(d.as_str()),
            });
        }
        let mut record =
            BaseRecord::with_opaque_to(&self.output.dead_letter_topic, 0usize).headers(headers);
        if let Some(k) = key {
            record = record.key(k);
        }
        let envelope = self
            .output
            .encoder
            .dead_letter(&letter, key, value)
            .map_err(|e| CycleError::Fatal(Cause::part("encoding a dead letter", e)))?;
        match (&envelope, value) {
            (Some(env), _) => record = record.payload(env.as_slice()),
            (None, Some(v)) => record = record.payload(v),
            (None, None) => {}
        }
        self.txn.send(record)?;
        self.telemetry.dead_letter(reason);
        tracing::debug!(
            reason,
            topic = letter.topic,
            partition = letter.partition,
            offset = letter.offset,
            "dead letter"
        );
        Ok(())
    }

    /// `--passthrough`: a copy of an input record (`key`, `value`, appended at `appended`) to
    /// the output topic.
    pub(super) fn copy(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        appended: i64,
    ) -> Result<(), CycleError> {
        let mut record = BaseRecord::with_opaque_to(&self.output.output_topic, 0usize);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(v) = value {
            record = record.payload(v);
        }
        self.telemetry.batch().fired_at.push(appended);
        self.txn.send(record)
    }
}
