//! Membership from the log: the records members write into the claims topic and the rules every
//! member applies to them (who is live, which partitions are whose). Pure; the runtime that
//! writes heartbeats is [`super::members`] (the pipeline follows it in `coordinator::roster`, a
//! sink in `sink`), and `replay` reads the same records to refuse while members run.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// A partition of some topic: the topic's name and the partition number.
pub type TopicPartition = (String, i32);

/// The key of a heartbeat record; its value is the process token.
pub const HEARTBEAT_KEY: &[u8] = b"\0tidemark.member";
/// The key of the record a process writes when it stops; its value is the process token.
pub const LEAVE_KEY: &[u8] = b"\0tidemark.leave";
/// The key of the record that moves a group from the broker's consumer group to membership from
/// the log; its value is [`MOVE_VALUE`]. A member of a group whose coordinator stopped assigning
/// partitions writes it (see `coordinator::membership`); every member that reads it, at start or
/// while it runs, leaves the consumer group and follows the roster. The record stays: the group
/// keeps membership from the log until the claims topic is recreated.
pub const MOVE_KEY: &[u8] = b"\0tidemark.membership";
/// The value of the record under [`MOVE_KEY`].
pub const MOVE_VALUE: &[u8] = b"log";

/// Whether a claims-topic record (key, value) moves the group to membership from the log.
pub fn is_move_to_log(key: &[u8], value: &[u8]) -> bool {
    key == MOVE_KEY && value == MOVE_VALUE
}
/// The partitions of `parts` that fall to `me` among `members` (process tokens): per topic, the
/// partitions in order go round the members in token order. Every member computes it from its
/// own view of who is live; `me` need not be among `members` (then it gets nothing).
pub fn share(parts: &[TopicPartition], members: &[String], me: &str) -> BTreeSet<TopicPartition> {
    let mut members: Vec<&String> = members.iter().collect();
    members.sort();
    members.dedup();
    let Some(mine) = members.iter().position(|m| *m == me) else {
        return BTreeSet::new();
    };
    let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
    for (t, p) in parts {
        by_topic.entry(t).or_default().push(*p);
    }
    let mut out = BTreeSet::new();
    // Each topic starts the round at another member, so that topics of fewer partitions than
    // members do not all fall to the first ones.
    for (i, (topic, mut ps)) in by_topic.into_iter().enumerate() {
        ps.sort_unstable();
        ps.dedup();
        for (j, p) in ps.into_iter().enumerate() {
            if (i + j) % members.len() == mine {
                out.insert((topic.to_string(), p));
            }
        }
    }
    out
}

/// Who is live, as one member sees it: the last time each process was heard from.
#[derive(Debug, Default)]
pub struct Liveness {
    heard: HashMap<String, Instant>,
}

impl Liveness {
    /// Takes note of a record of the claims topic by the process `token`: heard at `at`, or gone
    /// (a leave record).
    pub fn note(&mut self, token: &str, at: Instant, left: bool) {
        if left {
            self.heard.remove(token);
        } else {
            let e = self.heard.entry(token.to_string()).or_insert(at);
            *e = (*e).max(at);
        }
    }

    /// The processes heard from within `session` of `now`, sorted.
    pub fn live(&self, now: Instant, session: Duration) -> Vec<String> {
        let mut out: Vec<String> = self
            .heard
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) <= session)
            .map(|(t, _)| t.clone())
            .collect();
        out.sort();
        out
    }
}

/// The process token a record of the claims topic speaks for, and whether it says the process
/// left: heartbeats and leaves carry it as their value, claims as the value's first word.
pub fn token_of(key: &[u8], value: &[u8]) -> Option<(String, bool)> {
    let value = std::str::from_utf8(value).ok()?;
    if key == HEARTBEAT_KEY {
        return Some((value.to_string(), false));
    }
    if key == LEAVE_KEY {
        return Some((value.to_string(), true));
    }
    if key.first() == Some(&0) {
        return None;
    }
    let (token, generation) = value.rsplit_once(' ')?;
    generation.parse::<u64>().ok()?;
    Some((token.to_string(), false))
}

