//! The follow mode: the committed records of many partitions of one topic, followed as they grow
//! and read side by side, with each partition's transactions resolved as they stream by (the
//! hop's second stage, the sink, `tail`, the watch over a group's decisions).

use super::client::*;
use super::fetch::*;
use super::resolve::*;
use super::*;
use bytes::Buf;
use kafka_protocol::records::RecordBatchDecoder;
use std::collections::BTreeMap;

/// What the follow mode keeps of one topic between polls ([`super::LogReader::poll`]): the
/// partitions followed, and per partition where the next fetch starts and a transaction resolver
/// kept from one poll to the next, so each record is fetched and decoded once. A poll sends one
/// Fetch request per leader for every followed partition. Committed records come out in offset
/// order per partition, each once.
///
/// A transaction with no marker yet holds back the records after it. Given the producers'
/// transaction timeout ([`Following::giving_up_after`]), one whose first record is older than it
/// is given up as aborted (the broker aborts it; it can never commit), the rule a restore follows
/// too, so a producer that died and never came back cannot stall a partition for ever.
pub struct Following {
    topic: String,
    parts: BTreeMap<i32, ReadPart>,
    /// The producers' transaction timeout (ms), if known.
    transaction_timeout: Option<i64>,
    /// Rotates the order of partitions in requests: some brokers fill a response from its first
    /// partition on, which would starve the others while it has a backlog.
    turn: usize,
    /// Whether the last poll left a partition short of its high watermark.
    behind: bool,
}

/// How long a fetch may wait when the last one left a partition behind. A broker may answer a
/// fetch whose read takes longer than its wait with nothing at all
/// ([`crate::quirks::FETCH_ANSWERED_BEFORE_READ`]), and reads of a backlog take longest: with a one-millisecond wait the second stage could starve for seconds behind a
/// backlog. The wait costs nothing while data is there (the broker answers as soon as it has
/// some).
pub(super) const BEHIND_WAIT_MS: i32 = 50;

/// One followed partition.
pub(super) struct ReadPart {
    resolver: StreamResolver,
    /// The offset of the next fetch.
    fetch_offset: i64,
    /// Whether the last fetch reached the partition's end (its high watermark): only then can
    /// an open transaction be judged to have no marker coming.
    at_end: bool,
    /// A hole an answer showed at `fetch_offset`, and since when the reads have waited at it.
    hole: Option<(i64, std::time::Instant)>,
    /// The partition's high watermark in the last answer.
    high_watermark: i64,
}

/// How long a partition's reads wait at a hole in fetch answers before they go past it.
const HOLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl ReadPart {
    /// Takes note of a record at `offset` read where a hole was: the append filled it.
    fn filled_hole(&mut self, topic: &str, partition: i32, offset: i64) {
        if let Some((at, since)) = self.hole {
            if at == offset {
                tracing::warn!(
                    topic,
                    partition,
                    offset,
                    waited_ms = since.elapsed().as_millis() as u64,
                    "the hole in the log filled: an append became visible after a later one"
                );
                self.hole = None;
            }
        }
    }

    /// Whether the reads go past a hole: an answer to a fetch at `fetch_offset` begins at `got`.
    ///
    /// Kafka's log has no holes outside compacted topics (every offset holds a data or a control
    /// record, and an append is visible only after every earlier one), so a hole means an
    /// append still being written, answered past
    /// ([`crate::quirks::APPENDS_VISIBLE_OUT_OF_ORDER`]): reading on would lose it for good. The reads
    /// stay at the hole and fetch again, for up to [`HOLE_WAIT`]; a hole that lasts longer is in
    /// the log itself, and the reads go past it. Both are logged.
    fn past_hole(&mut self, topic: &str, partition: i32, got: i64) -> bool {
        match self.hole {
            Some((at, since)) if at == self.fetch_offset => {
                if since.elapsed() < HOLE_WAIT {
                    return false;
                }
                tracing::warn!(
                    topic,
                    partition,
                    expected = at,
                    got,
                    waited_ms = since.elapsed().as_millis() as u64,
                    "the hole in the log did not fill: reading on past it"
                );
                self.hole = None;
                true
            }
            _ => {
                tracing::warn!(
                    topic,
                    partition,
                    expected = self.fetch_offset,
                    got,
                    "a fetch answer skipped offsets of the log: reading again from the hole"
                );
                self.hole = Some((self.fetch_offset, std::time::Instant::now()));
                false
            }
        }
    }
}

