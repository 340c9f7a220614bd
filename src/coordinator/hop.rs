//! The repartition hop, both stages, inside one member and one transaction per cycle.
//!
//! **First stage** (one `Source` per owned input partition): each input record is decoded once
//! and checked by the source's [`Front`](crate::pipeline::Front) (`malformed` and
//! `future_timestamp` records are dead-lettered here, with their original bytes); an event is
//! folded into its source's partial of its key and windows ([`crate::windowing::fold`]) when
//! none of its windows can have passed the second stage's watermark by the time the partial
//! gets there (the source's committed watermark report bounds that watermark while the source is
//! not idle), and written alone otherwise, in either case to the repartition partition Kafka's
//! default partitioner picks for its grouping key ([`crate::format::repartition`]). Partials are
//! written at commit. At each commit, the source's watermark report goes to every
//! repartition partition when it changed (after the data it covers: the same producer writes it
//! later in the same transaction), and its offset marker to the offsets topic.
//!
//! **Second stage** (one `Part` per owned repartition partition): the repartition topic is read
//! as a raw log (only records of committed transactions, resolved from their markers) from each
//! partition's committed offset. Events and partials go to the partition's
//! [`Back`](crate::pipeline::Back), which may call them `late` (dead-lettered with their source
//! topic, partition and offset; a partial's records one by one);
//! watermark reports move its watermark (the minimum over the sources that are not idle).

use super::errors::CycleError;
use super::sources;
use super::sources::input_topic;
use super::{Core, Topology};
use crate::clock::wall_ms;
use crate::format::dead_letter::DeadLetter;
use crate::format::repartition::{self as wire, Decoded, Origin};
use crate::kafka::raw_log::RawRecord;
use crate::pipeline::{Checked, Reason, Rejection};
use crate::windowing::aggregate::Acc;
use crate::windowing::spec::Event;
use crate::windowing::trigger::Timing;
use crate::windowing::watermark::SourceWatermark;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::BaseRecord;

impl Core {
    /// First stage (and `--passthrough`): one record of an input partition.
    pub(super) fn on_source_record(
        &mut self,
        msg: &BorrowedMessage<'_>,
        topic: u16,
    ) -> Result<(), CycleError> {
        let (p, offset) = (msg.partition(), msg.offset());
        let now = wall_ms();
        let Some(src) = self.sources.get_mut(&(topic, p)) else {
            return Ok(()); // not (or no longer) ours
        };
        src.first_seen.get_or_insert(offset);
        src.next_offset = Some(offset + 1);
        src.batch_in += 1;
        self.txn.add_records(1);
        let Topology::Hop { partitions } = self.topology else {
            // --passthrough: a copy of the record, through the same cycle.
            let mut record = BaseRecord::with_opaque_to(&self.k.output_topic, 0usize);
            if let Some(k) = msg.key() {
                record = record.key(k);
            }
            if let Some(v) = msg.payload() {
                record = record.payload(v);
            }
            let appended = msg.timestamp().to_millis().unwrap_or(now);
            self.telemetry.batch().fired_at.push(appended);
            return self.txn.send(record);
        };
        let decoded = super::process::decode(&mut self.decoder, msg, now)?;
        let src = self.sources.get_mut(&(topic, p)).expect("looked up above");
        match src.front.check(decoded, now) {
            Checked::Filtered => {
                self.telemetry.batch().filtered(msg.topic());
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
                let partition = wire::partition_for(ev.key.as_bytes(), partitions);
                if self.hop_packs.len() < partitions as usize {
                    self.hop_packs
                        .resize_with(partitions as usize, Default::default);
                }
                let pack = &mut self.hop_packs[partition as usize];
                pack.push(&ev, origin);
                if pack.is_full() {
                    self.send_pack(partition)?;
                }
                Ok(())
            }
            Checked::Rejected {
                reason,
                detail,
                event_time: _,
            } => {
                let wm = src.front.watermark();
                let letter = DeadLetter {
                    reason: reason.as_str().to_string(),
                    topic: msg.topic().to_string(),
                    partition: p,
                    offset,
                    watermark: (wm != i64::MIN).then_some(wm),
                    late_by_ms: None,
                    detail,
                    epoch: src.epoch,
                };
                self.output.dead_letter(
                    &mut self.txn,
                    &mut self.telemetry,
                    msg.key(),
                    msg.payload(),
                    letter,
                    reason.as_str(),
                )
            }
        }
    }

    /// Writes repartition partition `r`'s pack, if it holds events, and empties it.
    fn send_pack(&mut self, r: i32) -> Result<(), CycleError> {
        self.send_packed(|c| &mut c.hop_packs, r)
    }

