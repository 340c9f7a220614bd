//! The raw-log reader: a minimal Kafka protocol client (kafka-protocol) that fetches a partition's
//! record batches with `read_uncommitted` isolation, so the broker filters nothing, from the
//! partition's leader, and resolves every transaction itself from the COMMIT/ABORT markers in the
//! log (per producer id and epoch). Restore, `audit`, `tail`, the sink, the hop's second stage,
//! the catch-up looks and the tests read through it: nothing in tidemark trusts a broker's
//! `read_committed` filtering (some brokers serve aborted records, see ARCHITECTURE.md).
//!
//! There is one reader, [`LogReader`], and it reads in four modes: *committed* (a partition's
//! committed records from an offset to its end, collected or streamed), *raw* (every record,
//! markers included, whatever became of its transaction), *peek* (whether data waits after an
//! offset) and *follow* (partitions followed as they grow, each committed record handed on once).
//!
//! * `client` — one connection (`RawClient`: TLS and SASL as [`crate::secure`] says), and the
//!   `Cluster` the reader reaches the brokers through: the leader of each partition and a
//!   connection per leader, dropped and asked afresh after an error;
//! * `sasl` — the SASL exchange on a fresh connection;
//! * `fetch` — Fetch requests and their answers decoded into records;
//! * `resolve` — the transaction resolver (pure, with its tests);
//! * `reader` — `LogReader`, the one type callers hold, and its modes' entry points;
//! * `committed`, `raw`, `peek`, `follow` — the four modes.

mod client;
mod committed;
mod fetch;
mod follow;
mod peek;
mod raw;
mod reader;
mod resolve;
mod sasl;

pub(crate) use client::connect;
pub use client::RawClient;
pub use follow::Following;
pub use reader::{read_topic, LogReader};
pub use resolve::{hand_made, resolve_records};

use bytes::Bytes;
use kafka_protocol::records::Record;
use std::collections::BTreeMap;

const FETCH_VERSION: i16 = 11;
/// Kafka's OFFSET_OUT_OF_RANGE error code.
const OFFSET_OUT_OF_RANGE: i16 = 1;
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
    /// A request that does not encode, or a response or record batch that does not decode.
    #[error("protocol: {what}: {source}")]
    Codec {
        /// What was being encoded or decoded.
        what: &'static str,
        /// The codec's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The broker's answer decodes but does not fit what was asked.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The connection could not be opened or authenticated.
    #[error(transparent)]
    Connect(#[from] crate::secure::ConnectError),
    /// The broker answered with an error code.
    #[error("broker error code {code} for {what}")]
    Broker {
        /// Kafka error code.
        code: i16,
        /// What was asked.
        what: String,
    },
}

impl RawLogError {
    /// A codec error of the protocol crate while encoding or decoding `what`.
    pub(crate) fn codec(what: &'static str) -> impl Fn(anyhow::Error) -> RawLogError {
        move |e| RawLogError::Codec {
            what,
            source: e.into(),
        }
    }
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
    /// The producer epoch of the batch.
    pub epoch: i16,
    /// For a transaction marker (a control record), its type: 0 = ABORT, 1 = COMMIT. Only the
    /// raw mode hands on markers; every other mode hands on data records only.
    pub marker: Option<i16>,
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
    /// Whether this is a data record, not a transaction marker.
    pub fn is_data(&self) -> bool {
        self.marker.is_none()
    }

    /// A record of partition `partition` as the protocol decoder gave it.
    fn from_record(partition: i32, r: Record) -> RawRecord {
        RawRecord {
            partition,
            offset: r.offset,
            producer_id: r.producer_id,
            transactional: r.transactional,
            epoch: r.producer_epoch,
            marker: if r.control {
                resolve::control_type(&r)
            } else {
                None
            },
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
    /// Per partition, the offset its log begins at (above 0 when a retention or DeleteRecords
    /// removed its head; the read starts there).
    pub starts: BTreeMap<i32, i64>,
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
