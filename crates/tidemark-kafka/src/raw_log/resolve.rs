//! The transaction resolver, pure: records of one partition in offset order in, committed records
//! out in offset order, each held until its transaction's COMMIT or ABORT marker is read.

use super::*;
use kafka_protocol::records::Record;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// What became of a record whose transaction may not be resolved yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    Committed,
    Aborted,
    Open,
}

/// Resolves transactions while a partition's log streams by: each record waits until its
/// transaction's COMMIT or ABORT marker, and committed records are handed on in offset order as
/// soon as every earlier record is resolved. Memory is bounded by the span of the oldest open
/// transaction, not by the log.
///
/// Open records are kept per producer id *and* epoch. A marker of producer P with epoch E
/// resolves P's open records of epoch E when there are any; when there are none, it resolves P's
/// open records of older epochs (Kafka writes the ABORT that fences a re-initialised producer
/// with the bumped epoch, and a KIP-890 broker writes each COMMIT with the epoch after the
/// records'). It never resolves records of a newer epoch.
///
/// A re-initialised producer (a new process with the same `transactional.id`) may write records
/// of its new epoch *before* the marker of its old epoch's transaction: Kafka never lets that
/// happen, but a broker has ([`crate::quirks::EPOCH_BUMP_BEFORE_MARKERS`]). So a newer epoch's
/// record settles
/// nothing: the older records wait for their own marker, or, if none ever comes, until their
/// transaction is older than the transaction timeout ([`StreamResolver::abort_older_than`], and
/// the open policy of a restore in the runtime).
pub(super) struct StreamResolver {
    partition: i32,
    queue: VecDeque<(RawRecord, Fate)>,
    /// Records popped from the queue so far: a record's queue position is its sequence number
    /// minus this.
    popped: usize,
    /// Per producer id and epoch, the sequence numbers of its open records.
    open: HashMap<i64, BTreeMap<i16, Vec<usize>>>,
    aborted_offsets: Vec<i64>,
    next_offset: i64,
}

impl StreamResolver {
    /// Forgets the offsets of aborted records read so far (only a restore's counts need them).
    pub(super) fn forget_aborted(&mut self) {
        self.aborted_offsets.clear();
    }

    pub(super) fn new(partition: i32, from: i64) -> StreamResolver {
        StreamResolver {
            partition,
            queue: VecDeque::new(),
            popped: 0,
            open: HashMap::new(),
            aborted_offsets: Vec::new(),
            next_offset: from,
        }
    }

    /// The offset of the first record still waiting for its transaction's marker, if any.
    pub(super) fn first_open(&self) -> Option<i64> {
        self.queue.front().map(|(r, _)| r.offset)
    }

    /// Sets the fate of the records with the given sequence numbers.
    pub(super) fn settle(&mut self, seqs: Vec<usize>, fate: Fate) {
        for seq in seqs {
            self.queue[seq - self.popped].1 = fate;
        }
    }

    pub(super) fn push<E>(
        &mut self,
        r: Record,
        emit: &mut impl FnMut(RawRecord) -> Result<(), E>,
    ) -> Result<(), E> {
        self.next_offset = self.next_offset.max(r.offset + 1);
        if r.control {
            let fate = if control_type(&r) == Some(1) {
                Fate::Committed
            } else {
                Fate::Aborted
            };
            if let Some(epochs) = self.open.get_mut(&r.producer_id) {
                let seqs: Vec<usize> = match epochs.remove(&r.producer_epoch) {
                    Some(seqs) => seqs,
                    None => {
                        // Kafka's fencing ABORT or a KIP-890 COMMIT: the epoch after the records'.
                        let newer = epochs.split_off(&r.producer_epoch);
                        std::mem::replace(epochs, newer)
                            .into_values()
                            .flatten()
                            .collect()
                    }
                };
                if epochs.is_empty() {
                    self.open.remove(&r.producer_id);
                }
                self.settle(seqs, fate);
            }
        } else {
            let seq = self.popped + self.queue.len();
            let fate = if r.transactional {
                let epochs = self.open.entry(r.producer_id).or_default();
                if epochs.keys().any(|&e| e < r.producer_epoch)
                    && !epochs.contains_key(&r.producer_epoch)
                {
                    tracing::debug!(
                        partition = self.partition,
                        producer_id = r.producer_id,
                        epoch = r.producer_epoch,
                        at_offset = r.offset,
                        "a re-initialised producer writes before its older transaction's marker"
                    );
                }
                epochs.entry(r.producer_epoch).or_default().push(seq);
                Fate::Open
            } else {
                Fate::Committed
            };
            self.queue
                .push_back((RawRecord::from_record(self.partition, r), fate));
        }
        self.drain(emit)
    }

