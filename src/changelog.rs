//! The state changelog: how a partition's state and committed input offset are written to Kafka
//! and read back.
//!
//! Every commit cycle produces, into the same transaction as the panes and the group offsets, one
//! changelog record per changed state entry: key = the encoded state key, value = the full current
//! value (or a tombstone), on the changelog partition equal to the input partition, with the header
//! `tidemark.input_offset` = the input offset that transaction commits (its *stamp*). For every
//! input partition the transaction consumed from, it also writes an **offset marker**: key
//! [`OFFSET_MARKER_KEY`] (a tag no state entry uses, so compaction keeps the latest marker and the
//! marker never enters the state), value and stamp = that offset.
//!
//! **The log is the only truth.** The committed input offset of a partition is the highest stamp
//! of a record of a COMMITTED transaction in its changelog partition, with transactions resolved
//! from the COMMIT/ABORT markers in the raw log ([`crate::kafka::raw_log::LogReader::stream`]).
//! Neither the broker's `read_committed` filtering
//! ([`crate::kafka::quirks::ABORTED_RECORDS_SERVED`]) nor the consumer group's committed offset
//! ([`crate::kafka::quirks::GROUP_OFFSETS_LATE`]) is trusted; the group offset is only compared
//! with it.
//!
//! **Restore rule.** A restore applies, in log order with the last write winning, every state
//! record of a committed transaction, and takes the highest committed stamp as the committed input
//! offset. A transaction with no marker yet may still commit (Apache Kafka writes the markers
//! after `EndTxn` returns), so a restore waits for open transactions to resolve, and gives up on
//! one only when it is older than the transaction timeout (a broker aborts such a transaction; it
//! can no longer commit), or when the restore has waited one timeout. It then stores the offset
//! of the first such record as the changelog position, so a later restore reads it again.
//!
//! **Replays.** `tidemark replay` writes, in one transaction, a **reset marker**
//! ([`RESET_MARKER_KEY`], stamped with the new input offset) into every changelog partition whose
//! input partition moves, and an **epoch marker** ([`EPOCH_MARKER_KEY`]) into the others. A restore
//! ignores every record before the latest committed reset marker: at the marker the state read so
//! far (and local state written before it) is dropped, and the committed offset becomes the
//! marker's stamp, even though earlier stamps were higher. Both markers carry the new replay epoch
//! and the fingerprint of the pipeline definition ([`EPOCH_HEADER`], [`FINGERPRINT_HEADER`]);
//! offset markers carry them too, so a restore also learns which definition wrote the state
//! ([`Lineage`], stored with the local state).

use crate::clock::wall_ms;
use crate::kafka::raw_log::{LogReader, PartitionLog, RawLogError, RawRecord};
use crate::kafka::secure::Brokers;
use crate::state::store::{Lineage, StateStore, StoreError, StoredOffsets};
use rocksdb::WriteBatch;
use std::time::{Duration, Instant};

/// Changelog records applied per RocksDB write during a restore.
const RESTORE_CHUNK: usize = 1_000;

/// Header carrying the input offset a changelog record's transaction commits.
pub const STAMP_HEADER: &str = "tidemark.input_offset";

/// Key of the offset marker record. State keys start with a tag byte of 1 or more
/// ([`crate::windowing::keys`]), so tag 0 never collides with one.
pub const OFFSET_MARKER_KEY: &[u8] = b"\x00tidemark.offset";

/// Key of the reset marker that `tidemark replay` writes: state before it is ignored.
pub const RESET_MARKER_KEY: &[u8] = b"\x00tidemark.reset";

/// Key of the epoch marker that `tidemark replay` writes where the input does not move.
pub const EPOCH_MARKER_KEY: &[u8] = b"\x00tidemark.epoch";

/// Header carrying the replay epoch on changelog markers.
pub const EPOCH_HEADER: &str = "tidemark.epoch";

/// Header carrying the pipeline fingerprint on changelog markers.
pub const FINGERPRINT_HEADER: &str = "tidemark.fingerprint";

/// The key of a marker (offset, reset or epoch) of one input partition in a topic of markers
/// shared by many (the offsets topic of the repartition hop): the marker's key, `/`, the topic,
/// `/`, the partition. [`Fold::record_keyed`] folds such a record under the plain marker key.
pub fn source_marker_key(marker: &[u8], topic: &str, partition: i32) -> Vec<u8> {
    let mut key = Vec::with_capacity(marker.len() + topic.len() + 12);
    key.extend_from_slice(marker);
    key.push(b'/');
    key.extend_from_slice(topic.as_bytes());
    key.push(b'/');
    key.extend_from_slice(partition.to_string().as_bytes());
    key
}