/// The session timeout of membership from the log: the consumer's `session.timeout.ms` where
/// set, else 10 s.
pub fn session(properties: &std::collections::BTreeMap<String, String>) -> Duration {
    properties
        .get("session.timeout.ms")
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// A raw record of the claims topic as [`Liveness::from_records`] takes it: key and value
/// (empty where absent) and timestamp.
pub fn parts_of(r: &super::raw_log::RawRecord) -> (&[u8], &[u8], i64) {
    (
        r.key.as_deref().unwrap_or_default(),
        r.value.as_deref().unwrap_or_default(),
        r.timestamp,
    )
}

impl Liveness {
    /// What the records of a claims topic (key, value, timestamp in epoch ms) say at `now_ms`,
    /// each heard when its timestamp says (records read back from before a process started).
    pub fn from_records<'a>(
        records: impl IntoIterator<Item = (&'a [u8], &'a [u8], i64)>,
        now_ms: i64,
    ) -> Liveness {
        let now = Instant::now();
        let mut heard = Liveness::default();
        for (key, value, ts) in records {
            if let Some((t, left)) = token_of(key, value) {
                let age = Duration::from_millis((now_ms - ts).max(0) as u64);
                heard.note(&t, now.checked_sub(age).unwrap_or(now), left);
            }
        }
        heard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parts(topics: &[(&str, i32)]) -> Vec<TopicPartition> {
        topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| (t.to_string(), p)))
            .collect()
    }

    #[test]
    fn the_partitions_go_round_the_members_topic_by_topic() {
        let all = parts(&[("a", 4), ("b", 1)]);
        let members = vec!["m2".to_string(), "m1".to_string()];
        let m1: Vec<_> = share(&all, &members, "m1").into_iter().collect();
        let m2: Vec<_> = share(&all, &members, "m2").into_iter().collect();
        let tp = |t: &str, p: i32| (t.to_string(), p);
        assert_eq!(m1, vec![tp("a", 0), tp("a", 2)]);
        // The second topic's round starts at the second member.
        assert_eq!(m2, vec![tp("a", 1), tp("a", 3), tp("b", 0)]);
        assert!(share(&all, &members, "m3").is_empty(), "not a member");
    }

    proptest! {
        #[test]
        fn every_partition_has_exactly_one_owner(
            counts in proptest::collection::vec(1i32..9, 1..4),
            n in 1usize..7,
        ) {
            let topics: Vec<(String, i32)> =
                counts.iter().enumerate().map(|(i, c)| (format!("t{i}"), *c)).collect();
            let all: Vec<TopicPartition> = topics
                .iter()
                .flat_map(|(t, c)| (0..*c).map(move |p| (t.clone(), p)))
                .collect();
            let members: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
            let mut seen = BTreeSet::new();
            let mut sizes = Vec::new();
            for m in &members {
                let mine = share(&all, &members, m);
                sizes.push(mine.len());
                for p in mine {
                    prop_assert!(seen.insert(p), "a partition with two owners");
                }
            }
            prop_assert_eq!(seen.len(), all.len());
            // Shares differ by at most one partition per topic.
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(hi - lo <= topics.len());
        }
    }

    #[test]
    fn liveness_lapses_after_the_session_and_ends_with_a_leave() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.note("a", t0, false);
        l.note("b", t0, false);
        l.note("b", t0 + Duration::from_secs(5), false);
        let session = Duration::from_secs(6);
        assert_eq!(l.live(t0 + Duration::from_secs(6), session), ["a", "b"]);
        assert_eq!(l.live(t0 + Duration::from_secs(7), session), ["b"]);
        l.note("b", t0 + Duration::from_secs(7), true);
        assert!(l.live(t0 + Duration::from_secs(7), session).is_empty());
    }

    #[test]
    fn records_speak_for_the_process_that_wrote_them() {
        assert_eq!(
            token_of(HEARTBEAT_KEY, b"m1:7:ab"),
            Some(("m1:7:ab".to_string(), false))
        );
        assert_eq!(
            token_of(LEAVE_KEY, b"m1:7:ab"),
            Some(("m1:7:ab".to_string(), true))
        );
        assert_eq!(
            token_of(b"in/3", b"m2:9:cd 4"),
            Some(("m2:9:cd".to_string(), false))
        );
        assert_eq!(token_of(b"\0tidemark.assignor", b"eager"), None);
        assert_eq!(token_of(MOVE_KEY, MOVE_VALUE), None);
        assert!(is_move_to_log(MOVE_KEY, MOVE_VALUE));
        assert!(!is_move_to_log(MOVE_KEY, b"group"));
        assert!(!is_move_to_log(HEARTBEAT_KEY, MOVE_VALUE));
        assert_eq!(token_of(b"in/3", b"garbage"), None);
    }
}
