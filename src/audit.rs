//! `tidemark audit`: proves exactly-once from a topic's raw log.
//!
//! It reads every partition through [`crate::kafka::raw_log`], which resolves transactions from
//! the COMMIT/ABORT markers in the log itself and never trusts the broker to hide aborted data,
//! and checks what a correct `read_committed` consumer sees: panes for duplicated
//! (dedup id, epoch, pane index) triples and pane-index gaps within an epoch, or dead letters for
//! source records dead-lettered more than once in one epoch. A replay recomputes every window in a
//! new epoch, so the same dedup id with pane indexes from 0 again is expected there, not a
//! duplicate; the report counts panes and windows per epoch. Records without the
//! `tidemark.epoch` header are of epoch 0. It also counts the aborted records the broker serves to a
//! `read_committed` fetch anyway.

use crate::format::dead_letter::{DeadLetter, REASON_HEADER};
use crate::format::epoch_of;
use crate::format::pane::{DEDUP_ID_HEADER, PANE_INDEX_HEADER};
use crate::kafka::raw_log::RawRecord;
use std::collections::BTreeMap;

/// What the audit found in an output topic of panes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PaneReport {
    /// Committed pane records.
    pub panes: usize,
    /// Distinct dedup ids.
    pub windows: usize,
    /// (dedup id, epoch, pane index) triples committed more than once, with their counts.
    pub duplicates: Vec<(String, u64, u32, usize)>,
    /// (dedup id, epoch) pairs whose pane indexes are not 0..=max without holes.
    pub gaps: Vec<(String, u64)>,
    /// Per epoch: panes and distinct dedup ids.
    pub by_epoch: BTreeMap<u64, (usize, usize)>,
    /// Committed records without the pane headers.
    pub not_panes: usize,
}

/// Checks committed pane records for duplicates and pane-index gaps.
pub fn check_panes(committed: &[RawRecord]) -> PaneReport {
    let mut seen: BTreeMap<(String, u64, u32), usize> = BTreeMap::new();
    let mut report = PaneReport::default();
    for r in committed {
        let id = r.header(DEDUP_ID_HEADER);
        let idx = r
            .header(PANE_INDEX_HEADER)
            .and_then(|s| s.parse::<u32>().ok());
        match (id, idx) {
            (Some(id), Some(idx)) => {
                *seen.entry((id.to_string(), epoch_of(r), idx)).or_default() += 1
            }
            _ => report.not_panes += 1,
        }
    }
    let mut by_id: BTreeMap<(&str, u64), Vec<u32>> = BTreeMap::new();
    let mut ids = std::collections::BTreeSet::new();
    for ((id, epoch, idx), n) in &seen {
        report.panes += n;
        report.by_epoch.entry(*epoch).or_default().0 += n;
        if *n > 1 {
            report.duplicates.push((id.clone(), *epoch, *idx, *n));
        }
        ids.insert(id.as_str());
        by_id.entry((id, *epoch)).or_default().push(*idx);
    }
    report.windows = ids.len();
    for ((id, epoch), idxs) in by_id {
        report.by_epoch.entry(epoch).or_default().1 += 1;
        if idxs.iter().enumerate().any(|(i, &x)| x != i as u32) {
            report.gaps.push((id.to_string(), epoch));
        }
    }
    report
}

/// What the audit found in a dead-letter topic.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeadLetterReport {
    /// Committed dead letters (records with a `tidemark.reason` header).
    pub dead_letters: usize,
    /// Dead letters per reason.
    pub by_reason: BTreeMap<String, usize>,
    /// Dead letters per replay epoch.
    pub by_epoch: BTreeMap<u64, usize>,
    /// Source records (topic, partition, offset) dead-lettered more than once in one epoch, with
    /// their counts.
    pub duplicates: Vec<(String, i32, i64, usize)>,
    /// Committed records without the dead-letter headers.
    pub not_dead_letters: usize,
}

