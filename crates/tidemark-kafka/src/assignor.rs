//! Which partition assignor a member uses, and when a group falls back from the cooperative
//! rebalance protocol to the eager one.
//!
//! librdkafka's assignors come in two protocols that cannot be mixed in one consumer: the
//! **eager** ones (`range`, `roundrobin`) revoke every partition at each rebalance, and the
//! **cooperative** one (`cooperative-sticky`, KIP-429) revokes only the partitions that move,
//! which takes a second rebalance right after the first. tidemark uses `range` unless
//! `[kafka.properties]` sets `partition.assignment.strategy`; the pipeline reference says why.
//!
//! A broker whose group coordinator does not complete the cooperative protocol's follow-up
//! rebalance leaves a member joining for ever, or hands a partition to a new owner before its
//! holder revoked it (the claims catch that: see `coordinator::claims`). A member using the
//! cooperative protocol therefore falls back to the eager one when either happens:
//!
//! * its consumer waits on the broker in a rebalance (joining, syncing) for longer than
//!   [`stall_bound`]: the rebalance timeout (`max.poll.interval.ms`) a correct broker bounds a
//!   rebalance with, plus one session timeout; or
//! * the claims show that a partition it holds was given to another member.
//!
//! Every member of a group must use the same protocol (a broker refuses a member whose
//! protocols share none with the group's), so the fallback is the group's, not one member's:
//! the member that decides it writes [`FALLBACK_KEY`] into the claims topic, and every member
//! that reads that record (at start, or while it runs) joins again with [`EAGER_FALLBACK`].
//! The record stays: the group keeps the eager protocol until the claims topic is recreated.

use std::time::Duration;

/// The assignor tidemark's consumer uses unless the pipeline sets one.
pub const DEFAULT_STRATEGY: &str = "range";

/// The assignor a group that gave up the cooperative protocol uses.
pub const EAGER_FALLBACK: &str = "range";

/// The key of the claims-topic record that moves a group to the eager protocol.
pub const FALLBACK_KEY: &[u8] = b"\0tidemark.assignor";

/// The value of that record.
pub const FALLBACK_VALUE: &[u8] = b"eager";

/// The two rebalance protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Every partition is revoked at each rebalance (`range`, `roundrobin`).
    Eager,
    /// Only the partitions that move are revoked (`cooperative-sticky`).
    Cooperative,
}

/// The protocol of a `partition.assignment.strategy` value (a comma-separated list of
/// assignors), or why tidemark refuses it: an unknown assignor, or eager and cooperative ones
/// mixed (librdkafka refuses that too).
pub fn protocol_of(strategy: &str) -> Result<Protocol, String> {
    let mut found: Option<Protocol> = None;
    for name in strategy.split(',').map(str::trim) {
        let p = match name {
            "range" | "roundrobin" => Protocol::Eager,
            "cooperative-sticky" => Protocol::Cooperative,
            "" => return Err("names no assignor".to_string()),
            other => {
                return Err(format!(
                    "{other:?} is not an assignor tidemark supports (range, roundrobin, cooperative-sticky)"
                ))
            }
        };
        match found {
            Some(q) if q != p => {
                return Err(
                    "mixes eager assignors (range, roundrobin) with cooperative-sticky: a consumer uses one protocol"
                        .to_string(),
                )
            }
            _ => found = Some(p),
        }
    }
    found.ok_or_else(|| "names no assignor".to_string())
}

/// How long a member may wait on the broker in one rebalance before the cooperative protocol
/// counts as not completing: the rebalance timeout plus one session timeout.
pub fn stall_bound(max_poll_interval_ms: u64, session_timeout_ms: u64) -> Duration {
    Duration::from_millis(max_poll_interval_ms + session_timeout_ms)
}

/// Whether librdkafka's consumer-group join state (`cgrp.join_state` in its statistics) is one
/// in which the member waits for the broker. The states in which it waits for the application
/// (`wait-assign-call`, `wait-unassign-call`, ...: tidemark restores partitions inside the
/// assignment callback, which may take long) and `steady` are not.
pub fn waits_on_broker(join_state: &str) -> bool {
    matches!(join_state, "wait-join" | "wait-metadata" | "wait-sync")
}

/// Watches a member's join state, sampled from its statistics, for a rebalance that does not
/// complete. Pure: the caller passes the time.
#[derive(Debug, Clone)]
pub struct JoinWatch {
    bound: Duration,
    /// When the member last started waiting on the broker (`None`: it is not waiting).
    waiting_since: Option<Duration>,
}

impl JoinWatch {
    /// A watch that reports a wait longer than `bound`.
    pub fn new(bound: Duration) -> JoinWatch {
        JoinWatch {
            bound,
            waiting_since: None,
        }
    }

    /// Takes in the join state seen at `now` (any monotonic clock) and tells whether the member
    /// has been waiting on the broker, without a break seen, for longer than the bound.
    pub fn observe(&mut self, now: Duration, join_state: &str) -> bool {
        if !waits_on_broker(join_state) {
            self.waiting_since = None;
            return false;
        }
        let since = *self.waiting_since.get_or_insert(now);
        now.saturating_sub(since) > self.bound
    }
}

/// Whether a claims-topic record (key, value) moves the group to the eager protocol.
pub fn is_fallback(key: &[u8], value: &[u8]) -> bool {
    key == FALLBACK_KEY && value == FALLBACK_VALUE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignors_map_to_their_protocol_and_mixtures_are_refused() {
        assert_eq!(protocol_of("range"), Ok(Protocol::Eager));
        assert_eq!(protocol_of("range, roundrobin"), Ok(Protocol::Eager));
        assert_eq!(protocol_of("cooperative-sticky"), Ok(Protocol::Cooperative));
        assert!(protocol_of("range,cooperative-sticky")
            .unwrap_err()
            .contains("mixes"));
        assert!(protocol_of("sticky").unwrap_err().contains("\"sticky\""));
        assert!(protocol_of("").is_err());
        assert_eq!(protocol_of(DEFAULT_STRATEGY), Ok(Protocol::Eager));
        assert_eq!(protocol_of(EAGER_FALLBACK), Ok(Protocol::Eager));
    }

    #[test]
    fn only_an_unbroken_wait_on_the_broker_past_the_bound_is_a_stall() {
        let s = Duration::from_secs;
        let mut w = JoinWatch::new(s(16));
        assert!(!w.observe(s(0), "steady"));
        assert!(!w.observe(s(5), "wait-join"));
        assert!(!w.observe(s(15), "wait-sync"));
        assert!(!w.observe(s(21), "wait-join"), "16 s waited: not past");
        assert!(w.observe(s(22), "wait-join"));
        // A break (steady, or waiting on the application) starts the count again.
        assert!(!w.observe(s(23), "steady"));
        assert!(!w.observe(s(30), "wait-join"));
        assert!(!w.observe(s(40), "wait-assign-call"));
        assert!(!w.observe(s(50), "wait-join"));
        assert!(!w.observe(s(66), "wait-join"));
        assert!(w.observe(s(67), "wait-metadata"));
    }

    #[test]
    fn the_bound_is_the_rebalance_timeout_plus_a_session() {
        assert_eq!(stall_bound(300_000, 45_000), Duration::from_secs(345));
    }

    #[test]
    fn the_fallback_record_is_recognised_exactly() {
        assert!(is_fallback(FALLBACK_KEY, FALLBACK_VALUE));
        assert!(!is_fallback(FALLBACK_KEY, b"cooperative"));
        assert!(!is_fallback(b"events/0", FALLBACK_VALUE));
    }
}