impl std::fmt::Debug for Following {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Following")
            .field("topic", &self.topic)
            .field("partitions", &self.parts.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Following {
    /// Follows no partition of `topic` yet; a transaction without a marker waits for it.
    pub fn new(topic: &str) -> Following {
        Following {
            topic: topic.to_string(),
            parts: BTreeMap::new(),
            transaction_timeout: None,
            turn: 0,
            behind: false,
        }
    }

    /// Gives up as aborted every transaction older than `transaction_timeout` (ms) without a
    /// marker: the producers' timeout, after which the broker aborts them.
    pub fn giving_up_after(mut self, transaction_timeout: i64) -> Following {
        self.transaction_timeout = Some(transaction_timeout);
        self
    }

    /// Follows partition `p` from offset `from`, forgetting what was read of it before.
    pub fn follow(&mut self, p: i32, from: i64) {
        self.parts.insert(
            p,
            ReadPart {
                resolver: StreamResolver::new(p, from),
                fetch_offset: from,
                at_end: false,
                hole: None,
                high_watermark: from,
            },
        );
    }

    /// Stops following partition `p`.
    pub fn unfollow(&mut self, p: i32) {
        self.parts.remove(&p);
    }

    /// The partitions followed.
    pub fn partitions(&self) -> impl Iterator<Item = i32> + '_ {
        self.parts.keys().copied()
    }

    /// Whether any partition is followed.
    pub fn is_idle(&self) -> bool {
        self.parts.is_empty()
    }

    /// Whether the last poll left a partition short of its high watermark: there is more to
    /// read at once.
    pub fn is_behind(&self) -> bool {
        self.behind
    }

    /// Where a read of partition `p` would start again without losing a committed record: the
    /// first record still in an open transaction, or else the next fetch's offset. Everything
    /// before it has been handed on or was aborted; `None` when `p` is not followed.
    pub fn resume_at(&self, p: i32) -> Option<i64> {
        let part = self.parts.get(&p)?;
        Some(part.resolver.first_open().unwrap_or(part.fetch_offset))
    }

    /// Partition `p`'s high watermark in the last answer (where it was followed from, before any).
    pub fn end(&self, p: i32) -> Option<i64> {
        self.parts.get(&p).map(|part| part.high_watermark)
    }

    /// Fetches every followed partition once through `cluster`, waiting at most `max_wait_ms`
    /// for data, and hands each committed record, resolved, to `emit`. Returns how many records
    /// were fetched (control records and records still in open transactions included).
    pub(super) fn poll(
        &mut self,
        cluster: &mut Cluster,
        max_wait_ms: i32,
        mut emit: impl FnMut(RawRecord),
    ) -> Result<usize, RawLogError> {
        if self.parts.is_empty() {
            return Ok(0);
        }
        let by_leader = cluster.by_leader(
            &self.topic,
            self.parts.iter().map(|(&p, part)| (p, part.fetch_offset)),
        )?;
        self.turn = self.turn.wrapping_add(1);
        let max_wait_ms = if self.behind {
            max_wait_ms.max(BEHIND_WAIT_MS)
        } else {
            max_wait_ms
        };
        self.behind = false;
        let mut fetched = 0;
        let ok = |_: ()| Ok::<(), std::convert::Infallible>(());
        for (addr, mut wanted) in by_leader {
            let n = wanted.len();
            wanted.rotate_left(self.turn % n);
            let req = fetch_request(
                &self.topic,
                &wanted,
                FetchLimits {
                    isolation: 0,
                    // A fetch that may not wait may be answered with nothing at all
                    // (quirks::FETCH_ANSWERED_BEFORE_READ): wait at least a millisecond.
                    max_wait_ms: max_wait_ms.max(1),
                    min_bytes: 1,
                    max_bytes: 16 << 20,
                    partition_max_bytes: 4 << 20,
                },
            );
            let resp = cluster.fetch(&addr, &req)?;
            if resp.error_code != 0 {
                cluster.forget_leaders();
                return Err(RawLogError::Broker {
                    code: resp.error_code,
                    what: format!("fetch {}", self.topic),
                });
            }
            for t in resp.responses {
                for fp in t.partitions {
                    let p = fp.partition_index;
                    let Some(part) = self.parts.get_mut(&p) else {
                        continue;
                    };
                    if fp.error_code != 0 {
                        cluster.forget_leaders();
                        return Err(RawLogError::Broker {
                            code: fp.error_code,
                            what: format!("fetch {}/{p}@{}", self.topic, part.fetch_offset),
                        });
                    }
                    if let Some(mut bytes) = fp.records {
                        'batches: while bytes.has_remaining() {
                            let set = RecordBatchDecoder::decode(&mut bytes)
                                .map_err(RawLogError::codec("record batch"))?;
                            for r in set.records {
                                if r.offset < part.fetch_offset {
                                    continue;
                                }
                                if r.offset > part.fetch_offset
                                    && !part.past_hole(&self.topic, p, r.offset)
                                {
                                    break 'batches;
                                }
                                part.filled_hole(&self.topic, p, r.offset);
                                part.fetch_offset = r.offset + 1;
                                fetched += 1;
                                part.resolver
                                    .push(r, &mut |rec| {
                                        emit(rec);
                                        ok(())
                                    })
                                    .expect("infallible");
                            }
                        }
                    }
                    part.at_end = part.fetch_offset >= fp.high_watermark;
                    part.high_watermark = fp.high_watermark;
                    self.behind |= !part.at_end;
                }
            }
        }
        let before = self
            .transaction_timeout
            .map_or(i64::MIN, |t| crate::clock::wall_ms().saturating_sub(t));
        for (p, part) in &mut self.parts {
            if !part.at_end {
                // A marker may still be on its way in the part of the log not read yet.
                continue;
            }
            let given_up = part
                .resolver
                .abort_older_than(before, &mut |rec| {
                    emit(rec);
                    ok(())
                })
                .expect("infallible");
            if given_up > 0 {
                tracing::warn!(
                    topic = self.topic,
                    partition = p,
                    transactions = given_up,
                    "transactions older than the transaction timeout never resolved: treated as aborted"
                );
            }
            // Only the counts of a restore need them.
            part.resolver.forget_aborted();
        }
        Ok(fetched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part_at(offset: i64) -> ReadPart {
        ReadPart {
            resolver: StreamResolver::new(0, offset),
            fetch_offset: offset,
            at_end: false,
            hole: None,
            high_watermark: offset,
        }
    }

    #[test]
    fn reads_wait_at_a_hole_until_it_fills() {
        let mut part = part_at(10);
        // An answer to a fetch at 10 begins at 12: wait, and again on the next answer.
        assert!(!part.past_hole("t", 0, 12));
        assert!(!part.past_hole("t", 0, 12));
        // The append at 10 becomes visible: the hole is forgotten.
        part.filled_hole("t", 0, 10);
        assert!(part.hole.is_none());
        part.fetch_offset = 11;
        // A new hole further on is waited at afresh.
        assert!(!part.past_hole("t", 0, 15));
        assert_eq!(part.hole.map(|(at, _)| at), Some(11));
    }

    #[test]
    fn reads_go_past_a_hole_that_lasts_longer_than_the_wait() {
        let mut part = part_at(10);
        assert!(!part.past_hole("t", 0, 12));
        let since = std::time::Instant::now()
            .checked_sub(HOLE_WAIT)
            .expect("a monotonic clock this far from its start");
        part.hole = Some((10, since));
        assert!(part.past_hole("t", 0, 12));
        assert!(part.hole.is_none());
    }
}