/// Checks committed dead-letter records: each source record (topic, partition, offset), and each
/// pane too large to write (dedup id, pane index), must be dead-lettered at most once per epoch.
pub fn check_dead_letters(committed: &[RawRecord]) -> DeadLetterReport {
    let mut report = DeadLetterReport::default();
    let mut seen: BTreeMap<(String, i32, i64, u64), usize> = BTreeMap::new();
    for r in committed {
        // A pane too large to write is dead-lettered under its own headers: its dedup id and
        // pane index stand for the source coordinates.
        let pane = || {
            let reason = r.header(REASON_HEADER)?;
            let dedup = r.header(DEDUP_ID_HEADER)?;
            let index = r.header(PANE_INDEX_HEADER)?.parse::<i64>().ok()?;
            Some((reason.to_string(), format!("pane {dedup}"), index))
        };
        let (reason, at, epoch) = match DeadLetter::from_record(r) {
            Some(d) => (d.reason, (d.topic, d.partition, d.offset), d.epoch),
            None => match pane() {
                Some((reason, dedup, index)) => (reason, (dedup, -1, index), epoch_of(r)),
                None => {
                    report.not_dead_letters += 1;
                    continue;
                }
            },
        };
        report.dead_letters += 1;
        *report.by_reason.entry(reason).or_default() += 1;
        *report.by_epoch.entry(epoch).or_default() += 1;
        *seen.entry((at.0, at.1, at.2, epoch)).or_default() += 1;
    }
    report.duplicates = seen
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((t, p, o, _), n)| (t, p, o, n))
        .collect();
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::dead_letter::{
        REASON_HEADER, SOURCE_OFFSET_HEADER, SOURCE_PARTITION_HEADER, SOURCE_TOPIC_HEADER,
    };
    use crate::format::pane::EPOCH_HEADER;
    use bytes::Bytes;

    fn dead_letter(partition: &str, offset: &str, reason: &str) -> RawRecord {
        let h = |k: &str, v: &str| (k.to_string(), Some(Bytes::from(v.to_string())));
        RawRecord {
            partition: 0,
            offset: 0,
            producer_id: 1,
            transactional: true,
            epoch: 0,
            marker: None,
            timestamp: 0,
            key: None,
            value: Some(Bytes::from_static(b"original")),
            headers: vec![
                h(REASON_HEADER, reason),
                h(SOURCE_TOPIC_HEADER, "events"),
                h(SOURCE_PARTITION_HEADER, partition),
                h(SOURCE_OFFSET_HEADER, offset),
            ],
        }
    }

    #[test]
    fn each_source_record_is_dead_lettered_once() {
        let mut not_a_dead_letter = dead_letter("0", "1", "late");
        not_a_dead_letter.headers.clear();
        let report = check_dead_letters(&[
            dead_letter("0", "5", "late"),
            dead_letter("1", "5", "malformed"),
            dead_letter("0", "5", "late"),
            dead_letter("0", "6", "malformed"),
            not_a_dead_letter,
        ]);
        assert_eq!(report.dead_letters, 4);
        assert_eq!(report.duplicates, vec![("events".to_string(), 0, 5, 2)]);
        assert_eq!(report.by_reason.get("malformed"), Some(&2));
        assert_eq!(report.not_dead_letters, 1);
    }

    fn pane(id: &str, epoch: Option<&str>, idx: &str) -> RawRecord {
        let mut r = dead_letter("0", "0", "x");
        let h = |k: &str, v: &str| (k.to_string(), Some(Bytes::from(v.to_string())));
        r.headers = vec![h(DEDUP_ID_HEADER, id), h(PANE_INDEX_HEADER, idx)];
        if let Some(e) = epoch {
            r.headers.push(h(EPOCH_HEADER, e));
        }
        r
    }

    #[test]
    fn a_new_epoch_recomputes_windows_without_counting_as_duplicates() {
        let report = check_panes(&[
            // Epoch 0 (no header, as before epochs existed): w1 panes 0, 1; w2 pane 0 twice.
            pane("w1", None, "0"),
            pane("w1", Some("0"), "1"),
            pane("w2", None, "0"),
            pane("w2", Some("0"), "0"),
            // Epoch 1 starts every window at pane 0 again; w1 skips pane 1.
            pane("w1", Some("1"), "0"),
            pane("w1", Some("1"), "2"),
            pane("w2", Some("1"), "0"),
        ]);
        assert_eq!(report.panes, 7);
        assert_eq!(report.windows, 2);
        assert_eq!(report.duplicates, vec![("w2".to_string(), 0, 0, 2)]);
        assert_eq!(report.gaps, vec![("w1".to_string(), 1)]);
        assert_eq!(report.by_epoch.get(&0), Some(&(4, 2)));
        assert_eq!(report.by_epoch.get(&1), Some(&(3, 2)));
        // Dead letters: the same source record once per epoch is not a repeat.
        let mut again = dead_letter("0", "7", "late");
        again
            .headers
            .push((EPOCH_HEADER.into(), Some(Bytes::from_static(b"1"))));
        let dead = check_dead_letters(&[dead_letter("0", "7", "late"), again]);
        assert!(dead.duplicates.is_empty());
        assert_eq!(dead.by_epoch.get(&1), Some(&1));
    }
}
