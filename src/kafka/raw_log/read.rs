//! Whole reads of a partition or topic with every transaction resolved: one partition collected or
//! streamed, a topic polled by a reader that keeps its connections, a follower that hands on what
//! is new, and the dump of every record for tools and tests.

use super::client::*;
use super::fetch::*;
use super::resolve::*;
use super::*;
use std::collections::BTreeMap;

/// Reads partition `partition` of `topic` from offset `from` to its end, from the partition's
/// leader, and resolves every transaction from the COMMIT/ABORT markers in the log itself.
pub fn read_partition(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    from: i64,
) -> Result<PartitionLog, RawLogError> {
    resolve(
        &mut leader_of(bootstrap, topic, partition)?,
        topic,
        partition,
        from,
    )
}

/// Like [`read_partition`], but hands each committed record to `emit` as soon as it is resolved
/// instead of collecting the log in memory (restores of big changelogs). The returned log has no
/// committed records, only the counts and the next offset.
pub fn stream_partition<E: From<RawLogError>>(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    from: i64,
    emit: impl FnMut(RawRecord) -> Result<(), E>,
) -> Result<PartitionLog, E> {
    let mut leader = leader_of(bootstrap, topic, partition)?;
    resolve_each(&mut leader, topic, partition, from, emit)
}

/// Reads the partitions of one topic, keeping its connections (to the bootstrap server and to each
/// partition leader) from one read to the next, for readers that poll.
pub struct TopicReader {
    topic: String,
    cluster: Cluster,
}

impl TopicReader {
    /// Connects to the first bootstrap server.
    pub fn connect(bootstrap: &str, topic: &str) -> Result<TopicReader, RawLogError> {
        Ok(TopicReader {
            topic: topic.to_string(),
            cluster: Cluster::connect(bootstrap)?,
        })
    }

    /// The topic's partitions and their leaders' addresses, asked afresh (leaders move).
    pub(super) fn leaders(&mut self) -> Result<BTreeMap<i32, String>, RawLogError> {
        self.cluster.refresh(&self.topic).cloned()
    }

    /// Reads every partition from `from(partition)` to its end and resolves its transactions.
    pub fn read(
        &mut self,
        from: impl FnMut(i32) -> i64,
    ) -> Result<BTreeMap<i32, PartitionLog>, RawLogError> {
        self.read_where(|_| true, from)
    }

    /// Reads the partitions `parts` from `from(partition)` to their ends and resolves their
    /// transactions (a partition the topic does not have is left out).
    pub fn read_partitions(
        &mut self,
        parts: &[i32],
        from: impl FnMut(i32) -> i64,
    ) -> Result<BTreeMap<i32, PartitionLog>, RawLogError> {
        self.read_where(|p| parts.contains(&p), from)
    }

    pub(super) fn read_where(
        &mut self,
        wanted: impl Fn(i32) -> bool,
        mut from: impl FnMut(i32) -> i64,
    ) -> Result<BTreeMap<i32, PartitionLog>, RawLogError> {
        let mut out = BTreeMap::new();
        for (p, addr) in self.leaders()? {
            if wanted(p) {
                let read = self
                    .cluster
                    .client(&addr)
                    .and_then(|client| resolve(client, &self.topic, p, from(p)));
                match read {
                    Ok(log) => out.insert(p, log),
                    Err(e) => {
                        self.cluster.forget(&addr);
                        return Err(e);
                    }
                };
            }
        }
        Ok(out)
    }
}

/// Follows one partition's committed records across repeated reads: each read starts at
/// [`Follow::from`] (the first record still in an open transaction, or the end), and each
/// committed record is handed on once, even when it follows an open one and is read again.
#[derive(Debug, Default, Clone)]
pub struct Follow {
    /// Where the next read starts.
    pub from: i64,
    /// Offsets at or after `from` already handed on.
    done: std::collections::BTreeSet<i64>,
}

impl Follow {
    /// Follows from `from`.
    pub fn starting_at(from: i64) -> Follow {
        Follow {
            from,
            ..Follow::default()
        }
    }

    /// The committed records of `log` (read from [`Follow::from`]) not handed on before, in
    /// offset order; moves `from` to the first unresolved offset or the end.
    pub fn fresh<'a>(&mut self, log: &'a PartitionLog) -> Vec<&'a RawRecord> {
        let fresh = log
            .committed
            .iter()
            .filter(|r| self.done.insert(r.offset))
            .collect();
        self.from = log.first_open.unwrap_or(log.next_offset);
        let from = self.from;
        self.done.retain(|&o| o >= from);
        fresh
    }
}

