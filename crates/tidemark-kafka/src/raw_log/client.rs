//! The connection: a minimal blocking Kafka protocol client, the partition leaders found from the
//! cluster's metadata, and connections to them opened on first use and again after an error.

use super::*;
use crate::secure::{Brokers, ConnectError, Security, Stream};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::fetch_request::FetchRequest;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FetchResponse, MetadataResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::time::Duration;

/// How long a reply may take unless [`RawClient::set_read_timeout`] says otherwise.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The `ApiVersions` version of the first request on every connection (not a flexible one,
/// which every broker answers).
const API_VERSIONS_VERSION: i16 = 2;

/// A minimal blocking Kafka protocol client: one connection, one request at a time. Tidemark reads
/// the raw log and the group's state through it; tests also speak the group protocol with it.
pub struct RawClient {
    addr: String,
    stream: Stream,
    correlation: i32,
}

impl RawClient {
    /// Connects to the broker at `addr` (host:port) over plain TCP, without authentication; a
    /// reply must come within 30 s.
    pub fn connect(addr: &str) -> Result<RawClient, RawLogError> {
        RawClient::open(addr, &Security::default())
    }

    /// Connects to the broker at `addr` as `security` says (TLS, then SASL), and asks which
    /// API versions it supports, so that a listener that expects another protocol fails here,
    /// with what to change, rather than at the first read.
    pub fn open(addr: &str, security: &Security) -> Result<RawClient, RawLogError> {
        let stream = Stream::open(addr, security, READ_TIMEOUT)?;
        let mut client = RawClient {
            addr: addr.to_string(),
            stream,
            correlation: 0,
        };
        let versions: Result<ApiVersionsResponse, RawLogError> = client.request(
            ApiKey::ApiVersions,
            API_VERSIONS_VERSION,
            &ApiVersionsRequest::default(),
        );
        match versions {
            Ok(v) if v.error_code == 0 => {}
            Ok(v) => {
                return Err(RawLogError::Broker {
                    code: v.error_code,
                    what: format!("ApiVersions with {addr}"),
                })
            }
            Err(RawLogError::Io { source, .. }) if security.protocol.tls() => {
                return Err(ConnectError::ClosedAfterHandshake {
                    addr: addr.to_string(),
                    reason: source.to_string(),
                }
                .into())
            }
            Err(RawLogError::Io { source, .. }) => {
                return Err(ConnectError::NoAnswer {
                    addr: addr.to_string(),
                    reason: source.to_string(),
                }
                .into())
            }
            Err(e) => return Err(e),
        }
        if let Some(sasl) = &security.sasl {
            super::sasl::authenticate(&mut client, addr, sasl)?;
        }
        Ok(client)
    }

    /// Connects to the cluster's first bootstrap server that answers, as [`RawClient::open`].
    pub fn bootstrap(brokers: &Brokers) -> Result<RawClient, RawLogError> {
        connect(brokers)
    }

    /// Sets how long a reply may take (a JoinGroup waits for the whole rebalance).
    pub fn set_read_timeout(&mut self, timeout: Duration) -> Result<(), RawLogError> {
        self.stream
            .tcp()
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
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("tidemark-raw-log")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, Req::header_version(version))
            .map_err(RawLogError::codec("request header"))?;
        req.encode(&mut body, version)
            .map_err(RawLogError::codec("request"))?;
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
        let rh = ResponseHeader::decode(&mut buf, Resp::header_version(version))
            .map_err(RawLogError::codec("response header"))?;
        if rh.correlation_id != self.correlation {
            return Err(RawLogError::Protocol(format!(
                "correlation id {} does not match request {}",
                rh.correlation_id, self.correlation
            )));
        }
        Resp::decode(&mut buf, version).map_err(RawLogError::codec("response"))
    }
}

