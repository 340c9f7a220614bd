//! The scaling signal: how long each input partition's backlog would take to drain, and how many
//! members the group should have so that the backlog stays under a target
//! (`kafka.target_backlog`), after the Dataflow model's throughput-based autoscaling.
//!
//! Each consumer statistics report (librdkafka's, every `statistics.interval.ms`) gives, per
//! input partition this member reads, the end a `read_committed` consumer may read to and the
//! position handed to the application. From two reports `dt` apart:
//!
//! - the **lag** of partition p is `end − position` (records);
//! - its **arrival rate** `a_p` is how far `end` moved per second, and its **processing rate**
//!   `r_p` how far `position` moved, both smoothed over about [`HORIZON_S`];
//! - `tidemark_backlog_seconds{topic,partition}` is `lag_p / r_p`, and [`MAX_BACKLOG_S`] (one
//!   day) when the partition has a lag and made no progress;
//! - the member's **capacity** `c` (records per second it could process when never idle) is
//!   `Σ r_p / busy`, with `busy` the share of wall time the loop did not spend waiting for records
//!   (at least [`MIN_BUSY`], so that an idle member does not claim an unbounded capacity);
//! - with `k` of the pipeline's `P` input partitions here, the members needed for this member's
//!   share of the input are `(Σ a_p + Σ lag_p / T) / c` (keep up with arrivals and drain the
//!   backlog within the target T), and, taking the other partitions to be like these,
//!   `tidemark_recommended_members` is `ceil(needed × P / k)`, at least 1 and at most `P` (a
//!   member beyond the partition count gets nothing to read). The group's figure is the largest
//!   any member reports (`max(tidemark_recommended_members)`, as the KEDA trigger in `ops/k8s`
//!   asks).
//!
//! The model is pure (time and idle time come in as numbers) so that a synthetic backlog tests it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The time over which rates are smoothed, seconds.
pub const HORIZON_S: f64 = 30.0;
/// The backlog reported for a partition with a lag that made no progress, seconds.
pub const MAX_BACKLOG_S: f64 = 86_400.0;
/// The smallest busy share the capacity is computed with.
pub const MIN_BUSY: f64 = 0.05;

/// One input partition in one statistics report.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionSample {
    /// Input topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The end a `read_committed` consumer may read to.
    pub end: i64,
    /// The position handed to the application.
    pub position: i64,
}

/// What one report yields.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    /// Per partition: (topic, partition, backlog seconds).
    pub backlog: Vec<(String, i32, f64)>,
    /// The members the group should have (`None` until two reports were seen).
    pub recommended_members: Option<u32>,
    /// Partitions in the previous report and not in this one (their backlog is no longer this
    /// member's: its gauge goes to 0).
    pub gone: Vec<(String, i32)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Rates {
    end: i64,
    position: i64,
    /// Smoothed arrival rate, records/s (`None` before the second sample).
    arrival: Option<f64>,
    /// Smoothed processing rate, records/s.
    processed: Option<f64>,
}

/// The scaling model of one member.
#[derive(Debug)]
pub struct ScalingModel {
    target_backlog_s: f64,
    partitions_total: usize,
    last: Option<(f64, f64)>,
    busy: Option<f64>,
    parts: HashMap<(String, i32), Rates>,
}

/// Moves a smoothed value toward `x`, with weight `w`.
fn smooth(old: Option<f64>, x: f64, w: f64) -> f64 {
    match old {
        Some(o) => o + w * (x - o),
        None => x,
    }
}

impl ScalingModel {
    /// A model for a pipeline with `partitions_total` input partitions and a target backlog.
    pub fn new(target_backlog_s: f64, partitions_total: usize) -> ScalingModel {
        ScalingModel {
            target_backlog_s,
            partitions_total: partitions_total.max(1),
            last: None,
            busy: None,
            parts: HashMap::new(),
        }
    }

