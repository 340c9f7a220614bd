//! The coordinator: `tidemark run`'s loop and the commit cycle.
//!
//! Records are processed one at a time exactly as `simulate` does (one [`Engine`] per input
//! partition); panes and dead letters go straight into the open transaction. Every
//! `commit_interval`, or after `max_batch_records` records, [`Core::commit_cycle`] makes the batch
//! durable. **It is the only place where offsets, output and state become durable**:
//!
//! 1. produce the changelog: every state entry changed since the last cycle, full value or
//!    tombstone, stamped with the input offset this transaction commits, and an offset marker for
//!    every input partition the transaction consumed from (the log's record of that offset);
//! 2. await the delivery of everything produced in the transaction;
//! 3. `send_offsets_to_transaction` with the consumer's group metadata (a hint for tools, and
//!    KIP-447 fencing on brokers that check the generation);
//! 4. `commit_transaction`;
//! 5. write each partition's state batch to RocksDB together with its input offset and changelog
//!    offset, in one WriteBatch;
//! 6. begin the next transaction.
//!
//! Errors are classified with librdkafka's own predicates: retriable calls are retried; an
//! abortable error aborts the transaction, drops the uncommitted state, seeks every partition back
//! to its committed offset and carries on; a fatal error, or fencing, stops the process with a
//! non-zero exit (abort is never called after fencing). Transaction calls block, so the whole loop
//! runs on a dedicated thread, never on async workers.
//!
//! **The log is the only truth.** On assignment a partition's starting offset is what its
//! changelog's committed transactions say ([`crate::state::changelog`]); the consumer is assigned
//! that offset explicitly, and the group's committed offset is read only to warn when it
//! disagrees. A revocation commits first; a *lost* assignment (session expired, poll interval
//! exceeded) aborts the open transaction instead, since another member may already own the
//! partitions.

use crate::avro::{AvroEncoder, Framing, OutputFormat, SchemaRegistry};
use crate::clock::wall_ms;
use crate::config::{KafkaSpec, PipelineSpec};
use crate::metrics::{self as m, Health};
use crate::pipeline::{Rejection, Step};
use crate::record::DecodeError;
use crate::sink::json::encode_pane;
use crate::sink::kafka::{dead_letter_headers, pane_headers, DeadLetterInfo};
use crate::source::decode::Decoder;
use crate::source::{consumer_config, producer_config};
use crate::state::changelog::{
    restore, OpenPolicy, RestoreError, StartPosition, OFFSET_MARKER_KEY, STAMP_HEADER,
};
use crate::state::store::{StateStore, StoredOffsets};
use crate::windowing::cache::Changes;
use crate::windowing::engine::{Engine, Pane, WINDOW_OPERATOR};
use crate::windowing::trigger::Timing;
use crate::windowing::watermark::WatermarkTracker;
use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Errors that stop `tidemark run`.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration has no `[kafka]` section.
    #[error("the pipeline has no [kafka] section")]
    NoKafka,
    /// Setting up clients, topics or state failed.
    #[error("startup: {0}")]
    Startup(String),
    /// A fatal Kafka error or fencing: the process must stop.
    #[error("fatal: {0}")]
    Fatal(String),
}

/// Tracks deliveries of the open transaction.
#[derive(Debug, Default)]
struct Deliveries {
    outstanding: AtomicUsize,
    error: Mutex<Option<KafkaError>>,
    /// Last delivered changelog offset per partition.
    changelog: Mutex<HashMap<i32, i64>>,
    /// `tidemark_records_out_total` handles per topic and partition.
    out: Mutex<HashMap<String, HashMap<i32, Counter>>>,
}

/// Producer context: counts deliveries; the opaque is 0 for output, `1 + partition` for changelog.
struct TxnContext(Arc<Deliveries>);

impl ClientContext for TxnContext {}

impl ProducerContext for TxnContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        if let Ok(msg) = result {
            // By topic name first, so a delivery allocates nothing once its counter exists.
            let mut out = self.0.out.lock().expect("lock");
            if !out.contains_key(msg.topic()) {
                out.insert(msg.topic().to_string(), HashMap::new());
            }
            out.get_mut(msg.topic())
                .expect("inserted above")
                .entry(msg.partition())
                .or_insert_with(|| {
                    counter!(m::RECORDS_OUT, "topic" => msg.topic().to_string(),
                        "partition" => msg.partition().to_string())
                })
                .increment(1);
        }
        match result {
            Ok(m) if opaque > 0 => {
                let mut map = self.0.changelog.lock().expect("lock");
                let e = map.entry(opaque as i32 - 1).or_insert(m.offset());
                *e = (*e).max(m.offset());
            }
            Ok(_) => {}
            Err((e, _)) => *self.0.error.lock().expect("lock") = Some(e.clone()),
        }
        self.0.outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a failed transactional step must be handled.
#[derive(Debug)]
enum CycleError {
    /// Abort, rewind to the committed offsets, continue.
    Abortable(String),
    /// Stop the process.
    Fatal(String),
}

