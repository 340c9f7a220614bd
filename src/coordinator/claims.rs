//! Fencing from the log: claims.
//!
//! A broker that implements KIP-447 refuses `TxnOffsetCommit` from a member of an old generation,
//! so a *zombie* (a member that lost its partitions without noticing) cannot commit. Not every
//! broker checks ([`crate::kafka::quirks::NO_GENERATION_FENCING`]), and a group coordinator has
//! been seen to hand a member's partitions to another member while the first still held them
//! (under static membership; under the cooperative protocol,
//! [`crate::kafka::quirks::COOPERATIVE_FOLLOW_UP_INCOMPLETE`]): both committed the same input,
//! and panes were written twice. This module closes that hole with the log alone.
//!
//! The claims topic (`<application_id>-claims`, one partition) holds one record per partition a
//! member is assigned: key `topic/partition`, value `token generation`, where the token names the
//! process and the generation counts its assignments. A member
//!
//! 1. on assignment, writes its claims into the open transaction and waits until they are
//!    delivered, **before** it restores the partitions from the log;
//! 2. in the commit cycle, after everything the transaction wrote is delivered and before it
//!    commits, reads the claims topic from where it last stopped: a claim by another process
//!    for a partition it holds, written after its own claim of that partition, means the
//!    partition has a newer owner. The transaction is then aborted, the partitions are dropped
//!    and the member leaves the group and joins it again.
//!
//! Why no input is committed twice: the old owner's records for the transaction are in the log
//! before it reads the claims (step 2 of the cycle waited for them). If it sees no newer claim,
//! the newer owner's claim was written after that read, so the newer owner's restore, which
//! starts after its claim is delivered, finds the old owner's transaction in the log, open or
//! resolved, and waits for its outcome (restores wait for open transactions). If it sees the
//! claim, it aborts. Every claim counts as soon as it is written, whatever becomes of its
//! transaction: an aborted claim can only make a member give up a partition it might have kept.
//!
//! The same topic carries the group's two decisions about its membership: a record
//! [`crate::kafka::assignor::FALLBACK_KEY`] moves every member to the eager protocol (see
//! [`crate::kafka::assignor`] and `super::membership`), and a record
//! [`crate::kafka::roster::MOVE_KEY`] moves every member from the broker's consumer group to
//! membership from the log (`super::roster`).

use super::errors::{Cause, CycleError};
use super::transaction::Transaction;
use crate::kafka::raw_log::{LogReader, RawLogError, RawRecord};
use crate::kafka::secure::Brokers;
use crate::kafka::{assignor, roster};
use rdkafka::producer::BaseRecord;
use std::collections::HashMap;

pub(super) use crate::kafka::roster::TopicPartition;

/// What this process claimed for a partition it holds.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// The generation of the claim written when the partition was assigned.
    generation: u64,
    /// Whether that claim has been read back from the log (claims by others before it are older).
    seen: bool,
}

/// The claims of one process: what it holds, what it claimed, and how far it has read the claims
/// topic. Pure: the caller writes the records it returns and feeds back what it reads.
#[derive(Debug)]
pub(super) struct ClaimBook {
    token: String,
    generation: u64,
    next: i64,
    held: HashMap<TopicPartition, Held>,
    /// Whether the claims topic holds the record that moves the group to the eager protocol.
    eager: bool,
    /// Whether it holds the record that moves the group to membership from the log.
    log_membership: bool,
}

/// The key of a claim record for `part`.
pub(super) fn claim_key(part: &TopicPartition) -> String {
    format!("{}/{}", part.0, part.1)
}

/// Parses a claim record's key and value; `None` for a record that is not a claim.
fn parse(key: &[u8], value: &[u8]) -> Option<(TopicPartition, String, u64)> {
    let key = std::str::from_utf8(key).ok()?;
    let (topic, p) = key.rsplit_once('/')?;
    let value = std::str::from_utf8(value).ok()?;
    let (token, generation) = value.rsplit_once(' ')?;
    Some((
        (topic.to_string(), p.parse().ok()?),
        token.to_string(),
        generation.parse().ok()?,
    ))
}

impl ClaimBook {
    /// A book for the process named `token`, whose reading of the claims topic starts at `next`
    /// (its end when the process starts: older claims concern older owners).
    pub(super) fn new(token: String, next: i64) -> ClaimBook {
        ClaimBook {
            token,
            generation: 0,
            next,
            held: HashMap::new(),
            eager: false,
            log_membership: false,
        }
    }

    /// Whether the claims read so far move the group to the eager rebalance protocol.
    pub(super) fn eager(&self) -> bool {
        self.eager
    }

