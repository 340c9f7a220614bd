//! Rebalance and restore: the consumer context whose callbacks restore newly assigned partitions
//! from the log (the log is the only truth) and commit or abort before partitions leave.
//!
//! An assignment may hold input partitions and, with the repartition hop, partitions of the
//! repartition topic. An input partition of a pipeline partitioned by the key, and a repartition
//! partition, is a windowing partition: its state is restored from its changelog partition,
//! whose offset markers say where it resumes. An input partition of the hop's first stage is a
//! source: the offsets topic's markers say where it resumes. Repartition partitions are assigned
//! to keep the group's ownership, then paused: the second stage reads them as a raw log.

use super::errors::RunError;
use super::parts::PartGauges;
use super::sources;
use super::sources::input_topic;
use super::{Core, Part, Source, Topology};
use crate::clock::wall_ms;
use crate::kafka::assignor::{self, JoinWatch};
use crate::kafka::roster::TopicPartition;
use crate::metrics as m;
use crate::pipeline::{Front, Step};
use crate::state::changelog::{
    restore, OpenPolicy, RestoreError, RestoreStats, SourceMarkers, StartPosition,
};
use crate::state::store::{Lineage, StateStore};
use crate::windowing::engine::WINDOW_OPERATOR;
use crate::windowing::fold::Folder;
use metrics::{counter, gauge, histogram};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What an assignment asks of the consumer: where each partition starts, and which to pause.
pub(super) struct Assigned {
    pub(super) start_at: TopicPartitionList,
    pub(super) pause: TopicPartitionList,
}

impl Core {
    /// How restores treat open transactions.
    fn open_policy(&self) -> OpenPolicy {
        OpenPolicy {
            transaction_timeout: Duration::from_millis(self.k.transaction_timeout as u64),
            poll: Duration::from_millis(100),
        }
    }

    /// Refuses state written by another pipeline definition.
    fn check_fingerprint(&self, what: &str, lineage: &Lineage) -> Result<(), RunError> {
        match &lineage.fingerprint {
            Some(theirs) if *theirs != self.fingerprint => Err(RunError::Incompatible(format!(
                "{what}'s state was written by another pipeline definition \
                 (fingerprint {theirs}, this file's is {}): what shapes the state changed \
                 (window, lateness, trigger, aggregations, key, timestamp, input format, input \
                 topics or repartitioning). Run `tidemark replay` with this file to recompute \
                 from the input, or use a new application_id",
                self.fingerprint
            ))),
            _ => Ok(()),
        }
    }

