//! [`LogReader`], the one reader of the raw log, and its four modes' entry points.

use super::client::*;
use super::follow::Following;
use super::{committed, peek, raw};
use super::{PartitionLog, RawLogError, RawRecord, TopicLog};
use crate::secure::Brokers;
use std::collections::BTreeMap;

/// Reads the raw log of any topic, from each partition's leader, on connections kept from one read
/// to the next. It reads in four modes:
///
/// * committed: [`LogReader::committed`] collects the committed records of partitions from an
///   offset to their ends, [`LogReader::stream`] hands them on as they are resolved (restores of
///   big changelogs), and [`LogReader::topic_log`] reads a whole topic and checks what the broker
///   hands a `read_committed` consumer (`audit`);
/// * raw: [`LogReader::raw`], every record of a partition, markers included;
/// * peek: [`LogReader::peek`], whether data waits after an offset;
/// * follow: [`LogReader::poll`], partitions followed as they grow ([`Following`] keeps what
///   each read leaves for the next).
///
/// A read that fails drops the reader's connections and the leaders it knew: the next read asks
/// afresh (a broker that restarted closed its connections; a leader may have moved).
pub struct LogReader {
    cluster: Cluster,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader").finish_non_exhaustive()
    }
}

impl LogReader {
    /// Connects to the first of the `bootstrap` servers at once, so that a wrong address fails
    /// here.
    pub fn connect(brokers: impl Into<Brokers>) -> Result<LogReader, RawLogError> {
        Ok(LogReader {
            cluster: Cluster::connect(brokers.into())?,
        })
    }

    /// Connects on the first read instead, and again on the read after one that failed: for a
    /// reader that lives as long as its owner and must outlast a broker's restart.
    pub fn lazy(brokers: impl Into<Brokers>) -> LogReader {
        LogReader {
            cluster: Cluster::lazy(brokers.into()),
        }
    }

    /// The partitions of `topic`, asked afresh.
    pub fn partitions(&mut self, topic: &str) -> Result<Vec<i32>, RawLogError> {
        let read = self
            .cluster
            .refresh(topic)
            .map(|l| l.keys().copied().collect());
        self.after(read)
    }

    /// Reads every partition of `topic` that `wanted` picks, each from `from(partition)` to its
    /// end, and resolves its transactions.
    pub fn committed(
        &mut self,
        topic: &str,
        wanted: impl Fn(i32) -> bool,
        from: impl FnMut(i32) -> i64,
    ) -> Result<BTreeMap<i32, PartitionLog>, RawLogError> {
        let read = committed::read(&mut self.cluster, topic, wanted, from);
        self.after(read)
    }

    /// Reads partition `p` of `topic` from `from` to its end and hands each committed record to
    /// `emit` as soon as its transaction is resolved, in offset order, instead of collecting the
    /// log in memory. The returned log has no committed records, only the counts and the next
    /// offset.
    pub fn stream<E: From<RawLogError>>(
        &mut self,
        topic: &str,
        p: i32,
        from: i64,
        emit: impl FnMut(RawRecord) -> Result<(), E>,
    ) -> Result<PartitionLog, E> {
        let read = committed::stream(&mut self.cluster, topic, p, from, emit);
        self.after(read)
    }

    /// Reads every partition of `topic` from its start and resolves every transaction; counts
    /// the aborted records the broker serves to a `read_committed` fetch.
    pub fn topic_log(&mut self, topic: &str) -> Result<TopicLog, RawLogError> {
        let read = committed::topic_log(&mut self.cluster, topic);
        self.after(read)
    }

    /// Where partition `p` of `topic` begins: the first offset a fetch can read, past any
    /// records a retention or a DeleteRecords removed.
    pub fn log_start(&mut self, topic: &str, p: i32) -> Result<i64, RawLogError> {
        let read = self
            .cluster
            .leader(topic, p)
            .and_then(|addr| super::fetch::log_start(self.cluster.client(&addr)?, topic, p));
        self.after(read)
    }

    /// Every record of partition `p` of `topic` from `from` to the end of the log, data and
    /// markers, whatever became of its transaction, and the offset after the last one.
    pub fn raw(
        &mut self,
        topic: &str,
        p: i32,
        from: i64,
    ) -> Result<(Vec<RawRecord>, i64), RawLogError> {
        let read = raw::read(&mut self.cluster, topic, p, from);
        self.after(read)
    }

    /// For each (partition, offset) of `topic` in `wanted`: whether a data record that is
    /// committed, or may still commit, lies at or after the offset.
    pub fn peek(
        &mut self,
        topic: &str,
        wanted: &[(i32, i64)],
    ) -> Result<BTreeMap<i32, bool>, RawLogError> {
        let read = peek::data_after(&mut self.cluster, topic, wanted);
        self.after(read)
    }

    /// Fetches every partition `following` follows once, waiting at most `max_wait_ms` for data,
    /// and hands each committed record not handed on before to `emit`, in offset order per
    /// partition. Returns how many records were fetched (markers and records of open
    /// transactions included).
    pub fn poll(
        &mut self,
        following: &mut Following,
        max_wait_ms: i32,
        emit: impl FnMut(RawRecord),
    ) -> Result<usize, RawLogError> {
        let read = following.poll(&mut self.cluster, max_wait_ms, emit);
        self.after(read)
    }

    /// Passes a read's result on; after an error, forgets every connection and leader.
    fn after<T, E>(&mut self, read: Result<T, E>) -> Result<T, E> {
        if read.is_err() {
            self.cluster.forget_all();
        }
        read
    }
}

/// Reads a topic's raw log from its start and resolves every transaction, on a connection of its
/// own ([`LogReader::topic_log`]).
pub fn read_topic(brokers: impl Into<Brokers>, topic: &str) -> Result<TopicLog, RawLogError> {
    LogReader::connect(brokers)?.topic_log(topic)
}