fn classify(what: &str, e: KafkaError) -> Result<bool, CycleError> {
    // Ok(true) = retry.
    let fenced = matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    );
    if fenced {
        return Err(CycleError::Fatal(format!(
            "{what}: producer fenced by a newer instance: {e}"
        )));
    }
    if let KafkaError::Transaction(t) = &e {
        if t.is_fatal() {
            return Err(CycleError::Fatal(format!("{what}: {e}")));
        }
        if t.is_retriable() {
            return Ok(true);
        }
        if t.txn_requires_abort() {
            return Err(CycleError::Abortable(format!("{what}: {e}")));
        }
    }
    Err(CycleError::Abortable(format!("{what}: {e}")))
}

/// Runs a transactional call, retrying retriable errors a bounded number of times.
fn with_retry(
    what: &str,
    mut call: impl FnMut() -> Result<(), KafkaError>,
) -> Result<(), CycleError> {
    for attempt in 0.. {
        match call() {
            Ok(()) => return Ok(()),
            Err(e) => {
                if classify(what, e)? && attempt < 20 {
                    std::thread::sleep(Duration::from_millis(50 * (attempt + 1)));
                    continue;
                }
                return Err(CycleError::Abortable(format!(
                    "{what}: gave up after retries"
                )));
            }
        }
    }
    unreachable!()
}

/// One input partition being processed.
struct Part {
    /// The record step: the partition's engine and watermark tracker.
    step: Step,
    /// Offset after the last processed record; `None` until the first record when the log has no
    /// committed offset for this partition.
    next_offset: Option<i64>,
    /// Input offset committed, as the log said at assignment and each commit since; `None` while
    /// nothing has ever committed on this partition.
    committed_offset: Option<i64>,
    /// Offset of the first record processed since the assignment, where a partition without a
    /// committed offset is rewound to.
    first_seen: Option<i64>,
    /// Watermark tracker as of the last commit, restored on abort.
    committed_tracker: WatermarkTracker,
    cf: String,
    /// Records processed in the open transaction.
    batch_in: u64,
    gauges: PartGauges,
}

/// Metric handles of one input partition, registered once at assignment.
struct PartGauges {
    records_in: Counter,
    watermark: Gauge,
    watermark_lag: Gauge,
    open_windows: Gauge,
    state_entries: Gauge,
}

impl PartGauges {
    /// Sets the watermark and its lag behind the wall clock `now` (nothing before the first
    /// watermark).
    fn set_watermark(&self, wm: i64, now: i64) {
        if wm != i64::MIN {
            self.watermark.set(wm as f64 / 1000.0);
            self.watermark_lag.set((now - wm) as f64 / 1000.0);
        }
    }

