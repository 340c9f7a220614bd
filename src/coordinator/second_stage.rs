//! The repartition hop's second stage, one `Part` per owned repartition partition.
//!
//! The repartition topic is read as a raw log (only records of committed transactions, resolved
//! from their markers) from each partition's committed offset. Events and partials go to the
//! partition's [`Back`](crate::pipeline::Back), which may call them `late` (dead-lettered with
//! their source topic, partition and offset; a partial's records one by one); watermark reports
//! move its watermark (the minimum over the sources that are not idle).

use super::errors::{Cause, CycleError, RunError};
use super::output::Out;
use super::parts::Part;
use super::settings::Settings;
use crate::clock::wall_ms;
use crate::config::KafkaSpec;
use crate::format::dead_letter::DeadLetter;
use crate::format::repartition::{self as wire, Decoded, Origin};
use crate::kafka::raw_log::{Following, LogReader, RawRecord};
use crate::pipeline::{Reason, Rejection};
use crate::windowing::aggregate::Acc;
use crate::windowing::engine::EngineError;
use crate::windowing::spec::Event;
use crate::windowing::trigger::Timing;
use crate::windowing::watermark::SourceWatermark;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How often consumed records of the repartition topic are deleted.
const PURGE_EVERY: Duration = Duration::from_secs(30);

/// Whether a purge has failed already (said once per process).
static PURGE_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The second stage's reader of the repartition topic and its buffers.
pub(super) struct SecondStage {
    /// The reader of the repartition topic's raw log.
    reader: LogReader,
    /// The owned repartition partitions, followed from each one's committed offset.
    following: Following,
    /// Every event is decoded into this one buffer.
    event: Event,
    /// Every watermark record's reports are decoded into this one buffer.
    reports: Vec<(Origin, SourceWatermark)>,
    /// When the repartition topic was last purged below the committed positions.
    last_purge: Instant,
}

impl SecondStage {
    /// Connects to the repartition topic of `k`; no partition is followed yet.
    pub(super) fn connect(k: &KafkaSpec) -> Result<SecondStage, RunError> {
        let reader = LogReader::connect(&k.brokers)
            .map_err(|e| RunError::Startup(Cause::part("reading the repartition topic", e)))?;
        Ok(SecondStage {
            reader,
            following: Following::new(&k.repartition_topic).giving_up_after(k.transaction_timeout),
            event: Event::default(),
            reports: Vec::new(),
            last_purge: Instant::now(),
        })
    }

    /// Reads repartition partition `p` from offset `from` on.
    pub(super) fn follow(&mut self, p: i32, from: i64) {
        self.following.follow(p, from);
    }

    /// Stops reading repartition partition `p`.
    pub(super) fn unfollow(&mut self, p: i32) {
        self.following.unfollow(p);
    }

    /// Whether no partition is followed.
    pub(super) fn is_idle(&self) -> bool {
        self.following.is_idle()
    }

    /// Whether the last read left records behind (read again at once).
    pub(super) fn is_behind(&self) -> bool {
        self.following.is_behind()
    }

    /// Reads what committed on the owned repartition partitions since the last read and
    /// processes it. Returns how many records were fetched.
    pub(super) fn read(
        &mut self,
        s: &Settings,
        parts: &mut BTreeMap<i32, Part>,
        out: &mut Out<'_>,
    ) -> Result<usize, CycleError> {
        if self.following.is_idle() {
            return Ok(0);
        }
        let mut records = Vec::new();
        let fetched = match self
            .reader
            .poll(&mut self.following, 0, |r| records.push(r))
        {
            Ok(n) => n,
            Err(e) => {
                // A leader that moved, a broker that is busy: read again from where the reads got
                // to. The records handed on before the error (other partitions of the same
                // response) are processed below: the reader has moved past them.
                tracing::warn!("reading the repartition topic: {e}");
                std::thread::sleep(Duration::from_millis(100));
                0
            }
        };
        let now = wall_ms();
        for r in records {
            process(s, parts, out, r, &mut self.event, &mut self.reports, now)?;
        }
        Ok(fetched)
    }

    /// After a commit, at most every [`PURGE_EVERY`]: deletes the records of the owned
    /// repartition partitions below their committed offsets (DeleteRecords), on a thread of its
    /// own so the loop does not wait. Nothing needs them any more: a restore reads the
    /// changelog, not the repartition topic. A broker that does not support it is logged once;
    /// the topic's retention then bounds it.
    pub(super) fn purge(&mut self, s: &Settings, parts: &BTreeMap<i32, Part>) {
        if self.last_purge.elapsed() < PURGE_EVERY {
            return;
        }
        self.last_purge = Instant::now();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (&p, part) in parts {
            if let Some(c) = part.committed_offset.filter(|&c| c > 0) {
                let _ =
                    tpl.add_partition_offset(&s.k.repartition_topic, p, rdkafka::Offset::Offset(c));
            }
        }
        if tpl.count() == 0 {
            return;
        }
        let config = crate::clients::base_config(&s.k);
        std::thread::spawn(move || {
            use rdkafka::admin::{AdminClient, AdminOptions};
            let purged = (|| -> Result<(), String> {
                let admin: AdminClient<rdkafka::client::DefaultClientContext> =
                    config.create().map_err(|e| e.to_string())?;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
                let result = rt
                    .block_on(admin.delete_records(&tpl, &opts))
                    .map_err(|e| e.to_string())?;
                for el in result.elements() {
                    if let Err(e) = el.error() {
                        return Err(format!("partition {}: {e}", el.partition()));
                    }
                }
                Ok(())
            })();
            if let Err(e) = purged {
                if !PURGE_FAILED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        "deleting consumed records of the repartition topic failed ({e}): the broker may not support DeleteRecords; the topic's retention.ms bounds it instead (logged once)"
                    );
                }
            }
        });
    }
}

