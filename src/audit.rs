//! `tidemark audit`: proves exactly-once from a topic's raw log.
//!
//! It fetches every record batch of every partition with `read_uncommitted` isolation, so the broker
//! filters nothing, and replays the transaction protocol itself: a transactional record is
//! committed when its producer's next control batch is a COMMIT marker, aborted when it is an ABORT
//! marker, and still open when no marker follows. Non-transactional records are committed as
//! written. What a correct `read_committed` consumer sees is exactly the committed records, which
//! is what the audit reports on; it never trusts the broker to hide aborted data (some brokers do
//! not, see ARCHITECTURE.md). It also fetches with `read_committed` and counts the aborted records
//! such a broker serves anyway.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{
    ApiKey, FetchResponse, MetadataResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{Record, RecordBatchDecoder};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const FETCH_VERSION: i16 = 11;
const METADATA_VERSION: i16 = 8;

/// Errors of the audit.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
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

/// A minimal blocking Kafka protocol client: one connection, one request at a time.
struct RawClient {
    addr: String,
    stream: TcpStream,
    correlation: i32,
}

impl RawClient {
    fn connect(addr: &str) -> Result<RawClient, AuditError> {
        let io = |source| AuditError::Io {
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

    fn request<Req, Resp>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, AuditError>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        let proto = |e: anyhow::Error| AuditError::Protocol(e.to_string());
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("tidemark-audit")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, Req::header_version(version))
            .map_err(proto)?;
        req.encode(&mut body, version).map_err(proto)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        let addr = self.addr.clone();
        let io = |source| AuditError::Io {
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
            return Err(AuditError::Protocol(format!(
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
    /// Key bytes.
    pub key: Option<Bytes>,
    /// Value bytes.
    pub value: Option<Bytes>,
    /// Headers.
    pub headers: Vec<(String, Option<Bytes>)>,
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
) -> Result<Fetched, AuditError> {
    let mut out = Vec::new();
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
        let req = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(50)
            .with_min_bytes(0)
            .with_max_bytes(16 << 20)
            .with_isolation_level(isolation)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(8 << 20)])]);
        let resp: FetchResponse = client.request(ApiKey::Fetch, FETCH_VERSION, &req)?;
        if resp.error_code != 0 {
            return Err(AuditError::Broker {
                code: resp.error_code,
                what: format!("fetch {topic}"),
            });
        }
        let mut got_any = false;
        for t in resp.responses {
            for p in t.partitions {
                if p.error_code != 0 {
                    return Err(AuditError::Broker {
                        code: p.error_code,
                        what: format!("fetch {topic}/{partition}@{offset}"),
                    });
                }
                high_watermark = p.high_watermark;
                for a in p.aborted_transactions.unwrap_or_default() {
                    aborted_list.push((a.producer_id.0, a.first_offset));
                }
                let Some(mut bytes) = p.records else { continue };
                while bytes.has_remaining() {
                    let set = RecordBatchDecoder::decode(&mut bytes)
                        .map_err(|e| AuditError::Protocol(format!("record batch: {e}")))?;
                    for r in set.records {
                        if r.offset >= offset {
                            offset = r.offset + 1;
                            got_any = true;
                            out.push(r);
                        }
                    }
                }
            }
        }
        if !got_any {
            return Ok((out, aborted_list));
        }
    }
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
    /// The offset after the last record read.
    pub next_offset: i64,
}

/// Connects to the first bootstrap server.
fn connect(bootstrap: &str) -> Result<RawClient, AuditError> {
    let addr = bootstrap.split(',').next().unwrap_or(bootstrap).trim();
    RawClient::connect(addr.strip_prefix("PLAINTEXT://").unwrap_or(addr))
}