    /// Restores newly assigned partitions and returns where each must be read from: the offset
    /// the log's committed markers say, or the reset position where nothing has ever committed.
    /// The group's committed offset is read only to warn when it disagrees.
    pub(super) fn assign<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
    ) -> Result<Assigned, RunError> {
        counter!(m::REBALANCES, "kind" => "assign").increment(1);
        self.health.set_ready(false);
        let hints = self.group_offsets(consumer, tpl);
        let mut out = Assigned {
            start_at: TopicPartitionList::new(),
            pause: TopicPartitionList::new(),
        };
        let fatal = |e: rdkafka::error::KafkaError| RunError::Fatal(e.to_string());
        // The claims go into the log before the restores read it (see `super::claims`).
        self.claims
            .claim(&self.txn, &self.k.claims_topic, &partitions_of(tpl))
            .map_err(|e| {
                RunError::Fatal(format!(
                    "claiming the assigned partitions: {}",
                    e.describe()
                ))
            })?;
        let mut restored = self.restore_all(tpl);
        for el in tpl.elements() {
            let (topic, p) = (el.topic().to_string(), el.partition());
            let hint = hints
                .as_ref()
                .map(|h| h.get(&(topic.clone(), p)).copied().flatten());
            let repartition =
                matches!(self.topology, Topology::Hop { .. }) && topic == self.k.repartition_topic;
            let committed = if repartition {
                self.assign_hop_part(p, restored.parts.remove(&p))?;
                out.pause
                    .add_partition(&topic, p)
                    .set_offset(Offset::Beginning)
                    .map_err(fatal)?;
                out.start_at
                    .add_partition_offset(&topic, p, Offset::Beginning)
                    .map_err(fatal)?;
                continue;
            } else if self.topology == Topology::Direct {
                self.assign_direct_part(p, restored.parts.remove(&p))?
            } else {
                let Some(i) = self.k.input_topics.iter().position(|t| *t == topic) else {
                    continue;
                };
                let pre = restored.sources.remove(&(i as u16, p));
                self.assign_source(i as u16, p, pre)?
            };
            let start = StartPosition::decide(committed, hint);
            if start.group_disagrees {
                tracing::warn!(
                    topic,
                    partition = p,
                    log = ?committed,
                    group = ?hint.flatten(),
                    "the consumer group's committed offset disagrees with the log; the log's is used"
                );
                counter!(m::GROUP_OFFSET_MISMATCHES, "partition" => p.to_string()).increment(1);
            }
            let offset = match start.offset {
                Some(o) => Offset::Offset(o),
                None => {
                    tracing::info!(
                        topic,
                        partition = p,
                        reset = ?self.reset,
                        "no transaction has committed work on this partition: starting from the reset position"
                    );
                    self.reset
                }
            };
            out.start_at
                .add_partition_offset(&topic, p, offset)
                .map_err(fatal)?;
        }
        self.set_owned();
        self.health.set_ready(true);
        Ok(out)
    }

    /// Restores windowing partition `p`'s state from its changelog partition, checks and records
    /// its lineage; returns the restore's figures.
    fn restore_part(
        &mut self,
        p: i32,
        pre: Option<Restored<RestoreStats>>,
    ) -> Result<(String, RestoreStats), RunError> {
        let cf = StateStore::cf_name(WINDOW_OPERATOR, p);
        let done = pre.unwrap_or_else(|| timed(|| self.restore_partition(&cf, p)));
        let (stats, took) = (done.result?, done.took);
        counter!(m::RESTORE_RECORDS, "partition" => p.to_string()).increment(stats.applied as u64);
        histogram!(m::RESTORE_DURATION).record(took.as_secs_f64());
        if !stats.waited.is_zero() {
            histogram!(m::RESTORE_OPEN_WAIT).record(stats.waited.as_secs_f64());
        }
        tracing::info!(
            partition = p,
            committed = ?stats.committed,
            applied = stats.applied,
            skipped = stats.skipped,
            markers = stats.markers,
            changelog_offset = stats.changelog_offset,
            waited_ms = stats.waited.as_millis() as u64,
            resets = stats.resets,
            epoch = stats.lineage.epoch,
            ms = took.as_millis() as u64,
            "partition restored from the changelog"
        );
        self.check_fingerprint(&format!("partition {p}"), &stats.lineage)?;
        // From here on this definition writes the partition's state: record that with it, so a
        // later start with another definition is refused even when the changelog's tail has
        // nothing new to say.
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
        Ok((cf, stats))
    }

    /// An input partition of a pipeline partitioned by the key; returns its committed offset.
    fn assign_direct_part(
        &mut self,
        p: i32,
        pre: Option<Restored<RestoreStats>>,
    ) -> Result<Option<i64>, RunError> {
        let (cf, stats) = self.restore_part(p, pre)?;
        let topic = self.k.input_topics[0].clone();
        // The watermark resumes from the one stored with the state, so replayed records are
        // judged as they were the first time.
        let step = Step::open(
            &self.spec.engine,
            &self.store,
            p,
            &[format!("{topic}/{p}")],
            Some(self.k.max_future_skew),
            wall_ms(),
        )
        .map_err(|e| RunError::Fatal(e.to_string()))?;
        self.parts.insert(
            p,
            Part {
                committed_fronts: step.fronts().to_vec(),
                epoch: stats.lineage.epoch,
                step,
                next_offset: stats.committed,
                committed_offset: stats.committed,
                first_seen: None,
                cf,
                batch_in: 0,
                gauges: PartGauges::new(&topic, p),
            },
        );
        Ok(stats.committed)
    }

    /// A repartition partition (the hop's second stage): restored from its changelog partition,
    /// then read from the repartition offset it committed.
    fn assign_hop_part(
        &mut self,
        p: i32,
        pre: Option<Restored<RestoreStats>>,
    ) -> Result<(), RunError> {
        let (cf, stats) = self.restore_part(p, pre)?;
        let step = Step::open_back(&self.spec.engine, &self.store, p, &self.source_names)
            .map_err(|e| RunError::Fatal(e.to_string()))?;
        if let Some(t) = self.hop_reader.as_mut() {
            t.follow(p, stats.committed.unwrap_or(0));
        }
        let topic = self.k.repartition_topic.clone();
        self.parts.insert(
            p,
            Part {
                committed_fronts: Vec::new(),
                epoch: stats.lineage.epoch,
                step,
                next_offset: stats.committed,
                committed_offset: stats.committed,
                first_seen: None,
                cf,
                batch_in: 0,
                gauges: PartGauges::new(&topic, p),
            },
        );
        Ok(())
    }

    /// An input partition of the hop's first stage (or of `--passthrough`); returns its committed
    /// offset, from the offsets topic.
    fn assign_source(
        &mut self,
        topic_index: u16,
        p: i32,
        pre: Option<Restored<SourceMarkers>>,
    ) -> Result<Option<i64>, RunError> {
        let topic = input_topic(&self.k, topic_index).to_string();
        let done = pre.unwrap_or_else(|| timed(|| self.restore_source(&topic, p)));
        let (state, took) = (done.result?, done.took);
        tracing::info!(
            topic,
            partition = p,
            committed = ?state.committed,
            markers = state.markers,
            epoch = state.lineage.epoch,
            watermark = state.watermark,
            ms = took.as_millis() as u64,
            "input partition restored from the offsets topic"
        );
        self.check_fingerprint(&format!("input partition {topic}/{p}"), &state.lineage)?;
        let front = Front::resume(
            self.spec.engine.watermark,
            state.watermark,
            Some(self.k.max_future_skew),
            wall_ms(),
        );
        let records_in =
            counter!(m::RECORDS_IN, "topic" => topic.clone(), "partition" => p.to_string());
        self.sources.insert(
            (topic_index, p),
            Source {
                committed_front: front.clone(),
                front,
                epoch: state.lineage.epoch,
                next_offset: state.committed,
                committed_offset: state.committed,
                first_seen: None,
                batch_in: 0,
                written: None,
                last_appended: wall_ms(),
                pending: None,
                records_in,
                folder: self
                    .k
                    .combine
                    .then(|| Folder::new(&self.spec.engine))
                    .flatten(),
            },
        );
        Ok(state.committed)
    }

    /// Restores one partition, retrying a failed read of the changelog (a leader that moved, a
    /// broker that is busy) with backoff before giving up. A read never falls back to a guess.
    pub(super) fn restore_partition(&self, cf: &str, p: i32) -> Result<RestoreStats, RunError> {
        restore_with_retry(&self.store, &self.k, self.open_policy(), cf, p)
    }

    /// Reads input partition `topic`/`p`'s markers from the offsets topic.
    fn restore_source(&self, topic: &str, p: i32) -> Result<SourceMarkers, RunError> {
        sources::restore(
            &self.k.bootstrap_servers,
            &self.k.offsets_topic,
            self.offsets_partitions,
            topic,
            p,
            self.open_policy(),
        )
    }

    /// Restores every windowing partition and reads every source's markers of an assignment,
    /// [`PARALLEL_RESTORES`] at a time. Each read ends with a fetch that finds nothing new, which
    /// a broker may hold for its whole wait, 50 ms
    /// ([`crate::kafka::quirks::FETCH_HELD_PAST_DATA`]): one after another, 256 partitions
    /// took 27 s of waiting before the first commit. The results are applied (and
    /// logged) in the assignment's order, as before.
    fn restore_all(&self, tpl: &TopicPartitionList) -> Prefetched {
        let mut windowing = Vec::new();
        let mut sources = Vec::new();
        for el in tpl.elements() {
            let (topic, p) = (el.topic(), el.partition());
            match self.topology {
                Topology::Hop { .. } if topic == self.k.repartition_topic => windowing.push(p),
                Topology::Direct => windowing.push(p),
                _ => {
                    if let Some(i) = self.k.input_topics.iter().position(|t| t == topic) {
                        sources.push((i as u16, p, topic.to_string()));
                    }
                }
            }
        }
        let (store, k, policy) = (&self.store, &self.k, self.open_policy());
        let offsets_partitions = self.offsets_partitions;
        let parts = in_parallel(&windowing, |&p| {
            timed(|| {
                let cf = StateStore::cf_name(WINDOW_OPERATOR, p);
                restore_with_retry(store, k, policy, &cf, p)
            })
        });
        let markers = in_parallel(&sources, |(_, p, topic)| {
            timed(|| {
                sources::restore(
                    &k.bootstrap_servers,
                    &k.offsets_topic,
                    offsets_partitions,
                    topic,
                    *p,
                    policy,
                )
            })
        });
        Prefetched {
            parts: windowing.into_iter().zip(parts).collect(),
            sources: sources
                .into_iter()
                .map(|(i, p, _)| (i, p))
                .zip(markers)
                .collect(),
        }
    }

    /// The group's committed offsets, only to compare with the log's; `None` when they could not
    /// be read (a partition without one maps to `None`).
    pub(super) fn group_offsets<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
    ) -> Option<HashMap<(String, i32), Option<i64>>> {
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(5)) {
            Ok(committed) => Some(
                committed
                    .elements()
                    .iter()
                    .map(|e| {
                        let key = (e.topic().to_string(), e.partition());
                        match e.offset() {
                            Offset::Offset(o) => (key, Some(o)),
                            _ => (key, None),
                        }
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
            let (topic, p) = (el.topic(), el.partition());
            if !self.drop_partition(topic, p) {
                continue;
            }
            if lost {
                tracing::warn!(
                    topic,
                    partition = p,
                    "assignment lost: the partition's uncommitted work is dropped"
                );
            } else {
                tracing::info!(topic, partition = p, "partition revoked");
            }
        }
        self.set_owned();
        if lost && self.txn.is_dirty() {
            self.abort_and_rewind(consumer, "the assignment was lost")?;
        }
        Ok(())
    }

    /// Drops partition `p` of `topic` from this member (its engine or its source, the
    /// repartition reader's interest and its claim); says whether the member held it.
    pub(super) fn drop_partition(&mut self, topic: &str, p: i32) -> bool {
        self.claims.release(&(topic.to_string(), p));
        let windowing = match self.topology {
            Topology::Direct => true,
            Topology::Hop { .. } => topic == self.k.repartition_topic,
            Topology::Passthrough => false,
        };
        if windowing {
            if let Some(t) = self.hop_reader.as_mut() {
                t.unfollow(p);
            }
            self.parts.remove(&p).is_some()
        } else {
            let i = self.k.input_topics.iter().position(|t| t == topic);
            i.and_then(|i| self.sources.remove(&(i as u16, p)))
                .is_some()
        }
    }
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

/// The consumer context: rebalance callbacks run the coordinator's assign and revoke; statistics
/// reports feed the lag gauges and the scaling signal.
pub struct RebalanceContext {
    pub(super) core: Arc<Mutex<Core>>,
    pub(super) input_topics: Vec<String>,
    pub(super) scaling: Mutex<super::scaling::ScalingModel>,
    /// Nanoseconds the loop has waited for records in all ([`super::scaling::Idle`]).
    pub(super) idle: Arc<super::scaling::Idle>,
    /// With the cooperative protocol: the watch on rebalances that wait on the broker, fed by
    /// the statistics reports, and when the context was made (the watch's clock).
    join_watch: Option<(Mutex<JoinWatch>, Instant)>,
    /// Set once a rebalance waited on the broker past the watch's bound.
    pub(super) stalled: AtomicBool,
    /// How long a rebalance may wait on the broker: the rebalance timeout plus a session.
    pub(super) stall_bound: Duration,
    /// Assignments this consumer was given (assignment callbacks).
    pub(super) assignments: AtomicU64,
}

impl RebalanceContext {
    /// The context of `k`'s consumer with client `settings`, over a pipeline with
    /// `input_partitions` input partitions.
    pub(super) fn new(
        core: Arc<Mutex<Core>>,
        k: &crate::config::KafkaSpec,
        input_partitions: usize,
        settings: &rdkafka::ClientConfig,
    ) -> Result<Self, RunError> {
        let strategy = settings
            .get("partition.assignment.strategy")
            .unwrap_or(assignor::DEFAULT_STRATEGY);
        let protocol = assignor::protocol_of(strategy)
            .map_err(|e| RunError::Startup(format!("partition.assignment.strategy: {e}")))?;
        let ms = |key: &str, default: u64| {
            settings
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(default)
        };
        let stall_bound = assignor::stall_bound(
            ms("max.poll.interval.ms", 300_000),
            ms("session.timeout.ms", 45_000),
        );
        let join_watch = (protocol == assignor::Protocol::Cooperative)
            .then(|| (Mutex::new(JoinWatch::new(stall_bound)), Instant::now()));
        Ok(RebalanceContext {
            core,
            input_topics: k.input_topics.clone(),
            scaling: Mutex::new(super::scaling::ScalingModel::new(
                k.target_backlog as f64 / 1000.0,
                input_partitions,
            )),
            idle: Arc::default(),
            join_watch,
            stalled: AtomicBool::new(false),
            stall_bound,
            assignments: AtomicU64::new(0),
        })
    }
}

impl ClientContext for RebalanceContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        if let (Some((watch, born)), Some(group)) = (&self.join_watch, &statistics.cgrp) {
            let stalled = watch
                .lock()
                .expect("lock")
                .observe(born.elapsed(), &group.join_state);
            if stalled && !self.stalled.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    join_state = group.join_state,
                    "a rebalance has waited on the broker for longer than the rebalance timeout \
                     plus a session timeout"
                );
            }
        }
        let mut samples = Vec::new();
        for topic in statistics.topics.values() {
            if !self.input_topics.contains(&topic.topic) {
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
                    gauge!(m::CONSUMER_LAG, "topic" => topic.topic.clone(), "partition" => p.to_string())
                        .set((end - part.app_offset).max(0) as f64);
                    samples.push(super::scaling::PartitionSample {
                        topic: topic.topic.clone(),
                        partition: *p,
                        end,
                        position: part.app_offset,
                    });
                }
            }
        }
        let (now, idle) = self.idle.seconds();
        let signal = self
            .scaling
            .lock()
            .expect("lock")
            .observe(now, idle, &samples);
        for (topic, p, seconds) in signal.backlog {
            gauge!(m::BACKLOG, "topic" => topic, "partition" => p.to_string()).set(seconds);
        }
        for (topic, p) in signal.gone {
            gauge!(m::BACKLOG, "topic" => topic, "partition" => p.to_string()).set(0.0);
        }
        if let Some(n) = signal.recommended_members {
            gauge!(m::RECOMMENDED_MEMBERS).set(n as f64);
        }
    }
}

