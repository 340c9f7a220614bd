//! Restores: what an assignment's partitions resume from, read from the log (the log is the only
//! truth).
//!
//! An input partition of a pipeline partitioned by the key, and a repartition partition, is a
//! windowing partition (`Part`): its state is restored from its changelog partition, whose offset
//! markers say where it resumes. An input partition of the hop's first stage is a source
//! (`Source`): the offsets topic's markers say where it resumes.

use super::errors::{Cause, RunError};
use super::parts::{Part, Source};
use super::settings::Settings;
use super::sources;
use crate::changelog::{restore, OpenPolicy, RestoreError, RestoreStats, SourceMarkers};
use crate::clock::wall_ms;
use crate::metrics as m;
use crate::pipeline::{Front, Step};
use crate::state::store::{Lineage, StateStore};
use crate::windowing::engine::WINDOW_OPERATOR;
use crate::windowing::fold::Folder;
use metrics::{counter, histogram};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What an assignment asks of the consumer: where each partition starts, and which to pause.
pub(super) struct Assigned {
    pub(super) start_at: TopicPartitionList,
    pub(super) pause: TopicPartitionList,
}

/// Restores partitions of one member's settings into its state store.
pub(super) struct Restorer<'a> {
    pub(super) s: &'a Settings,
    pub(super) store: &'a StateStore,
}