    /// Takes one report made at `now_s` (seconds, any fixed origin), when the loop had waited
    /// `idle_s` seconds in all (since any fixed start), with the partitions this member reads now.
    pub fn observe(&mut self, now_s: f64, idle_s: f64, samples: &[PartitionSample]) -> Signal {
        let dt = self.last.map(|(t, _)| now_s - t).filter(|dt| *dt > 0.0);
        if let (Some(dt), Some((_, idle_before))) = (dt, self.last) {
            let busy = (1.0 - (idle_s - idle_before) / dt).clamp(0.0, 1.0);
            self.busy = Some(smooth(self.busy, busy, (dt / HORIZON_S).min(1.0)));
        }
        self.last = Some((now_s, idle_s));
        let mut seen = HashMap::with_capacity(samples.len());
        for s in samples {
            let key = (s.topic.clone(), s.partition);
            let mut r = self.parts.remove(&key).unwrap_or(Rates {
                end: s.end,
                position: s.position,
                ..Rates::default()
            });
            if let Some(dt) = dt {
                let w = (dt / HORIZON_S).min(1.0);
                let arrival = (s.end - r.end).max(0) as f64 / dt;
                let processed = (s.position - r.position).max(0) as f64 / dt;
                r.arrival = Some(smooth(r.arrival, arrival, w));
                r.processed = Some(smooth(r.processed, processed, w));
            }
            r.end = s.end;
            r.position = s.position;
            seen.insert(key, r);
        }
        // Partitions no longer read here are forgotten.
        let gone = self.parts.drain().map(|(k, _)| k).collect();
        self.parts = seen;
        let mut backlog = Vec::with_capacity(samples.len());
        let (mut arrival, mut processed, mut lag_total) = (0.0, 0.0, 0.0);
        let mut measured = dt.is_some();
        for s in samples {
            let r = &self.parts[&(s.topic.clone(), s.partition)];
            let lag = (s.end - s.position).max(0) as f64;
            lag_total += lag;
            let Some(rate) = r.processed else {
                measured = false;
                continue;
            };
            arrival += r.arrival.unwrap_or(0.0);
            processed += rate;
            let seconds = if lag == 0.0 {
                0.0
            } else if rate > 0.0 {
                (lag / rate).min(MAX_BACKLOG_S)
            } else {
                MAX_BACKLOG_S
            };
            backlog.push((s.topic.clone(), s.partition, seconds));
        }
        let recommended_members = match (measured, self.busy) {
            (true, Some(busy)) if !samples.is_empty() => {
                Some(self.recommend(arrival, processed, lag_total, busy, samples.len()))
            }
            _ => None,
        };
        Signal {
            backlog,
            recommended_members,
            gone,
        }
    }

    /// The members the group should have, from this member's `k` partitions (see the module's
    /// documentation for the formula).
    fn recommend(&self, arrival: f64, processed: f64, lag: f64, busy: f64, k: usize) -> u32 {
        let capacity = processed / busy.max(MIN_BUSY);
        let demand = arrival + lag / self.target_backlog_s;
        let p = self.partitions_total as f64;
        let needed = if demand <= 0.0 {
            0.0
        } else if capacity <= 0.0 {
            // Nothing was processed while there was work: no capacity figure; ask for every
            // partition to have its member.
            p
        } else {
            demand / capacity * p / k as f64
        };
        (needed.ceil() as u32).clamp(1, self.partitions_total as u32)
    }
}

/// Wall time since the loop started and how much of it the loop spent waiting for records, for
/// the scaling signal's busy share.
pub(crate) struct Idle {
    started: Instant,
    nanos: std::sync::atomic::AtomicU64,
}

impl Default for Idle {
    fn default() -> Idle {
        Idle {
            started: Instant::now(),
            nanos: Default::default(),
        }
    }
}

