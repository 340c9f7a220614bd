//! The repartition hop's first stage, one `Source` per owned input partition.
//!
//! Each input record is decoded once and checked by the source's
//! [`Front`](crate::pipeline::Front) (`malformed` and `future_timestamp` records are
//! dead-lettered here, with their original bytes); an event is folded into its source's partial
//! of its key and windows ([`crate::windowing::fold`]) when none of its windows can have passed
//! the second stage's watermark by the time the partial gets there (the source's committed
//! watermark report bounds that watermark while the source is not idle), and written alone
//! otherwise, in either case to the repartition partition Kafka's default partitioner picks for
//! its grouping key ([`crate::format::repartition`]). Partials are written at commit. At each
//! commit, the source's watermark report goes to every repartition partition when it changed
//! (after the data it covers: the same producer writes it later in the same transaction), and its
//! offset marker to the offsets topic. `--passthrough` shares the sources and their markers.

use super::catch_up::CatchUp;
use super::errors::{Cause, CycleError};
use super::output::Out;
use super::parts::Source;
use super::settings::{Settings, Topology};
use super::sources;
use crate::clock::wall_ms;
use crate::format::dead_letter::DeadLetter;
use crate::format::repartition::{self as wire, Origin};
use crate::input::decode::Decoder;
use crate::pipeline::{Checked, Reason};
use crate::windowing::watermark::SourceWatermark;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::BaseRecord;
use std::collections::BTreeMap;

/// The first stage's packs: the event and partial records being built, one per repartition
/// partition, written when full or at commit.
pub(super) struct FirstStage {
    partitions: i32,
    packs: Vec<wire::Pack>,
    partials: Vec<wire::PartialPack>,
}

impl FirstStage {
    /// Packs for `partitions` repartition partitions.
    pub(super) fn new(partitions: i32) -> FirstStage {
        FirstStage {
            partitions,
            packs: (0..partitions).map(|_| Default::default()).collect(),
            partials: (0..partitions).map(|_| Default::default()).collect(),
        }
    }

    /// One record `msg` of input partition `src` (of input topic `topic`).
    pub(super) fn record(
        &mut self,
        s: &Settings,
        src: &mut Source,
        decoder: &mut Decoder,
        out: &mut Out<'_>,
        msg: &BorrowedMessage<'_>,
        topic: u16,
    ) -> Result<(), CycleError> {
        let (p, offset) = (msg.partition(), msg.offset());
        let now = wall_ms();
        let decoded = super::process::decode(decoder, msg, now)?;
        match src.front.check(decoded, now) {
            Checked::Filtered => {
                out.telemetry.batch().filtered(msg.topic());
                Ok(())
            }
            Checked::Event(ev) => {
                let appended = msg.timestamp().to_millis().unwrap_or(now);
                src.last_appended = src.last_appended.max(appended);
                // Folded into a partial where none of its windows can have passed the second
                // stage's watermark when the partial gets there; sent as it is otherwise.
                let bound = src.watermark_bound();
                if let (Some(bound), Some(folder)) = (bound, src.folder.as_mut()) {
                    if folder.admits(ev.ts, bound) {
                        folder.fold(&ev.key, ev.ts, &ev.values, offset, appended);
                        return Ok(());
                    }
                }
                let origin = Origin {
                    topic,
                    partition: p,
                    offset,
                    appended,
                };
                // Events wait in their partition's pack until it is full or the cycle ends
                // (the second stage reads only committed records, so waiting costs no latency).
                let partition = wire::partition_for(ev.key.as_bytes(), self.partitions);
                let pack = &mut self.packs[partition as usize];
                if let Err(e) = pack.push(&ev, origin) {
                    // The front refuses such keys; this keeps a record the hop cannot carry
                    // from stopping the member all the same.
                    return reject(src, out, msg, Reason::TooLarge, e.to_string());
                }
                if pack.is_full() {
                    send_packed(&mut self.packs, s, out, partition)?;
                }
                Ok(())
            }
            Checked::Rejected {
                reason,
                detail,
                event_time: _,
            } => reject(src, out, msg, reason, detail),
        }
    }

