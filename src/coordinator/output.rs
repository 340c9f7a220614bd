//! What the member writes for its users: panes to the output topic and dead letters to the
//! dead-letter topic, encoded (JSON or Avro) and produced into the open transaction.

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

    /// Produces panes of replay epoch `epoch` into the open transaction `txn`; `fired_at` is the
    /// append time of what fired them (for the latency histogram).
    pub(super) fn panes(
        &self,
        txn: &mut Transaction,
        telemetry: &mut Telemetry,
        panes: Vec<Pane>,
        epoch: u64,
        fired_at: i64,
    ) -> Result<(), CycleError> {
        for p in panes {
            let value = self
                .encoder
                .pane(&p, epoch)
                .map_err(|e| CycleError::Fatal(e.to_string()))?;
            let record = BaseRecord::with_opaque_to(&self.output_topic, 0usize)
                .key(p.key.as_bytes())
                .payload(value.as_slice())
                .headers(pane::headers(&p, epoch));
            txn.send(record)?;
            telemetry.pane(p.timing, fired_at);
            txn.touch();
        }
        Ok(())
    }

    /// Produces a dead letter into the open transaction `txn`: under JSON output the record keeps
    /// `key` and `value` untouched; under Avro output its value is the envelope holding them.
    pub(super) fn dead_letter(
        &self,
        txn: &mut Transaction,
        telemetry: &mut Telemetry,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        letter: DeadLetter,
        reason: &'static str,
    ) -> Result<(), CycleError> {
        let mut record =
            BaseRecord::with_opaque_to(&self.dead_letter_topic, 0usize).headers(letter.headers());
        if let Some(k) = key {
            record = record.key(k);
        }
        let envelope = self
            .encoder
            .dead_letter(&letter, key, value)
            .map_err(|e| CycleError::Fatal(e.to_string()))?;
        match (&envelope, value) {
            (Some(env), _) => record = record.payload(env.as_slice()),
            (None, Some(v)) => record = record.payload(v),
            (None, None) => {}
        }
        txn.send(record)?;
        telemetry.dead_letter(reason);
        tracing::debug!(
            reason,
            topic = letter.topic,
            partition = letter.partition,
            offset = letter.offset,
            "dead letter"
        );
        Ok(())
    }
}