impl Restorer<'_> {
    /// Refuses state written by another pipeline definition.
    fn check_fingerprint(&self, what: &str, lineage: &Lineage) -> Result<(), RunError> {
        match &lineage.fingerprint {
            Some(theirs) if *theirs != self.s.fingerprint => Err(RunError::Incompatible(format!(
                "{what}'s state was written by another pipeline definition \
                 (fingerprint {theirs}, this file's is {}): what shapes the state changed \
                 (window, lateness, trigger, aggregations, key, timestamp, input format, input \
                 topics or repartitioning). Run `tidemark replay` with this file to recompute \
                 from the input, or use a new application_id",
                self.s.fingerprint
            ))),
            _ => Ok(()),
        }
    }

    /// Restores windowing partition `p`'s state from its changelog partition, checks and records
    /// its lineage; returns the restore's figures.
    fn restore_part(
        &self,
        p: i32,
        pre: Option<Restored<RestoreStats>>,
    ) -> Result<(String, RestoreStats), RunError> {
        let cf = StateStore::cf_name(WINDOW_OPERATOR, p);
        let done = pre.unwrap_or_else(|| timed(|| self.read_part(p)));
        let (stats, took) = (done.result?, done.took);
        counter!(m::RESTORE_RECORDS, "partition" => p.to_string()).increment(stats.applied as u64);
        histogram!(m::RESTORE_DURATION).record(took.as_secs_f64());
        if !stats.waited.is_zero() {
            histogram!(m::RESTORE_OPEN_WAIT).record(stats.waited.as_secs_f64());
        }
        tracing::info!(
            partition = p,
            committed = ?stats.committed,
            applied = stats.applied,
            skipped = stats.skipped,
            markers = stats.markers,
            changelog_offset = stats.changelog_offset,
            waited_ms = stats.waited.as_millis() as u64,
            resets = stats.resets,
            epoch = stats.lineage.epoch,
            ms = took.as_millis() as u64,
            "partition restored from the changelog"
        );
        self.check_fingerprint(&format!("partition {p}"), &stats.lineage)?;
        // From here on this definition writes the partition's state: record that with it, so a
        // later start with another definition is refused even when the changelog's tail has
        // nothing new to say.
        let lineage = Lineage {
            epoch: stats.lineage.epoch,
            fingerprint: Some(self.s.fingerprint.clone()),
        };
        if stats.lineage != lineage {
            let mut batch = rocksdb::WriteBatch::default();
            self.store
                .put_lineage(&mut batch, &cf, &lineage)
                .and_then(|()| self.store.write(batch))
                .map_err(|e| RunError::Fatal(Cause::part("storing the state's lineage", e)))?;
        }
        Ok((cf, stats))
    }

    /// An input partition of a pipeline partitioned by the key, restored.
    pub(super) fn direct_part(
        &self,
        p: i32,
        pre: Option<Restored<RestoreStats>>,
    ) -> Result<Part, RunError> {
        let (cf, stats) = self.restore_part(p, pre)?;
        let topic = self.s.k.input_topics[0].clone();
        // The watermark resumes from the one stored with the state, so replayed records are
        // judged as they were the first time.
        let step = Step::open(
            &self.s.spec.engine,
            self.store,
            p,
            &[format!("{topic}/{p}")],
            Some(self.s.k.max_future_skew),
            wall_ms(),
        )
        .map_err(|e| RunError::Fatal(Cause::part(format!("opening partition {p}"), e)))?;
        Ok(Part::restored(step, &stats, cf, &topic, p))
    }

    /// A repartition partition (the hop's second stage): restored from its changelog partition,
    /// to be read from the repartition offset it committed.
    pub(super) fn hop_part(
        &self,
        p: i32,
        pre: Option<Restored<RestoreStats>>,
    ) -> Result<Part, RunError> {
        let (cf, stats) = self.restore_part(p, pre)?;
        let step = Step::open_back(&self.s.spec.engine, self.store, p, &self.s.source_names)
            .map_err(|e| RunError::Fatal(Cause::part(format!("opening partition {p}"), e)))?;
        let topic = self.s.k.repartition_topic.clone();
        Ok(Part::restored(step, &stats, cf, &topic, p))
    }

    /// An input partition of the hop's first stage (or of `--passthrough`), restored from the
    /// offsets topic.
    pub(super) fn source(
        &self,
        topic_index: u16,
        p: i32,
        pre: Option<Restored<SourceMarkers>>,
    ) -> Result<Source, RunError> {
        let topic = self.s.input_topic(topic_index).to_string();
        let done = pre.unwrap_or_else(|| timed(|| self.read_source(&topic, p)));
        let (state, took) = (done.result?, done.took);
        tracing::info!(
            topic,
            partition = p,
            committed = ?state.committed,
            markers = state.markers,
            epoch = state.lineage.epoch,
            watermark = state.watermark,
            ms = took.as_millis() as u64,
            "input partition restored from the offsets topic"
        );
        self.check_fingerprint(&format!("input partition {topic}/{p}"), &state.lineage)?;
        let front = Front::resume(
            self.s.spec.engine.watermark,
            state.watermark,
            Some(self.s.k.max_future_skew),
            wall_ms(),
        );
        let records_in =
            counter!(m::RECORDS_IN, "topic" => topic.clone(), "partition" => p.to_string());
        Ok(Source {
            committed_front: front.clone(),
            front,
            epoch: state.lineage.epoch,
            next_offset: state.committed,
            committed_offset: state.committed,
            first_seen: None,
            batch_in: 0,
            written: None,
            last_appended: wall_ms(),
            pending: None,
            records_in,
            folder: self
                .s
                .k
                .combine
                .then(|| Folder::new(&self.s.spec.engine))
                .flatten(),
        })
    }

    /// Restores every windowing partition and reads every source's markers of an assignment,
    /// [`PARALLEL_RESTORES`] at a time. Each read ends with a fetch that finds nothing new, which
    /// a broker may hold for its whole wait, 50 ms
    /// ([`crate::kafka::quirks::FETCH_HELD_PAST_DATA`]): one after another, 256 partitions
    /// took 27 s of waiting before the first commit. The results are applied (and
    /// logged) in the assignment's order.
    pub(super) fn all(&self, tpl: &TopicPartitionList) -> Prefetched {
        let mut windowing = Vec::new();
        let mut sources = Vec::new();
        for el in tpl.elements() {
            let (topic, p) = (el.topic(), el.partition());
            if self.s.is_parts_topic(topic) {
                windowing.push(p);
            } else if let Some(i) = self.s.input_index(topic) {
                sources.push((i, p, topic.to_string()));
            }
        }
        let parts = in_parallel(&windowing, |&p| timed(|| self.read_part(p)));
        let markers = in_parallel(&sources, |(_, p, topic)| {
            timed(|| self.read_source(topic, *p))
        });
        Prefetched {
            parts: windowing.into_iter().zip(parts).collect(),
            sources: sources
                .into_iter()
                .map(|(i, p, _)| (i, p))
                .zip(markers)
                .collect(),
        }
    }

    /// Restores windowing partition `p` from its changelog partition into the store.
    fn read_part(&self, p: i32) -> Result<RestoreStats, RunError> {
        let cf = StateStore::cf_name(WINDOW_OPERATOR, p);
        restore_with_retry(self.store, &self.s.k, self.s.open_policy(), &cf, p)
    }

    /// Reads input partition `topic`/`p`'s markers from the offsets topic.
    fn read_source(&self, topic: &str, p: i32) -> Result<SourceMarkers, RunError> {
        sources::restore(
            &self.s.k.brokers,
            &self.s.k.offsets_topic,
            self.s.offsets_partitions,
            topic,
            p,
            self.s.open_policy(),
        )
    }
}

