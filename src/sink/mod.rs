//! Sinks that run beside a pipeline, as their own consumer groups, and carry its committed
//! output into another system exactly once.
//!
//! **The seam.** What every such sink needs is written once, here, in [`run`]: sharing the output
//! topic's partitions (and the dead-letter topic's, when the sink keeps dead letters) among the
//! sink's members, through the consumer group `<application_id>-<sink>`, or, with
//! `kafka.membership = "log"`, through heartbeats in the topic `<application_id>-<sink>-members`
//! ([`crate::kafka::members`]); following each assigned
//! partition's **raw log**, with transactions resolved from their COMMIT/ABORT markers, so only
//! records of committed transactions are applied even on a broker that serves aborted records to
//! `read_committed` consumers; decoding panes and dead letters ([`crate::format`]); batching;
//! reducing a batch to the last pane per dedup id; retries; and metrics. What only one database
//! needs is a [`Sink`]: connect and check its tables, read back the offsets it stored, and write
//! one batch together with the offsets, atomically.
//!
//! **A sink is a folder**: `sink/<name>/` holds its section of the pipeline file (`[sink.<name>]`,
//! checked with the rest of the file through [`crate::config::SinkSection`]) and its [`Sink`];
//! [`SINKS`] registers it, in one line, and `tidemark sink <name>` runs it.
//!
//! The lifecycle (as in Arroyo's connectors): **start** — [`Sink::connect`], then each assigned
//! partition resumes at the offset [`Sink::stored_offsets`] returns (0 when none; Kafka's group
//! offsets are never used); **process** — committed records are decoded into the open batch;
//! **commit** — every `commit_interval`, once `max_batch_records` are pending, or before
//! partitions leave, [`Sink::write`] stores the batch and the next offset of every partition read
//! in one transaction of the destination. A failed write drops the batch and every position,
//! reconnects with backoff and reads again from the stored offsets: nothing is skipped, and a
//! sink's write must make applying a pane twice change nothing (keep the highest
//! `(epoch, pane_index)` per dedup id), so the destination converges to the last pane of every
//! window however often a batch is retried.
//!
//! * [`postgres`] — `tidemark sink postgres`: panes (and dead letters) into PostgreSQL tables,
//!   with the offsets in the same database transaction.

pub mod postgres;
mod reading;
mod share;
mod watch;

/// A sink as the command line and the pipeline file know it.
pub struct Registered {
    /// Its section of the pipeline file, `[sink.NAME]`.
    pub section: &'static dyn crate::config::SinkSection,
    /// Runs it over a validated pipeline until the flag is set.
    pub run: fn(crate::config::PipelineSpec, &AtomicBool) -> Result<(), SinkError>,
}

/// Every sink, one line each.
pub const SINKS: &[Registered] = &[Registered {
    section: &postgres::SECTION,
    run: postgres::run,
}];

/// Every sink's section, for [`crate::config::RawConfig::validate_with`].
pub fn sections() -> Vec<&'static dyn crate::config::SinkSection> {
    SINKS.iter().map(|s| s.section).collect()
}

use crate::config::KafkaSpec;
use crate::format::dead_letter::DeadLetter;
use crate::format::pane::PaneRecord;
use crate::format::{epoch_of, Decoder};
use crate::kafka::raw_log::RawRecord;
use crate::metrics as m;
use metrics::{counter, gauge, histogram};
use reading::Reading;
use share::Share;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A partition of a topic the sink reads: (topic, partition).
pub use crate::kafka::roster::TopicPartition;

/// The next offset to read, per partition.
pub type Offsets = BTreeMap<TopicPartition, i64>;

/// An error beneath a sink's, kept as its source.
pub type Source = Box<dyn std::error::Error + Send + Sync>;

