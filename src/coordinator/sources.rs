//! The first stage's committed input offsets (the repartition hop and `--passthrough`).
//!
//! Every transaction that consumed from input partition `p` of topic `t` writes, into partition
//! `p mod N` of the offsets topic (N partitions), an **offset marker**: key
//! `\0tidemark.offset/t/p`, value and stamp = the next input offset, with the replay epoch, the
//! pipeline fingerprint, the source's watermark and N in its headers. What is committed is read
//! back from the raw log, as a changelog partition's is: the highest stamp of a committed
//! transaction's marker for that source, or the stamp of its latest committed reset marker
//! (`tidemark replay`), never the group's offsets.

use super::errors::{Cause, RunError};
use crate::changelog::{
    source_marker_key, source_markers, OpenDecision, OpenPolicy, SourceMarkers,
    MARKER_PARTITIONS_HEADER, OFFSET_MARKER_KEY, SOURCE_WATERMARK_HEADER,
};
use crate::kafka::secure::Brokers;
use rdkafka::message::{Header, OwnedHeaders};

pub(super) use crate::changelog::marker_partition as offsets_partition;

/// Headers of a source's offset marker.
pub(super) fn marker_headers(
    next: i64,
    epoch: u64,
    fingerprint: &str,
    watermark: i64,
    offsets_partitions: i32,
) -> OwnedHeaders {
    crate::changelog::marker_headers(Some(next), epoch, fingerprint)
        .insert(Header {
            key: SOURCE_WATERMARK_HEADER,
            value: Some(&watermark.to_string()),
        })
        .insert(Header {
            key: MARKER_PARTITIONS_HEADER,
            value: Some(&offsets_partitions.to_string()),
        })
}

/// The key of `topic`/`p`'s offset marker.
pub(super) fn marker_key(topic: &str, p: i32) -> Vec<u8> {
    source_marker_key(OFFSET_MARKER_KEY, topic, p)
}

/// Reads what the offsets topic's committed transactions say of input partition `p` of `topic`.
/// Open transactions are waited for as a restore waits for them ([`OpenPolicy`]): a marker whose
/// transaction has not resolved yet may still commit, and missing it would read input again.
pub(super) fn restore(
    brokers: &Brokers,
    offsets_topic: &str,
    offsets_partitions: i32,
    topic: &str,
    p: i32,
    policy: OpenPolicy,
) -> Result<SourceMarkers, RunError> {
    let started = crate::clock::wall_ms();
    loop {
        let (state, log) = source_markers(
            brokers,
            offsets_topic,
            offsets_partition(p, offsets_partitions),
            offsets_partitions,
            topic,
            p,
        )
        .map_err(|e| {
            RunError::Fatal(Cause::part(
                format!("reading {offsets_topic} for {topic}/{p}"),
                e,
            ))
        })?;
        if let Some(n) = state.written_under {
            return Err(RunError::Incompatible(format!(
                "the offsets topic {offsets_topic} has {offsets_partitions} partitions, but its markers were written with {n}: \
                 its partition count must not change (the committed input offsets would be lost)"
            )));
        }
        match policy.decide(&log, crate::clock::wall_ms(), started) {
            OpenDecision::Wait(_) => std::thread::sleep(policy.poll),
            OpenDecision::Resolved | OpenDecision::GiveUp(_) => return Ok(state),
        }
    }
}
