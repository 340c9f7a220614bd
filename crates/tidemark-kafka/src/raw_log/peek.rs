//! The peek mode: whether a partition holds a data record at or after an offset, without
//! reading it.

use super::client::*;
use super::fetch::*;
use super::resolve::StreamResolver;
use super::*;
use bytes::Buf;
use kafka_protocol::records::{Record, RecordBatchDecoder};
use std::collections::BTreeMap;
use std::convert::Infallible;

/// For each (partition, offset) of `topic`: whether a data record lies at or after the offset,
/// from the raw log, in one fetch per leader: whether an input is caught up, judged from the log
/// itself rather than from a high watermark a broker may misreport
/// ([`crate::quirks::HIGH_WATERMARK_AFTER_BATCH`]). Control records (transaction markers)
/// do not count, nor do records of a transaction that the same answer shows aborted. An offset
/// before the log's start counts as having data unless the log is empty; so does any offset below
/// the high watermark that the broker's answer did not show (an empty answer is "don't know",
/// never "caught up").
pub(super) fn data_after(
    cluster: &mut Cluster,
    topic: &str,
    wanted: &[(i32, i64)],
) -> Result<BTreeMap<i32, bool>, RawLogError> {
    let by_leader = cluster.by_leader(topic, wanted.iter().copied())?;
    let mut out = BTreeMap::new();
    for (addr, parts) in by_leader {
        let req = fetch_request(
            topic,
            &parts,
            FetchLimits {
                isolation: 0,
                max_wait_ms: 1,
                min_bytes: 1,
                max_bytes: 1 << 20,
                partition_max_bytes: 64 << 10,
            },
        );
        let resp = cluster.fetch(&addr, &req)?;
        for t in resp.responses {
            for fp in t.partitions {
                let p = fp.partition_index;
                let Some(&(_, offset)) = parts.iter().find(|(q, _)| *q == p) else {
                    continue;
                };
                let data = match fp.error_code {
                    0 => {
                        let mut look = Look::new(p, offset);
                        if let Some(mut bytes) = fp.records {
                            while bytes.has_remaining() && !look.committed {
                                let set = RecordBatchDecoder::decode(&mut bytes)
                                    .map_err(RawLogError::codec("record batch"))?;
                                set.records.into_iter().for_each(|r| look.see(r));
                            }
                        }
                        let (data, seen) = look.finish();
                        // A broker may answer before it has read the log
                        // (quirks::FETCH_ANSWERED_BEFORE_READ): offsets below the high
                        // watermark that the answer did not show may hold data, so they count
                        // as data.
                        data || seen < fp.high_watermark
                    }
                    // Before the log's start: data unless the log is empty.
                    OFFSET_OUT_OF_RANGE => fp.log_start_offset < fp.high_watermark,
                    code => {
                        cluster.forget_leaders();
                        return Err(RawLogError::Broker {
                            code,
                            what: format!("fetch {topic}/{p}@{offset}"),
                        });
                    }
                };
                out.insert(p, data);
            }
        }
    }
    Ok(out)
}

/// What one answer shows after an offset, with its transactions resolved as every reader of the
/// raw log resolves them ([`StreamResolver`]): a record at or after the offset counts once its
/// transaction commits or while it has no marker yet (it may commit), never once it aborted.
/// Data records before the offset are left out; markers are all fed, since one may settle
/// records after the offset.
struct Look {
    from: i64,
    resolver: StreamResolver,
    /// Whether a committed record at or after `from` has come out.
    committed: bool,
}

impl Look {
    fn new(partition: i32, from: i64) -> Look {
        Look {
            from,
            resolver: StreamResolver::new(partition, from),
            committed: false,
        }
    }

    fn see(&mut self, r: Record) {
        if r.control || r.offset >= self.from {
            let committed = &mut self.committed;
            self.resolver
                .push(r, &mut |_| {
                    *committed = true;
                    Ok::<(), Infallible>(())
                })
                .unwrap_or_else(|e| match e {});
        }
    }

    /// Whether data waits after `from`, and the offset up to which the answer was seen.
    fn finish(mut self) -> (bool, i64) {
        let committed = &mut self.committed;
        let log = self
            .resolver
            .finish(&mut |_| {
                *committed = true;
                Ok::<(), Infallible>(())
            })
            .unwrap_or_else(|e| match e {});
        (self.committed || log.open > 0, log.next_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::super::hand_made as raw;
    use super::*;
    use bytes::Bytes;

    fn data(offset: i64, pid: i64, transactional: bool) -> Record {
        raw(
            offset,
            pid,
            transactional,
            None,
            None,
            Bytes::from_static(b"v"),
            0,
        )
    }

    fn marker(offset: i64, pid: i64, kind: i16) -> Record {
        raw(offset, pid, true, Some(kind), None, Bytes::new(), 0)
    }

    fn look(from: i64, records: &[Record]) -> (bool, i64) {
        let mut l = Look::new(0, from);
        records.iter().cloned().for_each(|r| l.see(r));
        l.finish()
    }

    /// A transaction marker's control type: the transaction aborted.
    const ABORT: i16 = 0;
    /// A transaction marker's control type: the transaction committed.
    const COMMIT: i16 = 1;

    #[test]
    fn records_of_an_aborted_transaction_are_not_waiting_data() {
        let aborted = [data(0, 7, true), data(1, 7, true), marker(2, 7, ABORT)];
        assert_eq!(look(0, &aborted), (false, 3));
        let committed = [data(0, 7, true), marker(1, 7, COMMIT)];
        assert_eq!(look(0, &committed), (true, 2));
        assert_eq!(look(1, &committed), (false, 2), "only the marker after 1");
        let open = [data(0, 7, true), marker(1, 7, ABORT), data(2, 7, true)];
        assert_eq!(look(0, &open), (true, 3), "a later transaction, still open");
        let plain = [data(0, -1, false)];
        assert_eq!(look(0, &plain), (true, 1));
        // A committed transaction before an aborted one of the same producer.
        let both = [
            data(0, 7, true),
            marker(1, 7, COMMIT),
            data(2, 7, true),
            marker(3, 7, ABORT),
        ];
        assert_eq!(look(0, &both), (true, 4));
        assert_eq!(look(2, &both), (false, 4));
        // Another producer's ABORT settles nothing of this one.
        let other = [data(0, 7, true), marker(1, 8, ABORT)];
        assert_eq!(look(0, &other), (true, 2));
    }

    #[test]
    fn markers_settle_epochs_as_the_resolver_does() {
        // A marker of an older epoch settles nothing of a newer epoch's records: a re-initialised
        // producer may write before its old transaction's marker (EPOCH_BUMP_BEFORE_MARKERS).
        let mut newer = data(0, 7, true);
        newer.producer_epoch = 1;
        assert_eq!(look(0, &[newer, marker(1, 7, ABORT)]), (true, 2));
        // The ABORT that fences a re-initialised producer carries the bumped epoch and settles
        // the older epoch's open records.
        let mut fencing = marker(1, 7, ABORT);
        fencing.producer_epoch = 1;
        assert_eq!(look(0, &[data(0, 7, true), fencing]), (false, 2));
    }
}
