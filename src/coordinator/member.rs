//! The member: [`Core`], the parts a member of the group is made of, and the operations the loop,
//! the rebalance callbacks and the membership drive. Each operation lends the parts it needs to
//! the room that does the work (`process`, `first_stage`, `second_stage`, `cycle`, `restore`)
//! and handles the outcome; no other file reaches into `Core`'s fields.

use super::catch_up::CatchUp;
use super::claims::Claims;
use super::cycle::Cycle;
use super::errors::{Cause, CycleError, RunError};
use super::first_stage::{self, FirstStage};
use super::output::{Out, Output};
use super::parts::{Part, Source};
use super::process;
use super::restore::{self, Assigned, Restorer};
use super::second_stage::SecondStage;
use super::settings::{Settings, Topology};
use super::telemetry::Telemetry;
use super::transaction::Transaction;
use super::watchdog;
use crate::changelog::StartPosition;
use crate::clock::wall_ms;
use crate::config::KafkaSpec;
use crate::input::decode::Decoder;
use crate::kafka::roster::TopicPartition;
use crate::metrics::{self as m, Health};
use crate::state::store::StateStore;
use metrics::{counter, gauge};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// The member's output side ([`Out`]: the open transaction, telemetry and output settings),
/// borrowed field by field so the member's other parts stay free to borrow.
macro_rules! out {
    ($member:expr) => {
        Out {
            txn: &mut $member.txn,
            telemetry: &mut $member.telemetry,
            output: &$member.output,
        }
    };
}

/// A member of the pipeline's group: what it runs with, its partitions and sources, the open
/// transaction, and the parts that write, report and fence.
pub struct Core {
    s: Settings,
    store: StateStore,
    /// The open transaction and its producer.
    txn: Transaction,
    decoder: Decoder,
    /// Where panes and dead letters go (JSON or Avro).
    output: Output,
    /// The windowing partitions, by partition number.
    parts: BTreeMap<i32, Part>,
    /// The hop's first stage (and passthrough): input partitions by (topic index, partition).
    sources: BTreeMap<(u16, i32), Source>,
    /// The hop's first stage's packs (behind the hop only).
    first: Option<FirstStage>,
    /// The hop's second stage: the repartition topic's raw log, followed (behind the hop only).
    second: Option<SecondStage>,
    /// Whether input partitions are read to their end: a source is idle only when caught up.
    catch_up: CatchUp,
    /// The error that must stop the loop, set by a rebalance callback.
    fatal: Option<RunError>,
    health: Arc<Health>,
    /// Metrics, and what this member did, for its last log line.
    telemetry: Telemetry,
    /// The partitions this member holds, for the group watchdog.
    owned_here: watchdog::Held,
    /// This member's claims of its partitions, for fencing from the log.
    claims: Claims,
}

/// Everything a member is made of, built at startup.
pub(super) struct Parts {
    pub(super) s: Settings,
    pub(super) store: StateStore,
    pub(super) txn: Transaction,
    pub(super) decoder: Decoder,
    pub(super) output: Output,
    pub(super) second: Option<SecondStage>,
    pub(super) health: Arc<Health>,
    pub(super) owned_here: watchdog::Held,
    pub(super) claims: Claims,
}

impl Core {
    /// A member holding no partition yet.
    pub(super) fn new(p: Parts) -> Core {
        let first = match p.s.topology {
            Topology::Hop { partitions } => Some(FirstStage::new(partitions)),
            _ => None,
        };
        Core {
            catch_up: CatchUp::new(&p.s.k.brokers),
            s: p.s,
            store: p.store,
            txn: p.txn,
            decoder: p.decoder,
            output: p.output,
            parts: BTreeMap::new(),
            sources: BTreeMap::new(),
            first,
            second: p.second,
            fatal: None,
            health: p.health,
            telemetry: Telemetry::new(),
            owned_here: p.owned_here,
            claims: p.claims,
        }
    }