/// Reads a topic's raw log and resolves every transaction.
pub fn read_topic(bootstrap: &str, topic: &str) -> Result<TopicLog, RawLogError> {
    let mut reader = TopicReader::connect(bootstrap, topic)?;
    let mut log = TopicLog::default();
    for (&p, addr) in &reader.leaders()? {
        let client = reader.cluster.client(addr)?;
        let part = resolve(client, topic, p, 0)?;
        log.aborted += part.aborted_offsets.len();
        log.open += part.open;
        log.committed.extend(part.committed);
        // What does the broker hand a read_committed consumer?
        if !part.aborted_offsets.is_empty() {
            let (served, broker_aborted) = fetch_partition(client, topic, p, 1, 0)?;
            let hidden_by_list = |offset: i64, pid: i64| {
                broker_aborted
                    .iter()
                    .any(|&(bp, first)| bp == pid && first <= offset)
            };
            log.aborted_served_to_read_committed += served
                .iter()
                .filter(|r| !r.control && part.aborted_offsets.binary_search(&r.offset).is_ok())
                .filter(|r| !hidden_by_list(r.offset, r.producer_id))
                .count();
        }
    }
    Ok(log)
}

/// One record of a raw log as [`dump_topic`] lists it: the record, its batch's producer epoch,
/// its control type (0 = ABORT, 1 = COMMIT) if it is a marker, and what the resolver made of it.
#[derive(Debug, Clone)]
pub struct DumpedRecord {
    /// The record (a marker's key is its control key).
    pub record: RawRecord,
    /// The producer epoch of its batch.
    pub epoch: i16,
    /// For a transaction marker, its type.
    pub control: Option<i16>,
    /// "committed", "aborted" or "open" for data records; "marker" for markers.
    pub fate: &'static str,
}

/// Every record of every partition of `topic`, markers included, with what the resolver made of
/// each: for diagnosing a run after the fact (the tests dump the topics of a failed chaos run).
pub fn dump_topic(bootstrap: &str, topic: &str) -> Result<Vec<DumpedRecord>, RawLogError> {
    let mut reader = TopicReader::connect(bootstrap, topic)?;
    let mut out = Vec::new();
    for (&p, addr) in &reader.leaders()? {
        let client = reader.cluster.client(addr)?;
        let (records, _) = fetch_partition(client, topic, p, 0, 0)?;
        let mut committed = std::collections::BTreeSet::new();
        let log = resolve_records(p, 0, records.iter().cloned(), |r| {
            committed.insert(r.offset);
            Ok::<(), RawLogError>(())
        })?;
        for r in records {
            let control = if r.control { control_type(&r) } else { None };
            let fate = if r.control {
                "marker"
            } else if committed.contains(&r.offset) {
                "committed"
            } else if log.aborted_offsets.binary_search(&r.offset).is_ok() {
                "aborted"
            } else {
                "open"
            };
            out.push(DumpedRecord {
                epoch: r.producer_epoch,
                control,
                fate,
                record: RawRecord::from_record(p, r),
            });
        }
    }
    Ok(out)
}

/// Streams partition `p` of `topic` from `from` through a [`StreamResolver`]; committed records go
/// to `emit` in offset order. Returns the log's tail summary (no committed records in it).
pub(super) fn resolve_each<E: From<RawLogError>>(
    client: &mut RawClient,
    topic: &str,
    p: i32,
    from: i64,
    mut emit: impl FnMut(RawRecord) -> Result<(), E>,
) -> Result<PartitionLog, E> {
    let mut resolver = StreamResolver::new(p, from);
    fetch_each(client, topic, p, 0, from, |r| resolver.push(r, &mut emit))?;
    resolver.finish(&mut emit)
}

pub(super) fn resolve(
    client: &mut RawClient,
    topic: &str,
    p: i32,
    from: i64,
) -> Result<PartitionLog, RawLogError> {
    let mut committed = Vec::new();
    let mut log = resolve_each(client, topic, p, from, |r| {
        committed.push(r);
        Ok::<(), RawLogError>(())
    })?;
    log.committed = committed;
    Ok(log)
}
