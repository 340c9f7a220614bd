//! Looks without reading: whether a partition holds a data record at or after an offset.

use super::client::*;
use super::fetch::*;
use super::*;
use bytes::Buf;
use kafka_protocol::records::RecordBatchDecoder;
use std::collections::{BTreeMap, HashMap};

/// Says whether partitions of a topic hold a data record at or after a given offset, from the raw
/// log, in one fetch per leader: whether an input is caught up, judged from the log itself rather
/// than from a high watermark a broker may misreport ([`crate::kafka::quirks::HIGH_WATERMARK_AFTER_BATCH`]).
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
            conns: Leaders::new(),
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

/// Kafka's OFFSET_OUT_OF_RANGE error code.
pub(super) const OFFSET_OUT_OF_RANGE: i16 = 1;