    /// The pipeline's `[kafka]` settings.
    pub(super) fn k(&self) -> &KafkaSpec {
        &self.s.k
    }

    /// The member's claims.
    pub(super) fn claims(&mut self) -> &mut Claims {
        &mut self.claims
    }

    /// Turns `/readyz` on or off.
    pub(super) fn set_ready(&self, ready: bool) {
        self.health.set_ready(ready);
    }

    /// Keeps `e` for the loop, which stops with it (a rebalance callback cannot return it).
    pub(super) fn fail(&mut self, e: RunError) {
        self.fatal = Some(e);
    }

    /// The error the loop must stop with, if a callback kept one.
    pub(super) fn take_fatal(&mut self) -> Option<RunError> {
        self.fatal.take()
    }

    /// Transactions committed and aborted, panes and dead letters produced, since the start.
    pub(super) fn outcomes(&self) -> (u64, u64, u64, u64) {
        let (committed, aborted) = self.txn.outcomes();
        let (panes, dead_letters) = self.telemetry.produced();
        (committed, aborted, panes, dead_letters)
    }

    /// Lends the parts to one commit cycle or one abort.
    fn cycle(&mut self) -> Cycle<'_> {
        Cycle {
            s: &self.s,
            store: &self.store,
            txn: &mut self.txn,
            telemetry: &mut self.telemetry,
            output: &self.output,
            claims: &mut self.claims,
            parts: &mut self.parts,
            sources: &mut self.sources,
            catch_up: &mut self.catch_up,
            first: self.first.as_mut(),
            second: self.second.as_mut(),
        }
    }

    /// Processes one record the consumer handed over.
    pub(super) fn on_message(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), CycleError> {
        if self.s.topology == Topology::Direct {
            let Some(part) = self.parts.get_mut(&msg.partition()) else {
                return Ok(()); // not (or no longer) ours
            };
            let mut out = out!(self);
            return process::keyed_record(part, &mut self.decoder, &mut out, msg);
        }
        // The repartition topic's partitions stay paused: only input records come here.
        let Some(topic) = self.s.input_index(msg.topic()) else {
            return Ok(());
        };
        let Some(src) = self.sources.get_mut(&(topic, msg.partition())) else {
            return Ok(()); // not (or no longer) ours
        };
        let offset = msg.offset();
        src.first_seen.get_or_insert(offset);
        src.next_offset = Some(offset + 1);
        src.batch_in += 1;
        let mut out = out!(self);
        out.txn.add_records(1);
        match self.first.as_mut() {
            Some(first) => first.record(&self.s, src, &mut self.decoder, &mut out, msg, topic),
            None if self.s.topology == Topology::Rows => {
                process::row_record(&self.s, src, &mut self.decoder, &mut out, msg)
            }
            // --passthrough: a copy of the record, through the same cycle.
            None => {
                let appended = msg.timestamp().to_millis().unwrap_or_else(wall_ms);
                out.copy(msg.key(), msg.payload(), appended)
            }
        }
    }

    /// Lets processing time move idle watermarks and early firings when no record arrives.
    pub(super) fn on_tick(&mut self) -> Result<(), CycleError> {
        let mut out = out!(self);
        process::tick(
            &self.s,
            &mut self.parts,
            &mut self.sources,
            &mut self.catch_up,
            &self.store,
            &mut out,
        )?;
        // A source whose report changed (it went idle, say) has something to commit.
        if !self.txn.is_dirty()
            && first_stage::reports_pending(&self.s, &self.sources, &self.catch_up)
        {
            self.txn.touch();
        }
        Ok(())
    }

    /// Whether the second stage reads the repartition topic (it follows a partition).
    pub(super) fn is_reading_repartition(&self) -> bool {
        self.second.as_ref().is_some_and(|r| !r.is_idle())
    }

    /// Whether the second stage's last read left records behind.
    pub(super) fn repartition_behind(&self) -> bool {
        self.second.as_ref().is_some_and(SecondStage::is_behind)
    }

    /// Second stage: reads what committed on the owned repartition partitions since the last
    /// read and processes it. Returns how many records were fetched.
    pub(super) fn read_repartition(&mut self) -> Result<usize, CycleError> {
        let Some(second) = self.second.as_mut() else {
            return Ok(0);
        };
        let mut out = out!(self);
        second.read(&self.s, &mut self.parts, &mut out)
    }

    /// Whether the open transaction should commit now: it holds work, and the batch is full or
    /// (when `look_at_clock`) the commit interval has passed.
    fn due(&self, look_at_clock: bool) -> bool {
        self.txn.due(
            self.s.k.max_batch_records,
            Duration::from_millis(self.s.k.commit_interval as u64),
            look_at_clock,
        )
    }

    /// After a step of the loop: commits when due, aborts and rewinds after an abortable error,
    /// and says when the loop must stop. The commit interval is looked at only when
    /// `look_at_clock` (the loop reads the clock every few records, not after each one).
    pub(super) fn settle<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        step: Result<(), CycleError>,
        look_at_clock: bool,
    ) -> Result<(), RunError> {
        match step {
            Ok(()) if self.due(look_at_clock) => self.commit(consumer),
            Ok(()) => Ok(()),
            Err(CycleError::Fatal(m)) => Err(RunError::Fatal(m)),
            Err(CycleError::Abortable(m)) => self.abort_and_rewind(consumer, &m.to_string()),
            Err(CycleError::Superseded(lost)) => self.give_up(consumer, lost),
        }
    }

    /// Runs the commit cycle and handles its failure as the coordinator's docs say.
    pub(super) fn commit<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), RunError> {
        match self.cycle().run(consumer) {
            Ok(()) => Ok(()),
            Err(CycleError::Fatal(m)) => Err(RunError::Fatal(m)),
            Err(CycleError::Abortable(m)) => {
                self.abort_and_rewind(consumer, &m.to_string())?;
                self.txn.back_off();
                Ok(())
            }
            Err(CycleError::Superseded(lost)) => self.give_up(consumer, lost),
        }
    }

    /// Commits the open transaction now, whether or not it holds anything (a clean stop, a
    /// rejoin, a decision of the group's).
    pub(super) fn commit_now<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), RunError> {
        self.txn.touch();
        self.commit(consumer)
    }

    /// Aborts the open transaction and rewinds every partition and source to its committed
    /// state and offset.
    pub(super) fn abort_and_rewind<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        why: &str,
    ) -> Result<(), RunError> {
        self.cycle().abort(consumer, why)
    }

    /// After [`CycleError::Superseded`]: aborts the transaction, drops the partitions another
    /// member claimed (records the consumer still hands over for them are ignored) and asks the
    /// loop to leave the group and join it again, since the consumer's own view of its
    /// assignment is stale.
    fn give_up<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        lost: Vec<TopicPartition>,
    ) -> Result<(), RunError> {
        tracing::error!(
            partitions = ?lost,
            "another member has claimed partitions this member holds: the group moved them \
             without telling this member. Aborting the transaction, dropping them and joining \
             the group again"
        );
        counter!(m::PARTITIONS_SUPERSEDED).increment(lost.len() as u64);
        self.abort_and_rewind(consumer, "partitions claimed by another member")?;
        for part in &lost {
            self.drop_partition(&part.0, part.1);
        }
        self.set_owned();
        self.claims.note_superseded();
        Ok(())
    }

    /// Moves the group to the eager rebalance protocol (a record in the claims topic, in the
    /// open transaction, delivered before this returns).
    pub(super) fn announce_eager(&mut self) -> Result<(), CycleError> {
        self.claims
            .announce_eager(&self.txn, &self.s.k.claims_topic)
    }

    /// Moves the group to membership from the log, as [`Core::announce_eager`] moves it to the
    /// eager protocol.
    pub(super) fn announce_log_membership(&mut self) -> Result<(), CycleError> {
        self.claims
            .announce_log_membership(&self.txn, &self.s.k.claims_topic)
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
        let hints = restore::group_offsets(consumer, tpl);
        let mut out = Assigned {
            start_at: TopicPartitionList::new(),
            pause: TopicPartitionList::new(),
        };
        let fatal = |e| RunError::Fatal(Cause::kafka("assigning", e));
        // The claims go into the log before the restores read it (see `super::claims`).
        self.claims
            .claim(
                &self.txn,
                &self.s.k.claims_topic,
                &restore::partitions_of(tpl),
            )
            .map_err(|e| {
                RunError::Fatal(Cause::found(format!(
                    "claiming the assigned partitions: {}",
                    e.describe()
                )))
            })?;
        let restorer = Restorer {
            s: &self.s,
            store: &self.store,
        };
        let mut restored = restorer.all(tpl);
        for el in tpl.elements() {
            let (topic, p) = (el.topic().to_string(), el.partition());
            let hint = hints
                .as_ref()
                .map(|h| h.get(&(topic.clone(), p)).copied().flatten());
            let committed = match self.s.topology {
                Topology::Hop { .. } if topic == self.s.k.repartition_topic => {
                    let part = restorer.hop_part(p, restored.parts.remove(&p))?;
                    if let Some(second) = self.second.as_mut() {
                        second.follow(p, part.committed_offset.unwrap_or(0));
                    }
                    self.parts.insert(p, part);
                    out.pause
                        .add_partition(&topic, p)
                        .set_offset(Offset::Beginning)
                        .map_err(fatal)?;
                    out.start_at
                        .add_partition_offset(&topic, p, Offset::Beginning)
                        .map_err(fatal)?;
                    continue;
                }
                Topology::Direct => {
                    let part = restorer.direct_part(p, restored.parts.remove(&p))?;
                    let committed = part.committed_offset;
                    self.parts.insert(p, part);
                    committed
                }
                _ => {
                    let Some(i) = self.s.input_index(&topic) else {
                        continue;
                    };
                    let src = restorer.source(i, p, restored.sources.remove(&(i, p)))?;
                    let committed = src.committed_offset;
                    self.sources.insert((i, p), src);
                    committed
                }
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
                        reset = ?self.s.reset,
                        "no transaction has committed work on this partition: starting from the reset position"
                    );
                    self.s.reset
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

    /// Drops partition `p` of `topic` from this member (its engine or its source, the second
    /// stage's interest and its claim); says whether the member held it.
    fn drop_partition(&mut self, topic: &str, p: i32) -> bool {
        self.claims.release(&(topic.to_string(), p));
        if self.s.is_parts_topic(topic) {
            if let Some(second) = self.second.as_mut() {
                second.unfollow(p);
            }
            self.parts.remove(&p).is_some()
        } else {
            let i = self.s.input_index(topic);
            i.and_then(|i| self.sources.remove(&(i, p))).is_some()
        }
    }

    /// Publishes the partitions this member holds (the gauge counts them; the group watchdog
    /// reads them).
    fn set_owned(&self) {
        let parts_topic = self.s.parts_topic();
        let held: BTreeSet<(String, i32)> = self
            .parts
            .keys()
            .map(|&p| (parts_topic.to_string(), p))
            .chain(
                self.sources
                    .keys()
                    .map(|&(t, p)| (self.s.input_topic(t).to_string(), p)),
            )
            .collect();
        gauge!(m::ASSIGNED_PARTITIONS).set(held.len() as f64);
        *self.owned_here.lock().expect("lock") = held;
    }

    /// Follows the assignment `want` (from [`crate::kafka::members::Roster::tick`]): commits
    /// and drops the partitions this member holds that are no longer its own, then claims,
    /// restores and takes the new ones. The consumer's manual assignment follows.
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
                .map_err(|e| RunError::Fatal(Cause::kafka("unassigning", e)))?;
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
            .map_err(|e| RunError::Fatal(Cause::kafka("assigning", e)))
    }
}
