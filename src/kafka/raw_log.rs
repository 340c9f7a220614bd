//! The raw-log reader: a minimal Kafka protocol client (kafka-protocol) that fetches a partition's
//! record batches with `read_uncommitted` isolation, so the broker filters nothing, from the
//! partition's leader, and resolves every transaction itself from the COMMIT/ABORT markers in the
//! log (per producer id and epoch). Committed records come out in offset order, streamed or
//! collected. Restore, `audit`, `tail` and the tests read through it: nothing in tidemark trusts a
//! broker's `read_committed` filtering (some brokers serve aborted records, see ARCHITECTURE.md).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{
    ApiKey, FetchResponse, MetadataResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{Record, RecordBatchDecoder};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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

/// A minimal blocking Kafka protocol client: one connection, one request at a time. Tidemark reads
/// the raw log and the group's state through it; tests also speak the group protocol with it.
pub struct RawClient {
    addr: String,
    stream: TcpStream,
    correlation: i32,
}

impl RawClient {
    /// Connects to the broker at `addr` (host:port); a reply must come within 30 s.
    pub fn connect(addr: &str) -> Result<RawClient, RawLogError> {
        let io = |source| RawLogError::Io {
            addr: addr.to_string(),
            source,
        };
        let stream = TcpStream::connect(addr).map_err(io)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io)?;
        Ok(RawClient {
            addr: addr.to_string(),
            stream,
            correlation: 0,
        })
    }

    /// Sets how long a reply may take (a JoinGroup waits for the whole rebalance).
    pub fn set_read_timeout(&mut self, timeout: Duration) -> Result<(), RawLogError> {
        self.stream
            .set_read_timeout(Some(timeout))
            .map_err(|source| RawLogError::Io {
                addr: self.addr.clone(),
                source,
            })
    }

    /// Sends one request of API `key` at `version` and waits for its response.
    pub fn request<Req, Resp>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, RawLogError>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        let proto = |e: anyhow::Error| RawLogError::Protocol(e.to_string());
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("tidemark-raw-log")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, Req::header_version(version))
            .map_err(proto)?;
        req.encode(&mut body, version).map_err(proto)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        let addr = self.addr.clone();
        let io = |source| RawLogError::Io {
            addr: addr.clone(),
            source,
        };
        self.stream.write_all(&frame).map_err(io)?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).map_err(io)?;
        let mut buf = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
        self.stream.read_exact(&mut buf).map_err(io)?;
        let mut buf = Bytes::from(buf);
        let rh = ResponseHeader::decode(&mut buf, Resp::header_version(version)).map_err(proto)?;
        if rh.correlation_id != self.correlation {
            return Err(RawLogError::Protocol(format!(
                "correlation id {} does not match request {}",
                rh.correlation_id, self.correlation
            )));
        }
        Resp::decode(&mut buf, version).map_err(proto)
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

/// Records of one partition, and the broker's list of aborted transactions (producer id, first offset).
type Fetched = (Vec<Record>, Vec<(i64, i64)>);

fn fetch_partition(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    isolation: i8,
    from: i64,
) -> Result<Fetched, RawLogError> {
    let mut out = Vec::new();
    let aborted = fetch_each(client, topic, partition, isolation, from, |r| {
        out.push(r);
        Ok::<(), RawLogError>(())
    })?;
    Ok((out, aborted))
}

/// The sizes, the wait and the isolation level of one Fetch request.
#[derive(Debug, Clone, Copy)]
struct FetchLimits {
    /// 0: read uncommitted (everything in the log, which is how transactions are resolved here,
    /// from the markers); 1: read committed (only to see what the broker would filter).
    isolation: i8,
    max_wait_ms: i32,
    min_bytes: i32,
    max_bytes: i32,
    partition_max_bytes: i32,
}

/// A Fetch request for the partitions `parts` (partition, offset) of `topic`, without a fetch
/// session.
fn fetch_request(topic: &str, parts: &[(i32, i64)], limits: FetchLimits) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(limits.max_wait_ms)
        .with_min_bytes(limits.min_bytes)
        .with_max_bytes(limits.max_bytes)
        .with_isolation_level(limits.isolation)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(
                parts
                    .iter()
                    .map(|&(p, offset)| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(limits.partition_max_bytes)
                    })
                    .collect(),
            )])
}