    /// Writes repartition partition `r`'s partial pack, if it holds partials, and empties it.
    fn send_partial_pack(&mut self, r: i32) -> Result<(), CycleError> {
        self.send_packed(|c| &mut c.hop_partials, r)
    }

    /// Writes repartition partition `r`'s pack among `packs`, if it holds entries, and empties
    /// it (keeping its buffer).
    fn send_packed<K: wire::PackKind>(
        &mut self,
        packs: fn(&mut Core) -> &mut Vec<wire::Packed<K>>,
        r: i32,
    ) -> Result<(), CycleError> {
        let Some(mut pack) = packs(self)
            .get_mut(r as usize)
            .filter(|p| !p.is_empty())
            .map(std::mem::take)
        else {
            return Ok(());
        };
        let sent = self.send_repartition(r, pack.finish());
        pack.clear();
        packs(self)[r as usize] = pack;
        sent
    }

    /// Writes `value` to repartition partition `r`, counting its bytes.
    fn send_repartition(&mut self, r: i32, value: &[u8]) -> Result<(), CycleError> {
        self.telemetry.batch().hop_bytes += value.len() as u64;
        let record = BaseRecord::with_opaque_to(&self.k.repartition_topic, 0usize)
            .partition(r)
            .payload(value);
        self.txn.send(record)
    }

    /// Drops the events of the packs not written yet (their transaction aborts).
    pub(super) fn clear_packs(&mut self) {
        self.hop_packs.iter_mut().for_each(wire::Pack::clear);
        self.hop_partials
            .iter_mut()
            .for_each(wire::PartialPack::clear);
    }

    /// Commit step 1, the first stage's partials: every source's, each to its key's repartition
    /// partition.
    fn send_partials(&mut self, partitions: i32) -> Result<(), CycleError> {
        if self.hop_partials.len() < partitions as usize {
            self.hop_partials
                .resize_with(partitions as usize, Default::default);
        }
        let mut taken = Vec::new();
        for (&(topic, p), src) in self.sources.iter_mut() {
            if let Some(f) = src.folder.as_mut().filter(|f| f.events() > 0) {
                taken.push((topic, p, f.take()));
            }
        }
        for (topic, p, partials) in taken {
            for partial in partials {
                let r = wire::partition_for(partial.key.as_bytes(), partitions);
                self.telemetry.batch().partials += 1;
                self.telemetry.batch().folded += partial.acc.count;
                let pack = &mut self.hop_partials[r as usize];
                pack.push(&partial, topic, p);
                if pack.is_full() {
                    self.send_partial_pack(r)?;
                }
            }
        }
        for r in 0..partitions {
            self.send_partial_pack(r)?;
        }
        Ok(())
    }

