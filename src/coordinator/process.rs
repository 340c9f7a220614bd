//! The per-record path of an input partitioned by the grouping key: each input record goes
//! through the partition's [`Step`](crate::pipeline::Step) (the same step `simulate` runs); its
//! panes and dead letters go into the open transaction. Also: the tick that lets processing time
//! move, and decoding an input record for the record step.

use super::catch_up::CatchUp;
use super::errors::{Cause, CycleError};
use super::output::Out;
use super::parts::{Part, Source};
use super::settings::{Settings, Topology};
use crate::clock::wall_ms;
use crate::format::dead_letter::DeadLetter;
use crate::format::row::{row_dedup_id, RowOutcome};
use crate::input::{DecodeError, Meta};
use crate::pipeline::{Decoded, Reason, Rejection};
use crate::state::store::StateStore;
use rdkafka::message::{BorrowedMessage, Message};
use std::collections::BTreeMap;

/// Processes one record of input partition `part`, partitioned by the grouping key, as
/// `simulate` processes one line. A record whose Kafka key is not its grouping key breaks that
/// promise: it is dead-lettered (`key_mismatch`), never grouped where it does not belong.
pub(super) fn keyed_record(
    part: &mut Part,
    decoder: &mut crate::input::decode::Decoder,
    out: &mut Out<'_>,
    msg: &BorrowedMessage<'_>,
) -> Result<(), CycleError> {
    let p = msg.partition();
    let offset = msg.offset();
    let now = wall_ms();
    let appended = msg.timestamp().to_millis().unwrap_or(now);
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
    let decoded = decode(decoder, msg, now)?;
    part.next_offset = Some(offset + 1);
    part.batch_in += 1;
    out.txn.add_records(1);
    let epoch = part.epoch;
    let mismatch = match (&decoded, msg.key()) {
        (Ok(Some(ev)), key) if key != Some(ev.key.as_bytes()) => Some(format!(
            "the record key {:?} is not the grouping key {:?}, but kafka.repartition = false declares the input partitioned by it",
            key.map(String::from_utf8_lossy),
            ev.key
        )),
        _ => None,
    };
    let outcome = match mismatch {
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
            .map_err(|e| CycleError::Fatal(Cause::part("the engine", e)))?,
    };
    if outcome.filtered {
        out.telemetry.batch().filtered(msg.topic());
    }
    if let Some(behind) = outcome.behind_watermark_ms {
        out.telemetry.lateness(behind);
    }
    if let Some(r) = outcome.rejection {
        let reason = r.reason.as_str();
        let letter = dead_letter_of(r, msg.topic(), p, offset, epoch);
        out.dead_letter(msg.key(), msg.payload(), letter, reason)?;
    }
    out.panes(outcome.panes, epoch, appended)
}

/// Processes one record of a pipeline of rows, read from input source `src`: its row, or its
/// dead letter, goes into the open transaction. The row's dedup id is the record's coordinates,
/// so a record read again after a crash or in a replay writes the same id.
pub(super) fn row_record(
    s: &Settings,
    src: &Source,
    decoder: &mut crate::input::decode::Decoder,
    out: &mut Out<'_>,
    msg: &BorrowedMessage<'_>,
) -> Result<(), CycleError> {
    let Some(rows) = s.spec.rows.as_ref() else {
        return Err(CycleError::Fatal(Cause::found(
            "a pipeline of rows without columns".to_string(),
        )));
    };
    let (p, offset) = (msg.partition(), msg.offset());
    let now = wall_ms();
    let decoded = decode(decoder, msg, now)?;
    match rows.record(decoded, s.spec.record_bytes) {
        RowOutcome::Filtered => {
            out.telemetry.batch().filtered(msg.topic());
            Ok(())
        }
        RowOutcome::Rejected(r) => {
            let reason = r.reason.as_str();
            let letter = dead_letter_of(r, msg.topic(), p, offset, src.epoch);
            out.dead_letter(msg.key(), msg.payload(), letter, reason)
        }
        RowOutcome::Row(row) => {
            let appended = msg.timestamp().to_millis().unwrap_or(now);
            let id = row_dedup_id(&s.spec.engine.name, msg.topic(), p, offset);
            out.row(msg.key(), &row, &id, src.epoch, appended)
        }
    }
}

/// Lets processing time move idle watermarks and early firings when no record arrives: ticks
/// every partition's step and every source's front (whether each is caught up as `catch_up`
/// finds it now), and keeps the state and lag figures current on an idle member. Whether the
/// sources' reports make the open transaction worth committing is the caller's to say
/// ([`super::first_stage::reports_pending`]).
pub(super) fn tick(
    s: &Settings,
    parts: &mut BTreeMap<i32, Part>,
    sources: &mut BTreeMap<(u16, i32), Source>,
    catch_up: &mut CatchUp,
    store: &StateStore,
    out: &mut Out<'_>,
) -> Result<(), CycleError> {
    let now = wall_ms();
    let mut fired = Vec::new();
    catch_up.refresh(s, parts, sources, now);
    let direct = s.topology == Topology::Direct;
    let topic = &s.k.input_topics[0];
    for (&p, part) in parts.iter_mut() {
        let caught_up = direct && catch_up.is_caught_up(topic, p, part.position());
        let panes = part
            .step
            .tick(now, caught_up)
            .map_err(|e| CycleError::Fatal(Cause::part("the engine", e)))?;
        if !panes.is_empty() {
            fired.push((panes, part.epoch));
        }
    }
    for (&(t, p), src) in sources.iter_mut() {
        let caught_up = catch_up.is_caught_up(s.input_topic(t), p, src.position());
        src.front.tick(now, caught_up);
    }
    // An idle member commits nothing; keep its watermark lag and state figures current anyway.
    out.telemetry.refresh_idle(parts, store, now);
    for (panes, epoch) in fired {
        out.panes(panes, epoch, now)?;
    }
    Ok(())
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
            Err(e @ DecodeError::Unavailable(_)) => {
                return Err(CycleError::Abortable(Cause::part("decoding", e)))
            }
            Err(e) => Err((e.reason(), e.to_string())),
            Ok(ev) => Ok(ev),
        },
    })
}