    fn new(topic: &str, p: i32) -> PartGauges {
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
struct BatchOutcome {
    /// Panes by timing: EARLY, ON_TIME, LATE, RETRACT.
    panes: [u64; 4],
    /// Dead letters by reason.
    dead_letters: Vec<&'static str>,
    /// Per pane, the append time (epoch ms) of the record or tick that fired it.
    fired_at: Vec<i64>,
}

/// What `run` does with each record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The windowing pipeline.
    Windows,
    /// A stateless transactional copy of the input to the output topic, through the same commit
    /// cycle: the broker-bound baseline of `scripts/bench-kafka.sh`.
    Passthrough,
}

/// Everything the loop and the rebalance callbacks share.
pub struct Core {
    spec: PipelineSpec,
    k: KafkaSpec,
    store: StateStore,
    producer: ThreadedProducer<TxnContext>,
    deliveries: Arc<Deliveries>,
    decoder: Decoder,
    /// Avro encoder of panes and dead letters; `None` for JSON output.
    encoder: Option<AvroEncoder>,
    parts: BTreeMap<i32, Part>,
    batch_records: usize,
    dirty: bool,
    last_commit: Instant,
    fatal: Option<String>,
    mode: Mode,
    health: Arc<Health>,
    /// Where a partition on which nothing has ever committed starts (`auto.offset.reset`).
    reset: Offset,
    batch: BatchOutcome,
    /// `tidemark_record_lateness_seconds`, registered once: it is recorded on the per-record path.
    lateness: Histogram,
    last_state_gauges: Option<Instant>,
    last_lag_update: Instant,
    /// Counters for logs: committed transactions, aborted transactions, panes, dead letters.
    pub counters: [u64; 4],
}

impl Core {
    fn send(&self, record: BaseRecord<'_, [u8], [u8], usize>) -> Result<(), CycleError> {
        self.deliveries.outstanding.fetch_add(1, Ordering::AcqRel);
        let mut record = record;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => {
                    self.deliveries.outstanding.fetch_sub(1, Ordering::AcqRel);
                    return Err(classify("produce", e)
                        .err()
                        .unwrap_or(CycleError::Abortable("produce".into())));
                }
            }
        }
    }

    fn send_panes(&mut self, panes: Vec<Pane>, fired_at: i64) -> Result<(), CycleError> {
        for p in panes {
            let value = match &self.encoder {
                None => encode_pane(&p, &self.spec.engine.aggregations).into_bytes(),
                Some(enc) => enc
                    .pane(&p, &self.spec.engine.aggregations)
                    .map_err(|e| CycleError::Fatal(e.to_string()))?,
            };
            let record = BaseRecord::with_opaque_to(&self.k.output_topic, 0usize)
                .key(p.key.as_bytes())
                .payload(value.as_slice())
                .headers(pane_headers(&p));
            self.send(record)?;
            self.counters[2] += 1;
            self.batch.panes[p.timing as usize] += 1;
            self.batch.fired_at.push(fired_at);
            self.dirty = true;
        }
        Ok(())
    }

    fn dead_letter(
        &mut self,
        msg: &BorrowedMessage<'_>,
        info: DeadLetterInfo,
    ) -> Result<(), CycleError> {
        let mut record = BaseRecord::with_opaque_to(&self.k.dead_letter_topic, 0usize)
            .headers(dead_letter_headers(&info));
        if let Some(k) = msg.key() {
            record = record.key(k);
        }
        let envelope = match &self.encoder {
            None => None,
            Some(enc) => Some(
                enc.dead_letter(&info, msg.key(), msg.payload())
                    .map_err(|e| CycleError::Fatal(e.to_string()))?,
            ),
        };
        match (&envelope, msg.payload()) {
            (Some(env), _) => record = record.payload(env.as_slice()),
            (None, Some(v)) => record = record.payload(v),
            (None, None) => {}
        }
        self.send(record)?;
        self.counters[3] += 1;
        self.batch.dead_letters.push(info.reason);
        tracing::debug!(
            reason = info.reason,
            partition = info.partition,
            offset = info.offset,
            "dead letter"
        );
        Ok(())
    }

    /// Processes one input record, as `simulate` processes one line.
    fn on_message(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), CycleError> {
        let p = msg.partition();
        let offset = msg.offset();
        let now = wall_ms();
        let topic = msg.topic();
        let appended = msg.timestamp().to_millis().unwrap_or(now);
        let Some(part) = self.parts.get_mut(&p) else {
            return Ok(()); // not (or no longer) ours
        };
        if part.next_offset != Some(offset) {
            // Transaction markers take offsets, so small jumps are normal; going back is not.
            tracing::debug!(
                partition = p,
                expected = part.next_offset,
                got = offset,
                "offset jump"
            );
        }
        part.first_seen.get_or_insert(offset);
        if self.mode == Mode::Passthrough {
            let mut record = BaseRecord::with_opaque_to(&self.k.output_topic, 0usize);
            if let Some(k) = msg.key() {
                record = record.key(k);
            }
            if let Some(v) = msg.payload() {
                record = record.payload(v);
            }
            part.next_offset = Some(offset + 1);
            part.batch_in += 1;
            self.batch_records += 1;
            self.dirty = true;
            self.batch.fired_at.push(appended);
            return self.send(record);
        }
        let key = msg.key().map(|k| String::from_utf8_lossy(k).into_owned());
        let decoded = match (key, msg.payload()) {
            (None, _) => Err("record has no key".to_string()),
            (_, None) => Err("record has no value".to_string()),
            (Some(key), Some(v)) => match self.decoder.decode_keyed(v, key) {
                // Not the record's fault (the registry is down): retry the transaction.
                Err(DecodeError::Unavailable(e)) => return Err(CycleError::Abortable(e)),
                other => other.map_err(|e| e.to_string()),
            },
        };
        part.next_offset = Some(offset + 1);
        part.batch_in += 1;
        self.batch_records += 1;
        self.dirty = true;
        let out = part
            .step
            .record(decoded, now)
            .map_err(|e| CycleError::Fatal(e.to_string()))?;
        if let Some(behind) = out.behind_watermark_ms {
            self.lateness.record(behind as f64 / 1000.0);
        }
        if let Some(r) = out.rejection {
            self.dead_letter(msg, dead_letter_info(r, topic, p, offset))?;
        }
        self.send_panes(out.panes, appended)
    }

    /// Lets processing time move idle watermarks and early firings when no record arrives.
    fn on_tick(&mut self) -> Result<(), CycleError> {
        let now = wall_ms();
        let mut panes = Vec::new();
        for part in self.parts.values_mut() {
            let fired = part
                .step
                .tick(now)
                .map_err(|e| CycleError::Fatal(e.to_string()))?;
            panes.extend(fired);
        }
        // An idle member commits nothing; keep its watermark lag and state figures current anyway.
        if self.last_lag_update.elapsed() >= Duration::from_secs(1) {
            self.refresh_state_gauges();
            self.last_lag_update = Instant::now();
            for part in self.parts.values() {
                part.gauges
                    .set_watermark(part.step.engine().watermark(), now);
            }
        }
        self.send_panes(panes, now)
    }

    fn due(&self) -> bool {
        self.dirty
            && (self.batch_records >= self.k.max_batch_records
                || self.last_commit.elapsed()
                    >= Duration::from_millis(self.k.commit_interval as u64))
    }

    /// The commit cycle: the only place where offsets, output and state become durable.
    fn commit_cycle<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), CycleError> {
        let started = Instant::now();
        let changes = self.step1_produce_changelog()?;
        self.step2_await_deliveries()?;
        self.step3_send_offsets(consumer)?;
        self.step4_commit()?;
        self.step5_write_local_state(changes)?;
        self.step6_begin()?;
        self.report_commit(started);
        Ok(())
    }

    /// Reports a committed transaction to metrics: what it committed, how long the cycle took,
    /// and per-partition gauges.
    fn report_commit(&mut self, started: Instant) {
        let now = wall_ms();
        histogram!(m::COMMIT_DURATION).record(started.elapsed().as_secs_f64());
        counter!(m::TRANSACTIONS, "outcome" => "committed").increment(1);
        let batch = std::mem::take(&mut self.batch);
        for (t, n) in batch.panes.iter().enumerate() {
            if *n > 0 {
                counter!(m::PANES, "timing" => Timing::ALL[t].as_str()).increment(*n);
            }
        }
        for reason in batch.dead_letters {
            counter!(m::DEAD_LETTERS, "reason" => reason).increment(1);
        }
        let latency = histogram!(m::PANE_LATENCY);
        for t in batch.fired_at {
            latency.record((now - t).max(0) as f64 / 1000.0);
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
    fn refresh_state_gauges(&mut self) {
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

    fn step1_produce_changelog(&mut self) -> Result<Vec<(i32, Changes)>, CycleError> {
        let mut all = Vec::new();
        let parts: Vec<i32> = self.parts.keys().copied().collect();
        for p in parts {
            let part = self.parts.get_mut(&p).expect("listed");
            let changes = part.step.engine_mut().take_changes();
            // State changes without a processed record cannot happen (timers exist only for
            // windows that received records), so every changed partition has an offset.
            let Some(next) = part.next_offset else {
                debug_assert!(changes.is_empty(), "state changed before any record");
                all.push((p, changes));
                continue;
            };
            let stamp = next.to_string();
            let consumed = part.committed_offset != Some(next);
            let topic = self.k.changelog_topic.as_str();
            for (key, value) in changes.iter() {
                self.send(changelog_record(topic, p, &stamp, key, value))?;
            }
            // The offset marker: the log's own record that this transaction commits `next`.
            if consumed {
                let marker = Some(stamp.as_bytes());
                self.send(changelog_record(
                    topic,
                    p,
                    &stamp,
                    OFFSET_MARKER_KEY,
                    marker,
                ))?;
            }
            all.push((p, changes));
        }
        Ok(all)
    }

    fn step2_await_deliveries(&mut self) -> Result<(), CycleError> {
        let deadline = Instant::now() + Duration::from_millis(self.k.transaction_timeout as u64);
        while self.deliveries.outstanding.load(Ordering::Acquire) > 0 {
            if Instant::now() > deadline {
                return Err(CycleError::Abortable(
                    "deliveries did not complete within the transaction timeout".into(),
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Some(e) = self.deliveries.error.lock().expect("lock").take() {
            return Err(classify("delivery", e)
                .err()
                .unwrap_or(CycleError::Abortable("delivery failed".into())));
        }
        Ok(())
    }

    fn step3_send_offsets<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), CycleError> {
        let mut tpl = TopicPartitionList::new();
        for (&p, part) in &self.parts {
            if let Some(next) = part.next_offset {
                tpl.add_partition_offset(&self.k.input_topic, p, Offset::Offset(next))
                    .map_err(|e| CycleError::Fatal(e.to_string()))?;
            }
        }
        if tpl.count() == 0 {
            return Ok(());
        }
        let cgm = consumer
            .group_metadata()
            .ok_or_else(|| CycleError::Abortable("no consumer group metadata yet".into()))?;
        let timeout = Duration::from_millis(self.k.transaction_timeout as u64);
        with_retry("send_offsets_to_transaction", || {
            self.producer
                .send_offsets_to_transaction(&tpl, &cgm, timeout)
        })
    }

    fn step4_commit(&mut self) -> Result<(), CycleError> {
        let timeout = Duration::from_millis(self.k.transaction_timeout as u64);
        with_retry("commit_transaction", || {
            self.producer.commit_transaction(timeout)
        })?;
        self.counters[0] += 1;
        Ok(())
    }

    fn step5_write_local_state(&mut self, changes: Vec<(i32, Changes)>) -> Result<(), CycleError> {
        let changelog = std::mem::take(&mut *self.deliveries.changelog.lock().expect("lock"));
        for (p, ch) in changes {
            let part = self.parts.get_mut(&p).expect("listed");
            let offsets = StoredOffsets {
                input: part.next_offset,
                changelog: changelog.get(&p).map(|o| o + 1),
            };
            part.step
                .engine_mut()
                .write_changes(&ch, Some(offsets))
                .map_err(|e| CycleError::Fatal(format!("writing local state: {e}")))?;
            part.committed_offset = part.next_offset;
            part.committed_tracker = part.step.tracker().clone();
            tracing::debug!(partition = p, offset = part.next_offset, "committed");
        }
        self.batch_records = 0;
        self.dirty = false;
        self.last_commit = Instant::now();
        Ok(())
    }

    fn step6_begin(&mut self) -> Result<(), CycleError> {
        self.producer.begin_transaction().map_err(|e| {
            classify("begin_transaction", e)
                .err()
                .unwrap_or(CycleError::Fatal("begin".into()))
        })
    }

    /// Aborts the open transaction and rewinds every partition to its committed state and offset.
    fn abort_and_rewind<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        why: &str,
    ) -> Result<(), RunError> {
        // Never abort after fencing or another fatal error: stop instead.
        if let Some(fatal) = self.producer_fatal() {
            return Err(RunError::Fatal(format!("{fatal} (while handling: {why})")));
        }
        tracing::warn!("aborting transaction: {why}");
        let timeout = Duration::from_millis(self.k.transaction_timeout as u64);
        // Wait for outstanding deliveries to settle (they fail or land in the aborted transaction).
        let deadline = Instant::now() + timeout;
        while self.deliveries.outstanding.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.producer
            .abort_transaction(timeout)
            .map_err(|e| RunError::Fatal(format!("abort_transaction: {e}")))?;
        self.deliveries.error.lock().expect("lock").take();
        self.deliveries.changelog.lock().expect("lock").clear();
        self.counters[1] += 1;
        counter!(m::TRANSACTIONS, "outcome" => "aborted").increment(1);
        self.batch = BatchOutcome::default();
        let parts: Vec<i32> = self.parts.keys().copied().collect();
        for p in parts {
            let part = self.parts.get_mut(&p).expect("listed");
            // Reopening drops the uncommitted cache: RocksDB holds exactly the committed state.
            let engine = Engine::open(&self.spec.engine, &self.store, p)
                .map_err(|e| RunError::Fatal(e.to_string()))?;
            let tracker = part.committed_tracker.clone();
            part.step = Step::new(engine, tracker, Some(self.k.max_future_skew));
            part.next_offset = part.committed_offset;
            part.batch_in = 0;
            // Nothing committed yet: back to the first record this assignment processed (where
            // the reset position led); nothing processed: the position has not moved.
            let Some(to) = part.committed_offset.or(part.first_seen) else {
                continue;
            };
            tracing::info!(
                partition = p,
                offset = to,
                "rewound to the committed offset"
            );
            consumer
                .seek(&self.k.input_topic, p, Offset::Offset(to), timeout)
                .map_err(|e| RunError::Fatal(format!("seek partition {p}: {e}")))?;
        }
        self.batch_records = 0;
        self.dirty = false;
        self.producer
            .begin_transaction()
            .map_err(|e| RunError::Fatal(format!("begin_transaction after abort: {e}")))
    }

    /// Runs the commit cycle and handles its failure as the module docs say.
    fn commit<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>) -> Result<(), RunError> {
        match self.commit_cycle(consumer) {
            Ok(()) => Ok(()),
            Err(CycleError::Fatal(m)) => Err(RunError::Fatal(m)),
            Err(CycleError::Abortable(m)) => self.abort_and_rewind(consumer, &m),
        }
    }

    /// librdkafka's fatal error, if the producer has one (fencing surfaces here even when the
    /// failed call itself reported something milder, such as purged deliveries).
    fn producer_fatal(&self) -> Option<String> {
        self.producer
            .client()
            .fatal_error()
            .map(|(code, reason)| format!("fatal producer error {code:?}: {reason}"))
    }

    /// Restores newly assigned partitions from their changelogs, opens them, and returns them with
    /// the offset each must be read from: the offset the changelog's committed transactions say,
    /// or the reset position where nothing has ever committed. The group's committed offset is
    /// read only to warn when it disagrees.
    fn assign<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
    ) -> Result<TopicPartitionList, RunError> {
        counter!(m::REBALANCES, "kind" => "assign").increment(1);
        self.health.set_ready(false);
        let hints = self.group_offsets(consumer, tpl);
        let mut start_at = TopicPartitionList::new();
        for el in tpl.elements() {
            let p = el.partition();
            let cf = StateStore::cf_name(WINDOW_OPERATOR, p);
            let started = Instant::now();
            let stats = self.restore_partition(&cf, p)?;
            counter!(m::RESTORE_RECORDS, "partition" => p.to_string())
                .increment(stats.applied as u64);
            histogram!(m::RESTORE_DURATION).record(started.elapsed().as_secs_f64());
            if !stats.waited.is_zero() {
                histogram!(m::RESTORE_OPEN_WAIT).record(stats.waited.as_secs_f64());
            }
            let hint = hints.as_ref().map(|h| h.get(&p).copied().flatten());
            let start = StartPosition::decide(stats.committed, hint);
            tracing::info!(
                partition = p,
                committed = ?stats.committed,
                group_offset = ?hint.flatten(),
                applied = stats.applied,
                skipped = stats.skipped,
                markers = stats.markers,
                changelog_offset = stats.changelog_offset,
                waited_ms = stats.waited.as_millis() as u64,
                ms = started.elapsed().as_millis() as u64,
                "partition restored from the changelog"
            );
            if start.group_disagrees {
                tracing::warn!(
                    partition = p,
                    log = ?stats.committed,
                    group = ?hint.flatten(),
                    "the consumer group's committed offset disagrees with the changelog; the changelog's is used"
                );
                counter!(m::GROUP_OFFSET_MISMATCHES, "partition" => p.to_string()).increment(1);
            }
            let offset = match start.offset {
                Some(o) => Offset::Offset(o),
                None => {
                    tracing::info!(
                        partition = p,
                        reset = ?self.reset,
                        "no transaction has committed work on this partition: starting from the reset position"
                    );
                    self.reset
                }
            };
            start_at
                .add_partition_offset(&self.k.input_topic, p, offset)
                .map_err(|e| RunError::Fatal(e.to_string()))?;
            // The watermark resumes from the one stored with the state, so replayed records are
            // judged as they were the first time.
            let step = Step::open(
                &self.spec.engine,
                &self.store,
                p,
                Some(self.k.max_future_skew),
            )
            .map_err(|e| RunError::Fatal(e.to_string()))?;
            self.parts.insert(
                p,
                Part {
                    committed_tracker: step.tracker().clone(),
                    step,
                    next_offset: start.offset,
                    committed_offset: start.offset,
                    first_seen: None,
                    cf,
                    batch_in: 0,
                    gauges: PartGauges::new(&self.k.input_topic, p),
                },
            );
        }
        gauge!(m::ASSIGNED_PARTITIONS).set(self.parts.len() as f64);
        self.health.set_ready(true);
        Ok(start_at)
    }

    /// Restores one partition, retrying a failed read of the changelog (a leader that moved, a
    /// broker that is busy) with backoff before giving up. A read never falls back to a guess.
    fn restore_partition(
        &self,
        cf: &str,
        p: i32,
    ) -> Result<crate::state::changelog::RestoreStats, RunError> {
        let policy = OpenPolicy {
            transaction_timeout: Duration::from_millis(self.k.transaction_timeout as u64),
            poll: Duration::from_millis(100),
        };
        let mut attempt = 0u32;
        loop {
            let k = &self.k;
            match restore(
                &self.store,
                cf,
                &k.bootstrap_servers,
                &k.changelog_topic,
                p,
                policy,
            ) {
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
                Err(e) => return Err(RunError::Fatal(format!("restoring partition {p}: {e}"))),
            }
        }
    }

    /// The group's committed offsets, only to compare with the log's; `None` when they could not
    /// be read (a partition without one maps to `None`).
    fn group_offsets<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
    ) -> Option<HashMap<i32, Option<i64>>> {
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(5)) {
            Ok(committed) => Some(
                committed
                    .elements()
                    .iter()
                    .map(|e| match e.offset() {
                        Offset::Offset(o) => (e.partition(), Some(o)),
                        _ => (e.partition(), None),
                    })
                    .collect(),
            ),
            Err(e) => {
                tracing::warn!("reading the group's committed offsets (only a hint): {e}");
                None
            }
        }
    }

    /// Partitions leave this member. A revocation commits the open transaction first. A lost
    /// assignment (session expired, poll interval exceeded) must not commit: another member may
    /// own the partitions already, so the transaction is aborted and the remaining partitions
    /// rewound.
    fn revoke<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
        lost: bool,
    ) -> Result<(), RunError> {
        let kind = if lost { "lost" } else { "revoke" };
        counter!(m::REBALANCES, "kind" => kind).increment(1);
        if !lost {
            self.commit(consumer)?;
        }
        for el in tpl.elements() {
            if let Some(part) = self.parts.remove(&el.partition()) {
                if lost {
                    tracing::warn!(
                        partition = el.partition(),
                        "assignment lost: the partition's uncommitted work is dropped"
                    );
                } else {
                    tracing::info!(
                        partition = el.partition(),
                        cf = part.cf,
                        "partition revoked"
                    );
                }
            }
        }
        gauge!(m::ASSIGNED_PARTITIONS).set(self.parts.len() as f64);
        if lost && self.dirty {
            self.abort_and_rewind(consumer, "the assignment was lost")?;
        }
        Ok(())
    }
}

