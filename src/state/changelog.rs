//! The state changelog: how a partition's state is written to Kafka and restored from it.
//!
//! Every commit cycle produces, into the same transaction as the panes and the input offsets, one
//! changelog record per changed state entry: key = the encoded state key, value = the full current
//! value (or a tombstone), on the changelog partition equal to the input partition, with the header
//! `tidemark.input_offset` = the input offset that transaction commits.
//!
//! **Restore rule.** A restore reads the changelog partition's *raw* log (with
//! [`crate::audit::stream_partition`]), resolves each transaction from its COMMIT/ABORT marker, and
//! applies, in log order with the last write winning, only records that (1) belong to a committed
//! transaction and (2) carry a stamp no greater than the group's committed input offset. Rule 1
//! never trusts the broker to hide aborted records (Tansu serves them to read_committed consumers).
//! Rule 2 guards against a transaction that is still open when the restore reads the log and might
//! commit later: its stamp lies beyond the committed offset, so it is skipped, and its input will be
//! processed again by this member. A committed transaction's stamp is always at most the committed
//! offset, since that transaction committed the offset itself.

use crate::audit::{stream_partition, AuditError, RawRecord};
use crate::state::store::{StateStore, StoreError, StoredOffsets};
use rocksdb::WriteBatch;

/// Changelog records applied per RocksDB write during a restore.
const RESTORE_CHUNK: usize = 1_000;

/// Header carrying the input offset a changelog record's transaction commits.
pub const STAMP_HEADER: &str = "tidemark.input_offset";

/// Errors of a restore.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Reading the changelog failed.
    #[error("reading the changelog: {0}")]
    Read(#[from] AuditError),
    /// Writing local state failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a restore did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Changelog records applied.
    pub applied: usize,
    /// Records skipped: aborted or open transactions, or stamped beyond the committed offset.
    pub skipped: usize,
    /// The changelog offset the restored state reflects.
    pub changelog_offset: i64,
}

/// Brings column family `cf` up to the group's committed input offset `committed` from the
/// changelog, starting at `from` (the stored changelog offset, or 0 after dropping local state).
pub fn restore(
    store: &StateStore,
    cf: &str,
    bootstrap: &str,
    changelog_topic: &str,
    partition: i32,
    from: i64,
    committed: i64,
) -> Result<RestoreStats, RestoreError> {
    store.ensure_cf(cf)?;
    let db = store.db();
    let handle = db
        .cf_handle(cf)
        .ok_or_else(|| StoreError::MissingCf(cf.to_string()))?;
    let mut stats = RestoreStats::default();
    let mut batch = WriteBatch::default();
    // The log streams through in chunks, so a restore needs memory for one chunk, not the log.
    // Chunks are written without offsets: if the restore is cut short, the stored offsets still
    // say where it started, and running it again from there re-applies the same records in the
    // same order over the partial result (puts and deletes of whole values), which converges.
    let log = stream_partition(
        bootstrap,
        changelog_topic,
        partition,
        from,
        |r: RawRecord| -> Result<(), RestoreError> {
            let stamp = r
                .headers
                .iter()
                .find(|(k, _)| k == STAMP_HEADER)
                .and_then(|(_, v)| v.as_ref())
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|s| s.parse::<i64>().ok());
            let Some(key) = r.key.as_ref() else {
                stats.skipped += 1;
                return Ok(());
            };
            if stamp.is_none_or(|s| s > committed) {
                stats.skipped += 1;
                return Ok(());
            }
            match &r.value {
                Some(v) => batch.put_cf(&handle, key, v),
                None => batch.delete_cf(&handle, key),
            }
            stats.applied += 1;
            if batch.len() >= RESTORE_CHUNK {
                store.write(std::mem::take(&mut batch))?;
            }
            Ok(())
        },
    )?;
    drop(handle);
    stats.skipped += log.aborted_offsets.len() + log.open;
    stats.changelog_offset = log.next_offset;
    store.put_offsets(
        &mut batch,
        cf,
        StoredOffsets {
            input: Some(committed),
            changelog: Some(log.next_offset),
        },
    )?;
    store.write(batch)?;
    Ok(stats)
}