/// The headers of a changelog marker (offset, reset or epoch): its stamp, when it has one, the
/// replay epoch and the pipeline fingerprint. `tidemark run` and `tidemark replay` both write
/// markers through this, and [`Fold`] reads them back.
pub fn marker_headers(
    stamp: Option<i64>,
    epoch: u64,
    fingerprint: &str,
) -> rdkafka::message::OwnedHeaders {
    use rdkafka::message::{Header, OwnedHeaders};
    let epoch = epoch.to_string();
    let mut h = OwnedHeaders::new_with_capacity(3)
        .insert(Header {
            key: EPOCH_HEADER,
            value: Some(&epoch),
        })
        .insert(Header {
            key: FINGERPRINT_HEADER,
            value: Some(fingerprint),
        });
    if let Some(s) = stamp {
        h = h.insert(Header {
            key: STAMP_HEADER,
            value: Some(&s.to_string()),
        });
    }
    h
}

/// Kafka's OFFSET_OUT_OF_RANGE error code: the stored changelog position is past the log's end.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// Errors of a restore.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Reading the changelog failed.
    #[error("reading the changelog: {0}")]
    Read(#[from] RawLogError),
    /// Writing local state failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a restore did and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Changelog state records applied.
    pub applied: usize,
    /// Records skipped: of aborted transactions, of transactions that never resolved, unkeyed.
    pub skipped: usize,
    /// Offset markers read.
    pub markers: usize,
    /// The committed input offset according to the log; `None` when no transaction that consumed
    /// from this partition has ever committed.
    pub committed: Option<i64>,
    /// The changelog offset the restored state reflects (where the next restore starts).
    pub changelog_offset: i64,
    /// The replay epoch and pipeline fingerprint the restored state belongs to.
    pub lineage: Lineage,
    /// Time spent waiting for open transactions to resolve.
    pub waited: Duration,
    /// Reset markers met (local state was dropped at each).
    pub resets: usize,
}

/// The stamp of a changelog record: the input offset its transaction commits.
pub fn stamp(r: &RawRecord) -> Option<i64> {
    r.header(STAMP_HEADER).and_then(|s| s.parse::<i64>().ok())
}

/// Folds committed changelog records, in log order, into state writes and the committed offset.
#[derive(Debug, Default)]
pub struct Fold {
    /// The highest stamp seen since the latest reset marker (or the reset marker's stamp).
    pub committed: Option<i64>,
    /// The replay epoch and fingerprint of the latest markers seen.
    pub lineage: Lineage,
    /// Reset markers seen.
    pub resets: usize,
    /// State records passed on.
    pub applied: usize,
    /// Unkeyed records.
    pub skipped: usize,
    /// Offset markers.
    pub markers: usize,
}

/// What one committed changelog record does to the state.
#[derive(Debug, PartialEq, Eq)]
pub enum StateWrite<'a> {
    /// Put the full value of an entry.
    Put(&'a [u8], &'a [u8]),
    /// Delete an entry.
    Delete(&'a [u8]),
    /// Drop every entry: a reset marker (everything before it is ignored).
    Reset,
    /// Nothing (an offset or epoch marker, or an unkeyed record).
    None,
}

impl Fold {
    /// Starts from the committed offset and lineage already reflected by local state, if any.
    pub fn new(base: Option<i64>, lineage: Lineage) -> Fold {
        Fold {
            committed: base,
            lineage,
            ..Fold::default()
        }
    }