impl ConsumerContext for RebalanceContext {
    /// Replaces librdkafka's default handling so that assigned partitions start at the offsets the
    /// log says, never at the group's committed offset.
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
                self.assignments.fetch_add(1, Ordering::Relaxed);
                tracing::info!(partitions = ?partitions_of(tpl), "rebalance: assigning");
                match core.assign(consumer, tpl) {
                    Ok(a) => {
                        let assigned = if cooperative {
                            consumer.incremental_assign(&a.start_at)
                        } else {
                            consumer.assign(&a.start_at)
                        };
                        // The second stage reads repartition partitions as a raw log; the
                        // consumer only keeps them.
                        assigned.and_then(|()| {
                            if a.pause.count() > 0 {
                                consumer.pause(&a.pause)
                            } else {
                                Ok(())
                            }
                        })
                    }
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

impl Core {
    /// Publishes the partitions this member holds (the gauge counts them; the group watchdog
    /// reads them).
    pub(super) fn set_owned(&self) {
        let parts_topic = self.parts_topic();
        let held: std::collections::BTreeSet<(String, i32)> = self
            .parts
            .keys()
            .map(|&p| (parts_topic.to_string(), p))
            .chain(
                self.sources
                    .keys()
                    .map(|&(t, p)| (input_topic(&self.k, t).to_string(), p)),
            )
            .collect();
        gauge!(m::ASSIGNED_PARTITIONS).set(held.len() as f64);
        *self.owned_here.lock().expect("lock") = held;
    }

    /// The topic whose partitions are the windowing partitions (`parts`): the repartition topic
    /// behind the hop, else the input topic.
    pub(super) fn parts_topic(&self) -> &str {
        match self.topology {
            Topology::Hop { .. } => &self.k.repartition_topic,
            _ => &self.k.input_topics[0],
        }
    }

    /// Follows the assignment `want` (from [`Roster::tick`]): commits and drops the partitions
    /// this member holds that are no longer its own, then claims, restores and takes the new
    /// ones. The consumer's manual assignment follows.
    pub(super) fn follow<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        want: &BTreeSet<TopicPartition>,
    ) -> Result<(), RunError> {
        let held = self.owned_here.lock().expect("lock").clone();
        // The consumer may still be assigned partitions the core gave up (claimed by another
        // member): they leave the consumer too.
        let assigned: BTreeSet<TopicPartition> = consumer
            .assignment()
            .map(|tpl| {
                tpl.elements()
                    .iter()
                    .map(|e| (e.topic().to_string(), e.partition()))
                    .collect()
            })
            .unwrap_or_default();
        let tpl = |parts: &mut dyn Iterator<Item = &TopicPartition>| {
            let mut tpl = TopicPartitionList::new();
            for (t, p) in parts {
                tpl.add_partition(t, *p);
            }
            tpl
        };
        let give: Vec<&TopicPartition> = held.iter().filter(|p| !want.contains(*p)).collect();
        if !give.is_empty() {
            let list = tpl(&mut give.iter().copied());
            tracing::info!(partitions = ?give, "membership from the log: giving up");
            self.revoke(consumer, &list, false)?;
        }
        let keep: BTreeSet<&TopicPartition> = held.intersection(want).collect();
        let stale: Vec<&TopicPartition> = assigned.iter().filter(|p| !keep.contains(p)).collect();
        if !stale.is_empty() {
            consumer
                .incremental_unassign(&tpl(&mut stale.iter().copied()))
                .map_err(|e| RunError::Fatal(format!("unassigning: {e}")))?;
        }
        let take: Vec<&TopicPartition> = want.iter().filter(|p| !held.contains(*p)).collect();
        if take.is_empty() {
            return Ok(());
        }
        let list = tpl(&mut take.iter().copied());
        tracing::info!(partitions = ?take, "membership from the log: taking");
        let a = self.assign(consumer, &list)?;
        consumer
            .incremental_assign(&a.start_at)
            .and_then(|()| {
                if a.pause.count() > 0 {
                    consumer.pause(&a.pause)
                } else {
                    Ok(())
                }
            })
            .map_err(|e| RunError::Fatal(format!("assigning: {e}")))
    }
}

/// Why a member leaves its group and joins it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// The group watchdog saw partitions without an owner for longer than `bound_ms`.
    Wedged {
        /// The watchdog's bound, in ms.
        bound_ms: i64,
    },
    /// Another member claimed partitions this member held (see [`super::claims`]).
    Superseded,
}