/// A changelog record for partition `p`, stamped with the input offset its transaction commits;
/// the opaque `1 + p` lets the delivery callback track the partition's last changelog offset.
fn changelog_record<'a>(
    topic: &'a str,
    p: i32,
    stamp: &'a str,
    key: &'a [u8],
    value: Option<&'a [u8]>,
) -> BaseRecord<'a, [u8], [u8], usize> {
    let headers = OwnedHeaders::new().insert(Header {
        key: STAMP_HEADER,
        value: Some(stamp),
    });
    let record = BaseRecord::with_opaque_to(topic, 1 + p as usize)
        .partition(p)
        .key(key)
        .headers(headers);
    match value {
        Some(v) => record.payload(v),
        None => record,
    }
}

/// What a dead letter says about the input record `topic`/`partition`/`offset` it stands for.
fn dead_letter_info(r: Rejection, topic: &str, partition: i32, offset: i64) -> DeadLetterInfo {
    DeadLetterInfo {
        reason: r.reason.as_str(),
        topic: topic.to_string(),
        partition,
        offset,
        watermark: r.watermark,
        late_by_ms: r.late_by_ms,
        detail: r.detail,
    }
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

/// The consumer context: rebalance callbacks run the coordinator's assign and revoke.
pub struct RebalanceContext {
    core: Arc<Mutex<Core>>,
    input_topic: String,
}

impl ClientContext for RebalanceContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        for topic in statistics.topics.values() {
            if topic.topic != self.input_topic {
                continue;
            }
            // Offsets are committed by transactions, not by the consumer, so librdkafka's own
            // `consumer_lag` (against its committed offset) is unknown: the lag is the end a
            // read_committed consumer may read to (the last stable offset) minus the position
            // handed to the application.
            for (p, part) in &topic.partitions {
                let end = if part.ls_offset >= 0 {
                    part.ls_offset
                } else {
                    part.hi_offset
                };
                if *p >= 0 && part.app_offset >= 0 && end >= 0 {
                    gauge!(m::CONSUMER_LAG, "partition" => p.to_string())
                        .set((end - part.app_offset).max(0) as f64);
                }
            }
        }
    }
}