/// The group's committed offsets, only to compare with the log's; `None` when they could not
/// be read (a partition without one maps to `None`).
pub(super) fn group_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tpl: &TopicPartitionList,
) -> Option<HashMap<(String, i32), Option<i64>>> {
    match consumer.committed_offsets(tpl.clone(), Duration::from_secs(5)) {
        Ok(committed) => Some(
            committed
                .elements()
                .iter()
                .map(|e| {
                    let key = (e.topic().to_string(), e.partition());
                    match e.offset() {
                        Offset::Offset(o) => (key, Some(o)),
                        _ => (key, None),
                    }
                })
                .collect(),
        ),
        Err(e) => {
            tracing::warn!("reading the group's committed offsets (only a hint): {e}");
            None
        }
    }
}

/// The (topic, partition) pairs of `tpl`.
pub(super) fn partitions_of(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

/// How many partitions of one assignment are restored at a time.
const PARALLEL_RESTORES: usize = 8;

/// A restore done ahead of its partition's turn, and how long it took.
pub(super) struct Restored<T> {
    result: Result<T, RunError>,
    took: Duration,
}

/// The restores of one assignment, done ahead.
pub(super) struct Prefetched {
    pub(super) parts: HashMap<i32, Restored<RestoreStats>>,
    pub(super) sources: HashMap<(u16, i32), Restored<SourceMarkers>>,
}

/// Runs a restore and times it.
fn timed<T>(f: impl FnOnce() -> Result<T, RunError>) -> Restored<T> {
    let started = Instant::now();
    let result = f();
    Restored {
        result,
        took: started.elapsed(),
    }
}

/// Runs `f` on every item, at most [`PARALLEL_RESTORES`] at a time, and returns the results in
/// the items' order.
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new(items.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL_RESTORES.min(items.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else {
                    break;
                };
                let r = f(item);
                results.lock().expect("lock")[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("lock")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

/// Restores partition `p` into column family `cf`, retrying a failed read of the changelog (a
/// leader that moved, a broker that is busy) with backoff before giving up. A read never falls
/// back to a guess.
fn restore_with_retry(
    store: &StateStore,
    k: &crate::config::KafkaSpec,
    policy: OpenPolicy,
    cf: &str,
    p: i32,
) -> Result<RestoreStats, RunError> {
    let mut attempt = 0u32;
    loop {
        match restore(store, cf, &k.brokers, &k.changelog_topic, p, policy) {
            Ok(stats) => return Ok(stats),
            Err(RestoreError::Read(e)) if attempt < 6 => {
                attempt += 1;
                tracing::warn!(
                    partition = p,
                    attempt,
                    "reading the changelog: {e}; retrying"
                );
                std::thread::sleep(Duration::from_millis(100 << attempt));
            }
            Err(e) => {
                return Err(RunError::Fatal(Cause::part(
                    format!("restoring partition {p}"),
                    e,
                )))
            }
        }
    }
}
