//! The commit cycle, one helper per numbered step (see the module docs of
//! [`crate::coordinator`]), and the abort that rewinds to the last commit. Only this file makes
//! offsets, output and state durable.

use super::catch_up::CatchUp;
use super::claims::Claims;
use super::errors::{Cause, CycleError, RunError};
use super::first_stage::{self, FirstStage};
use super::output::{Out, Output};
use super::parts::{Part, Source};
use super::second_stage::SecondStage;
use super::settings::{Settings, Topology};
use super::telemetry::Telemetry;
use super::transaction::Transaction;
use crate::changelog::{marker_headers, OFFSET_MARKER_KEY, STAMP_HEADER};
use crate::pipeline::Step;
use crate::state::store::StateStore;
use crate::state::store::StoredOffsets;
use crate::windowing::changes::Changes;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Instant;

/// What the commit cycle and the abort work on: the member's partitions and sources, the open
/// transaction and what writes into it, the claims, and the hop's two stages. The member lends
/// them for one cycle or one abort.
pub(super) struct Cycle<'a> {
    pub(super) s: &'a Settings,
    pub(super) store: &'a StateStore,
    pub(super) txn: &'a mut Transaction,
    pub(super) telemetry: &'a mut Telemetry,
    pub(super) output: &'a Output,
    pub(super) claims: &'a mut Claims,
    pub(super) parts: &'a mut BTreeMap<i32, Part>,
    pub(super) sources: &'a mut BTreeMap<(u16, i32), Source>,
    pub(super) catch_up: &'a mut CatchUp,
    pub(super) first: Option<&'a mut FirstStage>,
    pub(super) second: Option<&'a mut SecondStage>,
}