    /// Whether the claims read so far move the group to membership from the log.
    pub(super) fn log_membership(&self) -> bool {
        self.log_membership
    }

    /// Where the next read of the claims topic starts.
    pub(super) fn next(&self) -> i64 {
        self.next
    }

    /// Records that `parts` are assigned to this process and returns the claim records (key,
    /// value) to write for them.
    pub(super) fn claim(&mut self, parts: &[TopicPartition]) -> Vec<(String, String)> {
        self.generation += 1;
        let value = format!("{} {}", self.token, self.generation);
        parts
            .iter()
            .map(|part| {
                self.held.insert(
                    part.clone(),
                    Held {
                        generation: self.generation,
                        seen: false,
                    },
                );
                (claim_key(part), value.clone())
            })
            .collect()
    }

    /// Forgets a partition that left this process.
    pub(super) fn release(&mut self, part: &TopicPartition) {
        self.held.remove(part);
    }

    /// Takes in the claims topic's records (key, value) read up to `next`, in offset order, and
    /// returns the held partitions that another process claimed after this one's claim.
    pub(super) fn read<'a>(
        &mut self,
        records: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        next: i64,
    ) -> Vec<TopicPartition> {
        let mut lost = Vec::new();
        for (key, value) in records {
            if assignor::is_fallback(key, value) {
                self.eager = true;
                continue;
            }
            if roster::is_move_to_log(key, value) {
                self.log_membership = true;
                continue;
            }
            let Some((part, token, generation)) = parse(key, value) else {
                continue;
            };
            let Some(held) = self.held.get_mut(&part) else {
                continue;
            };
            if token == self.token {
                if generation == held.generation {
                    held.seen = true;
                }
            } else if held.seen && !lost.contains(&part) {
                lost.push(part);
            }
        }
        self.next = self.next.max(next);
        lost
    }

    /// Whether this process holds no partition.
    pub(super) fn holds_nothing(&self) -> bool {
        self.held.is_empty()
    }

    /// Whether this process holds `part`.
    pub(super) fn holds(&self, part: &TopicPartition) -> bool {
        self.held.contains_key(part)
    }
}

/// A token that names this process among the group's members past and present: the instance id
/// (for people reading the topic), the process id and the start time in nanoseconds.
pub(super) fn process_token(instance_id: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{instance_id}:{}:{nanos:x}", std::process::id())
}

/// A member's claims: its book, and its reader of the claims topic.
pub(super) struct Claims {
    book: ClaimBook,
    reader: LogReader,
    /// The claims topic (one partition).
    topic: String,
    /// Held partitions found claimed by another process in a look outside the commit cycle,
    /// for the next cycle's check.
    pending: Vec<TopicPartition>,
    /// Set when another member claimed partitions of this member's: the loop rejoins the group.
    superseded: bool,
}

impl Claims {
    /// Connects to the claims topic and reads it to its end: this process's reading starts there
    /// (older claims concern older owners), knowing whether the group moved to the eager
    /// rebalance protocol.
    pub(super) fn start(
        brokers: &Brokers,
        topic: &str,
        instance_id: &str,
    ) -> Result<Claims, RawLogError> {
        let mut reader = LogReader::connect(brokers)?;
        let (records, end) = reader.raw(topic, 0, 0)?;
        let mut book = ClaimBook::new(process_token(instance_id), end);
        book.read(data(&records), end);
        Ok(Claims {
            book,
            reader,
            topic: topic.to_string(),
            pending: Vec::new(),
            superseded: false,
        })
    }

    /// Reads the claims written since the last look into the book; returns the held partitions
    /// another process claimed since this one did.
    fn look(&mut self) -> Result<Vec<TopicPartition>, RawLogError> {
        let (records, next) = self.reader.raw(&self.topic, 0, self.book.next())?;
        Ok(self.book.read(data(&records), next))
    }
}

/// The key and value of each data record of a raw read (markers left out), empty where absent:
/// a claim counts as soon as it is written, whatever becomes of its transaction.
fn data(records: &[RawRecord]) -> impl Iterator<Item = (&[u8], &[u8])> {
    records.iter().filter(|r| r.is_data()).map(|r| {
        (
            r.key.as_deref().unwrap_or_default(),
            r.value.as_deref().unwrap_or_default(),
        )
    })
}

