//! What the member reports: the open transaction's outcome, reported to metrics once it
//! commits, the per-record lateness histogram, the state figures, and the counts of its last log
//! line.

use super::parts::{Part, Source};
use crate::clock::wall_ms;
use crate::metrics as m;
use crate::state::store::StateStore;
use crate::windowing::trigger::Timing;
use metrics::{counter, gauge, histogram, Histogram};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What the open transaction will have done once it commits, reported to metrics after step 4.
#[derive(Debug, Default)]
pub(super) struct BatchOutcome {
    /// Panes by timing: EARLY, ON_TIME, LATE, RETRACT.
    pub(super) panes: [u64; 4],
    /// Rows of a pipeline of rows.
    pub(super) rows: u64,
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

/// The member's reports, and what it has done since it started.
pub(super) struct Telemetry {
    batch: BatchOutcome,
    /// `tidemark_record_lateness_seconds`, registered once: it is recorded on the per-record path.
    lateness: Histogram,
    last_state_gauges: Option<Instant>,
    /// Per partition, the largest state of one key last logged as large (logged again each
    /// time it doubles).
    warned_key_bytes: BTreeMap<i32, usize>,
    last_lag_update: Instant,
    /// Panes and dead letters produced (into transactions that committed or not).
    panes: u64,
    dead_letters: u64,
}

impl Telemetry {
    /// Registers the member's histogram; nothing reported yet.
    pub(super) fn new() -> Telemetry {
        Telemetry {
            batch: BatchOutcome::default(),
            lateness: histogram!(m::LATENESS),
            last_state_gauges: None,
            warned_key_bytes: BTreeMap::new(),
            last_lag_update: Instant::now(),
            panes: 0,
            dead_letters: 0,
        }
    }

    /// What the open transaction has done so far.
    pub(super) fn batch(&mut self) -> &mut BatchOutcome {
        &mut self.batch
    }

    /// Counts a pane of `timing` produced into the open transaction, fired by what was appended
    /// at `fired_at`.
    pub(super) fn pane(&mut self, timing: Timing, fired_at: i64) {
        self.panes += 1;
        self.batch.panes[timing as usize] += 1;
        self.batch.fired_at.push(fired_at);
    }

    /// Counts a row of a pipeline of rows produced into the open transaction, for the input
    /// record appended at `appended`.
    pub(super) fn row(&mut self, appended: i64) {
        self.batch.rows += 1;
        self.batch.fired_at.push(appended);
    }

    /// Counts a dead letter produced into the open transaction.
    pub(super) fn dead_letter(&mut self, reason: &'static str) {
        self.dead_letters += 1;
        self.batch.dead_letters.push(reason);
    }

    /// Records how far behind the watermark a record arrived.
    pub(super) fn lateness(&self, behind_ms: i64) {
        self.lateness.record(behind_ms as f64 / 1000.0);
    }

    /// Forgets what the aborted transaction did.
    pub(super) fn aborted(&mut self) {
        self.batch = BatchOutcome::default();
    }

    /// Panes and dead letters produced since the start.
    pub(super) fn produced(&self) -> (u64, u64) {
        (self.panes, self.dead_letters)
    }

    /// Reports a committed transaction to metrics: what it committed, how long the cycle took,
    /// and per-partition gauges.
    pub(super) fn report_commit(
        &mut self,
        started: Instant,
        parts: &mut BTreeMap<i32, Part>,
        sources: &mut BTreeMap<(u16, i32), Source>,
        store: &StateStore,
    ) {
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
            (m::ROWS, batch.rows),
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
        for src in sources.values_mut() {
            src.records_in.increment(std::mem::take(&mut src.batch_in));
        }
        for part in parts.values_mut() {
            part.gauges
                .records_in
                .increment(std::mem::take(&mut part.batch_in));
            part.gauges
                .set_watermark(part.step.engine().watermark(), now);
            part.gauges
                .open_windows
                .set(part.step.engine().pending_timers() as f64);
        }
        self.refresh_state_gauges(parts, store);
    }

    /// On an idle member, at most every second: the state figures and each partition's
    /// watermark lag, kept current although nothing commits.
    pub(super) fn refresh_idle(
        &mut self,
        parts: &BTreeMap<i32, Part>,
        store: &StateStore,
        now: i64,
    ) {
        if self.last_lag_update.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.refresh_state_gauges(parts, store);
        self.last_lag_update = Instant::now();
        for part in parts.values() {
            part.gauges
                .set_watermark(part.step.engine().watermark(), now);
        }
    }

    /// RocksDB figures (entries per partition, live bytes), at most every 5 s: they are not free.
    fn refresh_state_gauges(&mut self, parts: &BTreeMap<i32, Part>, store: &StateStore) {
        if self
            .last_state_gauges
            .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
        {
            return;
        }
        for (p, part) in parts {
            let entries = store.estimate_keys(&part.cf);
            part.gauges.state_entries.set(entries as f64);
            let cache = part.step.engine().cache_figures();
            part.gauges.cache_bytes.set(cache.bytes as f64);
            part.gauges.largest_key.set(cache.largest_key as f64);
            // One key holding a large share of the cache is a state that grows without bound
            // (a long global window, an unbounded distinct count): said once, and again each
            // time it doubles.
            let warned = self.warned_key_bytes.entry(*p).or_default();
            if cache.largest_key > cache.byte_limit / 4 && cache.largest_key > 2 * *warned {
                *warned = cache.largest_key;
                tracing::warn!(
                    partition = p,
                    key_state_bytes = cache.largest_key,
                    cache_bytes = cache.byte_limit,
                    "one key's window state holds more than a quarter of the partition's cache: \
                     bound it (approx_count_distinct, max_values, a shorter window or a global \
                     window's idle expiry) or raise kafka.cache_memory"
                );
            }
        }
        gauge!(m::STATE_SIZE).set(store.size_bytes() as f64);
        self.last_state_gauges = Some(Instant::now());
    }
}