/// Errors that stop a sink.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The pipeline file lacks a section the sink needs.
    #[error("the pipeline needs a [{0}] section")]
    Missing(&'static str),
    /// A destination table exists with other columns than the sink writes: the sentence names
    /// the difference.
    #[error("{0}")]
    Schema(String),
    /// Checking or making a destination table failed.
    #[error("{what}: {source}")]
    Tables {
        /// What was being done.
        what: String,
        /// The destination's error.
        #[source]
        source: Source,
    },
    /// A pane could not be decoded and the sink keeps no dead letters to put it in.
    #[error("{0}")]
    Undecodable(String),
    /// Setting up the Kafka clients failed.
    #[error("startup: {what}: {source}")]
    Startup {
        /// What was being done.
        what: String,
        /// The client's error.
        #[source]
        source: Source,
    },
    /// The destination refused a batch, and would refuse it again: the sink stops rather than
    /// retry it forever (as a Kafka Connect sink task fails on a non-retriable error).
    #[error("the destination refused a batch: {0}")]
    Refused(#[source] BatchError),
}

impl SinkError {
    /// Whether the error is the user's to fix (exit status 2) rather than a failure (1).
    pub fn is_refusal(&self) -> bool {
        matches!(self, SinkError::Missing(_) | SinkError::Schema(_))
    }

    /// A failed step of the startup.
    pub fn startup(what: impl Into<String>, source: impl Into<Source>) -> SinkError {
        SinkError::Startup {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// Why a batch was not written.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The sink has no connection to its destination.
    #[error("not connected")]
    NotConnected,
    /// A failure that passes: a lost connection, a conflict between transactions, a server
    /// shutting down or out of resources. The batch is read again from the stored offsets and
    /// written again after reconnecting.
    #[error("{what}")]
    Transient {
        /// The failure in words, with the destination's own message.
        what: String,
        /// The destination's error.
        #[source]
        source: Source,
    },
    /// The destination refused the batch's data (a constraint, a value it cannot store): the
    /// same batch would be refused again.
    #[error("{what}")]
    Refused {
        /// The refusal in words, with the destination's own message.
        what: String,
        /// The destination's error.
        #[source]
        source: Source,
    },
}

impl BatchError {
    /// Whether writing the batch again, after reconnecting, can succeed.
    pub fn is_transient(&self) -> bool {
        !matches!(self, BatchError::Refused { .. })
    }
}

/// A dead letter with the bytes of its record.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterRow {
    /// What the dead letter says (its headers).
    pub letter: DeadLetter,
    /// The record's key.
    pub key: Option<Vec<u8>>,
    /// The record's value (the original bytes under JSON output, the Avro envelope under Avro).
    pub value: Option<Vec<u8>>,
}

impl DeadLetterRow {
    /// A dead letter read from its record; `None` when it lacks the dead-letter headers.
    pub fn from_record(r: &RawRecord) -> Option<DeadLetterRow> {
        Some(DeadLetterRow {
            letter: DeadLetter::from_record(r)?,
            key: r.key.as_ref().map(|k| k.to_vec()),
            value: r.value.as_ref().map(|v| v.to_vec()),
        })
    }
}

/// One batch: what a [`Sink`] writes in one transaction of its destination.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    /// The last pane per dedup id among the batch's panes (highest `(epoch, pane_index)`).
    pub panes: Vec<PaneRecord>,
    /// Dead letters (only for sinks that keep them).
    pub dead_letters: Vec<DeadLetterRow>,
    /// The next offset of every partition read, to store with the batch.
    pub offsets: Offsets,
}

impl Batch {
    /// A batch of `panes` reduced to the last pane per dedup id, with `dead_letters` and
    /// `offsets`.
    pub fn new(
        panes: Vec<PaneRecord>,
        dead_letters: Vec<DeadLetterRow>,
        offsets: Offsets,
    ) -> Batch {
        let mut last: HashMap<String, PaneRecord> = HashMap::with_capacity(panes.len());
        for p in panes {
            match last.get(&p.dedup_id) {
                Some(e) if (e.epoch, e.pane_index) >= (p.epoch, p.pane_index) => {}
                _ => {
                    last.insert(p.dedup_id.clone(), p);
                }
            }
        }
        Batch {
            panes: last.into_values().collect(),
            dead_letters,
            offsets,
        }
    }
}

/// What one batch did at the destination.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchStats {
    /// Rows inserted or replaced.
    pub upserted: u64,
    /// Panes skipped because the destination holds a higher `(epoch, pane_index)`.
    pub superseded: u64,
    /// Rows deleted by RETRACT panes.
    pub deleted: u64,
    /// Dead letters inserted.
    pub dead_letters: u64,
}

/// What a database connector implements; [`run`] does the rest.
pub trait Sink {
    /// The sink's name: the suffix of its consumer group, and its name in logs.
    fn name(&self) -> &'static str;

    /// Whether dead letters are kept: then the dead-letter topic is read too, and a pane that
    /// does not decode becomes a dead letter instead of stopping the sink.
    fn keeps_dead_letters(&self) -> bool;