/// How [`rejoin`] left the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rejoin {
    /// Subscribed again with the same consumer: the next poll joins as a new member.
    Subscribed,
    /// A static member left and removed its registration (where the broker supports it); the
    /// caller joins again with a new consumer as a dynamic member. A broker that keeps a static
    /// member's registration ([`crate::kafka::quirks::LEAVE_BY_INSTANCE_ID_IGNORED`],
    /// [`crate::kafka::quirks::STATIC_PHANTOM_LEADER`]) cannot hand the new membership the old
    /// one's place.
    AsDynamicMember,
}

/// Leaves the group and joins it again (`why`: the group watchdog found partitions without an
/// owner for longer than its bound, or another member claimed partitions of this member's): logs
/// it, counts a wedge as such, turns `/readyz` false and commits the open transaction first
/// (the revocation that leaving brings commits nothing more). A dynamic member subscribes again
/// at once; a static one gives up its static membership for the rest of the process's life (see
/// [`Rejoin::AsDynamicMember`]). The core must not be locked by the caller: leaving runs the
/// rebalance callback.
pub(super) fn rejoin<C: ConsumerContext>(
    core: &Mutex<Core>,
    consumer: &BaseConsumer<C>,
    topics: &[&str],
    why: Why,
) -> Result<Rejoin, RunError> {
    // What the static registration's removal needs is taken while the core is locked anyway.
    let k = {
        let mut c = core.lock().expect("lock");
        match why {
            Why::Wedged { bound_ms } => {
                tracing::error!(
                    bound_ms,
                    static_membership = c.k.static_membership,
                    "the consumer group has left partitions without an owner for longer than the \
                     bound: leaving and joining it again as a new member"
                );
                counter!(m::GROUP_WEDGES).increment(1);
            }
            Why::Superseded => tracing::warn!(
                static_membership = c.k.static_membership,
                "leaving the group and joining it again as a new member, since its view of this \
                 member's assignment is stale"
            ),
        }
        c.health.set_ready(false);
        c.txn.touch();
        c.commit(consumer)?;
        c.k.clone()
    };
    consumer.unsubscribe();
    if !k.static_membership {
        consumer
            .subscribe(topics)
            .map_err(|e| RunError::Fatal(format!("subscribing again: {e}")))?;
        return Ok(Rejoin::Subscribed);
    }
    // A static member does not leave when it unsubscribes: remove its registration.
    if let Err(e) = crate::kafka::group::remove_static_members(
        &k.bootstrap_servers,
        &k.application_id,
        &[k.instance_id.as_str()],
    ) {
        tracing::warn!("removing this member's static registration before rejoining: {e}");
    }
    tracing::warn!(
        "rejoining as a dynamic member: static membership is given up until this member restarts"
    );
    Ok(Rejoin::AsDynamicMember)
}

