//! The coordinator: `tidemark run`'s loop and the commit cycle.
//!
//! Its rooms:
//! * this file — the loop;
//! * `member` — the member ([`member::Core`]): its parts, and the operations the loop, the
//!   rebalance callbacks and the membership drive; each lends the parts it needs to a room
//!   below, and no room below sees the member;
//! * `settings` — what the member runs with and never changes (pipeline, `[kafka]`, topology);
//! * `parts` — a windowing partition (`Part`) and an input partition of the first stage
//!   (`Source`), with their positions;
//! * `process` — the record path of an input partitioned by the grouping key: each record goes
//!   through its partition's [`crate::pipeline::Step`], the same step `simulate` runs; the tick;
//! * `first_stage` — the hop's first stage: each input record checked by its source's
//!   [`crate::pipeline::Front`], folded into a partial or packed for the repartition topic; the
//!   sources' reports and offset markers at commit;
//! * `second_stage` — the hop's second stage: the repartition topic's raw log, read into each
//!   repartition partition's [`crate::pipeline::Back`];
//! * `cycle` — the commit cycle, one helper per numbered step below, and the abort;
//! * `restore` — what newly assigned partitions resume from, read from the log;
//! * `rebalance` — the consumer context (restore on assignment, commit or abort on revocation)
//!   and the rejoin;
//! * `sources` — the first stage's committed input offsets, read from the offset markers in the
//!   offsets topic;
//! * `claims` — fencing from the log: each member claims its partitions in the claims topic, and
//!   a member that finds a newer claim of one of its partitions aborts and rejoins;
//! * `errors` — [`RunError`] and [`Cause`], which keeps every failure's source, and the
//!   decision on a transactional error ([`Decision`]: retry, abort and replay, or stop);
//! * `output` — panes and dead letters, encoded, into the open transaction;
//! * `transaction` — the open transaction: its producer, its deliveries, and the transactional
//!   calls the commit cycle's steps make;
//! * `setup` — topics, decoder and encoder at startup; `telemetry` — metrics and reports;
//!   `catch_up` — whether input partitions are read to their end (their raw logs looked at);
//!   `watchdog` — the group watchdog, which asks for a rejoin when partitions stay without owner;
//!   `membership` — the consumer, its subscription, and the rejoin.
//!
//! **Topologies.** With `repartition = false` the input (one topic) is partitioned by the grouping
//! key already: each input partition is a windowing partition (`Part`) with its own engine, its
//! changelog partition holds its state and offset markers. By default records take the
//! **repartition hop**: the member owns some input partitions (`Source`s, the first stage) and
//! some partitions of `<application_id>-repartition` (`Part`s, the second stage), as Kafka
//! Streams' sub-topologies do, all in one consumer group. The first stage's offset markers go to
//! the offsets topic; each repartition partition's state and offset markers (repartition offsets)
//! to its changelog partition. `run --passthrough` copies input records to the output topic
//! through the same cycle, with sources only.
//!
//! Every `commit_interval`, or after `max_batch_records` records, `Cycle::run` makes the
//! batch durable in **one** transaction. **It is the only place where offsets, output and state
//! become durable**:
//!
//! 1. produce what the transaction commits besides output: the first stage's watermark reports
//!    (to every repartition partition, for each source whose report changed) and its offset
//!    markers (offsets topic); the changelog of every partition — each changed state entry, full
//!    value or tombstone, stamped with the input (or repartition) offset this transaction commits
//!    — and its offset marker;
//! 2. await the delivery of everything produced in the transaction;
//! 3. read the claims topic: if another member has claimed one of this member's partitions since
//!    this member did, abort, drop those partitions and rejoin (fencing from the log, see
//!    `claims`);
//! 4. `send_offsets_to_transaction` with the consumer's group metadata (a hint for tools, and
//!    KIP-447 fencing on brokers that check the generation);
//! 5. `commit_transaction`;
//! 6. write each partition's state batch to RocksDB together with its offsets, in one WriteBatch,
//!    and take the sources' positions and reports as committed;
//! 7. begin the next transaction.
//!
//! Errors are classified with librdkafka's own predicates: retriable calls are retried; an
//! abortable error aborts the transaction, drops the uncommitted state, seeks every input
//! partition back to its committed offset (and re-reads every repartition partition from its
//! committed offset) and carries on; a fatal error, or fencing, stops the process with a non-zero
//! exit (abort is never called after fencing). Transaction calls block, so the whole loop runs on
//! a dedicated thread, never on async workers.
//!
//! **The log is the only truth.** On assignment an input partition's starting offset is what the
//! committed offset markers in the log say (its changelog partition, or the offsets topic);
//! the consumer is assigned that offset explicitly, and the group's committed offset is read only
//! to warn when it disagrees. The second stage reads the repartition topic as a raw log and
//! applies only records of committed transactions. A revocation commits first; a *lost*
//! assignment (session expired, poll interval exceeded) aborts the open transaction instead,
//! since another member may already own the partitions.