    /// Connects, retrying with backoff until `shutdown` is set, and creates or checks the
    /// destination's tables. `Ok(false)` when shut down first. Called at start and again after a
    /// failed batch.
    fn connect(&mut self, shutdown: &AtomicBool) -> Result<bool, SinkError>;

    /// The offsets stored with the batches consumer group `group` wrote.
    fn stored_offsets(&mut self, group: &str) -> Result<Offsets, BatchError>;

    /// Writes one batch and its offsets for consumer group `group` atomically. Writing a pane
    /// again must change nothing: a row is replaced only by a higher `(epoch, pane_index)`.
    fn write(&mut self, batch: &Batch, group: &str) -> Result<BatchStats, BatchError>;
}

/// How [`run`] batches.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    /// A batch is written at least this often, in ms.
    pub commit_interval: i64,
    /// A batch is written early once it holds this many records.
    pub max_batch_records: usize,
}

/// The records read since the last batch was written.
#[derive(Debug, Default)]
struct Pending {
    panes: Vec<PaneRecord>,
    dead_letters: Vec<DeadLetterRow>,
    /// Whether a position moved (a batch of offsets only is still worth storing).
    moved: bool,
}

impl Pending {
    fn len(&self) -> usize {
        self.panes.len() + self.dead_letters.len()
    }
}