/// An engine error on the second stage's path: the member stops.
fn fatal(e: EngineError) -> CycleError {
    CycleError::Fatal(Cause::part("the second stage", e))
}

/// Processes one record `r` read from the repartition topic, decoding an event into `ev` and a
/// watermark record's reports into `reports`.
fn process(
    s: &Settings,
    parts: &mut BTreeMap<i32, Part>,
    out: &mut Out<'_>,
    r: RawRecord,
    ev: &mut Event,
    reports: &mut Vec<(Origin, SourceWatermark)>,
    now: i64,
) -> Result<(), CycleError> {
    let Some(part) = parts.get_mut(&r.partition) else {
        return Ok(()); // no longer ours
    };
    let decoded = match r.value.as_deref() {
        Some(v) => wire::decode_into(r.key.as_deref(), v, ev, reports),
        None => Err(wire::HopError::MissingValue),
    };
    let topics = s.k.input_topics.len();
    let known = |o: &Origin| usize::from(o.topic) < topics;
    part.first_seen.get_or_insert(r.offset);
    part.next_offset = Some(r.offset + 1);
    part.batch_in += 1;
    out.txn.add_records(1);
    let epoch = part.epoch;
    match decoded {
        Ok(Decoded::Event(o)) if known(&o) => event(s, part, out, ev, o, now),
        Ok(Decoded::Events { count, max_topic })
            if count == 0 || usize::from(max_topic) < topics =>
        {
            let value = r.value.as_deref().expect("decoded from it");
            let unreadable = |e| CycleError::Fatal(Cause::part("a checked pack does not read", e));
            let mut reader = wire::PackReader::new(value).map_err(unreadable)?;
            while let Some(o) = reader.next_into(ev).map_err(unreadable)? {
                event(s, part, out, ev, o, now)?;
            }
            // `records_in` and the batch count events, not packs.
            let extra = u64::from(count).saturating_sub(1);
            part.batch_in += extra;
            out.txn.add_records(extra as usize);
            Ok(())
        }
        Ok(Decoded::Partials) => {
            let value = r.value.as_deref().expect("decoded from it");
            match read_partials(s, value) {
                Ok(partials) => {
                    let extra = partials
                        .iter()
                        .map(|(p, _)| p.events.len() as u64)
                        .sum::<u64>()
                        .saturating_sub(1);
                    for (p, acc) in partials {
                        partial(s, part, out, p, &acc, now)?;
                    }
                    // `records_in` and the batch count input records, not partials.
                    part.batch_in += extra;
                    out.txn.add_records(extra as usize);
                    Ok(())
                }
                Err(e) => malformed(s, out, &r, e.to_string(), epoch),
            }
        }
        Ok(Decoded::Watermarks) if reports.iter().all(|(o, _)| known(o)) => {
            out.telemetry.batch().hop_watermarks += 1;
            for (o, report) in reports.iter() {
                let source = format!("{}/{}", s.input_topic(o.topic), o.partition);
                let back = part.step.back_mut();
                back.report(&source, *report, now).map_err(fatal)?;
                let panes = back.take_panes();
                // What fired them is the source's last record, or its going idle: latency counts
                // from the record's append, or from the idle claim.
                let fired_at = report.idle_at.unwrap_or(o.appended);
                out.panes(panes, epoch, fired_at)?;
            }
            Ok(())
        }
        decoded => {
            let detail = match decoded {
                Err(e) => e.to_string(),
                Ok(_) => "a record of an unknown source".to_string(),
            };
            malformed(s, out, &r, detail, epoch)
        }
    }
}

/// Dead-letters a repartition record that no first stage of this pipeline wrote, with its bytes.
fn malformed(
    s: &Settings,
    out: &mut Out<'_>,
    r: &RawRecord,
    detail: String,
    epoch: u64,
) -> Result<(), CycleError> {
    let letter = DeadLetter {
        reason: Reason::Malformed.as_str().to_string(),
        topic: s.k.repartition_topic.clone(),
        partition: r.partition,
        offset: r.offset,
        watermark: None,
        late_by_ms: None,
        detail,
        epoch,
    };
    out.dead_letter(
        r.key.as_deref(),
        r.value.as_deref(),
        letter,
        Reason::Malformed.as_str(),
    )
}