use crate::clients::consumer_config;
use crate::config::PipelineSpec;
use crate::metrics::Health;
use errors::CycleError;
use member::Core;
use output::Output;
use rdkafka::consumer::Consumer;
use second_stage::SecondStage;
use settings::{Settings, Topology};
use setup::{codecs, ensure_topics, open_store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use transaction::Transaction;

mod catch_up;
mod claims;
mod cycle;
mod errors;
mod first_stage;
mod member;
mod membership;
mod output;
mod parts;
mod process;
mod rebalance;
mod restore;
mod roster;
mod scaling;
mod second_stage;
mod settings;
mod setup;
mod sources;
mod telemetry;
mod transaction;
mod watchdog;

pub use errors::{Cause, Decision, RunError};
use membership::Membership;
pub use rebalance::RebalanceContext;

/// What `run` does with each record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The windowing pipeline.
    Windows,
    /// A stateless transactional copy of the input to the output topic, through the same commit
    /// cycle: the broker-bound baseline of `scripts/bench-kafka.sh`.
    Passthrough,
    /// A pipeline of `[[columns]]`: each input record becomes one row (or dead letter) through
    /// the same commit cycle, with no state. `run` picks it when the pipeline has columns.
    Rows,
}

/// How often the second stage reads the repartition topic while it finds nothing.
const TAIL_EVERY: Duration = Duration::from_millis(5);

/// Records the consumer hands over in a row, at most, before the second stage reads again.
const POLL_BATCH: usize = 1_000;
/// Within a poll batch, how many records go by between looks at the clock (for the commit
/// interval and the next read of the repartition topic).
const CLOCK_EVERY: usize = 64;

/// What a member shares with the process that asks it to stop: the request, and whether the
/// part of the stop that must not be cut short (committing the open transaction) is done. What
/// follows it, leaving the consumer group, waits for any rebalance in flight; a process that
/// gives up on it then exits as cleanly as one that left, and the broker removes the member
/// when its session times out.
#[derive(Debug, Default)]
pub struct Stop {
    requested: AtomicBool,
    committed: AtomicBool,
}

impl Stop {
    /// Asks the member to stop.
    pub fn request(&self) {
        self.requested.store(true, Ordering::Relaxed);
    }

    /// The request as a flag, for loops that watch a plain flag.
    pub fn requested(&self) -> &AtomicBool {
        &self.requested
    }

    /// Whether the member committed its open transaction after the request.
    pub fn is_committed(&self) -> bool {
        self.committed.load(Ordering::Acquire)
    }

    fn mark_committed(&self) {
        self.committed.store(true, Ordering::Release);
    }
}

/// Runs the pipeline as a member of its consumer group until `stop` is requested or a fatal
/// error.
pub fn run(
    spec: PipelineSpec,
    mode: Mode,
    health: Arc<Health>,
    stop: Arc<Stop>,
) -> Result<(), RunError> {
    let k = spec.kafka.clone().ok_or(RunError::NoKafka)?;
    let mode = match mode {
        Mode::Windows if spec.rows.is_some() => Mode::Rows,
        other => other,
    };
    if !setup::check_access(&k, &stop)? {
        return Ok(());
    }
    let layout = ensure_topics(&k, mode)?;
    let topology = match mode {
        Mode::Passthrough => Topology::Passthrough,
        Mode::Rows => Topology::Rows,
        Mode::Windows if k.repartition => Topology::Hop {
            partitions: layout.repartition_partitions,
        },
        Mode::Windows => Topology::Direct,
    };
    tracing::info!(
        inputs = ?k.input_topics,
        topology = ?topology,
        group = k.application_id,
        "starting"
    );
    std::fs::create_dir_all(&k.state_dir)
        .map_err(|e| RunError::Startup(Cause::part(k.state_dir.display().to_string(), e)))?;
    let store = open_store(&k, &layout, mode)?;
    let claims =
        claims::Claims::start(&k.brokers, &k.claims_topic, &k.instance_id).map_err(|e| {
            RunError::Startup(Cause::part(
                format!("reading the claims topic {}", k.claims_topic),
                e,
            ))
        })?;
    let txn = Transaction::start(&k)?;
    let (decoder, encoder) = codecs(&spec, &k)?;
    let record_bytes = spec.record_bytes;
    let consumer_settings = consumer_config(&k);
    let reset_name = consumer_settings
        .get("auto.offset.reset")
        .unwrap_or("earliest")
        .to_string();
    let reset = crate::clients::reset_position(&reset_name).ok_or_else(|| {
        RunError::Startup(Cause::found(format!(
            "auto.offset.reset = {reset_name:?} is not supported"
        )))
    })?;
    let second = match topology {
        Topology::Hop { .. } => Some(SecondStage::connect(&k)?),
        _ => None,
    };
    let fingerprint = spec.fingerprint();
    let input_partitions = layout.source_names.len();
    let owned_here = watchdog::Held::default();
    let mut topics: Vec<String> = k.input_topics.clone();
    if matches!(topology, Topology::Hop { .. }) {
        topics.push(k.repartition_topic.clone());
    }
    let core = Arc::new(Mutex::new(Core::new(member::Parts {
        s: Settings {
            spec,
            k: k.clone(),
            topology,
            source_names: layout.source_names,
            offsets_partitions: layout.offsets_partitions,
            fingerprint,
            reset,
        },
        store,
        txn,
        decoder,
        output: Output::new(encoder, &k, record_bytes),
        second,
        health,
        owned_here: owned_here.clone(),
        claims,
    })));
    let member = Membership::join(
        core.clone(),
        &k,
        input_partitions,
        consumer_settings,
        topics.clone(),
        owned_here,
    )?;
    let poll = Duration::from_millis((k.commit_interval as u64 / 4).clamp(1, 50));
    let mut turns = Loop {
        core,
        member,
        poll,
        // The second stage reads the repartition topic every few milliseconds (at once again
        // while it finds records); in between, the consumer hands over records without
        // waiting, and waits at most until the next read when it has none.
        hop_poll: poll.min(TAIL_EVERY),
        last_tail: Instant::now() - TAIL_EVERY,
        tail_busy: false,
    };
    let mut result = Ok(());
    while !stop.requested.load(Ordering::Relaxed) {
        if let Err(e) = turns.turn() {
            result = Err(e);
            break;
        }
    }
    turns.member.leave(result, &stop)
}

