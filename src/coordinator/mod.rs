//! The coordinator: `tidemark run`'s loop and the commit cycle.
//!
//! Its rooms:
//! * this file — the member's state ([`Core`], one `Part` per input partition) and the loop;
//! * `process` — the per-record path: each record goes through the partition's
//!   [`crate::pipeline::Step`], the same step `simulate` runs, and its panes and dead letters go
//!   straight into the open transaction;
//! * `cycle` — the commit cycle, one helper per numbered step below, and the abort;
//! * `rebalance` — the consumer context: restore on assignment, commit or abort on revocation;
//! * `errors` — [`RunError`], and the classification of transactional errors;
//! * `delivery` — the producer context that tracks the open transaction's deliveries;
//! * `setup` — topics, decoder and encoder at startup; `telemetry` — metric handles and reports.
//!
//! Every `commit_interval`, or after `max_batch_records` records, `Core::commit_cycle` makes the
//! batch durable. **It is the only place where offsets, output and state become durable**:
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

use crate::avro::AvroEncoder;
use crate::config::{KafkaSpec, PipelineSpec};
use crate::metrics::{self as m, Health};
use crate::pipeline::Step;
use crate::source::decode::Decoder;
use crate::source::{consumer_config, producer_config};
use crate::state::store::StateStore;
use crate::windowing::watermark::WatermarkTracker;
use delivery::{Deliveries, TxnContext};
use errors::CycleError;
use metrics::{histogram, Histogram};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::Offset;
use setup::{codecs, ensure_topics};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use telemetry::{BatchOutcome, PartGauges};

mod cycle;
mod delivery;
mod errors;
mod process;
mod rebalance;
mod setup;
mod telemetry;

pub use errors::RunError;
pub use rebalance::RebalanceContext;

/// One input partition being processed.
struct Part {
    /// The record step: the partition's engine and watermark tracker.
    step: Step,
    /// The pipeline's replay epoch, as the partition's changelog says: stamped on panes and dead
    /// letters.
    epoch: u64,
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
    /// The error that must stop the loop, set by a rebalance callback.
    fatal: Option<RunError>,
    /// The fingerprint of what shapes this pipeline's state ([`PipelineSpec::fingerprint`]).
    fingerprint: String,
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
    let fingerprint = spec.fingerprint();
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
        fingerprint,
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
        if let Some(e) = c.fatal.take() {
            result = Err(e);
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
