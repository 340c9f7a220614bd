//! The per-record path of an input partitioned by the grouping key: each input record goes
//! through the partition's [`Step`](crate::pipeline::Step) (the same step `simulate` runs); its
//! panes and dead letters go into the open transaction. Also: the dispatch of records to the
//! hop's stages, and the tick that lets processing time move.

use super::errors::CycleError;
use super::sources::input_topic;
use super::{Core, Topology};
use crate::clock::wall_ms;
use crate::format::dead_letter::DeadLetter;
use crate::input::{DecodeError, Meta};
use crate::pipeline::{Decoded, Reason, Rejection};
use rdkafka::message::{BorrowedMessage, Message};

impl Core {
    /// Processes one record the consumer handed over.
    pub(super) fn on_message(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), CycleError> {
        match self.topology {
            Topology::Direct => self.on_keyed_record(msg),
            Topology::Hop { .. } | Topology::Passthrough => {
                match self.k.input_topics.iter().position(|t| t == msg.topic()) {
                    Some(i) => self.on_source_record(msg, i as u16),
                    None => Ok(()), // the repartition topic's partitions stay paused
                }
            }
        }
    }

    /// Processes one record of an input partitioned by the grouping key, as `simulate` processes
    /// one line. A record whose Kafka key is not its grouping key breaks that promise: it is
    /// dead-lettered (`key_mismatch`), never grouped where it does not belong.
    fn on_keyed_record(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), CycleError> {
        let p = msg.partition();
        let offset = msg.offset();
        let now = wall_ms();
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
        let decoded = decode(&mut self.decoder, msg, now)?;
        part.next_offset = Some(offset + 1);
        part.batch_in += 1;
        self.txn.add_records(1);
        let epoch = part.epoch;
        let mismatch = match (&decoded, msg.key()) {
            (Ok(Some(ev)), key) if key != Some(ev.key.as_bytes()) => Some(format!(
                "the record key {:?} is not the grouping key {:?}, but kafka.repartition = false declares the input partitioned by it",
                key.map(String::from_utf8_lossy),
                ev.key
            )),
            _ => None,
        };
        let out = match mismatch {
            Some(detail) => {
                let wm = part.step.engine().watermark();
                crate::pipeline::Outcome {
                    rejection: Some(Rejection {
                        reason: Reason::KeyMismatch,
                        detail,
                        watermark: (wm != i64::MIN).then_some(wm),
                        event_time: decoded.as_ref().ok().and_then(Option::as_ref).map(|e| e.ts),
                        late_by_ms: None,
                    }),
                    ..Default::default()
                }
            }
            None => part
                .step
                .record(0, decoded, now)
                .map_err(|e| CycleError::Fatal(e.to_string()))?,
        };
        if out.filtered {
            self.telemetry.batch().filtered(msg.topic());
        }
        if let Some(behind) = out.behind_watermark_ms {
            self.telemetry.lateness(behind);
        }
        if let Some(r) = out.rejection {
            let reason = r.reason.as_str();
            let letter = dead_letter_of(r, msg.topic(), p, offset, epoch);
            self.output.dead_letter(
                &mut self.txn,
                &mut self.telemetry,
                msg.key(),
                msg.payload(),
                letter,
                reason,
            )?;
        }
        self.output.panes(
            &mut self.txn,
            &mut self.telemetry,
            out.panes,
            epoch,
            appended,
        )
    }

    /// Lets processing time move idle watermarks and early firings when no record arrives.
    pub(super) fn on_tick(&mut self) -> Result<(), CycleError> {
        let now = wall_ms();
        let mut fired = Vec::new();
        self.refresh_caught_up(now);
        let direct = self.topology == Topology::Direct;
        let topic = self.k.input_topics[0].clone();
        let caught_up: Vec<bool> = self
            .parts
            .iter()
            .map(|(&p, part)| direct && self.catch_up.is_caught_up(&topic, p, part.position()))
            .collect();
        for (part, caught_up) in self.parts.values_mut().zip(caught_up) {
            let panes = part
                .step
                .tick(now, caught_up)
                .map_err(|e| CycleError::Fatal(e.to_string()))?;
            if !panes.is_empty() {
                fired.push((panes, part.epoch));
            }
        }
        let caught_up: Vec<bool> = self
            .sources
            .iter()
            .map(|(&(t, p), src)| {
                self.catch_up
                    .is_caught_up(input_topic(&self.k, t), p, src.position())
            })
            .collect();
        for (src, caught_up) in self.sources.values_mut().zip(caught_up) {
            src.front.tick(now, caught_up);
        }
        // A source whose report changed (it went idle, say) has something to commit.
        if !self.txn.is_dirty() && self.sources_pending() {
            self.txn.touch();
        }
        // An idle member commits nothing; keep its watermark lag and state figures current anyway.
        self.telemetry.refresh_idle(&self.parts, &self.store, now);
        for (panes, epoch) in fired {
            self.output
                .panes(&mut self.txn, &mut self.telemetry, panes, epoch, now)?;
        }
        Ok(())
    }
}

impl Core {
    /// Looks at the raw log of every input partition that would be idle if it were caught up
    /// (silent for the idle timeout) and whose look is due ([`CatchUp::due`]): does a data
    /// record lie after its position? Only then can it count as idle.
    pub(super) fn refresh_caught_up(&mut self, now: i64) {
        let mut wanted: std::collections::BTreeMap<String, Vec<(i32, i64)>> = Default::default();
        if self.topology == Topology::Direct {
            let topic = &self.k.input_topics[0];
            for (&p, part) in &self.parts {
                let quiet = part
                    .step
                    .fronts()
                    .iter()
                    .any(|(_, f)| f.report(now, true).idle_at.is_some());
                let position = part.position();
                if quiet && self.catch_up.due(topic, p, position) {
                    wanted.entry(topic.clone()).or_default().push((p, position));
                }
            }
        }
        for (&(t, p), src) in &self.sources {
            let topic = input_topic(&self.k, t);
            let position = src.position();
            if src.front.report(now, true).idle_at.is_some()
                && self.catch_up.due(topic, p, position)
            {
                wanted
                    .entry(topic.to_string())
                    .or_default()
                    .push((p, position));
            }
        }
        self.catch_up.look(wanted);
    }
}

/// What a dead letter says about the input record `topic`/`partition`/`offset` it stands for.
fn dead_letter_of(
    r: Rejection,
    topic: &str,
    partition: i32,
    offset: i64,
    epoch: u64,
) -> DeadLetter {
    DeadLetter {
        reason: r.reason.as_str().to_string(),
        topic: topic.to_string(),
        partition,
        offset,
        watermark: r.watermark,
        late_by_ms: r.late_by_ms,
        detail: r.detail,
        epoch,
    }
}

/// Decodes an input record at processing time `now` for the record step: its event, `None`
/// when the pipeline's filter rejects it, or why it cannot be used. A Schema Registry that
/// cannot be reached is not the record's fault: the transaction is aborted and retried.
pub(super) fn decode(
    decoder: &mut crate::input::decode::Decoder,
    msg: &BorrowedMessage<'_>,
    now: i64,
) -> Result<Decoded, CycleError> {
    let meta = Meta {
        record_timestamp: msg.timestamp().to_millis(),
        now,
    };
    Ok(match msg.payload() {
        None => Err((Reason::Malformed, "record has no value".to_string())),
        Some(v) => match decoder.decode(v, meta) {
            Err(DecodeError::Unavailable(e)) => return Err(CycleError::Abortable(e)),
            Err(e) => Err((e.reason(), e.to_string())),
            Ok(ev) => Ok(ev),
        },
    })
}
