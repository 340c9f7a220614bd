//! Membership from the log (`kafka.membership = "log"`): members share the partitions without
//! the broker's consumer group.
//!
//! A group coordinator has been seen never to evict a member that died, and to hand the same
//! partitions to two members when a rebalance finally ran
//! ([`crate::kafka::quirks::DEAD_MEMBERS_NOT_EVICTED`]): a group on such a broker stops making
//! progress after the first kill. With log membership the consumer is assigned partitions
//! directly and the claims topic is the group:
//!
//! - every member writes a heartbeat (key [`crate::kafka::roster::HEARTBEAT_KEY`], value its process token) into the
//!   claims topic every [`HEARTBEAT_EVERY`], outside any transaction, and a leave record when it
//!   stops;
//! - every member reads the topic every [`LOOK_EVERY`]: a process is live while its heartbeats or
//!   claims keep coming within the session timeout (`session.timeout.ms`, default 10 s), and
//!   until it leaves; records older than the process are judged by their timestamps;
//! - every member computes the same assignment from the live processes ([`share`]: round robin
//!   over the processes in token order, per topic; `crate::kafka::roster`) and follows it: it commits and drops the
//!   partitions that are no longer its own, and claims, restores and takes the new ones.
//!
//! Members' views differ for a moment when one joins or dies. Correctness never rests on them
//! agreeing: a member that takes a partition claims it first, and the claims fence the previous
//! holder as they do under group membership (`super::claims`); a member that finds a partition
//! of its own claimed by another aborts and drops it, and its next look agrees with the claim
//! (the claim showed the other process live).

use super::claims::TopicPartition;
use super::errors::RunError;
use super::Core;
use crate::config::KafkaSpec;
use crate::kafka::raw_log::PartitionTail;
use crate::kafka::roster::{parts_of, share, token_of, Liveness, HEARTBEAT_KEY, LEAVE_KEY};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::TopicPartitionList;
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a member writes its heartbeat.
pub(super) const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How often a member reads the claims topic and follows the assignment.
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(250);

/// This member's part in membership from the log: its heartbeat producer, its reader of the
/// claims topic, and what it has heard.
pub(super) struct Roster {
    token: String,
    topic: String,
    producer: BaseProducer,
    tail: PartitionTail,
    next: i64,
    heard: Liveness,
    session: Duration,
    last_beat: Option<Instant>,
    last_look: Option<Instant>,
    /// Every partition the group shares: the input topics' (and the repartition topic's).
    parts: Vec<TopicPartition>,
}

impl Roster {
    /// Starts the roster of the process named `token` over `parts`: reads the claims topic to its
    /// end (processes heard from before are judged by their records' timestamps) and writes the
    /// first heartbeat.
    pub(super) fn start(
        k: &KafkaSpec,
        token: String,
        parts: Vec<TopicPartition>,
    ) -> Result<Roster, RunError> {
        let startup = |e: String| RunError::Startup(format!("membership from the log: {e}"));
        let mut config = crate::source::producer_config(k);
        config.remove("transactional.id");
        config.set("acks", "all");
        config.set("linger.ms", "0");
        let producer: BaseProducer = config.create().map_err(|e| startup(e.to_string()))?;
        let mut tail = PartitionTail::connect(&k.bootstrap_servers, &k.claims_topic, 0)
            .map_err(|e| startup(format!("reading {}: {e}", k.claims_topic)))?;
        let (records, next) = tail.read_from(0).map_err(|e| startup(e.to_string()))?;
        let session = crate::kafka::roster::session(&k.properties);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let heard = Liveness::from_records(records.iter().map(parts_of), wall);
        let mut roster = Roster {
            token,
            topic: k.claims_topic.clone(),
            producer,
            tail,
            next,
            heard,
            session,
            last_beat: None,
            last_look: None,
            parts,
        };
        roster.beat()?;
        Ok(roster)
    }

    /// Writes a record with `key` and this process's token, and waits for it.
    fn write(&mut self, key: &[u8]) -> Result<(), RunError> {
        let record = BaseRecord::<[u8], str>::to(&self.topic)
            .partition(0)
            .key(key)
            .payload(&self.token);
        self.producer
            .send(record)
            .map_err(|(e, _)| RunError::Fatal(format!("writing to the claims topic: {e}")))?;
        self.producer
            .flush(Duration::from_secs(10))
            .map_err(|e| RunError::Fatal(format!("writing to the claims topic: {e}")))
    }

    /// Writes this process's heartbeat.
    fn beat(&mut self) -> Result<(), RunError> {
        self.write(HEARTBEAT_KEY)?;
        self.heard.note(&self.token, Instant::now(), false);
        self.last_beat = Some(Instant::now());
        Ok(())
    }

    /// Beats when it is time, and when it is time to look: reads the claims topic and returns the
    /// partitions that are this member's now. A failed write or read is logged and decides
    /// nothing (the broker may be away; a member not heard from for a session loses its share).
    pub(super) fn tick(&mut self) -> Option<BTreeSet<TopicPartition>> {
        if self
            .last_beat
            .is_none_or(|t| t.elapsed() >= HEARTBEAT_EVERY)
        {
            if let Err(e) = self.beat() {
                tracing::warn!("membership from the log: heartbeat: {e:?}");
                self.last_beat = Some(Instant::now());
            }
        }
        if self.last_look.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
            return None;
        }
        self.last_look = Some(Instant::now());
        match self.tail.read_from(self.next) {
            Ok((records, next)) => {
                let now = Instant::now();
                for (key, value, _) in records.iter().map(parts_of) {
                    if let Some((t, left)) = token_of(key, value) {
                        self.heard.note(&t, now, left);
                    }
                }
                self.next = next;
            }
            Err(e) => {
                tracing::warn!("membership from the log: reading the claims topic: {e}");
                return None;
            }
        }
        let live = self.heard.live(Instant::now(), self.session);
        Some(share(&self.parts, &live, &self.token))
    }

    /// Writes the record that says this process left, so the others take its partitions at once.
    pub(super) fn leave(&mut self) {
        if let Err(e) = self.write(LEAVE_KEY) {
            tracing::warn!("membership from the log: leaving: {e:?}");
        }
    }
}

impl Core {
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
