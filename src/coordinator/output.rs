//! What the member writes for its users: panes to the output topic and dead letters to the
//! dead-letter topic, encoded (JSON or Avro) and produced into the open transaction; and
//! [`Out`], what every path that produces output writes with.

use super::errors::{Cause, CycleError};
use super::telemetry::Telemetry;
use super::transaction::Transaction;
use crate::config::KafkaSpec;
use crate::format::dead_letter::{
    bounded_detail, pane_headers, pane_too_large, DeadLetter, DROPPED_HEADER,
};
use crate::format::{pane, Encoder};
use crate::pipeline::Reason;
use crate::windowing::engine::Pane;
use rdkafka::message::Header;
use rdkafka::producer::BaseRecord;

/// The encoder of panes and dead letters, and the topics they go to.
pub(super) struct Output {
    encoder: Encoder,
    output_topic: String,
    dead_letter_topic: String,
    /// The largest key plus value a record carries: the producer's `message.max.bytes` less
    /// room for its headers ([`crate::config::PipelineSpec::record_bytes`]).
    max_payload: usize,
}

impl Output {
    /// Writes with `encoder` to the output and dead-letter topics `k` names, records of at most
    /// `record_bytes` of key and value.
    pub(super) fn new(encoder: Encoder, k: &KafkaSpec, record_bytes: usize) -> Output {
        Output {
            encoder,
            output_topic: k.output_topic.clone(),
            dead_letter_topic: k.dead_letter_topic.clone(),
            max_payload: record_bytes,
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
    /// append time of what fired them (for the latency histogram). A pane too large for one
    /// record is dead-lettered `too_large` in its place, as `simulate` does.
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
            let bytes = p.key.len() + value.len();
            if let Some(detail) = pane_too_large(bytes, self.output.max_payload) {
                let headers = pane_headers(&p, epoch, &detail, bytes);
                let record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(
                    &self.output.dead_letter_topic,
                    0usize,
                )
                .key(p.key.as_bytes())
                .headers(headers);
                self.txn.send(record)?;
                self.telemetry.dead_letter(Reason::TooLarge.as_str());
                tracing::warn!(dedup_id = %p.dedup_id, bytes, "pane too large: dead-lettered");
                continue;
            }
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

    /// A pipeline of rows: the row `value` of the input record appended at `appended`, under the
    /// record's Kafka `key`, with its dedup id and epoch.
    pub(super) fn row(
        &mut self,
        key: Option<&[u8]>,
        value: &str,
        dedup_id: &str,
        epoch: u64,
        appended: i64,
    ) -> Result<(), CycleError> {
        let mut record = BaseRecord::with_opaque_to(&self.output.output_topic, 0usize)
            .payload(value.as_bytes())
            .headers(crate::format::row::row_headers(dedup_id, epoch));
        if let Some(k) = key {
            record = record.key(k);
        }
        self.telemetry.row(appended);
        self.txn.send(record)?;
        self.txn.touch();
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