    /// Takes one record of a committed transaction; returns what it does to the state.
    pub fn record<'a>(&mut self, r: &'a RawRecord) -> StateWrite<'a> {
        self.record_keyed(r.key.as_deref(), r)
    }

    /// Like [`Fold::record`], with `key` read in place of the record's own key (a marker of one
    /// input partition in a shared topic, folded under the plain marker key).
    pub fn record_keyed<'a>(&mut self, key: Option<&'a [u8]>, r: &'a RawRecord) -> StateWrite<'a> {
        if key == Some(RESET_MARKER_KEY) {
            // Everything before is ignored: the committed offset is the marker's, not the max.
            self.resets += 1;
            self.committed = stamp(r);
            self.lineage = Lineage {
                epoch: marker_epoch(r).unwrap_or(self.lineage.epoch),
                fingerprint: r.header(FINGERPRINT_HEADER).map(str::to_string),
            };
            return StateWrite::Reset;
        }
        if let Some(s) = stamp(r) {
            self.committed = Some(self.committed.map_or(s, |c| c.max(s)));
        }
        let Some(key) = key else {
            self.skipped += 1;
            return StateWrite::None;
        };
        if key.first() == Some(&0) {
            // Offset and epoch markers (tag 0 is never a state key).
            if key == OFFSET_MARKER_KEY {
                self.markers += 1;
            }
            if let Some(e) = marker_epoch(r) {
                self.lineage.epoch = self.lineage.epoch.max(e);
            }
            if let Some(f) = r.header(FINGERPRINT_HEADER) {
                self.lineage.fingerprint = Some(f.to_string());
            }
            return StateWrite::None;
        }
        self.applied += 1;
        match r.value.as_deref() {
            Some(v) => StateWrite::Put(key, v),
            None => StateWrite::Delete(key),
        }
    }
}

fn marker_epoch(r: &RawRecord) -> Option<u64> {
    r.header(EPOCH_HEADER).and_then(|s| s.parse().ok())
}

/// What a changelog partition says is committed now, without touching local state: the committed
/// input offset and the lineage (epoch and fingerprint), from its committed transactions (open
/// ones count as not committed).
pub fn committed_now(
    brokers: &Brokers,
    changelog_topic: &str,
    partition: i32,
) -> Result<(Option<i64>, Lineage), RawLogError> {
    let mut fold = Fold::new(None, Lineage::default());
    LogReader::connect(brokers)?.stream(changelog_topic, partition, 0, |r: RawRecord| {
        fold.record(&r);
        Ok::<(), RawLogError>(())
    })?;
    Ok((fold.committed, fold.lineage))
}

/// Header carrying an input partition's watermark on its offset markers in a topic of markers
/// shared by many (the offsets topic).
pub const SOURCE_WATERMARK_HEADER: &str = "tidemark.source_watermark";

/// Header carrying the partition count of a topic of markers shared by many when a marker was
/// written: a marker read under another count means the topic was resized and markers moved.
pub const MARKER_PARTITIONS_HEADER: &str = "tidemark.offsets_partitions";

/// The partition of a topic of markers shared by many (with `partitions` partitions) that holds
/// the markers of input partition `p`.
pub fn marker_partition(p: i32, partitions: i32) -> i32 {
    p.rem_euclid(partitions.max(1))
}

/// What the committed markers of one input partition in a topic of markers shared by many say.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SourceMarkers {
    /// The committed input offset; `None` when nothing ever committed.
    pub committed: Option<i64>,
    /// Replay epoch and fingerprint.
    pub lineage: Lineage,
    /// The input partition's watermark at its last committed marker since the latest reset
    /// (`i64::MIN` for none).
    pub watermark: i64,
    /// Offset markers read.
    pub markers: usize,
    /// A partition count other than the topic's that a marker was written under, if any.
    pub written_under: Option<i32>,
}

/// Reads the committed markers of input partition `p` of `topic` from partition `partition` of
/// `markers_topic` (which has `partitions` partitions), from its start. Returns them and the
/// log's tail summary (open transactions, for the caller to wait on).
pub fn source_markers(
    brokers: &Brokers,
    markers_topic: &str,
    partition: i32,
    partitions: i32,
    topic: &str,
    p: i32,
) -> Result<(SourceMarkers, PartitionLog), RawLogError> {
    let suffix = format!("/{topic}/{p}");
    let mut fold = Fold::new(None, Lineage::default());
    let mut out = SourceMarkers {
        watermark: i64::MIN,
        ..SourceMarkers::default()
    };
    let log =
        LogReader::connect(brokers)?.stream(markers_topic, partition, 0, |r: RawRecord| {
            let Some(marker) = r
                .key
                .as_deref()
                .and_then(|k| k.strip_suffix(suffix.as_bytes()))
            else {
                return Ok::<(), RawLogError>(());
            };
            if let Some(n) = r
                .header(MARKER_PARTITIONS_HEADER)
                .and_then(|n| n.parse::<i32>().ok())
            {
                if n != partitions {
                    out.written_under = Some(n);
                }
            }
            if marker == RESET_MARKER_KEY {
                // A replay: the input partition starts again from the reset's offset, and so does
                // its watermark.
                out.watermark = i64::MIN;
            } else if let Some(w) = r
                .header(SOURCE_WATERMARK_HEADER)
                .and_then(|w| w.parse::<i64>().ok())
            {
                out.watermark = out.watermark.max(w);
            }
            fold.record_keyed(Some(marker), &r);
            Ok(())
        })?;
    out.committed = fold.committed;
    out.lineage = fold.lineage;
    out.markers = fold.markers;
    Ok((out, log))
}