/// The member's loop between the start and the stop: each turn reads the repartition topic when
/// it is due, then hands the consumer's records to the member, one poll batch at a time.
struct Loop {
    core: Arc<Mutex<Core>>,
    member: Membership,
    /// How long a poll waits for records with nothing to read otherwise, and with the second
    /// stage to serve.
    poll: Duration,
    hop_poll: Duration,
    /// When the second stage last read, and whether it found records or is behind (then it
    /// reads again at once).
    last_tail: Instant,
    tail_busy: bool,
}

impl Loop {
    /// One turn; an error stops the member.
    fn turn(&mut self) -> Result<(), RunError> {
        self.member.rejoin_if_asked()?;
        let tailing = self.core.lock().expect("lock").is_reading_repartition();
        if tailing && (self.tail_busy || self.last_tail.elapsed() >= TAIL_EVERY) {
            self.read_repartition()?;
        }
        let timeout = if self.tail_busy {
            Duration::ZERO
        } else if tailing {
            self.hop_poll
        } else {
            self.poll
        };
        self.poll_batch(tailing, timeout)
    }

    /// The second stage reads what committed on its repartition partitions since it last read.
    fn read_repartition(&mut self) -> Result<(), RunError> {
        self.last_tail = Instant::now();
        let consumer = &self.member.consumer;
        let mut c = self.core.lock().expect("lock");
        let read = c.read_repartition();
        self.tail_busy = c.repartition_behind() || matches!(read, Ok(n) if n > 0);
        c.settle(consumer, read.map(|_| ()), true)
    }

    /// Up to [`POLL_BATCH`] records from the consumer, the first waited for up to `timeout`;
    /// ends early when the consumer has none, or when the second stage is due to read again.
    /// The member is locked per record, not per batch: the consumer's poll runs the rebalance
    /// callbacks, which lock it themselves.
    fn poll_batch(&mut self, tailing: bool, timeout: Duration) -> Result<(), RunError> {
        for i in 0..POLL_BATCH {
            let wait = if i == 0 { timeout } else { Duration::ZERO };
            let msg = self.member.idle.poll(&self.member.consumer, wait);
            let idle = msg.is_none();
            let mut c = self.core.lock().expect("lock");
            if let Some(e) = c.take_fatal() {
                return Err(e);
            }
            let step = match msg {
                Some(Ok(m)) => c.on_message(&m),
                Some(Err(e)) => consumer_error(&mut self.member, e),
                None => c.on_tick(),
            };
            // The clock is read every CLOCK_EVERY records (and when there are none): reading it
            // after each record showed in profiles.
            let look_at_clock = idle || i % CLOCK_EVERY == CLOCK_EVERY - 1;
            c.settle(&self.member.consumer, step, look_at_clock)?;
            if idle || (tailing && look_at_clock && self.last_tail.elapsed() >= TAIL_EVERY) {
                break;
            }
        }
        Ok(())
    }
}

/// What an error the consumer hands over means: a fatal one (fencing of a static member by a
/// newer one with the same `group.instance.id`, among others) stops the member, as a fatal
/// producer error does; any other is logged and noted.
fn consumer_error(
    member: &mut Membership,
    e: rdkafka::error::KafkaError,
) -> Result<(), CycleError> {
    match member.consumer.client().fatal_error() {
        Some((code, reason)) => Err(CycleError::Fatal(Cause::found(format!(
            "fatal consumer error {code:?}: {reason} ({e})"
        )))),
        None => {
            tracing::warn!("consumer: {e}");
            member.note_consumer_error(&e);
            Ok(())
        }
    }
}