/// Fetches partition `partition` of `topic` from `from` to its end, handing each record (control
/// records included) to `f` in offset order; returns the broker's aborted-transaction list.
///
/// The fetching and the decoding of record batches run on a helper thread one response ahead of
/// `f` (two responses at most wait in between), so that on a long read (a restore) the broker's
/// work, the decoding and what `f` does with the records overlap instead of taking turns.
fn fetch_each<E: From<RawLogError>>(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    isolation: i8,
    from: i64,
    mut f: impl FnMut(Record) -> Result<(), E>,
) -> Result<Vec<(i64, i64)>, E> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Record>>(2);
        let fetcher = std::thread::Builder::new()
            .name("raw-log-fetch".into())
            .spawn_scoped(scope, move || {
                fetch_responses(client, topic, partition, isolation, from, tx)
            })
            .map_err(|e| RawLogError::Io {
                addr: "raw-log fetch thread".into(),
                source: e,
            })?;
        // When `f` fails, `rx` is dropped on the way out: the fetcher's next send fails, it
        // stops, and the scope waits for it.
        for records in rx.iter() {
            for r in records {
                f(r)?;
            }
        }
        Ok(fetcher
            .join()
            .expect("the raw-log fetch thread does not panic")?)
    })
}

/// The fetch loop of [`fetch_each`]: sends the decoded records of each response to `tx`, in
/// offset order, until a fetch brings nothing new (or the receiver is gone); returns the broker's
/// aborted-transaction list.
fn fetch_responses(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    isolation: i8,
    from: i64,
    tx: std::sync::mpsc::SyncSender<Vec<Record>>,
) -> Result<Vec<(i64, i64)>, RawLogError> {
    let mut aborted_list = Vec::new();
    let mut offset = from;
    let mut last_progress = std::time::Instant::now();
    let mut high_watermark = -1;
    loop {
        // Long reads (restores of big changelogs) report progress every 5 s.
        if last_progress.elapsed() >= std::time::Duration::from_secs(5) {
            last_progress = std::time::Instant::now();
            tracing::info!(topic, partition, offset, high_watermark, "reading raw log");
        }
        let req = fetch_request(
            topic,
            &[(partition, offset)],
            FetchLimits {
                isolation,
                max_wait_ms: 50,
                min_bytes: 0,
                max_bytes: 16 << 20,
                partition_max_bytes: 8 << 20,
            },
        );
        let resp: FetchResponse = client.request(ApiKey::Fetch, FETCH_VERSION, &req)?;
        let mut records = Vec::new();
        for p in fetched_partitions(resp, topic, partition, offset)? {
            high_watermark = p.high_watermark;
            for a in p.aborted_transactions.unwrap_or_default() {
                aborted_list.push((a.producer_id.0, a.first_offset));
            }
            let Some(bytes) = p.records else { continue };
            each_new_record(bytes, &mut offset, |r| records.push(r))?;
        }
        if records.is_empty() || tx.send(records).is_err() {
            return Ok(aborted_list);
        }
    }
}

/// The partition answers of a fetch of `topic`'s partition `partition` at `offset`, or the first
/// error the answer carries (for the whole request or for a partition).
fn fetched_partitions(
    resp: FetchResponse,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<Vec<PartitionData>, RawLogError> {
    if resp.error_code != 0 {
        return Err(RawLogError::Broker {
            code: resp.error_code,
            what: format!("fetch {topic}"),
        });
    }
    let parts: Vec<PartitionData> = resp
        .responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .collect();
    if let Some(p) = parts.iter().find(|p| p.error_code != 0) {
        return Err(RawLogError::Broker {
            code: p.error_code,
            what: format!("fetch {topic}/{partition}@{offset}"),
        });
    }
    Ok(parts)
}

/// Decodes the record batches of one partition's fetch answer and hands `f` each record at or
/// after `*offset`, in offset order, moving `*offset` past it (a batch may begin before the offset
/// asked for).
fn each_new_record(
    mut bytes: Bytes,
    offset: &mut i64,
    mut f: impl FnMut(Record),
) -> Result<(), RawLogError> {
    while bytes.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut bytes)
            .map_err(|e| RawLogError::Protocol(format!("record batch: {e}")))?;
        for r in set.records {
            if r.offset >= *offset {
                *offset = r.offset + 1;
                f(r);
            }
        }
    }
    Ok(())
}

