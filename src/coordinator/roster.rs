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

use super::errors::{Cause, RunError};
use crate::config::KafkaSpec;
use crate::kafka::members::Roster;
use crate::kafka::roster::TopicPartition;

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
        &k.brokers,
        &k.claims_topic,
        token,
        parts,
        crate::kafka::roster::session(&k.properties),
    )
    .map_err(|e| RunError::Startup(Cause::part("membership from the log", e)))
}
