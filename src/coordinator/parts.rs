//! What the coordinator keeps per partition: a windowing partition (`Part`) and an input
//! partition of the hop's first stage (`Source`), each with its committed and uncommitted
//! positions.

use crate::changelog::RestoreStats;
use crate::metrics as m;
use crate::pipeline::{Front, Step};
use crate::windowing::fold::Folder;
use crate::windowing::watermark::SourceWatermark;
use metrics::{counter, gauge, Counter, Gauge};

/// A windowing partition: an input partition (input partitioned by the grouping key) or a
/// partition of the repartition topic (the second stage of the hop).
pub(super) struct Part {
    /// The record step: the partition's engine, and (input partitioned by the key) the front of
    /// its input partition.
    pub(super) step: Step,
    /// The pipeline's replay epoch, as the partition's changelog says: stamped on panes and dead
    /// letters.
    pub(super) epoch: u64,
    /// Offset after the last processed record (of the input, or of the repartition topic);
    /// `None` until the first record when the log has no committed offset for this partition.
    pub(super) next_offset: Option<i64>,
    /// Offset committed, as the log said at assignment and each commit since; `None` while
    /// nothing has ever committed on this partition.
    pub(super) committed_offset: Option<i64>,
    /// Offset of the first record processed since the assignment, where a partition without a
    /// committed offset is rewound to.
    pub(super) first_seen: Option<i64>,
    /// The step's source fronts as of the last commit, restored on abort (none in the hop).
    pub(super) committed_fronts: Vec<(String, Front)>,
    pub(super) cf: String,
    /// Records processed in the open transaction.
    pub(super) batch_in: u64,
    pub(super) gauges: PartGauges,
}

impl Part {
    /// Partition `p` of `topic` with `step` over column family `cf`, restored as `stats` say:
    /// it resumes at the committed offset (nothing processed since).
    pub(super) fn restored(
        step: Step,
        stats: &RestoreStats,
        cf: String,
        topic: &str,
        p: i32,
    ) -> Part {
        Part {
            committed_fronts: step.fronts().to_vec(),
            epoch: stats.lineage.epoch,
            step,
            next_offset: stats.committed,
            committed_offset: stats.committed,
            first_seen: None,
            cf,
            batch_in: 0,
            gauges: PartGauges::new(topic, p),
        }
    }

    /// Where reading goes on: after the last processed record, at the committed offset, or at 0.
    pub(super) fn position(&self) -> i64 {
        self.next_offset.or(self.committed_offset).unwrap_or(0)
    }
}

/// An input partition read by the first stage of the hop (or copied by `--passthrough`).
pub(super) struct Source {
    /// The front: checks records and tracks the source's watermark.
    pub(super) front: Front,
    /// The front as of the last commit, restored on abort.
    pub(super) committed_front: Front,
    /// The replay epoch, as the offsets topic says: stamped on the first stage's dead letters.
    pub(super) epoch: u64,
    /// Offset after the last processed record; `None` before the first when nothing committed.
    pub(super) next_offset: Option<i64>,
    /// Offset committed, as the offset markers say; `None` while nothing has committed.
    pub(super) committed_offset: Option<i64>,
    /// Offset of the first record processed since the assignment.
    pub(super) first_seen: Option<i64>,
    /// Records processed in the open transaction.
    pub(super) batch_in: u64,
    /// The report the repartition topic has from this member (committed), and when it was
    /// written; `None` after an assignment or an abort, so the next cycle writes one.
    pub(super) written: Option<(SourceWatermark, i64)>,
    /// When the last record processed was appended to the input (epoch ms), for the pane latency
    /// of panes its watermark report fires.
    pub(super) last_appended: i64,
    /// The report written in the open transaction, committed with it.
    pub(super) pending: Option<(SourceWatermark, i64)>,
    /// `tidemark_records_in_total` of the source.
    pub(super) records_in: Counter,
    /// The open transaction's partials, where they cross the hop instead of records (see
    /// [`crate::windowing::fold`]).
    pub(super) folder: Option<Folder>,
}

impl Source {
    /// The highest watermark the second stage can have reached when it reads a record written
    /// in the open transaction, as far as this source can tell; `None` when it cannot tell.
    /// The second stage's watermark is the minimum over the sources that are not idle, so while
    /// this source's committed report says it is not idle, that report bounds it. Without a
    /// committed report of its own (after an assignment or an abort) or while idle, it cannot.
    pub(super) fn watermark_bound(&self) -> Option<i64> {
        match self.written {
            Some((report, _)) if report.idle_at.is_none() => Some(report.watermark),
            _ => None,
        }
    }

    /// Where reading goes on: after the last processed record, at the committed offset, or at 0.
    pub(super) fn position(&self) -> i64 {
        self.next_offset.or(self.committed_offset).unwrap_or(0)
    }
}

/// Metric handles of one input partition, registered once at assignment.
pub(super) struct PartGauges {
    pub(super) records_in: Counter,
    pub(super) watermark: Gauge,
    pub(super) watermark_lag: Gauge,
    pub(super) open_windows: Gauge,
    pub(super) state_entries: Gauge,
    pub(super) cache_bytes: Gauge,
    pub(super) largest_key: Gauge,
}

impl PartGauges {
    /// Sets the watermark and its lag behind the wall clock `now` (nothing before the first
    /// watermark).
    pub(super) fn set_watermark(&self, wm: i64, now: i64) {
        if wm != i64::MIN {
            self.watermark.set(wm as f64 / 1000.0);
            self.watermark_lag.set((now - wm) as f64 / 1000.0);
        }
    }

    pub(super) fn new(topic: &str, p: i32) -> PartGauges {
        let part = p.to_string();
        PartGauges {
            records_in: counter!(m::RECORDS_IN, "topic" => topic.to_string(), "partition" => part.clone()),
            watermark: gauge!(m::WATERMARK, "partition" => part.clone()),
            watermark_lag: gauge!(m::WATERMARK_LAG, "partition" => part.clone()),
            open_windows: gauge!(m::OPEN_WINDOWS, "partition" => part.clone()),
            state_entries: gauge!(m::STATE_ENTRIES, "partition" => part.clone()),
            cache_bytes: gauge!(m::CACHE_BYTES, "partition" => part.clone()),
            largest_key: gauge!(m::LARGEST_KEY, "partition" => part),
        }
    }
}