/// Runs `sink` over the pipeline's committed output until `shutdown` is set.
pub fn run(
    k: &KafkaSpec,
    decoder: &Decoder,
    batching: Batching,
    sink: &mut dyn Sink,
    shutdown: &AtomicBool,
) -> Result<(), SinkError> {
    let group = format!("{}-{}", k.application_id, sink.name());
    if !sink.connect(shutdown)? {
        return Ok(());
    }
    let mut topics = vec![k.output_topic.clone()];
    if sink.keeps_dead_letters() {
        topics.push(k.dead_letter_topic.clone());
    }
    // Who reads which partition: the broker's consumer group, or membership from the log in a
    // topic of the sink's own (`kafka.membership = "log"`).
    let mut share = Share::start(k, &group, &topics)?;
    let mut reading = Reading::new(&k.brokers, &topics, k.transaction_timeout);
    let mut pending = Pending::default();
    let mut last_commit = Instant::now();
    let interval = Duration::from_millis(batching.commit_interval as u64);
    let poll = (interval / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
    let mut failed = false;
    loop {
        let stopping = shutdown.load(Ordering::Relaxed);
        let wait = if stopping { Duration::ZERO } else { poll };
        let assigned = share.assigned(wait, &mut || match sink.stored_offsets(&group) {
            Ok(o) => Some(o),
            Err(e) => {
                tracing::debug!("reading stored offsets for the group's watchdog: {e}");
                None
            }
        });
        // Partitions that left: write what was read from them first.
        let gone = reading.positions().keys().any(|tp| !assigned.contains(tp));
        let due = last_commit.elapsed() >= interval
            || pending.len() >= batching.max_batch_records
            || gone
            || stopping;
        if failed || ((pending.len() > 0 || pending.moved) && due) {
            let written = !failed && commit(sink, &group, &mut pending, &reading)?;
            if !written {
                // Drop the batch and every position: they are taken up again below, from the
                // offsets the sink stored.
                counter!(m::SINK_RETRIES).increment(1);
                pending = Pending::default();
                reading.retain(|_| false);
                std::thread::sleep(Duration::from_millis(200));
                if !sink.connect(shutdown)? {
                    return Ok(());
                }
                failed = false;
            }
            last_commit = Instant::now();
        }
        if stopping {
            share.leave();
            tracing::info!(sink = sink.name(), "stopped");
            return Ok(());
        }
        reading.retain(|tp| assigned.contains(tp));
        let new: Vec<TopicPartition> = assigned
            .iter()
            .filter(|tp| !reading.follows(tp))
            .cloned()
            .collect();
        if !new.is_empty() {
            match sink.stored_offsets(&group) {
                Ok(stored) => {
                    for tp in new {
                        let from = stored.get(&tp).copied().unwrap_or(0);
                        tracing::info!(
                            topic = tp.0,
                            partition = tp.1,
                            from,
                            sink = sink.name(),
                            "partition assigned: reading from the offset the sink stored"
                        );
                        reading.follow(&tp, from);
                    }
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!("reading stored offsets: {e}");
                    failed = true;
                    continue;
                }
                Err(e) => return Err(SinkError::Refused(e)),
            }
        }
        let before = reading.positions();
        for (topic, r) in reading.read() {
            let dead_topic = topic == k.dead_letter_topic;
            take(
                &topic,
                &r,
                dead_topic,
                decoder,
                sink.keeps_dead_letters(),
                &mut pending,
            )?;
        }
        pending.moved |= reading.positions() != before;
    }
}

/// Writes the pending batch with every partition's position; `Ok(false)` when the write failed
/// in a way that passes, an error when the destination refused it.
fn commit(
    sink: &mut dyn Sink,
    group: &str,
    pending: &mut Pending,
    reading: &Reading,
) -> Result<bool, SinkError> {
    let offsets = reading.positions();
    let taken = std::mem::take(pending);
    let batch = Batch::new(taken.panes, taken.dead_letters, offsets);
    let started = Instant::now();
    match sink.write(&batch, group) {
        Ok(s) => {
            histogram!(m::SINK_BATCH_DURATION).record(started.elapsed().as_secs_f64());
            counter!(m::SINK_ROWS, "outcome" => "upserted").increment(s.upserted);
            counter!(m::SINK_ROWS, "outcome" => "superseded").increment(s.superseded);
            counter!(m::SINK_ROWS, "outcome" => "deleted").increment(s.deleted);
            counter!(m::SINK_DEAD_LETTERS).increment(s.dead_letters);
            for ((t, p), lag) in reading.lags() {
                gauge!(m::SINK_LAG, "topic" => t, "partition" => p.to_string()).set(lag as f64);
            }
            Ok(true)
        }
        Err(e) if e.is_transient() => {
            tracing::warn!(
                sink = sink.name(),
                "writing a batch: {e}; reconnecting, then reading again from the stored offsets"
            );
            Ok(false)
        }
        Err(e) => Err(SinkError::Refused(e)),
    }
}

/// Takes committed record `r` of `topic` into `pending`: a pane, or a dead letter (from the
/// dead-letter topic, or a pane that does not decode when the sink keeps dead letters).
fn take(
    topic: &str,
    r: &RawRecord,
    dead_topic: bool,
    decoder: &Decoder,
    keeps_dead_letters: bool,
    pending: &mut Pending,
) -> Result<(), SinkError> {
    let p = r.partition;
    if dead_topic {
        if let Some(d) = DeadLetterRow::from_record(r) {
            pending.dead_letters.push(d);
        }
        return Ok(());
    }
    match r.value.as_deref().map(|v| decoder.pane(v)) {
        Some(Ok(pane)) => pending.panes.push(pane),
        other => {
            let why = match other {
                Some(Err(why)) => why,
                _ => "a pane record without a value".to_string(),
            };
            let detail = format!("{topic}/{p}@{}: pane does not decode: {why}", r.offset);
            if !keeps_dead_letters {
                return Err(SinkError::Undecodable(format!(
                    "{detail} (configure a dead-letter table to keep such records and go on)"
                )));
            }
            tracing::warn!("{detail}");
            pending.dead_letters.push(DeadLetterRow {
                letter: DeadLetter {
                    reason: "undecodable_pane".into(),
                    topic: topic.to_string(),
                    partition: p,
                    offset: r.offset,
                    watermark: None,
                    late_by_ms: None,
                    detail,
                    epoch: epoch_of(r),
                },
                key: r.key.as_ref().map(|k| k.to_vec()),
                value: r.value.as_ref().map(|v| v.to_vec()),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windowing::trigger::Timing;

    fn pane(id: &str, epoch: u64, index: u32) -> PaneRecord {
        PaneRecord {
            key: "k".into(),
            window_start: 0,
            window_end: 1,
            timing: Timing::Late,
            pane_index: index,
            dedup_id: id.into(),
            epoch,
            count: index as u64 + 1,
            aggregates: vec![],
        }
    }

    #[test]
    fn a_batch_keeps_the_last_pane_per_dedup_id() {
        let batch = Batch::new(
            vec![
                pane("a", 0, 0),
                pane("a", 0, 2),
                pane("a", 0, 1),
                pane("b", 1, 0),
                pane("b", 0, 5),
            ],
            vec![],
            Offsets::new(),
        );
        let mut got: Vec<(String, u64, u32)> = batch
            .panes
            .iter()
            .map(|p| (p.dedup_id.clone(), p.epoch, p.pane_index))
            .collect();
        got.sort();
        assert_eq!(got, [("a".into(), 0, 2), ("b".into(), 1, 0)]);
    }
}
