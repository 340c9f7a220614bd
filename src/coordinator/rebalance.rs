//! Rebalance and restore: the consumer context whose callbacks restore newly assigned partitions
//! from their changelogs (the log is the only truth) and commit or abort before partitions leave.

use super::errors::RunError;
use super::telemetry::PartGauges;
use super::{Core, Part};
use crate::metrics as m;
use crate::pipeline::Step;
use crate::state::changelog::{restore, OpenPolicy, RestoreError, RestoreStats, StartPosition};
use crate::state::store::{Lineage, StateStore};
use crate::windowing::engine::WINDOW_OPERATOR;
use metrics::{counter, gauge, histogram};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

impl Core {
    /// Restores newly assigned partitions from their changelogs, opens them, and returns them with
    /// the offset each must be read from: the offset the changelog's committed transactions say,
    /// or the reset position where nothing has ever committed. The group's committed offset is
    /// read only to warn when it disagrees.
    pub(super) fn assign<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
    ) -> Result<TopicPartitionList, RunError> {
        counter!(m::REBALANCES, "kind" => "assign").increment(1);
        self.health.set_ready(false);
        let hints = self.group_offsets(consumer, tpl);
        let mut start_at = TopicPartitionList::new();
        for el in tpl.elements() {
            let p = el.partition();
            let cf = StateStore::cf_name(WINDOW_OPERATOR, p);
            let started = Instant::now();
            let stats = self.restore_partition(&cf, p)?;
            counter!(m::RESTORE_RECORDS, "partition" => p.to_string())
                .increment(stats.applied as u64);
            histogram!(m::RESTORE_DURATION).record(started.elapsed().as_secs_f64());
            if !stats.waited.is_zero() {
                histogram!(m::RESTORE_OPEN_WAIT).record(stats.waited.as_secs_f64());
            }
            let hint = hints.as_ref().map(|h| h.get(&p).copied().flatten());
            let start = StartPosition::decide(stats.committed, hint);
            tracing::info!(
                partition = p,
                committed = ?stats.committed,
                group_offset = ?hint.flatten(),
                applied = stats.applied,
                skipped = stats.skipped,
                markers = stats.markers,
                changelog_offset = stats.changelog_offset,
                waited_ms = stats.waited.as_millis() as u64,
                resets = stats.resets,
                epoch = stats.lineage.epoch,
                ms = started.elapsed().as_millis() as u64,
                "partition restored from the changelog"
            );
            if let Some(theirs) = &stats.lineage.fingerprint {
                if *theirs != self.fingerprint {
                    return Err(RunError::Incompatible(format!(
                        "partition {p}'s state was written by another pipeline definition \
                         (fingerprint {theirs}, this file's is {}): what shapes the state changed \
                         (window, lateness, trigger, aggregations, key, timestamp or input format). \
                         Run `tidemark replay` with this file to recompute from the input, or use \
                         a new application_id",
                        self.fingerprint
                    )));
                }
            }
            if start.group_disagrees {
                tracing::warn!(
                    partition = p,
                    log = ?stats.committed,
                    group = ?hint.flatten(),
                    "the consumer group's committed offset disagrees with the changelog; the changelog's is used"
                );
                counter!(m::GROUP_OFFSET_MISMATCHES, "partition" => p.to_string()).increment(1);
            }
            let offset = match start.offset {
                Some(o) => Offset::Offset(o),
                None => {
                    tracing::info!(
                        partition = p,
                        reset = ?self.reset,
                        "no transaction has committed work on this partition: starting from the reset position"
                    );
                    self.reset
                }
            };
            start_at
                .add_partition_offset(&self.k.input_topic, p, offset)
                .map_err(|e| RunError::Fatal(e.to_string()))?;
            // From here on this definition writes the partition's state: record that with it, so
            // a later start with another definition is refused even when the changelog's tail
            // has nothing new to say.
            let lineage = Lineage {
                epoch: stats.lineage.epoch,
                fingerprint: Some(self.fingerprint.clone()),
            };
            if stats.lineage != lineage {
                let mut batch = rocksdb::WriteBatch::default();
                self.store
                    .put_lineage(&mut batch, &cf, &lineage)
                    .and_then(|()| self.store.write(batch))
                    .map_err(|e| RunError::Fatal(format!("storing the state's lineage: {e}")))?;
            }
            // The watermark resumes from the one stored with the state, so replayed records are
            // judged as they were the first time.
            let step = Step::open(
                &self.spec.engine,
                &self.store,
                p,
                Some(self.k.max_future_skew),
            )
            .map_err(|e| RunError::Fatal(e.to_string()))?;
            self.parts.insert(
                p,
                Part {
                    committed_tracker: step.tracker().clone(),
                    epoch: stats.lineage.epoch,
                    step,
                    next_offset: start.offset,
                    committed_offset: start.offset,
                    first_seen: None,
                    cf,
                    batch_in: 0,
                    gauges: PartGauges::new(&self.k.input_topic, p),
                },
            );
        }
        gauge!(m::ASSIGNED_PARTITIONS).set(self.parts.len() as f64);
        self.health.set_ready(true);
        Ok(start_at)
    }

    /// Restores one partition, retrying a failed read of the changelog (a leader that moved, a
    /// broker that is busy) with backoff before giving up. A read never falls back to a guess.
    pub(super) fn restore_partition(&self, cf: &str, p: i32) -> Result<RestoreStats, RunError> {
        let policy = OpenPolicy {
            transaction_timeout: Duration::from_millis(self.k.transaction_timeout as u64),
            poll: Duration::from_millis(100),
        };
        let mut attempt = 0u32;
        loop {
            let k = &self.k;
            match restore(
                &self.store,
                cf,
                &k.bootstrap_servers,
                &k.changelog_topic,
                p,
                policy,
            ) {
                Ok(stats) => return Ok(stats),
                Err(RestoreError::Read(e)) if attempt < 6 => {
                    attempt += 1;
                    tracing::warn!(
                        partition = p,
                        attempt,
                        "reading the changelog: {e}; retrying"
                    );
                    std::thread::sleep(Duration::from_millis(100 << attempt));
                }
                Err(e) => return Err(RunError::Fatal(format!("restoring partition {p}: {e}"))),
            }
        }
    }

    /// The group's committed offsets, only to compare with the log's; `None` when they could not
    /// be read (a partition without one maps to `None`).
    pub(super) fn group_offsets<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
    ) -> Option<HashMap<i32, Option<i64>>> {
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(5)) {
            Ok(committed) => Some(
                committed
                    .elements()
                    .iter()
                    .map(|e| match e.offset() {
                        Offset::Offset(o) => (e.partition(), Some(o)),
                        _ => (e.partition(), None),
                    })
                    .collect(),
            ),
            Err(e) => {
                tracing::warn!("reading the group's committed offsets (only a hint): {e}");
                None
            }
        }
    }

    /// Partitions leave this member. A revocation commits the open transaction first. A lost
    /// assignment (session expired, poll interval exceeded) must not commit: another member may
    /// own the partitions already, so the transaction is aborted and the remaining partitions
    /// rewound.
    pub(super) fn revoke<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
        lost: bool,
    ) -> Result<(), RunError> {
        let kind = if lost { "lost" } else { "revoke" };
        counter!(m::REBALANCES, "kind" => kind).increment(1);
        if !lost {
            self.commit(consumer)?;
        }
        for el in tpl.elements() {
            if let Some(part) = self.parts.remove(&el.partition()) {
                if lost {
                    tracing::warn!(
                        partition = el.partition(),
                        "assignment lost: the partition's uncommitted work is dropped"
                    );
                } else {
                    tracing::info!(
                        partition = el.partition(),
                        cf = part.cf,
                        "partition revoked"
                    );
                }
            }
        }
        gauge!(m::ASSIGNED_PARTITIONS).set(self.parts.len() as f64);
        if lost && self.dirty {
            self.abort_and_rewind(consumer, "the assignment was lost")?;
        }
        Ok(())
    }
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