    /// Second stage: reads what committed on the owned repartition partitions since the last
    /// read and processes it. Returns how many records were fetched.
    pub(super) fn read_repartition(&mut self) -> Result<usize, CycleError> {
        let Some(reader) = self.hop_reader.as_mut() else {
            return Ok(0);
        };
        if reader.is_idle() {
            return Ok(0);
        }
        let mut records = Vec::new();
        let fetched = match reader.poll(0, |r| records.push(r)) {
            Ok(n) => n,
            Err(e) => {
                // A leader that moved, a broker that is busy: read again from where the reads got
                // to. The records handed on before the error (other partitions of the same
                // response) are processed below: the reader has moved past them.
                tracing::warn!("reading the repartition topic: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                0
            }
        };
        let now = wall_ms();
        // Every event is decoded into the same buffer, every watermark record's reports likewise.
        let mut ev = std::mem::take(&mut self.hop_event);
        let mut reports = std::mem::take(&mut self.hop_reports);
        let result = self.process_repartition(records, &mut ev, &mut reports, now);
        self.hop_event = ev;
        self.hop_reports = reports;
        result.map(|()| fetched)
    }

    /// Processes records read from the repartition topic, decoding each event into `ev` and each
    /// watermark record's reports into `reports`.
    fn process_repartition(
        &mut self,
        records: Vec<RawRecord>,
        ev: &mut Event,
        reports: &mut Vec<(Origin, SourceWatermark)>,
        now: i64,
    ) -> Result<(), CycleError> {
        for r in records {
            if !self.parts.contains_key(&r.partition) {
                continue; // no longer ours
            }
            let decoded = match r.value.as_deref() {
                Some(v) => wire::decode_into(r.key.as_deref(), v, ev, reports),
                None => Err(wire::HopError::missing_value()),
            };
            let known = |o: &Origin| usize::from(o.topic) < self.k.input_topics.len();
            let part = self.parts.get_mut(&r.partition).expect("checked above");
            part.first_seen.get_or_insert(r.offset);
            part.next_offset = Some(r.offset + 1);
            part.batch_in += 1;
            self.txn.add_records(1);
            let epoch = part.epoch;
            let fatal = |e: crate::windowing::engine::EngineError| CycleError::Fatal(e.to_string());
            match decoded {
                Ok(Decoded::Event(o)) if known(&o) => {
                    self.second_stage_event(r.partition, ev, o, now)?;
                }
                Ok(Decoded::Events { count, max_topic })
                    if count == 0 || usize::from(max_topic) < self.k.input_topics.len() =>
                {
                    let value = r.value.as_deref().expect("decoded from it");
                    let mut reader = wire::PackReader::new(value).map_err(|e| {
                        CycleError::Fatal(format!("a checked pack does not read: {e}"))
                    })?;
                    while let Some(o) = reader.next_into(ev).map_err(|e| {
                        CycleError::Fatal(format!("a checked pack does not read: {e}"))
                    })? {
                        self.second_stage_event(r.partition, ev, o, now)?;
                    }
                    // `records_in` and the batch count events, not packs.
                    let extra = u64::from(count).saturating_sub(1);
                    self.parts
                        .get_mut(&r.partition)
                        .expect("checked above")
                        .batch_in += extra;
                    self.txn.add_records(extra as usize);
                }
                Ok(Decoded::Partials) => {
                    let value = r.value.as_deref().expect("decoded from it");
                    match self.read_partials(value) {
                        Ok(partials) => {
                            let extra = partials
                                .iter()
                                .map(|(p, _)| p.events.len() as u64)
                                .sum::<u64>()
                                .saturating_sub(1);
                            for (p, acc) in partials {
                                self.second_stage_partial(r.partition, p, &acc, now)?;
                            }
                            // `records_in` and the batch count input records, not partials.
                            self.parts
                                .get_mut(&r.partition)
                                .expect("checked above")
                                .batch_in += extra;
                            self.txn.add_records(extra as usize);
                        }
                        Err(e) => self.malformed_repartition_record(&r, e.to_string(), epoch)?,
                    }
                }
                Ok(Decoded::Watermarks) if reports.iter().all(|(o, _)| known(o)) => {
                    self.telemetry.batch().hop_watermarks += 1;
                    for (o, report) in reports.iter() {
                        let source = format!(
                            "{}/{}",
                            self.k.input_topics[usize::from(o.topic)],
                            o.partition
                        );
                        let back = self
                            .parts
                            .get_mut(&r.partition)
                            .expect("checked above")
                            .step
                            .back_mut();
                        back.report(&source, *report, now).map_err(fatal)?;
                        let panes = back.take_panes();
                        // What fired them is the source's last record, or its going idle:
                        // latency counts from the record's append, or from the idle claim.
                        let fired_at = report.idle_at.unwrap_or(o.appended);
                        self.output.panes(
                            &mut self.txn,
                            &mut self.telemetry,
                            panes,
                            epoch,
                            fired_at,
                        )?;
                    }
                }
                decoded => {
                    let detail = match decoded {
                        Err(e) => e.to_string(),
                        Ok(_) => "a record of an unknown source".to_string(),
                    };
                    self.malformed_repartition_record(&r, detail, epoch)?;
                }
            }
        }
        Ok(())
    }

    /// Dead-letters a repartition record that no first stage of this pipeline wrote, with its
    /// bytes.
    fn malformed_repartition_record(
        &mut self,
        r: &RawRecord,
        detail: String,
        epoch: u64,
    ) -> Result<(), CycleError> {
        let letter = DeadLetter {
            reason: Reason::Malformed.as_str().to_string(),
            topic: self.k.repartition_topic.clone(),
            partition: r.partition,
            offset: r.offset,
            watermark: None,
            late_by_ms: None,
            detail,
            epoch,
        };
        self.output.dead_letter(
            &mut self.txn,
            &mut self.telemetry,
            r.key.as_deref(),
            r.value.as_deref(),
            letter,
            Reason::Malformed.as_str(),
        )
    }

    /// The partials of a partial record with their accumulators decoded, all of them or an
    /// error (a record is processed whole or not at all).
    fn read_partials(
        &self,
        value: &[u8],
    ) -> Result<Vec<(wire::PartialRecord, Acc)>, wire::HopError> {
        let aggs = &self.spec.engine.aggregations;
        let topics = self.k.input_topics.len();
        wire::read_partials(value)?
            .into_iter()
            .map(|p| {
                if usize::from(p.origin.topic) >= topics {
                    return Err(wire::HopError::unknown_source());
                }
                let acc = Acc::decode(aggs, &mut p.acc.as_slice(), false)
                    .filter(|a| a.count == p.events.len() as u64)
                    .ok_or_else(wire::HopError::bad_partial)?;
                Ok((p, acc))
            })
            .collect()
    }

    /// Second stage: one partial of repartition partition `p` (see
    /// [`crate::windowing::fold`]). Merged whole; when its windows had expired, each of its
    /// records is dead-lettered as late by its input coordinates, as it would have been alone.
    fn second_stage_partial(
        &mut self,
        p: i32,
        partial: wire::PartialRecord,
        acc: &Acc,
        now: i64,
    ) -> Result<(), CycleError> {
        let part = self.parts.get_mut(&p).expect("checked by the caller");
        let epoch = part.epoch;
        let back = part.step.back_mut();
        let fatal = |e: crate::windowing::engine::EngineError| CycleError::Fatal(e.to_string());
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
            self.telemetry.lateness(b);
        }
        if late.is_some() || panes.iter().any(|p| p.timing == Timing::Late) {
            // The first stage folds only what the second stage's watermark cannot have passed
            // while its input is not idle; an input back from idleness can be behind.
            self.telemetry.batch().late_partials += 1;
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
                self.second_stage_dead_letter(source, &partial.key, &value, rej, epoch)?;
            }
        }
        self.output.panes(
            &mut self.txn,
            &mut self.telemetry,
            panes,
            epoch,
            partial.origin.appended,
        )
    }

    /// Second stage: one event of repartition partition `p`, from input record `o`.
    fn second_stage_event(
        &mut self,
        p: i32,
        ev: &Event,
        o: Origin,
        now: i64,
    ) -> Result<(), CycleError> {
        let part = self.parts.get_mut(&p).expect("checked by the caller");
        let epoch = part.epoch;
        let back = part.step.back_mut();
        let fatal = |e: crate::windowing::engine::EngineError| CycleError::Fatal(e.to_string());
        back.clock(now).map_err(fatal)?;
        let (rejection, behind) = back.process(ev).map_err(fatal)?;
        let panes = back.take_panes();
        if let Some(b) = behind {
            self.telemetry.lateness(b);
        }
        if let Some(rej) = rejection {
            let value = self.event_json(ev);
            self.second_stage_dead_letter(o, &ev.key, &value, rej, epoch)?;
        }
        self.output
            .panes(&mut self.txn, &mut self.telemetry, panes, epoch, o.appended)
    }

    /// Dead-letters input record `o` as the second stage rejected it: with its grouping key and
    /// `value` (what the second stage knows of it), at its input coordinates.
    fn second_stage_dead_letter(
        &mut self,
        o: Origin,
        key: &str,
        value: &str,
        rej: Rejection,
        epoch: u64,
    ) -> Result<(), CycleError> {
        let letter = DeadLetter {
            reason: rej.reason.as_str().to_string(),
            topic: input_topic(&self.k, o.topic).to_string(),
            partition: o.partition,
            offset: o.offset,
            watermark: rej.watermark,
            late_by_ms: rej.late_by_ms,
            detail: rej.detail,
            epoch,
        };
        self.output.dead_letter(
            &mut self.txn,
            &mut self.telemetry,
            Some(key.as_bytes()),
            Some(value.as_bytes()),
            letter,
            rej.reason.as_str(),
        )
    }

    /// A decoded event as JSON, the value of a dead letter of the second stage (the original
    /// bytes stayed in the input topic, at the dead letter's source coordinates).
    fn event_json(&self, ev: &Event) -> String {
        let fields: serde_json::Map<String, serde_json::Value> = self
            .spec
            .input
            .fields
            .iter()
            .zip(&ev.values)
            .map(|(f, v)| (f.value.text.clone(), crate::format::pane::datum_json(v)))
            .collect();
        serde_json::json!({ "key": ev.key, "timestamp": ev.ts, "fields": fields }).to_string()
    }

    /// Commit step 1, the first stage's part: each source's watermark report to every
    /// repartition partition when it changed (or its idle claim needs refreshing), and an offset
    /// marker to the offsets topic for each source the transaction consumed from.
    pub(super) fn produce_source_markers(&mut self) -> Result<(), CycleError> {
        // The packs and partials first: every event of the cycle lies before the watermark
        // records below.
        for r in 0..self.hop_packs.len() {
            self.send_pack(r as i32)?;
        }
        if let Topology::Hop { partitions } = self.topology {
            self.send_partials(partitions)?;
        }
        let now = wall_ms();
        self.refresh_caught_up(now);
        let partitions = match self.topology {
            Topology::Hop { partitions } => Some(partitions),
            _ => None,
        };
        let keys: Vec<(u16, i32)> = self.sources.keys().copied().collect();
        // The reports that changed, written together to every repartition partition below.
        let mut reports = Vec::new();
        for key in keys {
            let (topic_index, p) = key;
            let topic = input_topic(&self.k, topic_index).to_string();
            let caught_up = self
                .catch_up
                .is_caught_up(&topic, p, self.sources[&key].position());
            let refresh = self.idle_refresh();
            let src = self.sources.get_mut(&key).expect("listed");
            if partitions.is_some() {
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
            let src = &self.sources[&key];
            let Some(next) = src.next_offset else {
                continue;
            };
            if src.committed_offset == Some(next) {
                continue;
            }
            let headers = sources::marker_headers(
                next,
                src.epoch,
                &self.fingerprint,
                src.front.watermark(),
                self.offsets_partitions,
            );
            let stamp = next.to_string();
            let key_bytes = sources::marker_key(&topic, p);
            let record = BaseRecord::with_opaque_to(&self.k.offsets_topic, 0usize)
                .partition(sources::offsets_partition(p, self.offsets_partitions))
                .key(key_bytes.as_slice())
                .payload(stamp.as_bytes())
                .headers(headers);
            self.txn.send(record)?;
        }
        // One watermark record per repartition partition holds every report that changed: with
        // S sources and P partitions, P records a cycle instead of S x P (64 x 64: 4,096).
        if let Some(partitions) = partitions {
            for chunk in reports.chunks(wire::MAX_REPORTS) {
                let mut value = Vec::new();
                wire::put_watermarks(&mut value, chunk);
                for r in 0..partitions {
                    self.send_repartition(r, &value)?;
                }
            }
        }
        Ok(())
    }

    /// After a commit, at most every [`PURGE_EVERY`]: deletes the records of the owned repartition
    /// partitions below their committed offsets (DeleteRecords), on a thread of its own so the
    /// loop does not wait. Nothing needs them any more: a restore reads the changelog, not the
    /// repartition topic. A broker that does not support it is logged once; the topic's
    /// retention then bounds it.
    pub(super) fn purge_repartition(&mut self) {
        if !matches!(self.topology, Topology::Hop { .. }) || self.last_purge.elapsed() < PURGE_EVERY
        {
            return;
        }
        self.last_purge = std::time::Instant::now();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (&p, part) in &self.parts {
            if let Some(c) = part.committed_offset.filter(|&c| c > 0) {
                let _ = tpl.add_partition_offset(
                    &self.k.repartition_topic,
                    p,
                    rdkafka::Offset::Offset(c),
                );
            }
        }
        if tpl.count() == 0 {
            return;
        }
        let config = crate::clients::base_config(&self.k);
        std::thread::spawn(move || {
            use rdkafka::admin::{AdminClient, AdminOptions};
            let purged = (|| -> Result<(), String> {
                let admin: AdminClient<rdkafka::client::DefaultClientContext> =
                    config.create().map_err(|e| e.to_string())?;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                let opts =
                    AdminOptions::new().operation_timeout(Some(std::time::Duration::from_secs(10)));
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

    /// How long an idle claim is written again after: half the idle timeout, so the second stage
    /// never sees it run out while the source stays idle.
    fn idle_refresh(&self) -> i64 {
        self.spec
            .engine
            .watermark
            .idle_timeout
            .map_or(i64::MAX, |t| (t / 2).max(1))
    }

    /// Whether a source has something for the next cycle to write: a watermark report that
    /// changed, or an idle claim due for refreshing.
    pub(super) fn sources_pending(&self) -> bool {
        let Topology::Hop { .. } = self.topology else {
            return false;
        };
        let now = wall_ms();
        let refresh = self.idle_refresh();
        self.sources.iter().any(|(&(t, p), src)| {
            let caught_up = self
                .catch_up
                .is_caught_up(input_topic(&self.k, t), p, src.position());
            needs_writing(src.written, src.front.report(now, caught_up), now, refresh)
        })
    }
}

/// How often consumed records of the repartition topic are deleted.
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a purge has failed already (said once per process).
static PURGE_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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