impl Idle {
    /// Polls `consumer`; a poll that may wait (`timeout` > 0) and brings nothing counts as
    /// waiting (polls that may not wait are not timed: reading the clock per record showed in
    /// profiles).
    pub(crate) fn poll<'c, C: rdkafka::consumer::ConsumerContext>(
        &self,
        consumer: &'c rdkafka::consumer::BaseConsumer<C>,
        timeout: Duration,
    ) -> Option<rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'c>>> {
        if timeout.is_zero() {
            return consumer.poll(timeout);
        }
        let started = Instant::now();
        let got = consumer.poll(timeout);
        if got.is_none() {
            self.add(started.elapsed());
        }
        got
    }

    fn add(&self, d: Duration) {
        self.nanos
            .fetch_add(d.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// (seconds since the start, seconds spent waiting).
    pub(crate) fn seconds(&self) -> (f64, f64) {
        let idle = self.nanos.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e9;
        (self.started.elapsed().as_secs_f64(), idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(parts: i32, end: i64, position: i64) -> Vec<PartitionSample> {
        (0..parts)
            .map(|p| PartitionSample {
                topic: "in".into(),
                partition: p,
                end,
                position,
            })
            .collect()
    }

    /// Feeds `steps` reports `dt` apart: every partition receives `arrive` and processes
    /// `process` records per second from a starting `lag`, the loop idle `idle` of the time.
    fn drive(
        m: &mut ScalingModel,
        parts: i32,
        lag: i64,
        arrive: f64,
        process: f64,
        idle: f64,
        steps: usize,
    ) -> Signal {
        let dt = 5.0;
        let mut end = lag;
        let mut position = 0i64;
        let mut signal = m.observe(0.0, 0.0, &samples(parts, end, position));
        for i in 1..=steps {
            end += (arrive * dt) as i64;
            position = (position + (process * dt) as i64).min(end);
            let t = i as f64 * dt;
            signal = m.observe(t, idle * t, &samples(parts, end, position));
        }
        signal
    }

    #[test]
    fn nothing_is_recommended_before_two_reports() {
        let mut m = ScalingModel::new(60.0, 8);
        let s = m.observe(0.0, 0.0, &samples(4, 100, 0));
        assert_eq!(s.recommended_members, None);
        assert!(s.backlog.is_empty());
    }

    #[test]
    fn a_member_keeping_up_with_half_its_time_idle_needs_no_help() {
        // 4 of 8 partitions, 1,000 records/s each arriving and processed, the loop idle half the
        // time: capacity 8,000/s against a demand of 4,000/s: this half needs half a member, the
        // whole input one member.
        let mut m = ScalingModel::new(60.0, 8);
        let s = drive(&mut m, 4, 0, 1_000.0, 1_000.0, 0.5, 20);
        assert_eq!(s.recommended_members, Some(1));
        assert!(s.backlog.iter().all(|(_, _, b)| *b == 0.0), "{s:?}");
    }

    #[test]
    fn a_saturated_member_falling_behind_asks_for_more_in_proportion() {
        // Never idle, processing 1,000/s per partition while 2,000/s arrive; 4 of 12 partitions
        // here, a target backlog of 10 minutes. After 120 s: capacity 4,000/s; demand 8,000/s of
        // arrivals plus 480,000 records of lag / 600 s = 8,800/s: 2.2 × (12 / 4) = 6.6 → 7.
        let mut m = ScalingModel::new(600.0, 12);
        let s = drive(&mut m, 4, 0, 2_000.0, 1_000.0, 0.0, 24);
        assert_eq!(s.recommended_members, Some(7));
        for (_, _, b) in &s.backlog {
            // 120,000 records behind at 1,000/s.
            assert_eq!(*b, 120.0);
        }
    }

    #[test]
    fn a_backlog_is_drained_within_the_target() {
        // An old backlog of 600,000 records per partition, nothing arriving, 5,000/s processed per
        // partition with the loop never idle: draining 2.4M records within 60 s needs 40,000/s,
        // twice this member's 20,000/s, so 2 × (8 / 4) = 4 members.
        let mut m = ScalingModel::new(60.0, 8);
        let s = drive(&mut m, 4, 600_000, 0.0, 5_000.0, 0.0, 1);
        // After one report: lag 575,000 each, 2.3M in all: 38,333/s needed → 1.92 × 2 → 4.
        assert_eq!(s.recommended_members, Some(4));
        // A longer target asks for fewer.
        let mut m = ScalingModel::new(600.0, 8);
        let s = drive(&mut m, 4, 600_000, 0.0, 5_000.0, 0.0, 1);
        assert_eq!(s.recommended_members, Some(1));
    }

    #[test]
    fn the_recommendation_never_exceeds_the_partition_count() {
        let mut m = ScalingModel::new(1.0, 6);
        let s = drive(&mut m, 6, 10_000_000, 50_000.0, 10.0, 0.0, 3);
        assert_eq!(s.recommended_members, Some(6));
    }

    #[test]
    fn a_partition_with_a_lag_and_no_progress_reports_the_cap() {
        let mut m = ScalingModel::new(60.0, 2);
        let s = drive(&mut m, 2, 1_000, 0.0, 0.0, 0.0, 2);
        assert!(
            s.backlog.iter().all(|(_, _, b)| *b == MAX_BACKLOG_S),
            "{s:?}"
        );
        assert_eq!(s.recommended_members, Some(2));
    }

    #[test]
    fn partitions_that_left_are_forgotten() {
        let mut m = ScalingModel::new(60.0, 4);
        drive(&mut m, 4, 0, 10.0, 10.0, 0.5, 2);
        let s = m.observe(100.0, 50.0, &samples(2, 500, 500));
        assert_eq!(s.backlog.len(), 2);
        assert_eq!(m.parts.len(), 2);
        let mut gone = s.gone;
        gone.sort();
        assert_eq!(gone, [("in".to_string(), 2), ("in".to_string(), 3)]);
    }
}