/// How many partitions of one assignment are restored at a time.
const PARALLEL_RESTORES: usize = 8;

/// A restore done ahead of its partition's turn, and how long it took.
pub(super) struct Restored<T> {
    result: Result<T, RunError>,
    took: Duration,
}

/// The restores of one assignment, done ahead.
struct Prefetched {
    parts: HashMap<i32, Restored<RestoreStats>>,
    sources: HashMap<(u16, i32), Restored<SourceMarkers>>,
}

/// Runs a restore and times it.
fn timed<T>(f: impl FnOnce() -> Result<T, RunError>) -> Restored<T> {
    let started = Instant::now();
    let result = f();
    Restored {
        result,
        took: started.elapsed(),
    }
}

/// Runs `f` on every item, at most [`PARALLEL_RESTORES`] at a time, and returns the results in
/// the items' order.
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new(items.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL_RESTORES.min(items.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else {
                    break;
                };
                let r = f(item);
                results.lock().expect("lock")[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("lock")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

/// Restores partition `p` into column family `cf`, retrying a failed read of the changelog (a
/// leader that moved, a broker that is busy) with backoff before giving up. A read never falls
/// back to a guess.
fn restore_with_retry(
    store: &StateStore,
    k: &crate::config::KafkaSpec,
    policy: OpenPolicy,
    cf: &str,
    p: i32,
) -> Result<RestoreStats, RunError> {
    let mut attempt = 0u32;
    loop {
        match restore(
            store,
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