fn resolve(
    client: &mut RawClient,
    topic: &str,
    p: i32,
    from: i64,
) -> Result<PartitionLog, AuditError> {
    let (records, _) = fetch_partition(client, topic, p, 0, from)?;
    let mut log = PartitionLog {
        next_offset: from,
        ..PartitionLog::default()
    };
    let mut pending: HashMap<i64, Vec<RawRecord>> = HashMap::new();
    let mut committed: BTreeMap<i64, RawRecord> = BTreeMap::new();
    for r in records {
        log.next_offset = log.next_offset.max(r.offset + 1);
        if r.control {
            let batch = pending.remove(&r.producer_id).unwrap_or_default();
            match control_type(&r) {
                Some(1) => committed.extend(batch.into_iter().map(|x| (x.offset, x))),
                _ => log.aborted_offsets.extend(batch.iter().map(|x| x.offset)),
            }
            continue;
        }
        let raw = RawRecord {
            partition: p,
            offset: r.offset,
            producer_id: r.producer_id,
            transactional: r.transactional,
            key: r.key,
            value: r.value,
            headers: r
                .headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        };
        if raw.transactional {
            pending.entry(raw.producer_id).or_default().push(raw);
        } else {
            committed.insert(raw.offset, raw);
        }
    }
    log.open = pending.values().map(Vec::len).sum();
    log.aborted_offsets.sort_unstable();
    log.committed = committed.into_values().collect();
    Ok(log)
}

/// The partitions of `topic` and the address of each one's leader, from the cluster's metadata.
fn leaders(client: &mut RawClient, topic: &str) -> Result<BTreeMap<i32, String>, AuditError> {
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
            return Err(AuditError::Broker {
                code: t.error_code,
                what: format!("metadata {topic}"),
            });
        }
        for p in &t.partitions {
            let addr = brokers
                .get(&p.leader_id.0)
                .cloned()
                .ok_or_else(|| AuditError::Broker {
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
    fn get(&mut self, addr: &str) -> Result<&mut RawClient, AuditError> {
        if !self.clients.contains_key(addr) {
            self.clients
                .insert(addr.to_string(), RawClient::connect(addr)?);
        }
        Ok(self.clients.get_mut(addr).expect("inserted"))
    }
}

/// Reads partition `partition` of `topic` from offset `from` to its end, from the partition's
/// leader, and resolves every transaction from the COMMIT/ABORT markers in the log itself.
pub fn read_partition(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    from: i64,
) -> Result<PartitionLog, AuditError> {
    let mut client = connect(bootstrap)?;
    let leaders = leaders(&mut client, topic)?;
    let addr = leaders.get(&partition).ok_or_else(|| AuditError::Broker {
        code: 3,
        what: format!("{topic} has no partition {partition}"),
    })?;
    let mut leader = RawClient::connect(addr)?;
    resolve(&mut leader, topic, partition, from)
}

/// Reads a topic's raw log and resolves every transaction.
pub fn read_topic(bootstrap: &str, topic: &str) -> Result<TopicLog, AuditError> {
    let mut client = connect(bootstrap)?;
    let partitions = leaders(&mut client, topic)?;
    let mut conns = Leaders {
        clients: HashMap::new(),
    };
    let mut log = TopicLog::default();
    for (&p, addr) in &partitions {
        let client = conns.get(addr)?;
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

/// What the audit found in an output topic of panes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PaneReport {
    /// Committed pane records.
    pub panes: usize,
    /// Distinct dedup ids.
    pub windows: usize,
    /// (dedup id, pane index) pairs committed more than once, with their counts.
    pub duplicates: Vec<(String, u32, usize)>,
    /// Dedup ids whose pane indexes are not 0..=max without holes.
    pub gaps: Vec<String>,
    /// Committed records without the pane headers.
    pub not_panes: usize,
}

fn header<'a>(r: &'a RawRecord, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.as_ref())
        .and_then(|v| std::str::from_utf8(v).ok())
}

/// Checks committed pane records for duplicates and pane-index gaps.
pub fn check_panes(committed: &[RawRecord]) -> PaneReport {
    let mut seen: BTreeMap<(String, u32), usize> = BTreeMap::new();
    let mut report = PaneReport::default();
    for r in committed {
        let id = header(r, "tidemark.dedup_id");
        let idx = header(r, "tidemark.pane_index").and_then(|s| s.parse::<u32>().ok());
        match (id, idx) {
            (Some(id), Some(idx)) => *seen.entry((id.to_string(), idx)).or_default() += 1,
            _ => report.not_panes += 1,
        }
    }
    let mut by_id: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for ((id, idx), n) in &seen {
        report.panes += n;
        if *n > 1 {
            report.duplicates.push((id.clone(), *idx, *n));
        }
        by_id.entry(id).or_default().push(*idx);
    }
    report.windows = by_id.len();
    for (id, idxs) in by_id {
        if idxs.iter().enumerate().any(|(i, &x)| x != i as u32) {
            report.gaps.push(id.to_string());
        }
    }
    report
}