    /// Hands on the resolved records at the head of the queue.
    pub(super) fn drain<E>(
        &mut self,
        emit: &mut impl FnMut(RawRecord) -> Result<(), E>,
    ) -> Result<(), E> {
        while self.queue.front().is_some_and(|(_, f)| *f != Fate::Open) {
            let (rec, fate) = self.queue.pop_front().expect("checked");
            self.popped += 1;
            match fate {
                Fate::Committed => emit(rec)?,
                _ => self.aborted_offsets.push(rec.offset),
            }
        }
        Ok(())
    }

    /// Treats as aborted every open transaction whose first record is stamped before `before`
    /// (epoch ms): a broker aborts a transaction older than its timeout, so it can never commit.
    /// Returns how many transactions were given up.
    pub(super) fn abort_older_than<E>(
        &mut self,
        before: i64,
        emit: &mut impl FnMut(RawRecord) -> Result<(), E>,
    ) -> Result<usize, E> {
        let queue = &self.queue;
        let popped = self.popped;
        let mut stale = Vec::new();
        for epochs in self.open.values_mut() {
            epochs.retain(|_, seqs| {
                let old = seqs
                    .first()
                    .is_some_and(|&s| queue[s - popped].0.timestamp < before);
                if old {
                    stale.push(std::mem::take(seqs));
                }
                !old
            });
        }
        self.open.retain(|_, epochs| !epochs.is_empty());
        let given_up = stale.len();
        for seqs in stale {
            self.settle(seqs, Fate::Aborted);
        }
        self.drain(emit)?;
        Ok(given_up)
    }

    /// At the end of the log: hands on committed records still queued behind an open
    /// transaction; returns the log's tail summary (without committed records).
    pub(super) fn finish<E>(
        &mut self,
        emit: &mut impl FnMut(RawRecord) -> Result<(), E>,
    ) -> Result<PartitionLog, E> {
        let mut log = PartitionLog {
            next_offset: self.next_offset,
            ..PartitionLog::default()
        };
        while let Some((rec, fate)) = self.queue.pop_front() {
            match fate {
                Fate::Committed => emit(rec)?,
                Fate::Aborted => self.aborted_offsets.push(rec.offset),
                Fate::Open => {
                    log.open += 1;
                    log.first_open.get_or_insert(rec.offset);
                    log.open_since
                        .entry(rec.producer_id)
                        .or_insert(rec.timestamp);
                }
            }
        }
        self.open.clear();
        self.aborted_offsets.sort_unstable();
        log.aborted_offsets = std::mem::take(&mut self.aborted_offsets);
        Ok(log)
    }
}

/// Resolves the transactions of records held in memory (one partition's raw log, control records
/// included, in offset order, starting at `from`): committed records go to `emit` in offset
/// order, exactly as a streamed read hands them on.
pub fn resolve_records<E>(
    partition: i32,
    from: i64,
    records: impl IntoIterator<Item = Record>,
    mut emit: impl FnMut(RawRecord) -> Result<(), E>,
) -> Result<PartitionLog, E> {
    let mut resolver = StreamResolver::new(partition, from);
    for r in records {
        resolver.push(r, &mut emit)?;
    }
    resolver.finish(&mut emit)
}

/// Control record key: version (i16) then type (i16): 0 = ABORT, 1 = COMMIT.
pub(super) fn control_type(r: &Record) -> Option<i16> {
    let key = r.key.as_ref()?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
}