/// Connects to the first bootstrap server that answers, in the order given. Settings that
/// cannot work (a certificate not trusted, credentials refused) fail at the first server: the
/// others would refuse them too.
pub(crate) fn connect(brokers: &Brokers) -> Result<RawClient, RawLogError> {
    let mut last = None;
    for addr in brokers.servers() {
        match RawClient::open(addr, brokers.security()) {
            Ok(c) => return Ok(c),
            Err(RawLogError::Connect(e)) if !e.is_retryable() => return Err(e.into()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| RawLogError::Protocol("no bootstrap server is given".into())))
}

/// The partitions of `topic` and the address of each one's leader, from the cluster's metadata.
pub(super) fn leaders(
    client: &mut RawClient,
    topic: &str,
) -> Result<BTreeMap<i32, String>, RawLogError> {
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

/// The cluster as every raw-log reader reaches it: the connection to the first bootstrap server,
/// the leader of each partition of the topics read (asked on first use, and afresh after an
/// error, since leaders move), and one connection per leader, opened on first use. A connection
/// that fails is dropped and opened afresh next time: a broker that restarted closed the old one,
/// and a reader that kept it would fail for ever.
pub(super) struct Cluster {
    brokers: Brokers,
    bootstrap: Option<RawClient>,
    leaders: HashMap<String, BTreeMap<i32, String>>,
    conns: HashMap<String, RawClient>,
}

impl Cluster {
    /// Connects to the first bootstrap server at once, so that a wrong address fails where the
    /// reader is made.
    pub(super) fn connect(brokers: Brokers) -> Result<Cluster, RawLogError> {
        Ok(Cluster {
            bootstrap: Some(connect(&brokers)?),
            brokers,
            leaders: HashMap::new(),
            conns: HashMap::new(),
        })
    }

    /// Opens no connection until the first read needs one.
    pub(super) fn lazy(brokers: Brokers) -> Cluster {
        Cluster {
            brokers,
            bootstrap: None,
            leaders: HashMap::new(),
            conns: HashMap::new(),
        }
    }

    /// The partitions of `topic` and their leaders' addresses, asked afresh.
    pub(super) fn refresh(&mut self, topic: &str) -> Result<&BTreeMap<i32, String>, RawLogError> {
        let client = match &mut self.bootstrap {
            Some(c) => c,
            None => self.bootstrap.insert(connect(&self.brokers)?),
        };
        match leaders(client, topic) {
            Ok(l) => Ok(self
                .leaders
                .entry(topic.to_string())
                .insert_entry(l)
                .into_mut()),
            Err(e) => {
                self.bootstrap = None;
                Err(e)
            }
        }
    }

    /// The partitions of `topic` and their leaders' addresses, asked on first use.
    pub(super) fn leaders(&mut self, topic: &str) -> Result<&BTreeMap<i32, String>, RawLogError> {
        if !self.leaders.contains_key(topic) {
            self.refresh(topic)?;
        }
        Ok(&self.leaders[topic])
    }

    /// The partitions `parts` (partition, offset) of `topic` grouped by leader, in the order
    /// given. A partition no leader is known for is asked for afresh once; one the topic does not
    /// have is an error.
    pub(super) fn by_leader(
        &mut self,
        topic: &str,
        parts: impl IntoIterator<Item = (i32, i64)> + Clone,
    ) -> Result<BTreeMap<String, Vec<(i32, i64)>>, RawLogError> {
        let known = self.leaders(topic)?;
        if parts
            .clone()
            .into_iter()
            .any(|(p, _)| !known.contains_key(&p))
        {
            self.refresh(topic)?;
        }
        let leaders = &self.leaders[topic];
        let mut out: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
        for (p, offset) in parts {
            let addr = leaders.get(&p).ok_or_else(|| no_partition(topic, p))?;
            out.entry(addr.clone()).or_default().push((p, offset));
        }
        Ok(out)
    }

    /// The address of the leader of partition `p` of `topic`.
    pub(super) fn leader(&mut self, topic: &str, p: i32) -> Result<String, RawLogError> {
        let mut by = self.by_leader(topic, [(p, 0)])?;
        Ok(by.pop_first().expect("one partition asked for").0)
    }

    /// The connection to the broker at `addr`, opened on first use.
    pub(super) fn client(&mut self, addr: &str) -> Result<&mut RawClient, RawLogError> {
        if !self.conns.contains_key(addr) {
            self.conns.insert(
                addr.to_string(),
                RawClient::open(addr, self.brokers.security())?,
            );
        }
        Ok(self.conns.get_mut(addr).expect("inserted"))
    }

    /// Forgets what an error puts in doubt: the connection to `addr` and every leader known.
    pub(super) fn forget(&mut self, addr: &str) {
        self.conns.remove(addr);
        self.forget_leaders();
    }

    /// Forgets every connection and every leader known, after an error that puts them all in
    /// doubt: they are opened and asked afresh on next use.
    pub(super) fn forget_all(&mut self) {
        self.bootstrap = None;
        self.conns.clear();
        self.forget_leaders();
    }

    /// Forgets every leader known (an answer said a partition's leader is elsewhere, or failed):
    /// they are asked afresh on next use.
    pub(super) fn forget_leaders(&mut self) {
        self.leaders.clear();
    }

    /// Sends `req` to the broker at `addr`. On an error the connection and the leaders known are
    /// dropped (see [`Cluster::forget`]).
    pub(super) fn fetch(
        &mut self,
        addr: &str,
        req: &FetchRequest,
    ) -> Result<FetchResponse, RawLogError> {
        let result = self
            .client(addr)
            .and_then(|c| c.request(ApiKey::Fetch, FETCH_VERSION, req));
        if result.is_err() {
            self.forget(addr);
        }
        result
    }
}

/// The error for a partition `topic` does not have (UNKNOWN_TOPIC_OR_PARTITION).
pub(super) fn no_partition(topic: &str, p: i32) -> RawLogError {
    RawLogError::Broker {
        code: 3,
        what: format!("{topic} has no partition {p}"),
    }
}