/// The consumer context: rebalance callbacks run the coordinator's assign and revoke.
pub struct RebalanceContext {
    pub(super) core: Arc<Mutex<Core>>,
    pub(super) input_topic: String,
}

impl ClientContext for RebalanceContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        for topic in statistics.topics.values() {
            if topic.topic != self.input_topic {
                continue;
            }
            // Offsets are committed by transactions, not by the consumer, so librdkafka's own
            // `consumer_lag` (against its committed offset) is unknown: the lag is the end a
            // read_committed consumer may read to (the last stable offset) minus the position
            // handed to the application.
            for (p, part) in &topic.partitions {
                let end = if part.ls_offset >= 0 {
                    part.ls_offset
                } else {
                    part.hi_offset
                };
                if *p >= 0 && part.app_offset >= 0 && end >= 0 {
                    gauge!(m::CONSUMER_LAG, "partition" => p.to_string())
                        .set((end - part.app_offset).max(0) as f64);
                }
            }
        }
    }
}

impl ConsumerContext for RebalanceContext {
    /// Replaces librdkafka's default handling so that assigned partitions start at the offsets the
    /// changelog says, never at the group's committed offset.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let mut core = self.core.lock().expect("lock");
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                tracing::info!(partitions = ?partitions_of(tpl), "rebalance: assigning");
                match core.assign(consumer, tpl) {
                    Ok(start_at) if cooperative => consumer.incremental_assign(&start_at),
                    Ok(start_at) => consumer.assign(&start_at),
                    Err(e) => {
                        core.fatal = Some(e);
                        Ok(())
                    }
                }
            }
            _ => {
                // A revocation, a lost assignment, or an error (which librdkafka's default
                // handler answers by dropping the assignment): the partitions leave this member.
                let lost = err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS
                    || consumer.assignment_lost();
                tracing::info!(partitions = ?partitions_of(tpl), lost, error = ?err, "rebalance: revoking");
                if let Err(e) = core.revoke(consumer, tpl, lost) {
                    core.fatal = Some(e);
                }
                if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
        };
        if let Err(e) = result {
            core.fatal = Some(RunError::Fatal(format!("applying the rebalance: {e}")));
        }
    }
}
