//! Fetching a partition's record batches from its leader: the Fetch request, the answers checked
//! for errors, the batches decoded into records in offset order.

use super::client::*;
use super::*;
use bytes::{Buf, Bytes};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder};

/// Records of one partition, and the broker's list of aborted transactions (producer id, first offset).
pub(super) type Fetched = (Vec<Record>, Vec<(i64, i64)>);

pub(super) fn fetch_partition(
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
pub(super) struct FetchLimits {
    /// 0: read uncommitted (everything in the log, which is how transactions are resolved here,
    /// from the markers); 1: read committed (only to see what the broker would filter).
    pub(super) isolation: i8,
    pub(super) max_wait_ms: i32,
    pub(super) min_bytes: i32,
    pub(super) max_bytes: i32,
    pub(super) partition_max_bytes: i32,
}

/// A Fetch request for the partitions `parts` (partition, offset) of `topic`, without a fetch
/// session.
pub(super) fn fetch_request(
    topic: &str,
    parts: &[(i32, i64)],
    limits: FetchLimits,
) -> FetchRequest {
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
pub(super) fn fetch_each<E: From<RawLogError>>(
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
pub(super) fn fetch_responses(
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

/// Where partition `partition` of `topic` begins: 0 unless a fetch at offset 0 is answered out
/// of range, else the log start offset the broker's out-of-range answer names (records a
/// retention or a DeleteRecords removed). The log is asked with a fetch, not with ListOffsets for
/// the earliest offset, because a broker may answer that with an offset past records still in
/// the log ([`crate::quirks::EARLIEST_OFFSET_PAST_RECORDS`]).
pub(super) fn log_start(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
) -> Result<i64, RawLogError> {
    let req = fetch_request(
        topic,
        &[(partition, 0)],
        FetchLimits {
            isolation: 0,
            max_wait_ms: 1,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partition_max_bytes: 64 << 10,
        },
    );
    let resp: FetchResponse = client.request(ApiKey::Fetch, FETCH_VERSION, &req)?;
    if resp.error_code != 0 {
        return Err(RawLogError::Broker {
            code: resp.error_code,
            what: format!("fetch {topic}/{partition}@0 (where the log begins)"),
        });
    }
    let answer = resp
        .responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == partition);
    match answer {
        Some(p) if p.error_code == OFFSET_OUT_OF_RANGE && p.log_start_offset >= 0 => {
            Ok(p.log_start_offset)
        }
        Some(p) if p.error_code != 0 => Err(RawLogError::Broker {
            code: p.error_code,
            what: format!("fetch {topic}/{partition}@0 (where the log begins)"),
        }),
        // Offset 0 is in range (a broker may leave a partition with nothing to give out of its
        // answer, `quirks::FETCH_ANSWERED_BEFORE_READ`): a read from 0 that meets the log's
        // start fails there, never silently.
        _ => Ok(0),
    }
}

/// The partition answers of a fetch of `topic`'s partition `partition` at `offset`, or the first
/// error the answer carries (for the whole request or for a partition).
pub(super) fn fetched_partitions(
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
pub(super) fn each_new_record(
    mut bytes: Bytes,
    offset: &mut i64,
    mut f: impl FnMut(Record),
) -> Result<(), RawLogError> {
    while bytes.has_remaining() {
        let set =
            RecordBatchDecoder::decode(&mut bytes).map_err(RawLogError::codec("record batch"))?;
        for r in set.records {
            if r.offset >= *offset {
                *offset = r.offset + 1;
                f(r);
            }
        }
    }
    Ok(())
}