/// How a restore treats transactions that are still open.
#[derive(Debug, Clone, Copy)]
pub struct OpenPolicy {
    /// The producers' transaction timeout: a transaction older than this cannot commit any more.
    pub transaction_timeout: Duration,
    /// How often the log is read again while waiting.
    pub poll: Duration,
}

/// What to do with a log whose tail has open transactions, at wall-clock time `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenDecision {
    /// Nothing is open: done.
    Resolved,
    /// Read again from this offset after a pause (an open transaction may still commit).
    Wait(i64),
    /// Every open transaction is older than the timeout: treat them as aborted; the state
    /// reflects the log up to this offset.
    GiveUp(i64),
}

impl OpenPolicy {
    /// Decides, from a log's tail summary, whether to wait for its open transactions. A wait ends
    /// when every open transaction is older than the timeout, and in any case one timeout after
    /// the restore began (`started_ms`): every transaction open then has resolved or timed out
    /// by that time, and one that opened since was written by a producer that does not own the
    /// partition, which must not hold the restore up for ever.
    pub fn decide(&self, log: &PartitionLog, now_ms: i64, started_ms: i64) -> OpenDecision {
        let Some(first) = log.first_open else {
            return OpenDecision::Resolved;
        };
        let timeout = self.transaction_timeout.as_millis() as i64;
        let youngest = log.open_since.values().copied().max().unwrap_or(i64::MIN);
        let give_up_at = youngest
            .saturating_add(timeout)
            .min(started_ms.saturating_add(timeout));
        if now_ms >= give_up_at {
            OpenDecision::GiveUp(first)
        } else {
            OpenDecision::Wait(first)
        }
    }
}

/// Where a restore starts: the stored changelog position and the committed offset local state
/// already reflects, or nothing (then local state is dropped and the changelog read from 0).
fn start_of(stored: StoredOffsets) -> Option<(i64, i64)> {
    match stored {
        StoredOffsets {
            input: Some(i),
            changelog: Some(c),
        } => Some((c, i)),
        _ => None,
    }
}

/// Brings column family `cf` up to date with changelog partition `partition` and returns what
/// the log says is committed.
///
/// Local state is kept when it has stored offsets: only the changelog after its stored position
/// is read and applied on top (nothing, when local state is current). Without stored offsets, or
/// when the stored position lies past the log's end (the changelog was recreated), the column
/// family is emptied and rebuilt from offset 0.
pub fn restore(
    store: &StateStore,
    cf: &str,
    brokers: &Brokers,
    changelog_topic: &str,
    partition: i32,
    policy: OpenPolicy,
) -> Result<RestoreStats, RestoreError> {
    let stored = start_of(store.offsets(cf)?);
    if stored.is_none() {
        store.clear_cf(cf)?;
    }
    match restore_from(
        store,
        cf,
        brokers,
        changelog_topic,
        partition,
        stored,
        policy,
    ) {
        Err(RestoreError::Read(RawLogError::Broker { code, .. }))
            if code == OFFSET_OUT_OF_RANGE && stored.is_some() =>
        {
            tracing::warn!(
                partition,
                stored = ?stored,
                "the stored changelog position is past the changelog's end: rebuilding local state from offset 0"
            );
            store.clear_cf(cf)?;
            restore_from(store, cf, brokers, changelog_topic, partition, None, policy)
        }
        other => other,
    }
}