impl Cycle<'_> {
    /// The commit cycle: the only place where offsets, output and state become durable. On an
    /// error the transaction is left open for the member to abort ([`Cycle::abort`]).
    pub(super) fn run<C: ConsumerContext>(
        mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), CycleError> {
        let started = Instant::now();
        let changes = self.step1_produce_markers_and_changelog()?;
        self.step2_await_deliveries()?;
        self.step3_check_claims()?;
        self.step4_send_offsets(consumer)?;
        self.step5_commit()?;
        self.step6_write_local_state(changes)?;
        self.step7_begin()?;
        self.telemetry
            .report_commit(started, self.parts, self.sources, self.store);
        if let Some(second) = self.second.as_mut() {
            second.purge(self.s, self.parts);
        }
        Ok(())
    }

    /// Step 1: the first stage's watermark reports and offset markers; then every changed state
    /// entry of every partition, and an offset marker per consumed partition, into the changelog.
    fn step1_produce_markers_and_changelog(&mut self) -> Result<Vec<(i32, Changes)>, CycleError> {
        self.catch_up
            .refresh(self.s, self.parts, self.sources, crate::clock::wall_ms());
        let mut out = Out {
            txn: &mut *self.txn,
            telemetry: &mut *self.telemetry,
            output: self.output,
        };
        first_stage::write_at_commit(
            self.first.as_deref_mut(),
            self.s,
            self.sources,
            self.catch_up,
            &mut out,
        )?;
        let mut all = Vec::new();
        let parts: Vec<i32> = self.parts.keys().copied().collect();
        for p in parts {
            let part = self.parts.get_mut(&p).expect("listed");
            // A partition without a processed record has no window state to write (timers exist
            // only for windows that received records); what its watermark sources reported waits
            // in its cache for its first commit.
            let Some(next) = part.next_offset else {
                continue;
            };
            let changes = part.step.engine_mut().take_changes();
            let consumed = part.committed_offset != Some(next);
            // Nothing read and nothing changed since the last commit: nothing to write, here or
            // in RocksDB (an idle partition costs nothing per cycle).
            if !consumed && changes.is_empty() {
                continue;
            }
            let stamp = next.to_string();
            let epoch = part.epoch;
            let topic = self.s.k.changelog_topic.as_str();
            for (key, value) in changes.iter() {
                self.txn
                    .send(changelog_record(topic, p, &stamp, key, value))?;
            }
            // The offset marker: the log's own record that this transaction commits `next`,
            // with the epoch and the fingerprint of the definition that wrote the state.
            if consumed {
                let headers = marker_headers(Some(next), epoch, &self.s.fingerprint);
                let marker = BaseRecord::with_opaque_to(topic, 1 + p as usize)
                    .partition(p)
                    .key(OFFSET_MARKER_KEY)
                    .payload(stamp.as_bytes())
                    .headers(headers);
                self.txn.send(marker)?;
            }
            all.push((p, changes));
        }
        Ok(all)
    }

    /// Step 2: everything produced in the transaction is delivered (or the first failure).
    fn step2_await_deliveries(&mut self) -> Result<(), CycleError> {
        self.txn.await_deliveries()
    }

    /// Step 3: no other member has claimed a partition of this member's since its own claim
    /// (fencing from the log, for brokers that do not check the group generation; see
    /// [`super::claims`]). It runs after step 2, so this transaction's records are in the log
    /// before the claims are read.
    fn step3_check_claims(&mut self) -> Result<(), CycleError> {
        self.claims.check()
    }

    /// Step 4: the group offsets go into the transaction (a hint; the log's offset markers rule):
    /// the input partitions read, and the repartition partitions' positions, of the partitions
    /// that moved since the last commit.
    fn step4_send_offsets<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), CycleError> {
        let mut tpl = TopicPartitionList::new();
        let fatal = |e| CycleError::Fatal(Cause::kafka("listing the offsets to commit", e));
        let parts_topic = self.s.parts_topic();
        for (&p, part) in self.parts.iter() {
            if let Some(next) = part
                .next_offset
                .filter(|n| part.committed_offset != Some(*n))
            {
                tpl.add_partition_offset(parts_topic, p, Offset::Offset(next))
                    .map_err(fatal)?;
            }
        }
        for (&(t, p), src) in self.sources.iter() {
            if let Some(next) = src.next_offset.filter(|n| src.committed_offset != Some(*n)) {
                tpl.add_partition_offset(self.s.input_topic(t), p, Offset::Offset(next))
                    .map_err(fatal)?;
            }
        }
        self.txn.send_offsets(&tpl, consumer)
    }

    /// Step 5: the transaction commits.
    fn step5_commit(&mut self) -> Result<(), CycleError> {
        self.txn.commit()
    }

    /// Step 6: each partition's state batch, with its offsets, into RocksDB; the sources'
    /// positions and reports are committed now.
    fn step6_write_local_state(&mut self, changes: Vec<(i32, Changes)>) -> Result<(), CycleError> {
        let changelog = self.txn.take_changelog_offsets();
        for (p, ch) in changes {
            let part = self.parts.get_mut(&p).expect("listed");
            let offsets = StoredOffsets {
                input: part.next_offset,
                changelog: changelog.get(&p).map(|o| o + 1),
            };
            part.step
                .engine_mut()
                .write_changes(&ch, Some(offsets))
                .map_err(|e| CycleError::Fatal(Cause::part("writing local state", e)))?;
            part.committed_offset = part.next_offset;
            tracing::debug!(partition = p, offset = part.next_offset, "committed");
        }
        for part in self.parts.values_mut() {
            part.committed_fronts = part.step.fronts().to_vec();
        }
        for src in self.sources.values_mut() {
            src.committed_offset = src.next_offset;
            src.committed_front = src.front.clone();
            if let Some(w) = src.pending.take() {
                src.written = Some(w);
            }
        }
        self.txn.settle();
        Ok(())
    }

    /// Step 7: the next transaction begins.
    fn step7_begin(&mut self) -> Result<(), CycleError> {
        self.txn.begin()
    }

    /// Aborts the open transaction and rewinds every partition and source to its committed state
    /// and offset.
    pub(super) fn abort<C: ConsumerContext>(
        mut self,
        consumer: &BaseConsumer<C>,
        why: &str,
    ) -> Result<(), RunError> {
        // Never aborts after fencing or another fatal error: stops instead.
        self.txn.abort(why)?;
        let timeout = self.s.transaction_timeout();
        self.telemetry.aborted();
        if let Some(first) = self.first.as_mut() {
            first.clear();
        }
        let hop = matches!(self.s.topology, Topology::Hop { .. });
        let parts: Vec<i32> = self.parts.keys().copied().collect();
        for p in parts {
            let part = self.parts.get_mut(&p).expect("listed");
            // Reopening drops the uncommitted cache: RocksDB holds exactly the committed state.
            part.step = if hop {
                Step::open_back(&self.s.spec.engine, self.store, p, &self.s.source_names)
            } else {
                Step::reopen(
                    &self.s.spec.engine,
                    self.store,
                    p,
                    part.committed_fronts.clone(),
                )
            }
            .map_err(|e| RunError::Fatal(Cause::part("rewinding", e)))?;
            part.next_offset = part.committed_offset;
            part.batch_in = 0;
            if hop {
                // The repartition topic is read again from the committed offset.
                let from = part.committed_offset.unwrap_or(0);
                if let Some(second) = self.second.as_mut() {
                    second.follow(p, from);
                }
                continue;
            }
            // Nothing committed yet: back to the first record this assignment processed (where
            // the reset position led); nothing processed: the position has not moved.
            let Some(to) = part.committed_offset.or(part.first_seen) else {
                continue;
            };
            tracing::info!(
                partition = p,
                offset = to,
                "rewound to the committed offset"
            );
            consumer
                .seek(&self.s.k.input_topics[0], p, Offset::Offset(to), timeout)
                .map_err(|e| RunError::Fatal(Cause::kafka(format!("seek partition {p}"), e)))?;
        }
        let keys: Vec<(u16, i32)> = self.sources.keys().copied().collect();
        for key in keys {
            let topic = self.s.input_topic(key.0).to_string();
            let src = self.sources.get_mut(&key).expect("listed");
            src.front = src.committed_front.clone();
            src.next_offset = src.committed_offset;
            src.batch_in = 0;
            src.pending = None;
            // What the repartition topic holds from this member is uncertain now: write again.
            src.written = None;
            if let Some(f) = src.folder.as_mut() {
                f.clear();
            }
            let Some(to) = src.committed_offset.or(src.first_seen) else {
                continue;
            };
            tracing::info!(
                topic,
                partition = key.1,
                offset = to,
                "rewound to the committed offset"
            );
            consumer
                .seek(&topic, key.1, Offset::Offset(to), timeout)
                .map_err(|e| RunError::Fatal(Cause::kafka(format!("seek {topic}/{}", key.1), e)))?;
        }
        self.txn.begin_after_abort()
    }
}

/// A changelog record for partition `p`, stamped with the input offset its transaction commits;
/// the opaque `1 + p` lets the delivery callback track the partition's last changelog offset.
fn changelog_record<'a>(
    topic: &'a str,
    p: i32,
    stamp: &'a str,
    key: &'a [u8],
    value: Option<&'a [u8]>,
) -> BaseRecord<'a, [u8], [u8], usize> {
    let headers = OwnedHeaders::new().insert(Header {
        key: STAMP_HEADER,
        value: Some(stamp),
    });
    let record = BaseRecord::with_opaque_to(topic, 1 + p as usize)
        .partition(p)
        .key(key)
        .headers(headers);
    match value {
        Some(v) => record.payload(v),
        None => record,
    }
}