    /// Drops the events and partials not written yet (their transaction aborts).
    pub(super) fn clear(&mut self) {
        self.packs.iter_mut().for_each(wire::Pack::clear);
        self.partials.iter_mut().for_each(wire::PartialPack::clear);
    }

    /// Commit step 1, the packs and partials: every pack that holds events, then every source's
    /// partials, each to its key's repartition partition.
    fn flush(
        &mut self,
        s: &Settings,
        sources: &mut BTreeMap<(u16, i32), Source>,
        out: &mut Out<'_>,
    ) -> Result<(), CycleError> {
        for r in 0..self.partitions {
            send_packed(&mut self.packs, s, out, r)?;
        }
        let mut taken = Vec::new();
        for (&(topic, p), src) in sources.iter_mut() {
            if let Some(f) = src.folder.as_mut().filter(|f| f.events() > 0) {
                taken.push((topic, p, f.take()));
            }
        }
        for (topic, p, partials) in taken {
            for partial in partials {
                let r = wire::partition_for(partial.key.as_bytes(), self.partitions);
                out.telemetry.batch().partials += 1;
                out.telemetry.batch().folded += partial.acc.count;
                let pack = &mut self.partials[r as usize];
                // A partial's key is an event's that the hop accepted, so it fits as well.
                pack.push(&partial, topic, p)
                    .map_err(|e| CycleError::Fatal(Cause::part("a partial", e)))?;
                if pack.is_full() {
                    send_packed(&mut self.partials, s, out, r)?;
                }
            }
        }
        for r in 0..self.partitions {
            send_packed(&mut self.partials, s, out, r)?;
        }
        Ok(())
    }
}

/// Dead-letters input record `msg` of source `src` for `reason`.
fn reject(
    src: &Source,
    out: &mut Out<'_>,
    msg: &BorrowedMessage<'_>,
    reason: Reason,
    detail: String,
) -> Result<(), CycleError> {
    let wm = src.front.watermark();
    let letter = DeadLetter {
        reason: reason.as_str().to_string(),
        topic: msg.topic().to_string(),
        partition: msg.partition(),
        offset: msg.offset(),
        watermark: (wm != i64::MIN).then_some(wm),
        late_by_ms: None,
        detail,
        epoch: src.epoch,
    };
    out.dead_letter(msg.key(), msg.payload(), letter, reason.as_str())
}

/// Writes repartition partition `r`'s pack among `packs`, if it holds entries, and empties it
/// (keeping its buffer).
fn send_packed<K: wire::PackKind>(
    packs: &mut [wire::Packed<K>],
    s: &Settings,
    out: &mut Out<'_>,
    r: i32,
) -> Result<(), CycleError> {
    let Some(pack) = packs.get_mut(r as usize).filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let sent = send_repartition(s, out, r, pack.finish());
    pack.clear();
    sent
}

/// Writes `value` to repartition partition `r`, counting its bytes.
fn send_repartition(
    s: &Settings,
    out: &mut Out<'_>,
    r: i32,
    value: &[u8],
) -> Result<(), CycleError> {
    out.telemetry.batch().hop_bytes += value.len() as u64;
    let record = BaseRecord::with_opaque_to(&s.k.repartition_topic, 0usize)
        .partition(r)
        .payload(value);
    out.txn.send(record)
}