impl ConsumerContext for RebalanceContext {
    /// Replaces librdkafka's default handling so that assigned partitions start at the offsets the
    /// changelog says, never at the group's committed offset.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let mut core = self.core.lock().expect("lock");
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                tracing::info!(partitions = ?partitions_of(tpl), "rebalance: assigning");
                match core.assign(consumer, tpl) {
                    Ok(start_at) if cooperative => consumer.incremental_assign(&start_at),
                    Ok(start_at) => consumer.assign(&start_at),
                    Err(e) => {
                        core.fatal = Some(e.to_string());
                        Ok(())
                    }
                }
            }
            _ => {
                // A revocation, a lost assignment, or an error (which librdkafka's default
                // handler answers by dropping the assignment): the partitions leave this member.
                let lost = err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS
                    || consumer.assignment_lost();
                tracing::info!(partitions = ?partitions_of(tpl), lost, error = ?err, "rebalance: revoking");
                if let Err(e) = core.revoke(consumer, tpl, lost) {
                    core.fatal = Some(e.to_string());
                }
                if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
        };
        if let Err(e) = result {
            core.fatal = Some(format!("applying the rebalance: {e}"));
        }
    }
}

fn ensure_topics(k: &KafkaSpec) -> Result<i32, RunError> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let probe: BaseConsumer = crate::source::base_config(k)
        .create()
        .map_err(|e| RunError::Startup(format!("creating a client: {e}")))?;
    let meta = probe
        .fetch_metadata(Some(&k.input_topic), Duration::from_secs(10))
        .map_err(|e| RunError::Startup(format!("reading metadata of {}: {e}", k.input_topic)))?;
    let partitions = meta
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map(|t| t.partitions().len() as i32)
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            RunError::Startup(format!("input topic {} does not exist", k.input_topic))
        })?;
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = crate::source::base_config(k)
        .create()
        .map_err(|e| RunError::Startup(format!("creating an admin client: {e}")))?;
    let out_parts = k.output_partitions.unwrap_or(partitions);
    // Only missing topics are created: a cluster where they all exist needs no admin rights (and
    // librdkafka's mock cluster, used by the fault-injection tests, has no CreateTopics).
    let meta = probe
        .fetch_metadata(None, Duration::from_secs(10))
        .map_err(|e| RunError::Startup(format!("reading cluster metadata: {e}")))?;
    let exists = |name: &str| {
        meta.topics()
            .iter()
            .any(|t| t.name() == name && t.error().is_none() && !t.partitions().is_empty())
    };
    let topics: Vec<NewTopic<'_>> = [
        NewTopic::new(&k.output_topic, out_parts, TopicReplication::Fixed(1)),
        NewTopic::new(&k.dead_letter_topic, out_parts, TopicReplication::Fixed(1)),
        NewTopic::new(&k.changelog_topic, partitions, TopicReplication::Fixed(1))
            .set("cleanup.policy", "compact"),
    ]
    .into_iter()
    .filter(|t| !exists(t.name))
    .collect();
    if topics.is_empty() {
        return Ok(partitions);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Startup(e.to_string()))?;
    let results = rt
        .block_on(admin.create_topics(
            topics.iter(),
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .map_err(|e| RunError::Startup(format!("creating topics: {e}")))?;
    for r in results {
        match r {
            Ok(t) => tracing::info!(topic = t, "created topic"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => return Err(RunError::Startup(format!("creating topic {t}: {e}"))),
        }
    }
    Ok(partitions)
}

/// Builds the input decoder and the output encoder, connecting to the Schema Registry when one is
/// configured (a registry that is down is a startup error) and registering the output schemas
/// under `<topic>-value`.
fn codecs(spec: &PipelineSpec, k: &KafkaSpec) -> Result<(Decoder, Option<AvroEncoder>), RunError> {
    let registry = match &spec.schema_registry {
        None => None,
        Some(url) => {
            Some(SchemaRegistry::connect(url).map_err(|e| RunError::Startup(e.to_string()))?)
        }
    };
    let decoder =
        Decoder::for_spec(spec, registry.clone()).map_err(|e| RunError::Startup(e.to_string()))?;
    let encoder = match &spec.output_format {
        OutputFormat::Json => None,
        OutputFormat::Avro {
            framing,
            pane_schema_id,
            dead_letter_schema_id,
        } => {
            let (pane_id, dl_id) = match (framing, &registry) {
                (Framing::Confluent, Some(r)) => {
                    let reg = |topic: &str, schema: &str| {
                        r.register(&format!("{topic}-value"), schema)
                            .map_err(|e| RunError::Startup(e.to_string()))
                    };
                    (
                        reg(&k.output_topic, crate::avro::WINDOW_RESULT_SCHEMA)?,
                        reg(&k.dead_letter_topic, crate::avro::DEAD_LETTER_SCHEMA)?,
                    )
                }
                _ => (
                    pane_schema_id.unwrap_or(0),
                    dead_letter_schema_id.unwrap_or(0),
                ),
            };
            Some(
                AvroEncoder::new(*framing, pane_id, dl_id)
                    .map_err(|e| RunError::Startup(e.to_string()))?,
            )
        }
    };
    Ok((decoder, encoder))
}

/// Runs the pipeline as a member of its consumer group until `shutdown` is set or a fatal error.
pub fn run(
    spec: PipelineSpec,
    mode: Mode,
    health: Arc<Health>,
    shutdown: Arc<AtomicBool>,
) -> Result<(), RunError> {
    let k = spec.kafka.clone().ok_or(RunError::NoKafka)?;
    let partitions = ensure_topics(&k)?;
    tracing::info!(
        input = k.input_topic,
        partitions,
        group = k.application_id,
        "starting"
    );
    std::fs::create_dir_all(&k.state_dir)
        .map_err(|e| RunError::Startup(format!("{}: {e}", k.state_dir.display())))?;
    let store = StateStore::open(&k.state_dir).map_err(|e| RunError::Startup(e.to_string()))?;
    let deliveries = Arc::new(Deliveries::default());
    let producer: ThreadedProducer<TxnContext> = producer_config(&k)
        .create_with_context(TxnContext(deliveries.clone()))
        .map_err(|e| RunError::Startup(format!("creating the producer: {e}")))?;
    let timeout = Duration::from_millis(k.transaction_timeout as u64);
    producer
        .init_transactions(timeout.max(Duration::from_secs(30)))
        .map_err(|e| RunError::Fatal(format!("init_transactions: {e}")))?;
    producer
        .begin_transaction()
        .map_err(|e| RunError::Fatal(format!("begin_transaction: {e}")))?;
    let (decoder, encoder) = codecs(&spec, &k)?;
    let consumer_settings = consumer_config(&k);
    let reset_name = consumer_settings
        .get("auto.offset.reset")
        .unwrap_or("earliest")
        .to_string();
    let reset = crate::source::reset_position(&reset_name).ok_or_else(|| {
        RunError::Startup(format!(
            "auto.offset.reset = {reset_name:?} is not supported"
        ))
    })?;
    let core = Arc::new(Mutex::new(Core {
        decoder,
        encoder,
        spec,
        k: k.clone(),
        store,
        producer,
        deliveries,
        parts: BTreeMap::new(),
        batch_records: 0,
        dirty: false,
        last_commit: Instant::now(),
        fatal: None,
        mode,
        health,
        reset,
        batch: BatchOutcome::default(),
        lateness: histogram!(m::LATENESS),
        last_state_gauges: None,
        last_lag_update: Instant::now(),
        counters: [0; 4],
    }));
    let consumer: BaseConsumer<RebalanceContext> = consumer_settings
        .create_with_context(RebalanceContext {
            core: core.clone(),
            input_topic: k.input_topic.clone(),
        })
        .map_err(|e| RunError::Startup(format!("creating the consumer: {e}")))?;
    consumer
        .subscribe(&[&k.input_topic])
        .map_err(|e| RunError::Startup(format!("subscribing: {e}")))?;
    let poll = Duration::from_millis((k.commit_interval as u64 / 4).clamp(1, 50));
    let mut result = Ok(());
    while !shutdown.load(Ordering::Relaxed) {
        let msg = consumer.poll(poll);
        let mut c = core.lock().expect("lock");
        if let Some(f) = c.fatal.take() {
            result = Err(RunError::Fatal(f));
            break;
        }
        let step = match msg {
            Some(Ok(m)) => c.on_message(&m),
            Some(Err(e)) => match consumer.client().fatal_error() {
                // Fencing of a static member by a newer one with the same group.instance.id, or
                // another fatal consumer error: stop, as for a fatal producer error.
                Some((code, reason)) => Err(CycleError::Fatal(format!(
                    "fatal consumer error {code:?}: {reason} ({e})"
                ))),
                None => {
                    tracing::warn!("consumer: {e}");
                    Ok(())
                }
            },
            None => c.on_tick(),
        };
        let outcome = match step {
            Ok(()) if c.due() => c.commit(&consumer),
            Ok(()) => Ok(()),
            Err(CycleError::Fatal(m)) => Err(RunError::Fatal(m)),
            Err(CycleError::Abortable(m)) => c.abort_and_rewind(&consumer, &m),
        };
        if let Err(e) = outcome {
            result = Err(e);
            break;
        }
    }
    if result.is_ok() {
        tracing::info!("shutting down: committing the open transaction");
        let mut c = core.lock().expect("lock");
        c.dirty = true;
        result = c.commit(&consumer);
        let counters = c.counters;
        drop(c);
        tracing::info!(
            committed = counters[0],
            aborted = counters[1],
            panes = counters[2],
            dead_letters = counters[3],
            "stopped"
        );
    }
    // Leave the group at once, so the partitions move to other members without waiting for the
    // session to time out (revocation runs the commit cycle, which fails harmlessly after a fatal
    // error).
    consumer.unsubscribe();
    result
}