impl Claims {
    /// Claims `parts`, newly assigned: writes a claim for each into the claims topic `topic` in
    /// the open transaction `txn` and waits until they are delivered. Called before the
    /// partitions are restored.
    pub(super) fn claim(
        &mut self,
        txn: &Transaction,
        topic: &str,
        parts: &[TopicPartition],
    ) -> Result<(), CycleError> {
        if parts.is_empty() {
            return Ok(());
        }
        let records = self.book.claim(parts);
        for (key, value) in &records {
            let record = BaseRecord::with_opaque_to(topic, 0usize)
                .partition(0)
                .key(key.as_bytes())
                .payload(value.as_bytes());
            txn.send(record)?;
        }
        txn.await_deliveries()
    }

    /// Forgets the claim of a partition that left this member.
    pub(super) fn release(&mut self, part: &TopicPartition) {
        self.book.release(part);
    }

    /// Reads the claims written since the last look; fails with [`CycleError::Superseded`] when
    /// another member has claimed a partition of this member's since this member's own claim.
    pub(super) fn check(&mut self) -> Result<(), CycleError> {
        let pending = std::mem::take(&mut self.pending);
        if self.book.holds_nothing() {
            return Ok(());
        }
        let mut lost = self
            .look()
            .map_err(|e| CycleError::Abortable(Cause::part("reading the claims topic", e)))?;
        for part in pending {
            if self.book.holds(&part) && !lost.contains(&part) {
                lost.push(part);
            }
        }
        if lost.is_empty() {
            Ok(())
        } else {
            Err(CycleError::Superseded(lost))
        }
    }

    /// Reads the claims written since the last look outside the commit cycle (a member that holds
    /// nothing runs no cycle): what it finds of this member's partitions waits for the next
    /// cycle's check. A failed read is logged and decides nothing.
    pub(super) fn look_between_cycles(&mut self) {
        match self.look() {
            Ok(lost) => self.pending.extend(lost),
            Err(e) => tracing::warn!("reading the claims topic: {e}"),
        }
    }

    /// The token this process's claims carry.
    pub(super) fn token(&self) -> String {
        self.book.token.clone()
    }

    /// Whether the claims topic says the group moved to the eager rebalance protocol.
    pub(super) fn group_is_eager(&self) -> bool {
        self.book.eager()
    }

    /// Whether the claims topic says the group moved to membership from the log.
    pub(super) fn group_uses_log(&self) -> bool {
        self.book.log_membership()
    }

    /// Moves the group to the eager rebalance protocol: writes the record that says so into the
    /// claims topic `topic` (in the open transaction; claims count as soon as they are written)
    /// and waits for its delivery.
    pub(super) fn announce_eager(
        &mut self,
        txn: &Transaction,
        topic: &str,
    ) -> Result<(), CycleError> {
        if self.group_is_eager() {
            return Ok(());
        }
        announce(txn, topic, assignor::FALLBACK_KEY, assignor::FALLBACK_VALUE)
    }

    /// Moves the group to membership from the log, as [`Claims::announce_eager`] moves it to the
    /// eager protocol.
    pub(super) fn announce_log_membership(
        &mut self,
        txn: &Transaction,
        topic: &str,
    ) -> Result<(), CycleError> {
        if self.group_uses_log() {
            return Ok(());
        }
        announce(txn, topic, roster::MOVE_KEY, roster::MOVE_VALUE)
    }

    /// Notes that another member claimed partitions of this member's: the loop rejoins the group.
    pub(super) fn note_superseded(&mut self) {
        self.superseded = true;
    }

    /// Whether another member claimed partitions of this member's since the last
    /// [`Claims::take_superseded`].
    pub(super) fn superseded(&self) -> bool {
        self.superseded
    }

    /// Whether another member claimed partitions of this member's, forgetting it.
    pub(super) fn take_superseded(&mut self) -> bool {
        std::mem::take(&mut self.superseded)
    }
}