fn restore_from(
    store: &StateStore,
    cf: &str,
    brokers: &Brokers,
    changelog_topic: &str,
    partition: i32,
    stored: Option<(i64, i64)>,
    policy: OpenPolicy,
) -> Result<RestoreStats, RestoreError> {
    store.ensure_cf(cf)?;
    let db = store.db();
    let handle = db
        .cf_handle(cf)
        .ok_or_else(|| StoreError::MissingCf(cf.to_string()))?;
    let (mut from, base) = match stored {
        Some((c, i)) => (c, Some(i)),
        None => (0, None),
    };
    let lineage = match stored {
        Some(_) => store.lineage(cf)?,
        None => Lineage::default(),
    };
    let mut fold = Fold::new(base, lineage);
    let mut stats = RestoreStats::default();
    let mut batch = WriteBatch::default();
    let started = Instant::now();
    let started_ms = wall_ms();
    loop {
        // The log streams through in chunks, so a restore needs memory for one chunk, not the
        // log. Chunks are written without offsets: if the restore is cut short, the stored
        // offsets still say where it started, and running it again from there re-applies the
        // same records in the same order over the partial result (puts and deletes of whole
        // values), which converges. Reading again from the first open record after a wait does
        // the same.
        let log = LogReader::connect(brokers)?.stream(
            changelog_topic,
            partition,
            from,
            |r: RawRecord| -> Result<(), RestoreError> {
                match fold.record(&r) {
                    StateWrite::Put(k, v) => batch.put_cf(&handle, k, v),
                    StateWrite::Delete(k) => batch.delete_cf(&handle, k),
                    StateWrite::Reset => {
                        // Drop what this restore read so far and what local state held before:
                        // every state key starts with a tag byte from 1 to 254.
                        batch = WriteBatch::default();
                        batch.delete_range_cf(&handle, [1u8].as_slice(), [255u8].as_slice());
                        store.write(std::mem::take(&mut batch))?;
                        return Ok(());
                    }
                    StateWrite::None => return Ok(()),
                }
                if batch.len() >= RESTORE_CHUNK {
                    store.write(std::mem::take(&mut batch))?;
                }
                Ok(())
            },
        )?;
        stats.skipped += log.aborted_offsets.len();
        match policy.decide(&log, wall_ms(), started_ms) {
            OpenDecision::Resolved => {
                stats.changelog_offset = log.next_offset;
                break;
            }
            OpenDecision::GiveUp(first) => {
                tracing::warn!(
                    partition,
                    records = log.open,
                    first_offset = first,
                    "changelog transactions did not resolve within the transaction timeout: treated as not committed"
                );
                stats.skipped += log.open;
                stats.changelog_offset = first;
                break;
            }
            OpenDecision::Wait(first) => {
                if stats.waited.is_zero() {
                    tracing::info!(
                        partition,
                        records = log.open,
                        first_offset = first,
                        "waiting for open changelog transactions to resolve"
                    );
                }
                std::thread::sleep(policy.poll);
                stats.waited = started.elapsed();
                from = first;
            }
        }
    }
    drop(handle);
    stats.applied = fold.applied;
    stats.markers = fold.markers;
    stats.skipped += fold.skipped;
    stats.committed = fold.committed;
    stats.resets = fold.resets;
    stats.lineage = fold.lineage;
    store.put_lineage(&mut batch, cf, &stats.lineage)?;
    store.put_offsets(
        &mut batch,
        cf,
        StoredOffsets {
            input: stats.committed,
            changelog: Some(stats.changelog_offset),
        },
    )?;
    store.write(batch)?;
    Ok(stats)
}

/// Where a consumer starts reading an input partition, decided from the log alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartPosition {
    /// The committed offset from the changelog; `None` = nothing committed: start from the
    /// configured reset position.
    pub offset: Option<i64>,
    /// The consumer group's committed offset says something else (it is only a hint).
    pub group_disagrees: bool,
}