/// The partials of a partial record with their accumulators decoded, all of them or an error (a
/// record is processed whole or not at all).
fn read_partials(
    s: &Settings,
    value: &[u8],
) -> Result<Vec<(wire::PartialRecord, Acc)>, wire::HopError> {
    let aggs = &s.spec.engine.aggregations;
    let topics = s.k.input_topics.len();
    wire::read_partials(value)?
        .into_iter()
        .map(|p| {
            if usize::from(p.origin.topic) >= topics {
                return Err(wire::HopError::UnknownSource);
            }
            let acc = Acc::decode(aggs, &mut p.acc.as_slice(), false)
                .filter(|a| a.count == p.events.len() as u64)
                .ok_or(wire::HopError::BadPartial)?;
            Ok((p, acc))
        })
        .collect()
}

/// One partial of `part` (see [`crate::windowing::fold`]). Merged whole; when its windows had
/// expired, each of its records is dead-lettered as late by its input coordinates, as it would
/// have been alone.
fn partial(
    s: &Settings,
    part: &mut Part,
    out: &mut Out<'_>,
    partial: wire::PartialRecord,
    acc: &Acc,
    now: i64,
) -> Result<(), CycleError> {
    let epoch = part.epoch;
    let back = part.step.back_mut();
    back.clock(now).map_err(fatal)?;
    let earliest = partial
        .events
        .iter()
        .map(|&(_, t)| t)
        .min()
        .unwrap_or(partial.ts);
    let (late, behind) = back
        .merge_partial(&partial.key, partial.ts, earliest, acc)
        .map_err(fatal)?;
    let panes = back.take_panes();
    if let Some(b) = behind {
        out.telemetry.lateness(b);
    }
    if late.is_some() || panes.iter().any(|p| p.timing == Timing::Late) {
        // The first stage folds only what the second stage's watermark cannot have passed while
        // its input is not idle; an input back from idleness can be behind.
        out.telemetry.batch().late_partials += 1;
    }
    if let Some(watermark) = late {
        let o = partial.origin;
        for &(offset, ts) in &partial.events {
            let mut rej = Rejection::late(ts, watermark);
            rej.detail = format!(
                "{} (folded with {} other records before the repartition hop: the record's fields are at its input coordinates)",
                rej.detail,
                partial.events.len() - 1
            );
            let value = serde_json::json!({
                "key": partial.key,
                "timestamp": ts,
                "fields": null,
            })
            .to_string();
            let source = Origin { offset, ..o };
            dead_letter(s, out, source, &partial.key, &value, rej, epoch)?;
        }
    }
    out.panes(panes, epoch, partial.origin.appended)
}

/// One event `ev` of `part`, from input record `o`.
fn event(
    s: &Settings,
    part: &mut Part,
    out: &mut Out<'_>,
    ev: &Event,
    o: Origin,
    now: i64,
) -> Result<(), CycleError> {
    let epoch = part.epoch;
    let back = part.step.back_mut();
    back.clock(now).map_err(fatal)?;
    let (rejection, behind) = back.process(ev).map_err(fatal)?;
    let panes = back.take_panes();
    if let Some(b) = behind {
        out.telemetry.lateness(b);
    }
    if let Some(rej) = rejection {
        let value = event_json(s, ev);
        dead_letter(s, out, o, &ev.key, &value, rej, epoch)?;
    }
    out.panes(panes, epoch, o.appended)
}

/// Dead-letters input record `o` as the second stage rejected it: with its grouping key and
/// `value` (what the second stage knows of it), at its input coordinates.
fn dead_letter(
    s: &Settings,
    out: &mut Out<'_>,
    o: Origin,
    key: &str,
    value: &str,
    rej: Rejection,
    epoch: u64,
) -> Result<(), CycleError> {
    let letter = DeadLetter {
        reason: rej.reason.as_str().to_string(),
        topic: s.input_topic(o.topic).to_string(),
        partition: o.partition,
        offset: o.offset,
        watermark: rej.watermark,
        late_by_ms: rej.late_by_ms,
        detail: rej.detail,
        epoch,
    };
    out.dead_letter(
        Some(key.as_bytes()),
        Some(value.as_bytes()),
        letter,
        rej.reason.as_str(),
    )
}

/// A decoded event as JSON, the value of a dead letter of the second stage (the original bytes
/// stayed in the input topic, at the dead letter's source coordinates).
fn event_json(s: &Settings, ev: &Event) -> String {
    let fields: serde_json::Map<String, serde_json::Value> = s
        .spec
        .input
        .fields
        .iter()
        .zip(&ev.values)
        .map(|(f, v)| (f.value.text.clone(), crate::format::pane::datum_json(v)))
        .collect();
    serde_json::json!({ "key": ev.key, "timestamp": ev.ts, "fields": fields }).to_string()
}