/// Writes one decision of the group's (`key`, `value`) into the claims topic `topic` and waits
/// for its delivery.
fn announce(txn: &Transaction, topic: &str, key: &[u8], value: &[u8]) -> Result<(), CycleError> {
    let record = BaseRecord::with_opaque_to(topic, 0usize)
        .partition(0)
        .key(key)
        .payload(value);
    txn.send(record)?;
    txn.await_deliveries()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("in".to_string(), p)
    }

    /// Feeds `records` (key, value) to `book` as read up to `next`.
    fn feed(book: &mut ClaimBook, records: &[(String, String)], next: i64) -> Vec<TopicPartition> {
        book.read(
            records.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())),
            next,
        )
    }

    #[test]
    fn a_claim_by_another_process_after_this_ones_takes_the_partition() {
        let mut a = ClaimBook::new("a".into(), 0);
        let mut b = ClaimBook::new("b".into(), 0);
        let mut log = a.claim(&[tp(0), tp(1)]);
        assert!(feed(&mut a, &log, 2).is_empty());
        log.extend(b.claim(&[tp(1)]));
        // a reads on from where it stopped: b's claim of 1 came after a's.
        assert_eq!(feed(&mut a, &log[2..], 3), vec![tp(1)]);
        // b reads everything: a's claims came before its own, so they are older.
        assert!(feed(&mut b, &log, 3).is_empty());
        assert_eq!(a.next(), 3);
    }

    #[test]
    fn claims_before_this_processs_own_are_older_owners() {
        let mut a = ClaimBook::new("a".into(), 0);
        let mut log = vec![(claim_key(&tp(0)), "old 7".to_string())];
        log.extend(a.claim(&[tp(0)]));
        assert!(feed(&mut a, &log, 2).is_empty());
    }

    #[test]
    fn a_claim_not_yet_read_back_does_not_count_others_before_it() {
        // a claimed, but reads the log in two goes: b's claim (older, before a's) comes first.
        let mut a = ClaimBook::new("a".into(), 0);
        let b_claim = (claim_key(&tp(0)), "b 1".to_string());
        let a_claims = a.claim(&[tp(0)]);
        assert!(feed(&mut a, std::slice::from_ref(&b_claim), 1).is_empty());
        assert!(feed(&mut a, &a_claims, 2).is_empty());
    }

    #[test]
    fn an_earlier_assignment_of_the_same_partition_is_not_this_ones_claim() {
        let mut a = ClaimBook::new("a".into(), 0);
        let first = a.claim(&[tp(0)]);
        a.release(&tp(0));
        let other = vec![(claim_key(&tp(0)), "b 1".to_string())];
        let second = a.claim(&[tp(0)]);
        // The log: a's first claim, b's, a's second. Reading it all, only the second claim is
        // a's current one; b's claim lies before it.
        let log: Vec<_> = first.into_iter().chain(other).chain(second).collect();
        assert!(feed(&mut a, &log, 3).is_empty());
    }

    #[test]
    fn partitions_not_held_and_records_that_are_not_claims_are_ignored() {
        let mut a = ClaimBook::new("a".into(), 5);
        let mine = a.claim(&[tp(0)]);
        let log = vec![
            mine[0].clone(),
            (claim_key(&tp(3)), "b 1".to_string()),
            ("garbage".to_string(), "x".to_string()),
            (claim_key(&tp(0)), "no-generation".to_string()),
        ];
        assert!(feed(&mut a, &log, 9).is_empty());
        assert_eq!(a.next(), 9);
        a.release(&tp(0));
        assert!(a.holds_nothing());
    }

    #[test]
    fn the_fallback_record_moves_the_book_to_the_eager_protocol_and_claims_nothing() {
        let mut a = ClaimBook::new("a".into(), 0);
        let mine = a.claim(&[tp(0)]);
        assert!(!a.eager());
        let log = vec![
            mine[0].clone(),
            (
                String::from_utf8(assignor::FALLBACK_KEY.to_vec()).unwrap(),
                String::from_utf8(assignor::FALLBACK_VALUE.to_vec()).unwrap(),
            ),
        ];
        assert!(feed(&mut a, &log, 2).is_empty());
        assert!(a.eager());
        assert!(!a.log_membership());
        assert!(a.holds(&tp(0)));
    }

    #[test]
    fn the_move_record_moves_the_book_to_membership_from_the_log_and_claims_nothing() {
        let mut a = ClaimBook::new("a".into(), 0);
        let mine = a.claim(&[tp(0)]);
        let record = (
            String::from_utf8(roster::MOVE_KEY.to_vec()).unwrap(),
            String::from_utf8(roster::MOVE_VALUE.to_vec()).unwrap(),
        );
        assert!(feed(&mut a, &mine, 1).is_empty());
        assert!(!a.log_membership());
        assert!(feed(&mut a, std::slice::from_ref(&record), 2).is_empty());
        assert!(a.log_membership());
        assert!(!a.eager());
        assert!(a.holds(&tp(0)));
    }

    #[test]
    fn topic_names_with_dots_and_dashes_round_trip() {
        let part = ("my.topic-1".to_string(), 12);
        let (parsed, token, generation) =
            parse(claim_key(&part).as_bytes(), b"m-1:42:ff 3").unwrap();
        assert_eq!((parsed, token.as_str(), generation), (part, "m-1:42:ff", 3));
    }
}
