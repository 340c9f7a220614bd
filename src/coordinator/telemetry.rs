//! The coordinator's metric handles and the reports made after each commit.

use super::Core;
use crate::clock::wall_ms;
use crate::metrics as m;
use crate::windowing::trigger::Timing;
use metrics::{counter, gauge, histogram, Counter, Gauge};
use std::time::{Duration, Instant};

/// Metric handles of one input partition, registered once at assignment.
pub(super) struct PartGauges {
    pub(super) records_in: Counter,
    pub(super) watermark: Gauge,
    pub(super) watermark_lag: Gauge,
    pub(super) open_windows: Gauge,
    pub(super) state_entries: Gauge,
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
            state_entries: gauge!(m::STATE_ENTRIES, "partition" => part),
        }
    }
}

/// What the open transaction will have done once it commits, reported to metrics after step 4.
#[derive(Debug, Default)]
pub(super) struct BatchOutcome {
    /// Panes by timing: EARLY, ON_TIME, LATE, RETRACT.
    pub(super) panes: [u64; 4],
    /// Dead letters by reason.
    pub(super) dead_letters: Vec<&'static str>,
    /// Per pane, the append time (epoch ms) of the record or tick that fired it.
    pub(super) fired_at: Vec<i64>,
    /// Watermark records of the hop applied by the second stage.
    pub(super) hop_watermarks: u64,
    /// Bytes the first stage wrote to the repartition topic.
    pub(super) hop_bytes: u64,
    /// Partials the first stage wrote, and the records folded into them.
    pub(super) partials: u64,
    pub(super) folded: u64,
    /// Partials the second stage found behind its watermark.
    pub(super) late_partials: u64,
    /// Records the pipeline's filter rejected, by input topic.
    pub(super) filtered: Vec<(String, u64)>,
}

impl BatchOutcome {
    /// Counts a record of `topic` that the pipeline's filter rejected.
    pub(super) fn filtered(&mut self, topic: &str) {
        match self.filtered.iter_mut().find(|(t, _)| t == topic) {
            Some((_, n)) => *n += 1,
            None => self.filtered.push((topic.to_string(), 1)),
        }
    }
}

impl Core {
    /// Reports a committed transaction to metrics: what it committed, how long the cycle took,
    /// and per-partition gauges.
    pub(super) fn report_commit(&mut self, started: Instant) {
        let now = wall_ms();
        histogram!(m::COMMIT_DURATION).record(started.elapsed().as_secs_f64());
        counter!(m::TRANSACTIONS, "outcome" => "committed").increment(1);
        let batch = std::mem::take(&mut self.batch);
        for (t, n) in batch.panes.iter().enumerate() {
            if *n > 0 {
                counter!(m::PANES, "timing" => Timing::ALL[t].as_str()).increment(*n);
            }
        }
        for (name, n) in [
            (m::HOP_WATERMARK_RECORDS, batch.hop_watermarks),
            (m::HOP_BYTES, batch.hop_bytes),
            (m::HOP_PARTIALS, batch.partials),
            (m::HOP_RECORDS_FOLDED, batch.folded),
            (m::HOP_LATE_PARTIALS, batch.late_partials),
        ] {
            if n > 0 {
                counter!(name).increment(n);
            }
        }
        for (topic, n) in batch.filtered {
            counter!(m::RECORDS_FILTERED, "topic" => topic).increment(n);
        }
        for reason in batch.dead_letters {
            counter!(m::DEAD_LETTERS, "reason" => reason).increment(1);
        }
        let latency = histogram!(m::PANE_LATENCY);
        for t in batch.fired_at {
            latency.record((now - t).max(0) as f64 / 1000.0);
        }
        for src in self.sources.values_mut() {
            src.records_in.increment(std::mem::take(&mut src.batch_in));
        }
        for part in self.parts.values_mut() {
            part.gauges
                .records_in
                .increment(std::mem::take(&mut part.batch_in));
            part.gauges
                .set_watermark(part.step.engine().watermark(), now);
            part.gauges
                .open_windows
                .set(part.step.engine().pending_timers() as f64);
        }
        self.refresh_state_gauges();
    }

    /// RocksDB figures (entries per partition, live bytes), at most every 5 s: they are not free.
    pub(super) fn refresh_state_gauges(&mut self) {
        if self
            .last_state_gauges
            .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
        {
            return;
        }
        for part in self.parts.values() {
            let entries = self.store.estimate_keys(&part.cf);
            part.gauges.state_entries.set(entries as f64);
        }
        gauge!(m::STATE_SIZE).set(self.store.size_bytes() as f64);
        self.last_state_gauges = Some(Instant::now());
    }
}

/// What a member did since it started, for its last log line.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counters {
    /// Transactions committed.
    pub(super) committed: u64,
    /// Transactions aborted.
    pub(super) aborted: u64,
    /// Transactions aborted since the last commit: repeated aborts back off
    /// (`cycle::abort_pause`).
    pub(super) aborts_in_a_row: u32,
    /// Panes produced (into transactions that committed or not).
    pub(super) panes: u64,
    /// Dead letters produced (likewise).
    pub(super) dead_letters: u64,
}