impl StartPosition {
    /// Decides from the log's committed offset alone. `group` is the group's committed offset
    /// (inner `None`: the group has none), or `None` when it could not be read; it is only
    /// compared.
    pub fn decide(log: Option<i64>, group: Option<Option<i64>>) -> StartPosition {
        StartPosition {
            offset: log,
            group_disagrees: group.is_some_and(|g| g != log),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::raw_log::hand_made as raw;
    use crate::kafka::raw_log::resolve_records;
    use bytes::Bytes;
    use kafka_protocol::records::Record;

    /// A transactional changelog record with an optional stamp; `control` makes it a marker.
    fn rec(
        offset: i64,
        pid: i64,
        key: Option<&[u8]>,
        stamp: Option<i64>,
        control: Option<i16>,
        ts: i64,
    ) -> Record {
        let key = key.map(Bytes::copy_from_slice);
        let mut r = raw(
            offset,
            pid,
            true,
            control,
            key,
            Bytes::from_static(b"v"),
            ts,
        );
        if let Some(s) = stamp {
            r.headers.insert(
                kafka_protocol::protocol::StrBytes::from_static_str(STAMP_HEADER),
                Some(Bytes::from(s.to_string())),
            );
        }
        r
    }

    const COMMIT: Option<i16> = Some(1);
    const ABORT: Option<i16> = Some(0);

    /// The committed offset a log gives, the state keys written, and the tail summary.
    fn fold(records: Vec<Record>, base: Option<i64>) -> (Option<i64>, Vec<Vec<u8>>, PartitionLog) {
        let (fold, keys, log) = fold_all(records, base);
        (fold.committed, keys, log)
    }

    /// The whole fold, the state keys live at the end, and the tail summary.
    fn fold_all(records: Vec<Record>, base: Option<i64>) -> (Fold, Vec<Vec<u8>>, PartitionLog) {
        let mut fold = Fold::new(base, Lineage::default());
        let mut keys = Vec::new();
        let log = resolve_records(0, 0, records, |r: RawRecord| {
            match fold.record(&r) {
                StateWrite::Put(k, _) => keys.push(k.to_vec()),
                StateWrite::Reset => keys.clear(),
                _ => {}
            }
            Ok::<(), RawLogError>(())
        })
        .unwrap();
        (fold, keys, log)
    }

    /// Adds a header to a record.
    fn with_header(mut r: Record, key: &'static str, value: &str) -> Record {
        r.headers.insert(
            kafka_protocol::protocol::StrBytes::from_static_str(key),
            Some(Bytes::from(value.to_string())),
        );
        r
    }

    #[test]
    fn a_committed_reset_marker_drops_earlier_state_and_lowers_the_committed_offset() {
        let m = Some(OFFSET_MARKER_KEY);
        let reset = |offset, pid, stamp| {
            let r = rec(offset, pid, Some(RESET_MARKER_KEY), Some(stamp), None, 0);
            with_header(
                with_header(r, EPOCH_HEADER, "1"),
                FINGERPRINT_HEADER,
                "fp-b",
            )
        };
        let marker = |offset, pid, stamp| {
            let r = rec(offset, pid, m, Some(stamp), None, 0);
            with_header(
                with_header(r, EPOCH_HEADER, "0"),
                FINGERPRINT_HEADER,
                "fp-a",
            )
        };
        let (fold, keys, _) = fold_all(
            vec![
                // Epoch 0 runs up to input offset 500.
                rec(0, 1, Some(b"\x01a"), Some(500), None, 0),
                marker(1, 1, 500),
                rec(2, 1, None, None, COMMIT, 0),
                // An aborted replay changes nothing.
                reset(3, 9, 0),
                rec(4, 9, None, None, ABORT, 0),
                // The committed replay resets to 100 in epoch 1.
                reset(5, 9, 100),
                rec(6, 9, None, None, COMMIT, 0),
                // Epoch 1 processes 100..130.
                rec(7, 2, Some(b"\x01b"), Some(130), None, 0),
                rec(8, 2, None, None, COMMIT, 0),
            ],
            None,
        );
        assert_eq!(fold.committed, Some(130), "not 500: the reset lowered it");
        assert_eq!(
            keys,
            vec![b"\x01b".to_vec()],
            "state before the reset is gone"
        );
        assert_eq!(fold.resets, 1);
        assert_eq!(
            fold.lineage,
            Lineage {
                epoch: 1,
                fingerprint: Some("fp-b".into())
            }
        );
        // Without the committed reset, epoch 0's offset and lineage stand.
        let (fold, _, _) = fold_all(
            vec![
                rec(0, 1, Some(b"\x01a"), Some(500), None, 0),
                marker(1, 1, 500),
                rec(2, 1, None, None, COMMIT, 0),
                reset(3, 9, 0),
                rec(4, 9, None, None, ABORT, 0),
            ],
            None,
        );
        assert_eq!(fold.committed, Some(500));
        assert_eq!(fold.lineage.fingerprint.as_deref(), Some("fp-a"));
    }

    #[test]
    fn the_committed_offset_comes_from_committed_markers_only() {
        let m = Some(OFFSET_MARKER_KEY);
        // pid 1 commits input up to 100 (a state record and a marker), pid 2 aborts up to 250,
        // pid 1 commits up to 180 with only a marker, pid 3 leaves 300 open.
        let (committed, keys, log) = fold(
            vec![
                rec(0, 1, Some(b"\x01a"), Some(100), None, 0),
                rec(1, 1, m, Some(100), None, 0),
                rec(2, 1, None, None, COMMIT, 0),
                rec(3, 2, Some(b"\x01b"), Some(250), None, 0),
                rec(4, 2, m, Some(250), None, 0),
                rec(5, 2, None, None, ABORT, 0),
                rec(6, 1, m, Some(180), None, 0),
                rec(7, 1, None, None, COMMIT, 0),
                rec(8, 3, m, Some(300), None, 5_000),
            ],
            None,
        );
        assert_eq!(committed, Some(180));
        // Only the committed state record reaches the state; markers never do.
        assert_eq!(keys, vec![b"\x01a".to_vec()]);
        assert_eq!((log.open, log.first_open), (1, Some(8)));
        assert_eq!(log.open_since.get(&3), Some(&5_000));
        assert_eq!(log.aborted_offsets, [3, 4]);
    }

    #[test]
    fn a_stale_group_offset_never_wins_over_the_log() {
        // The group says 0 (quirks::GROUP_OFFSETS_LATE); the log has a
        // committed transaction up to 40, an aborted one up to 90 and an open one up to 120.
        let m = Some(OFFSET_MARKER_KEY);
        let group_offset = Some(Some(0));
        let (committed, _, _) = fold(
            vec![
                rec(0, 7, m, Some(40), None, 0),
                rec(1, 7, None, None, COMMIT, 0),
                rec(2, 8, m, Some(90), None, 0),
                rec(3, 8, None, None, ABORT, 0),
                rec(4, 9, m, Some(120), None, 0),
            ],
            None,
        );
        let start = StartPosition::decide(committed, group_offset);
        assert_eq!(start.offset, Some(40));
        assert!(start.group_disagrees);
        // A log with nothing committed starts from the reset position whatever the group says.
        let start = StartPosition::decide(None, Some(Some(1234)));
        assert_eq!(start.offset, None);
        assert!(start.group_disagrees);
        let start = StartPosition::decide(Some(40), Some(Some(40)));
        assert!(!start.group_disagrees);
        // A group offset that could not be read is no disagreement, and still never used.
        let start = StartPosition::decide(Some(40), None);
        assert_eq!((start.offset, start.group_disagrees), (Some(40), false));
    }

    #[test]
    fn local_state_counts_as_the_base_of_the_tail() {
        // Local state reflects input up to 500; the tail holds only a later aborted transaction.
        let (committed, keys, _) = fold(
            vec![
                rec(10, 4, Some(b"\x01x"), Some(900), None, 0),
                rec(11, 4, None, None, ABORT, 0),
            ],
            Some(500),
        );
        assert_eq!(committed, Some(500));
        assert!(keys.is_empty());
    }

    #[test]
    fn open_transactions_are_waited_for_until_they_time_out() {
        let policy = OpenPolicy {
            transaction_timeout: Duration::from_secs(10),
            poll: Duration::from_millis(100),
        };
        let (_, _, log) = fold(
            vec![
                rec(0, 1, Some(b"\x01a"), Some(5), None, 1_000),
                rec(1, 2, Some(b"\x01b"), Some(6), None, 4_000),
            ],
            None,
        );
        assert_eq!(policy.decide(&log, 5_000, 5_000), OpenDecision::Wait(0));
        // pid 1's transaction is too old at 13,999 but pid 2's is not.
        assert_eq!(policy.decide(&log, 13_999, 5_000), OpenDecision::Wait(0));
        assert_eq!(policy.decide(&log, 14_000, 5_000), OpenDecision::GiveUp(0));
        // Transactions that keep opening (a producer that does not own the partition) hold a
        // restore up for one timeout at most.
        assert_eq!(policy.decide(&log, 4_500, 1_000), OpenDecision::Wait(0));
        assert_eq!(policy.decide(&log, 11_000, 1_000), OpenDecision::GiveUp(0));
        let (_, _, resolved) = fold(vec![], None);
        assert_eq!(policy.decide(&resolved, 0, 0), OpenDecision::Resolved);
    }
}
