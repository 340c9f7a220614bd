//! What the member writes for its users: panes to the output topic and dead letters to the
//! dead-letter topic, encoded (JSON or Avro) and produced into the open transaction; and
//! [`Out`], what every path that produces output writes with.

use super::errors::CycleError;
use super::telemetry::Telemetry;
use super::transaction::Transaction;
use crate::config::KafkaSpec;
use crate::format::dead_letter::DeadLetter;
use crate::format::{pane, Encoder};
use crate::windowing::engine::Pane;
use rdkafka::producer::BaseRecord;

/// The encoder of panes and dead letters, and the topics they go to.
pub(super) struct Output {
    encoder: Encoder,
    output_topic: String,
    dead_letter_topic: String,
}

impl Output {
    /// Writes with `encoder` to the output and dead-letter topics `k` names.
    pub(super) fn new(encoder: Encoder, k: &KafkaSpec) -> Output {
        Output {
            encoder,
            output_topic: k.output_topic.clone(),
            dead_letter_topic: k.dead_letter_topic.clone(),
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
                .map_err(|e| CycleError::Fatal(e.to_string()))?;
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
    pub(super) fn dead_letter(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        letter: DeadLetter,
        reason: &'static str,
    ) -> Result<(), CycleError> {
        let mut record = BaseRecord::with_opaque_to(&self.output.dead_letter_topic, 0usize)
            .headers(letter.headers());
        if let Some(k) = key {
            record = record.key(k);
        }
        let envelope = self
            .output
            .encoder
            .dead_letter(&letter, key, value)
            .map_err(|e| CycleError::Fatal(e.to_string()))?;
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
