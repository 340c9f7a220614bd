//! The committed mode: a partition's committed records from an offset to its end, with every
//! transaction resolved from the markers in the log, collected or streamed; and a whole topic's
//! committed records with a check of what the broker hands a `read_committed` consumer.

use super::client::*;
use super::fetch::*;
use super::resolve::*;
use super::*;

/// Reads the partitions of `topic` that `wanted` picks, each from `from(partition)` to its end,
/// and resolves their transactions (a partition the topic does not have is left out).
pub(super) fn read(
    cluster: &mut Cluster,
    topic: &str,
    wanted: impl Fn(i32) -> bool,
    mut from: impl FnMut(i32) -> i64,
) -> Result<BTreeMap<i32, PartitionLog>, RawLogError> {
    let mut out = BTreeMap::new();
    for (p, addr) in cluster.refresh(topic)?.clone() {
        if wanted(p) {
            let client = cluster.client(&addr)?;
            out.insert(p, resolve(client, topic, p, from(p))?);
        }
    }
    Ok(out)
}

/// Streams partition `p` of `topic` from `from` to its end; each committed record goes to `emit`
/// as soon as it is resolved, in offset order. Returns the log's tail summary (no committed
/// records in it).
pub(super) fn stream<E: From<RawLogError>>(
    cluster: &mut Cluster,
    topic: &str,
    p: i32,
    from: i64,
    emit: impl FnMut(RawRecord) -> Result<(), E>,
) -> Result<PartitionLog, E> {
    let addr = cluster.leader(topic, p)?;
    resolve_each(cluster.client(&addr)?, topic, p, from, emit)
}

/// Every partition of `topic` from its start, with what the broker hands a `read_committed`
/// consumer checked against the markers: how many aborted records it serves.
pub(super) fn topic_log(cluster: &mut Cluster, topic: &str) -> Result<TopicLog, RawLogError> {
    let mut log = TopicLog::default();
    for (p, addr) in cluster.refresh(topic)?.clone() {
        let client = cluster.client(&addr)?;
        // From where the log begins: a topic whose head a retention or DeleteRecords removed
        // (the repartition topic's consumed records, say) is read from what is left.
        let start = log_start(client, topic, p)?;
        log.starts.insert(p, start);
        let part = resolve(client, topic, p, start)?;
        log.aborted += part.aborted_offsets.len();
        log.open += part.open;
        log.committed.extend(part.committed);
        if !part.aborted_offsets.is_empty() {
            let (served, broker_aborted) = fetch_partition(client, topic, p, 1, start)?;
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

/// Partition `p` of `topic` from `from` to its end, its committed records collected.
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

/// Streams partition `p` of `topic` from `from` to its end on `client` through a transaction
/// resolver; committed records go to `emit` in offset order. Returns the log's tail summary (no
/// committed records in it).
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