/// Commit step 1, the first stage's part (and `--passthrough`'s, without `first`): the packs
/// and partials; each source's watermark report to every repartition partition when it changed
/// (or its idle claim needs refreshing); and an offset marker to the offsets topic for each
/// source the transaction consumed from. Whether a source is caught up is as `catch_up` last
/// found it.
pub(super) fn write_at_commit(
    first: Option<&mut FirstStage>,
    s: &Settings,
    sources: &mut BTreeMap<(u16, i32), Source>,
    catch_up: &CatchUp,
    out: &mut Out<'_>,
) -> Result<(), CycleError> {
    // The packs and partials first: every event of the cycle lies before the watermark
    // records below.
    let partitions = match first {
        Some(first) => {
            first.flush(s, sources, out)?;
            Some(first.partitions)
        }
        None => None,
    };
    let now = wall_ms();
    let refresh = s.idle_refresh();
    // The reports that changed, written together to every repartition partition below.
    let mut reports = Vec::new();
    for (&(topic_index, p), src) in sources.iter_mut() {
        let topic = s.input_topic(topic_index);
        if partitions.is_some() {
            let caught_up = catch_up.is_caught_up(topic, p, src.position());
            let report = src.front.report(now, caught_up);
            if needs_writing(src.written, report, now, refresh) {
                let was_idle = src.written.is_some_and(|(w, _)| w.idle_at.is_some());
                if was_idle != report.idle_at.is_some() {
                    tracing::info!(
                        topic,
                        partition = p,
                        idle = report.idle_at.is_some(),
                        watermark = report.watermark,
                        "input partition {}",
                        if was_idle {
                            "active again"
                        } else {
                            "idle: left out of the watermark"
                        }
                    );
                }
                src.pending = Some((report, now));
                let origin = Origin {
                    topic: topic_index,
                    partition: p,
                    offset: 0,
                    appended: src.last_appended,
                };
                reports.push((origin, report));
            }
        }
        let Some(next) = src.next_offset else {
            continue;
        };
        if src.committed_offset == Some(next) {
            continue;
        }
        let headers = sources::marker_headers(
            next,
            src.epoch,
            &s.fingerprint,
            src.front.watermark(),
            s.offsets_partitions,
        );
        let stamp = next.to_string();
        let key_bytes = sources::marker_key(topic, p);
        let record = BaseRecord::with_opaque_to(&s.k.offsets_topic, 0usize)
            .partition(sources::offsets_partition(p, s.offsets_partitions))
            .key(key_bytes.as_slice())
            .payload(stamp.as_bytes())
            .headers(headers);
        out.txn.send(record)?;
    }
    // One watermark record per repartition partition holds every report that changed: with
    // S sources and P partitions, P records a cycle instead of S x P (64 x 64: 4,096).
    if let Some(partitions) = partitions {
        for chunk in reports.chunks(wire::MAX_REPORTS) {
            let mut value = Vec::new();
            wire::put_watermarks(&mut value, chunk);
            for r in 0..partitions {
                send_repartition(s, out, r, &value)?;
            }
        }
    }
    Ok(())
}

/// Whether a source has something for the next cycle to write: a watermark report that
/// changed, or an idle claim due for refreshing (only behind the hop).
pub(super) fn reports_pending(
    s: &Settings,
    sources: &BTreeMap<(u16, i32), Source>,
    catch_up: &CatchUp,
) -> bool {
    let Topology::Hop { .. } = s.topology else {
        return false;
    };
    let now = wall_ms();
    let refresh = s.idle_refresh();
    sources.iter().any(|(&(t, p), src)| {
        let caught_up = catch_up.is_caught_up(s.input_topic(t), p, src.position());
        needs_writing(src.written, src.front.report(now, caught_up), now, refresh)
    })
}

/// Whether `report` must be written, given what was written (and when): the watermark or the idle
/// state changed, or an idle claim is older than `refresh`. The time of the last record alone
/// does not count: it matters only once the source is idle, and the idle report carries it.
fn needs_writing(
    written: Option<(SourceWatermark, i64)>,
    report: SourceWatermark,
    now: i64,
    refresh: i64,
) -> bool {
    match written {
        None => true,
        Some((w, at)) => {
            w.watermark != report.watermark
                || w.idle_at.is_some() != report.idle_at.is_some()
                || (report.idle_at.is_some() && now.saturating_sub(at) >= refresh)
        }
    }
}
