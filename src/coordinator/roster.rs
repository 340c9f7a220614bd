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
//!   claims topic every [`crate::kafka::members::HEARTBEAT_EVERY`], outside any transaction, and a leave record when it
//!   stops;
//! - every member reads the topic every [`crate::kafka::members::LOOK_EVERY`]: a process is live while its heartbeats or
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
use crate::kafka::members::Roster;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::TopicPartitionList;
use std::collections::BTreeSet;

/// Starts the roster of the process named `token` over `parts` in the pipeline's claims topic.
pub(super) fn start(
    k: &KafkaSpec,
    token: String,
    parts: Vec<TopicPartition>,
) -> Result<Roster, RunError> {
    let mut config = crate::clients::producer_config(k);
    config.remove("transactional.id");
    Roster::start(
        config,
        &k.bootstrap_servers,
        &k.claims_topic,
        token,
        parts,
        crate::kafka::roster::session(&k.properties),
    )
    .map_err(|e| RunError::Startup(format!("membership from the log: {e}")))
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
