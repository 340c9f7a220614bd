//! The per-record path: each input record goes through the partition's [`Step`] (the same step
//! `simulate` runs); its panes and dead letters go into the open transaction.

use super::errors::CycleError;
use super::{Core, Mode};
use crate::clock::wall_ms;
use crate::pipeline::Rejection;
use crate::record::DecodeError;
use crate::sink::json::encode_pane;
use crate::sink::kafka::{dead_letter_headers, pane_headers, DeadLetterInfo};
use crate::windowing::engine::Pane;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::BaseRecord;
use std::time::{Duration, Instant};

impl Core {
    /// Produces panes of replay epoch `epoch` into the open transaction.
    pub(super) fn send_panes(
        &mut self,
        panes: Vec<Pane>,
        epoch: u64,
        fired_at: i64,
    ) -> Result<(), CycleError> {
        for p in panes {
            let value = match &self.encoder {
                None => encode_pane(&p, epoch, &self.spec.engine.aggregations).into_bytes(),
                Some(enc) => enc
                    .pane(&p, epoch, &self.spec.engine.aggregations)
                    .map_err(|e| CycleError::Fatal(e.to_string()))?,
            };
            let record = BaseRecord::with_opaque_to(&self.k.output_topic, 0usize)
                .key(p.key.as_bytes())
                .payload(value.as_slice())
                .headers(pane_headers(&p, epoch));
            self.send(record)?;
            self.counters[2] += 1;
            self.batch.panes[p.timing as usize] += 1;
            self.batch.fired_at.push(fired_at);
            self.dirty = true;
        }
        Ok(())
    }

    pub(super) fn dead_letter(
        &mut self,
        msg: &BorrowedMessage<'_>,
        info: DeadLetterInfo,
    ) -> Result<(), CycleError> {
        let mut record = BaseRecord::with_opaque_to(&self.k.dead_letter_topic, 0usize)
            .headers(dead_letter_headers(&info));
        if let Some(k) = msg.key() {
            record = record.key(k);
        }
        let envelope = match &self.encoder {
            None => None,
            Some(enc) => Some(
                enc.dead_letter(&info, msg.key(), msg.payload())
                    .map_err(|e| CycleError::Fatal(e.to_string()))?,
            ),
        };
        match (&envelope, msg.payload()) {
            (Some(env), _) => record = record.payload(env.as_slice()),
            (None, Some(v)) => record = record.payload(v),
            (None, None) => {}
        }
        self.send(record)?;
        self.counters[3] += 1;
        self.batch.dead_letters.push(info.reason);
        tracing::debug!(
            reason = info.reason,
            partition = info.partition,
            offset = info.offset,
            "dead letter"
        );
        Ok(())
    }

    /// Processes one input record, as `simulate` processes one line.
    pub(super) fn on_message(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), CycleError> {
        let p = msg.partition();
        let offset = msg.offset();
        let now = wall_ms();
        let topic = msg.topic();
        let appended = msg.timestamp().to_millis().unwrap_or(now);
        let Some(part) = self.parts.get_mut(&p) else {
            return Ok(()); // not (or no longer) ours
        };
        if part.next_offset != Some(offset) {
            // Transaction markers take offsets, so small jumps are normal; going back is not.
            tracing::debug!(
                partition = p,
                expected = part.next_offset,
                got = offset,
                "offset jump"
            );
        }
        part.first_seen.get_or_insert(offset);
        if self.mode == Mode::Passthrough {
            let mut record = BaseRecord::with_opaque_to(&self.k.output_topic, 0usize);
            if let Some(k) = msg.key() {
                record = record.key(k);
            }
            if let Some(v) = msg.payload() {
                record = record.payload(v);
            }
            part.next_offset = Some(offset + 1);
            part.batch_in += 1;
            self.batch_records += 1;
            self.dirty = true;
            self.batch.fired_at.push(appended);
            return self.send(record);
        }
        let key = msg.key().map(|k| String::from_utf8_lossy(k).into_owned());
        let decoded = match (key, msg.payload()) {
            (None, _) => Err("record has no key".to_string()),
            (_, None) => Err("record has no value".to_string()),
            (Some(key), Some(v)) => match self.decoder.decode_keyed(v, key) {
                // Not the record's fault (the registry is down): retry the transaction.
                Err(DecodeError::Unavailable(e)) => return Err(CycleError::Abortable(e)),
                other => other.map_err(|e| e.to_string()),
            },
        };
        part.next_offset = Some(offset + 1);
        part.batch_in += 1;
        self.batch_records += 1;
        self.dirty = true;
        let out = part
            .step
            .record(decoded, now)
            .map_err(|e| CycleError::Fatal(e.to_string()))?;
        if let Some(behind) = out.behind_watermark_ms {
            self.lateness.record(behind as f64 / 1000.0);
        }
        let epoch = part.epoch;
        if let Some(r) = out.rejection {
            self.dead_letter(msg, dead_letter_info(r, topic, p, offset, epoch))?;
        }
        self.send_panes(out.panes, epoch, appended)
    }

    /// Lets processing time move idle watermarks and early firings when no record arrives.
    pub(super) fn on_tick(&mut self) -> Result<(), CycleError> {
        let now = wall_ms();
        let mut fired = Vec::new();
        for part in self.parts.values_mut() {
            let panes = part
                .step
                .tick(now)
                .map_err(|e| CycleError::Fatal(e.to_string()))?;
            if !panes.is_empty() {
                fired.push((panes, part.epoch));
            }
        }
        // An idle member commits nothing; keep its watermark lag and state figures current anyway.
        if self.last_lag_update.elapsed() >= Duration::from_secs(1) {
            self.refresh_state_gauges();
            self.last_lag_update = Instant::now();
            for part in self.parts.values() {
                part.gauges
                    .set_watermark(part.step.engine().watermark(), now);
            }
        }
        for (panes, epoch) in fired {
            self.send_panes(panes, epoch, now)?;
        }
        Ok(())
    }
}

/// What a dead letter says about the input record `topic`/`partition`/`offset` it stands for.
fn dead_letter_info(
    r: Rejection,
    topic: &str,
    partition: i32,
    offset: i64,
    epoch: u64,
) -> DeadLetterInfo {
    DeadLetterInfo {
        reason: r.reason.as_str(),
        topic: topic.to_string(),
        partition,
        offset,
        watermark: r.watermark,
        late_by_ms: r.late_by_ms,
        detail: r.detail,
        epoch,
    }
}