/// Control record key: version (i16) then type (i16): 0 = ABORT, 1 = COMMIT.
fn control_type(r: &Record) -> Option<i16> {
    let key = r.key.as_ref()?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
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

/// Connects to the first bootstrap server.
pub(crate) fn connect(bootstrap: &str) -> Result<RawClient, RawLogError> {
    let addr = bootstrap.split(',').next().unwrap_or(bootstrap).trim();
    RawClient::connect(addr.strip_prefix("PLAINTEXT://").unwrap_or(addr))
}

/// What became of a record whose transaction may not be resolved yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
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
/// happen, but a broker has ([`super::quirks::EPOCH_BUMP_BEFORE_MARKERS`]). So a newer epoch's
/// record settles
/// nothing: the older records wait for their own marker, or, if none ever comes, until their
/// transaction is older than the transaction timeout ([`StreamResolver::abort_older_than`], and
/// a restore's [`crate::state::changelog::OpenPolicy`]).
struct StreamResolver {
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
    fn new(partition: i32, from: i64) -> StreamResolver {
        StreamResolver {
            partition,
            queue: VecDeque::new(),
            popped: 0,
            open: HashMap::new(),
            aborted_offsets: Vec::new(),
            next_offset: from,
        }
    }

    /// Sets the fate of the records with the given sequence numbers.
    fn settle(&mut self, seqs: Vec<usize>, fate: Fate) {
        for seq in seqs {
            self.queue[seq - self.popped].1 = fate;
        }
    }

    fn push<E>(
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
    fn drain<E>(&mut self, emit: &mut impl FnMut(RawRecord) -> Result<(), E>) -> Result<(), E> {
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
    fn abort_older_than<E>(
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
    fn finish<E>(
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

/// Resolves the transactions of records already fetched from one partition's raw log (control
/// records included, in offset order, starting at `from`): committed records go to `emit` in
/// offset order, exactly as [`stream_partition`] hands them on. For tests and tools that hold a
/// log in memory.
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

/// Streams partition `p` of `topic` from `from` through a [`StreamResolver`]; committed records go
/// to `emit` in offset order. Returns the log's tail summary (no committed records in it).
fn resolve_each<E: From<RawLogError>>(
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

fn resolve(
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

/// The partitions of `topic` and the address of each one's leader, from the cluster's metadata.
fn leaders(client: &mut RawClient, topic: &str) -> Result<BTreeMap<i32, String>, RawLogError> {
    let meta: MetadataResponse = client.request(
        ApiKey::Metadata,
        METADATA_VERSION,
        &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))])),
    )?;
    let brokers: HashMap<i32, String> = meta
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
        .collect();
    let mut out = BTreeMap::new();
    for t in &meta.topics {
        if t.error_code != 0 {
            return Err(RawLogError::Broker {
                code: t.error_code,
                what: format!("metadata {topic}"),
            });
        }
        for p in &t.partitions {
            let addr = brokers
                .get(&p.leader_id.0)
                .cloned()
                .ok_or_else(|| RawLogError::Broker {
                    code: p.error_code,
                    what: format!("no leader for {topic}/{}", p.partition_index),
                })?;
            out.insert(p.partition_index, addr);
        }
    }
    Ok(out)
}

/// Connections to partition leaders, opened on first use.
struct Leaders {
    clients: HashMap<String, RawClient>,
}

impl Leaders {
    fn get(&mut self, addr: &str) -> Result<&mut RawClient, RawLogError> {
        if !self.clients.contains_key(addr) {
            self.clients
                .insert(addr.to_string(), RawClient::connect(addr)?);
        }
        Ok(self.clients.get_mut(addr).expect("inserted"))
    }

    /// Sends `req` to the broker at `addr`. On an error the connection is dropped (it is opened
    /// afresh next time); the caller forgets its leaders, which may have moved.
    fn fetch(&mut self, addr: &str, req: &FetchRequest) -> Result<FetchResponse, RawLogError> {
        let result = self
            .get(addr)
            .and_then(|c| c.request(ApiKey::Fetch, FETCH_VERSION, req));
        if result.is_err() {
            self.clients.remove(addr);
        }
        result
    }
}

/// The connection to the first bootstrap server, opened again after an error: a broker that
/// restarted closed the old one, and a reader that kept it would fail for ever.
struct Bootstrap {
    addr: String,
    client: Option<RawClient>,
}

impl Bootstrap {
    /// Connects at once, so that a wrong address fails where the reader is made.
    fn connect(bootstrap: &str) -> Result<Bootstrap, RawLogError> {
        Ok(Bootstrap {
            addr: bootstrap.to_string(),
            client: Some(connect(bootstrap)?),
        })
    }

    /// The topic's partitions and their leaders' addresses; on an error the connection is
    /// dropped and opened afresh next time.
    fn leaders(&mut self, topic: &str) -> Result<BTreeMap<i32, String>, RawLogError> {
        let client = match &mut self.client {
            Some(c) => c,
            None => self.client.insert(connect(&self.addr)?),
        };
        let result = leaders(client, topic);
        if result.is_err() {
            self.client = None;
        }
        result
    }
}

/// A connection to the leader of partition `partition` of `topic`.
fn leader_of(bootstrap: &str, topic: &str, partition: i32) -> Result<RawClient, RawLogError> {
    let mut client = connect(bootstrap)?;
    let leaders = leaders(&mut client, topic)?;
    let addr = leaders.get(&partition).ok_or_else(|| RawLogError::Broker {
        code: 3,
        what: format!("{topic} has no partition {partition}"),
    })?;
    RawClient::connect(addr)
}

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
    bootstrap: Bootstrap,
    conns: Leaders,
}

impl TopicReader {
    /// Connects to the first bootstrap server.
    pub fn connect(bootstrap: &str, topic: &str) -> Result<TopicReader, RawLogError> {
        Ok(TopicReader {
            topic: topic.to_string(),
            bootstrap: Bootstrap::connect(bootstrap)?,
            conns: Leaders {
                clients: HashMap::new(),
            },
        })
    }

    /// The topic's partitions and their leaders' addresses, asked afresh (leaders move).
    fn leaders(&mut self) -> Result<BTreeMap<i32, String>, RawLogError> {
        self.bootstrap.leaders(&self.topic)
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

    fn read_where(
        &mut self,
        wanted: impl Fn(i32) -> bool,
        mut from: impl FnMut(i32) -> i64,
    ) -> Result<BTreeMap<i32, PartitionLog>, RawLogError> {
        let mut out = BTreeMap::new();
        for (p, addr) in self.leaders()? {
            if wanted(p) {
                let read = self
                    .conns
                    .get(&addr)
                    .and_then(|client| resolve(client, &self.topic, p, from(p)));
                match read {
                    Ok(log) => out.insert(p, log),
                    Err(e) => {
                        self.conns.clients.remove(&addr);
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

/// Follows several partitions of one topic as they grow, for a reader that polls all the time (the
/// second stage of the repartition hop): one Fetch request per leader and poll for every followed
/// partition, and a transaction resolver per partition kept from one poll to the next, so each
/// record is fetched and decoded once. Committed records come out in offset order per partition.
///
/// A transaction with no marker yet holds back the records after it. One whose first record is
/// older than the transaction timeout is given up as aborted (the broker aborts it; it can never
/// commit), the rule a restore follows too, so a producer that died and never came back cannot
/// stall a partition for ever.
pub struct Tailer {
    topic: String,
    bootstrap: Bootstrap,
    conns: Leaders,
    /// Leader address per partition, asked afresh after an error.
    leaders: BTreeMap<i32, String>,
    parts: BTreeMap<i32, TailPart>,
    transaction_timeout: i64,
    /// Rotates the order of partitions in requests: some brokers fill a response from its first
    /// partition on, which would starve the others while it has a backlog.
    turn: usize,
    /// Whether the last poll left a partition short of its high watermark.
    behind: bool,
}

/// How long a fetch may wait when the last one left a partition behind. A broker may answer a
/// fetch whose read takes longer than its wait with nothing at all
/// ([`super::quirks::FETCH_ANSWERED_BEFORE_READ`]), and reads of a backlog take longest: with a one-millisecond wait the second stage could starve for seconds behind a
/// backlog. The wait costs nothing while data is there (the broker answers as soon as it has
/// some).
const BEHIND_WAIT_MS: i32 = 50;

/// One followed partition.
struct TailPart {
    resolver: StreamResolver,
    /// The offset of the next fetch.
    fetch_offset: i64,
    /// Whether the last fetch reached the partition's end (its high watermark): only then can
    /// an open transaction be judged to have no marker coming.
    at_end: bool,
}

impl std::fmt::Debug for Tailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tailer")
            .field("topic", &self.topic)
            .field("partitions", &self.parts.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Tailer {
    /// Connects to the first bootstrap server; transactions older than `transaction_timeout`
    /// (ms) without a marker are given up as aborted.
    pub fn connect(
        bootstrap: &str,
        topic: &str,
        transaction_timeout: i64,
    ) -> Result<Tailer, RawLogError> {
        Ok(Tailer {
            topic: topic.to_string(),
            bootstrap: Bootstrap::connect(bootstrap)?,
            conns: Leaders {
                clients: HashMap::new(),
            },
            leaders: BTreeMap::new(),
            parts: BTreeMap::new(),
            transaction_timeout,
            turn: 0,
            behind: false,
        })
    }

    /// Follows partition `p` from offset `from`, forgetting what was read of it before.
    pub fn follow(&mut self, p: i32, from: i64) {
        self.parts.insert(
            p,
            TailPart {
                resolver: StreamResolver::new(p, from),
                fetch_offset: from,
                at_end: false,
            },
        );
    }

    /// Stops following partition `p`.
    pub fn unfollow(&mut self, p: i32) {
        self.parts.remove(&p);
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

    /// Fetches every followed partition once, waiting at most `max_wait_ms` for data, and hands
    /// each committed record, resolved, to `emit`. Returns how many records were fetched (control
    /// records and records still in open transactions included).
    pub fn poll(
        &mut self,
        max_wait_ms: i32,
        mut emit: impl FnMut(RawRecord),
    ) -> Result<usize, RawLogError> {
        if self.parts.is_empty() {
            return Ok(0);
        }
        if self.parts.keys().any(|p| !self.leaders.contains_key(p)) {
            self.leaders = self.bootstrap.leaders(&self.topic)?;
        }
        let mut by_leader: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
        for (&p, part) in &self.parts {
            let addr = self.leaders.get(&p).ok_or_else(|| RawLogError::Broker {
                code: 3,
                what: format!("{} has no partition {p}", self.topic),
            })?;
            by_leader
                .entry(addr.clone())
                .or_default()
                .push((p, part.fetch_offset));
        }
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
            let resp = match self.conns.fetch(&addr, &req) {
                Ok(r) => r,
                Err(e) => {
                    self.leaders.clear();
                    return Err(e);
                }
            };
            if resp.error_code != 0 {
                self.leaders.clear();
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
                        self.leaders.clear();
                        return Err(RawLogError::Broker {
                            code: fp.error_code,
                            what: format!("fetch {}/{p}@{}", self.topic, part.fetch_offset),
                        });
                    }
                    if let Some(mut bytes) = fp.records {
                        while bytes.has_remaining() {
                            let set = RecordBatchDecoder::decode(&mut bytes)
                                .map_err(|e| RawLogError::Protocol(format!("record batch: {e}")))?;
                            for r in set.records {
                                if r.offset >= part.fetch_offset {
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
                    }
                    part.at_end = part.fetch_offset >= fp.high_watermark;
                    self.behind |= !part.at_end;
                }
            }
        }
        let before = crate::clock::wall_ms().saturating_sub(self.transaction_timeout);
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
            part.resolver.aborted_offsets.clear();
        }
        Ok(fetched)
    }
}

/// Says whether partitions of a topic hold a data record at or after a given offset, from the raw
/// log, in one fetch per leader: whether an input is caught up, judged from the log itself rather
/// than from a high watermark a broker may misreport ([`super::quirks::HIGH_WATERMARK_AFTER_BATCH`]).
/// Control records (transaction markers) do not count.
pub struct Peeker {
    bootstrap: Bootstrap,
    conns: Leaders,
    /// Leaders per topic, asked on first use and again after an error.
    leaders: HashMap<String, BTreeMap<i32, String>>,
}

impl std::fmt::Debug for Peeker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peeker").finish_non_exhaustive()
    }
}

impl Peeker {
    /// Connects to the first bootstrap server.
    pub fn connect(bootstrap: &str) -> Result<Peeker, RawLogError> {
        Ok(Peeker {
            bootstrap: Bootstrap::connect(bootstrap)?,
            conns: Leaders {
                clients: HashMap::new(),
            },
            leaders: HashMap::new(),
        })
    }

    /// For each (partition, offset) of `topic`: whether a data record lies at or after the
    /// offset. An offset before the log's start counts as having data unless the log is empty;
    /// so does any offset below the high watermark that the broker's answer did not show (an
    /// empty answer is "don't know", never "caught up").
    pub fn data_after(
        &mut self,
        topic: &str,
        wanted: &[(i32, i64)],
    ) -> Result<BTreeMap<i32, bool>, RawLogError> {
        if !self.leaders.contains_key(topic) {
            let l = self.bootstrap.leaders(topic)?;
            self.leaders.insert(topic.to_string(), l);
        }
        let mut by_leader: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
        for &(p, offset) in wanted {
            let addr = self.leaders[topic]
                .get(&p)
                .ok_or_else(|| RawLogError::Broker {
                    code: 3,
                    what: format!("{topic} has no partition {p}"),
                })?;
            by_leader.entry(addr.clone()).or_default().push((p, offset));
        }
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
            let resp = match self.conns.fetch(&addr, &req) {
                Ok(r) => r,
                Err(e) => {
                    self.leaders.remove(topic);
                    return Err(e);
                }
            };
            for t in resp.responses {
                for fp in t.partitions {
                    let p = fp.partition_index;
                    let Some(&(_, offset)) = parts.iter().find(|(q, _)| *q == p) else {
                        continue;
                    };
                    let data = match fp.error_code {
                        0 => {
                            let mut data = false;
                            // Offsets up to here were seen (as control records).
                            let mut seen = offset;
                            if let Some(mut bytes) = fp.records {
                                while bytes.has_remaining() && !data {
                                    let set =
                                        RecordBatchDecoder::decode(&mut bytes).map_err(|e| {
                                            RawLogError::Protocol(format!("record batch: {e}"))
                                        })?;
                                    for r in &set.records {
                                        data |= !r.control && r.offset >= offset;
                                        seen = seen.max(r.offset + 1);
                                    }
                                }
                            }
                            // A broker may answer before it has read the log
                            // (quirks::FETCH_ANSWERED_BEFORE_READ): offsets below the high
                            // watermark that the answer did not show may hold data, so they count
                            // as data.
                            data || seen < fp.high_watermark
                        }
                        // Before the log's start: data unless the log is empty.
                        OFFSET_OUT_OF_RANGE => fp.log_start_offset < fp.high_watermark,
                        code => {
                            self.leaders.remove(topic);
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
}

/// Reads one partition's raw log from an offset to its end, again and again, on kept
/// connections: every data record, whatever became of its transaction (committed, aborted or
/// still open). For logs where a record counts as soon as it is written, such as the claims
/// topic's.
pub struct PartitionTail {
    topic: String,
    partition: i32,
    bootstrap: Bootstrap,
    conns: Leaders,
    leader: Option<String>,
}

impl std::fmt::Debug for PartitionTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionTail")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

/// How many answers that stop short of the high watermark a [`PartitionTail`] asks again.
const SHORT_ANSWERS: usize = 50;

impl PartitionTail {
    /// Connects to the first bootstrap server.
    pub fn connect(
        bootstrap: &str,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionTail, RawLogError> {
        Ok(PartitionTail {
            topic: topic.to_string(),
            partition,
            bootstrap: Bootstrap::connect(bootstrap)?,
            conns: Leaders {
                clients: HashMap::new(),
            },
            leader: None,
        })
    }

    /// Every data record from `from` to the end of the log, and the offset after the last record
    /// (control records included). An answer that brings nothing while the high watermark lies
    /// further on is asked again (a broker may answer before it has read its log,
    /// [`super::quirks::FETCH_ANSWERED_BEFORE_READ`]); the read fails rather than stop short of
    /// the end.
    pub fn read_from(&mut self, from: i64) -> Result<(Vec<RawRecord>, i64), RawLogError> {
        let result = self.read_inner(from);
        if result.is_err() {
            self.leader = None;
        }
        result
    }

    fn read_inner(&mut self, from: i64) -> Result<(Vec<RawRecord>, i64), RawLogError> {
        let addr = match &self.leader {
            Some(a) => a.clone(),
            None => {
                let l = self.bootstrap.leaders(&self.topic)?;
                let a = l
                    .get(&self.partition)
                    .cloned()
                    .ok_or_else(|| RawLogError::Broker {
                        code: 3,
                        what: format!("{} has no partition {}", self.topic, self.partition),
                    })?;
                self.leader = Some(a.clone());
                a
            }
        };
        let (topic, partition) = (self.topic.as_str(), self.partition);
        let mut out = Vec::new();
        let mut offset = from;
        let mut short = 0;
        loop {
            // A fetch that may not wait at all may get nothing, not even the high watermark
            // (quirks::FETCH_ANSWERED_BEFORE_READ): this one may wait 1 ms for one byte.
            let req = fetch_request(
                topic,
                &[(partition, offset)],
                FetchLimits {
                    isolation: 0,
                    max_wait_ms: 1,
                    min_bytes: 1,
                    max_bytes: 4 << 20,
                    partition_max_bytes: 4 << 20,
                },
            );
            let resp = self.conns.fetch(&addr, &req)?;
            let mut high_watermark = -1;
            let before = offset;
            for p in fetched_partitions(resp, topic, partition, offset)? {
                high_watermark = high_watermark.max(p.high_watermark);
                let Some(bytes) = p.records else { continue };
                each_new_record(bytes, &mut offset, |r| {
                    if !r.control {
                        out.push(RawRecord::from_record(partition, r));
                    }
                })?;
            }
            if offset > before {
                short = 0;
                continue;
            }
            if offset >= high_watermark {
                return Ok((out, offset));
            }
            short += 1;
            if short > SHORT_ANSWERS {
                return Err(RawLogError::Protocol(format!(
                    "{topic}/{partition}: the broker answers nothing at offset {offset}, below its high watermark {high_watermark}"
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

/// Kafka's OFFSET_OUT_OF_RANGE error code.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// Reads a topic's raw log and resolves every transaction.
pub fn read_topic(bootstrap: &str, topic: &str) -> Result<TopicLog, RawLogError> {
    let mut reader = TopicReader::connect(bootstrap, topic)?;
    let mut log = TopicLog::default();
    for (&p, addr) in &reader.leaders()? {
        let client = reader.conns.get(addr)?;
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
        let client = reader.conns.get(addr)?;
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A raw-log record for tests: a control record of type `control` (0 = ABORT, 1 = COMMIT),
    /// or a data record with `key` and `value`, stamped `ts`.
    pub(crate) fn raw(
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

    fn rec(offset: i64, pid: i64, transactional: bool, control: Option<i16>, v: &str) -> Record {
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
    fn run(records: Vec<Record>) -> (Vec<String>, Vec<i64>, usize, i64) {
        let mut out = Vec::new();
        let log = resolve_records(0, 0, records, |r: RawRecord| {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
            Ok::<(), RawLogError>(())
        })
        .unwrap();
        (out, log.aborted_offsets, log.open, log.next_offset)
    }

    #[test]
    fn interleaved_transactions_come_out_in_offset_order() {
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
    fn aborted_and_open_transactions_are_not_emitted() {
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
    fn at_epoch(offset: i64, epoch: i16, control: Option<i16>, v: &str) -> Record {
        let mut r = rec(offset, 1, true, control, v);
        r.producer_epoch = epoch;
        r
    }

    #[test]
    fn a_re_initialised_producers_old_transaction_waits_for_its_own_marker() {
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
    fn a_marker_with_a_later_epoch_settles_older_epochs_only_when_its_own_has_nothing_open() {
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
    fn an_old_epochs_transaction_whose_marker_never_comes_is_given_up_after_the_timeout() {
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
    fn a_second_transaction_of_one_producer_is_resolved_by_its_own_marker() {
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
