//! The raw-log reader: a minimal Kafka protocol client (kafka-protocol) that fetches a partition's
//! record batches with `read_uncommitted` isolation, so the broker filters nothing, from the
//! partition's leader, and resolves every transaction itself from the COMMIT/ABORT markers in the
//! log (per producer id and epoch). Committed records come out in offset order, streamed or
//! collected. Restore, `audit`, `tail` and the tests read through it: nothing in tidemark trusts a
//! broker's `read_committed` filtering (some brokers serve aborted records, see ARCHITECTURE.md).
//!
//! * `client` — one connection (`RawClient`), and the `Cluster` every reader reaches the brokers
//!   through: the leader of each partition and a connection per leader, dropped and asked afresh
//!   after an error;
//! * `fetch` — Fetch requests and their answers decoded into records;
//! * `resolve` — the transaction resolver (pure, with its tests);
//! * `read` — whole reads: a partition, a topic, a follower, a dump;
//! * `committed_reader` — committed records of many partitions side by side (the repartition topic);
//! * `peeker` — whether data waits after an offset;
//! * `raw_reader` — every data record of one partition, read on from where it stopped (claims).

mod client;
mod committed_reader;
mod fetch;
mod peeker;
mod raw_reader;
mod read;
mod resolve;

pub(crate) use client::connect;
pub use client::RawClient;
pub use committed_reader::CommittedReader;
pub use peeker::Peeker;
pub use raw_reader::RawPartitionReader;
pub use read::{
    dump_topic, read_partition, read_topic, stream_partition, DumpedRecord, Follow, TopicReader,
};
pub use resolve::resolve_records;
#[cfg(test)]
pub(crate) use resolve::tests;

use bytes::Bytes;
use kafka_protocol::records::Record;
use std::collections::BTreeMap;

const FETCH_VERSION: i16 = 11;
const METADATA_VERSION: i16 = 8;

/// Errors of raw-log reads.
#[derive(Debug, thiserror::Error)]
pub enum RawLogError {
    /// Network failure.
    #[error("i/o with {addr}: {source}")]
    Io {
        /// Broker address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// A request or response could not be encoded or decoded.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The broker answered with an error code.
    #[error("broker error code {code} for {what}")]
    Broker {
        /// Kafka error code.
        code: i16,
        /// What was asked.
        what: String,
    },
}

/// One record as read from the raw log.
#[derive(Debug, Clone)]
pub struct RawRecord {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Producer id of the batch.
    pub producer_id: i64,
    /// Whether the batch was transactional.
    pub transactional: bool,
    /// The record's timestamp (epoch ms; the producer's create time for tidemark's records).
    pub timestamp: i64,
    /// Key bytes.
    pub key: Option<Bytes>,
    /// Value bytes.
    pub value: Option<Bytes>,
    /// Headers.
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl RawRecord {
    /// A record of partition `partition` as the protocol decoder gave it.
    fn from_record(partition: i32, r: Record) -> RawRecord {
        RawRecord {
            partition,
            offset: r.offset,
            producer_id: r.producer_id,
            transactional: r.transactional,
            timestamp: r.timestamp,
            key: r.key,
            value: r.value,
            headers: r
                .headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        }
    }

    /// The value of header `name` as text, if present and UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_ref())
            .and_then(|v| std::str::from_utf8(v).ok())
    }
}

/// Where each transactional record ended up.
#[derive(Debug, Default)]
pub struct TopicLog {
    /// Records a correct read_committed consumer sees, in partition and offset order.
    pub committed: Vec<RawRecord>,
    /// Records of aborted transactions.
    pub aborted: usize,
    /// Records of transactions with no marker yet.
    pub open: usize,
    /// Aborted records the broker served to a read_committed fetch.
    pub aborted_served_to_read_committed: usize,
}

/// One partition's log from some offset on, with its transactions resolved.
#[derive(Debug, Default)]
pub struct PartitionLog {
    /// Committed records, in offset order.
    pub committed: Vec<RawRecord>,
    /// Offsets of records of aborted transactions, ascending.
    pub aborted_offsets: Vec<i64>,
    /// Records of transactions with no marker yet.
    pub open: usize,
    /// Offset of the first record of a transaction with no marker yet: everything before it is
    /// resolved.
    pub first_open: Option<i64>,
    /// Per producer id with an open transaction, the timestamp of that transaction's first record
    /// (a transaction cannot commit once it is older than its producer's transaction timeout).
    pub open_since: BTreeMap<i64, i64>,
    /// The offset after the last record read.
    pub next_offset: i64,
}