/// A raw-log record made by hand, for tests of code that reads the log: a control record of
/// type `control` (0 = ABORT, 1 = COMMIT), or a data record with `key` and `value`, stamped `ts`.
pub fn hand_made(
    offset: i64,
    pid: i64,
    transactional: bool,
    control: Option<i16>,
    key: Option<Bytes>,
    value: Bytes,
    ts: i64,
) -> Record {
    let key = match control {
        // Control record key: version (i16) then type (i16).
        Some(t) => Some(Bytes::from([[0u8, 0u8], t.to_be_bytes()].concat())),
        None => key,
    };
    Record {
        transactional,
        control: control.is_some(),
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: pid,
        producer_epoch: 0,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset,
        sequence: 0,
        timestamp: ts,
        key,
        value: control.is_none().then_some(value),
        headers: Default::default(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::hand_made as raw;
    use super::*;

    pub(super) fn rec(
        offset: i64,
        pid: i64,
        transactional: bool,
        control: Option<i16>,
        v: &str,
    ) -> Record {
        let key = Some(Bytes::from(format!("k{v}")));
        raw(
            offset,
            pid,
            transactional,
            control,
            key,
            Bytes::from(v.to_string()),
            0,
        )
    }

    /// Feeds records through the resolver; returns emitted values, aborted offsets, open count.
    pub(super) fn run(records: Vec<Record>) -> (Vec<String>, Vec<i64>, usize, i64) {
        let mut out = Vec::new();
        let log = resolve_records(0, 0, records, |r: RawRecord| {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
            Ok::<(), RawLogError>(())
        })
        .unwrap();
        (out, log.aborted_offsets, log.open, log.next_offset)
    }

    #[test]
    pub(super) fn interleaved_transactions_come_out_in_offset_order() {
        // pid 1 writes a@0, pid 2 writes b@1, pid 1 writes c@2; pid 2 commits first (@3), then
        // pid 1 (@4): committed records still come out in log order a, b, c (last write wins in
        // log order, whatever order the markers arrive in).
        let (out, aborted, open, next) = run(vec![
            rec(0, 1, true, None, "a"),
            rec(1, 2, true, None, "b"),
            rec(2, 1, true, None, "c"),
            rec(3, 2, true, Some(1), ""),
            rec(4, 1, true, Some(1), ""),
        ]);
        assert_eq!(out, ["a", "b", "c"]);
        assert!(aborted.is_empty());
        assert_eq!((open, next), (0, 5));
    }

    #[test]
    pub(super) fn aborted_and_open_transactions_are_not_emitted() {
        // pid 1 aborts (a, c); pid 2 commits (b); pid 3 stays open (d) while a later
        // non-transactional record (e) and committed pid-2 record (f) follow it.
        let (out, aborted, open, _) = run(vec![
            rec(0, 1, true, None, "a"),
            rec(1, 2, true, None, "b"),
            rec(2, 1, true, None, "c"),
            rec(3, 1, true, Some(0), ""),
            rec(4, 2, true, Some(1), ""),
            rec(5, 3, true, None, "d"),
            rec(6, 2, true, None, "f"),
            rec(7, 2, true, Some(1), ""),
            rec(8, -1, false, None, "e"),
        ]);
        assert_eq!(out, ["b", "f", "e"]);
        assert_eq!(aborted, [0, 2]);
        assert_eq!(open, 1);
    }

    /// A record or marker of producer 1 with the given epoch.
    pub(super) fn at_epoch(offset: i64, epoch: i16, control: Option<i16>, v: &str) -> Record {
        let mut r = rec(offset, 1, true, control, v);
        r.producer_epoch = epoch;
        r
    }

    #[test]
    pub(super) fn a_re_initialised_producers_old_transaction_waits_for_its_own_marker() {
        // quirks::EPOCH_BUMP_BEFORE_MARKERS: the epoch is bumped once the old transaction is
        // prepared and its markers land partition by partition, so the restarted process (epoch
        // 1) can write b@1 before epoch
        // 0's COMMIT lands @3: a is committed by it, and comes out first, in log order.
        let (out, aborted, open, _) = run(vec![
            at_epoch(0, 0, None, "a"),
            at_epoch(1, 1, None, "b"),
            at_epoch(2, 1, Some(1), ""),
            at_epoch(3, 0, Some(1), ""),
        ]);
        assert_eq!(out, ["a", "b"]);
        assert!(aborted.is_empty());
        assert_eq!(open, 0);
        // The same with an old transaction that was being aborted.
        let (out, aborted, open, _) = run(vec![
            at_epoch(0, 0, None, "a"),
            at_epoch(1, 1, None, "b"),
            at_epoch(2, 0, Some(0), ""),
            at_epoch(3, 1, Some(1), ""),
        ]);
        assert_eq!(out, ["b"]);
        assert_eq!((aborted, open), (vec![0], 0));
        // The newer epoch's COMMIT does not settle the old transaction: at the end of the log it
        // is still open (and b, committed behind it, is handed on by `finish`).
        let (out, aborted, open, _) = run(vec![
            at_epoch(0, 0, None, "a"),
            at_epoch(1, 1, None, "b"),
            at_epoch(2, 1, Some(1), ""),
        ]);
        assert_eq!(out, ["b"]);
        assert!(aborted.is_empty());
        assert_eq!(open, 1);
    }

    #[test]
    pub(super) fn a_marker_with_a_later_epoch_settles_older_epochs_only_when_its_own_has_nothing_open(
    ) {
        // Kafka fences with an ABORT in the bumped epoch.
        let (out, aborted, open, _) =
            run(vec![at_epoch(0, 3, None, "a"), at_epoch(1, 4, Some(0), "")]);
        assert!(out.is_empty());
        assert_eq!((aborted, open), (vec![0], 0));
        // A KIP-890 broker commits with the epoch after the records'.
        let (out, aborted, open, _) =
            run(vec![at_epoch(0, 3, None, "a"), at_epoch(1, 4, Some(1), "")]);
        assert_eq!(out, ["a"]);
        assert!(aborted.is_empty());
        assert_eq!(open, 0);
        // An older epoch's marker never settles a newer epoch's records.
        let (out, _, open, _) = run(vec![at_epoch(0, 4, None, "a"), at_epoch(1, 3, Some(1), "")]);
        assert!(out.is_empty());
        assert_eq!(open, 1);
    }

    #[test]
    pub(super) fn an_old_epochs_transaction_whose_marker_never_comes_is_given_up_after_the_timeout()
    {
        let mut resolver = StreamResolver::new(0, 0);
        let mut out = Vec::new();
        let mut emit = |r: RawRecord| {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
            Ok::<(), RawLogError>(())
        };
        let mut old = at_epoch(0, 0, None, "a");
        old.timestamp = 1_000;
        let mut new = at_epoch(1, 1, None, "b");
        new.timestamp = 5_000;
        for r in [old, new, at_epoch(2, 1, Some(1), "")] {
            resolver.push(r, &mut emit).unwrap();
        }
        assert_eq!(resolver.abort_older_than(1_000, &mut emit).unwrap(), 0);
        assert_eq!(resolver.abort_older_than(2_000, &mut emit).unwrap(), 1);
        let log = resolver.finish(&mut emit).unwrap();
        assert_eq!(out, ["b"]);
        assert_eq!((log.aborted_offsets, log.open), (vec![0], 0));
    }

    #[test]
    pub(super) fn a_second_transaction_of_one_producer_is_resolved_by_its_own_marker() {
        let (out, aborted, open, _) = run(vec![
            rec(0, 1, true, None, "a"),
            rec(1, 1, true, Some(1), ""),
            rec(2, 1, true, None, "b"),
            rec(3, 1, true, Some(0), ""),
            rec(4, 1, true, None, "c"),
        ]);
        assert_eq!(out, ["a"]);
        assert_eq!(aborted, [2]);
        assert_eq!(open, 1);
    }
}
