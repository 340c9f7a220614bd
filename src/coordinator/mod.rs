//! The coordinator: `tidemark run`'s loop and the commit cycle.
//!
//! Its rooms:
//! * this file — the member's state ([`Core`]) and the loop;
//! * `process` — the per-record paths: an input record of a pipeline whose input is partitioned
//!   by the grouping key goes through its partition's [`crate::pipeline::Step`], the same step
//!   `simulate` runs; panes and dead letters go straight into the open transaction;
//! * `hop` — the repartition hop: the first stage checks each input record with its source's
//!   [`crate::pipeline::Front`] and writes the event to the repartition topic; the second stage
//!   reads that topic's raw log and passes events and watermark reports to each repartition
//!   partition's [`crate::pipeline::Back`];
//! * `cycle` — the commit cycle, one helper per numbered step below, and the abort;
//! * `rebalance` — the consumer context: restore on assignment, commit or abort on revocation;
//! * `sources` — the first stage's committed input offsets, read from the offset markers in the
//!   offsets topic;
//! * `claims` — fencing from the log: each member claims its partitions in the claims topic, and
//!   a member that finds a newer claim of one of its partitions aborts and rejoins;
//! * `errors` — [`RunError`], and the classification of transactional errors;
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
//! Every `commit_interval`, or after `max_batch_records` records, `Core::commit_cycle` makes the
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
use crate::config::{KafkaSpec, PipelineSpec};
use crate::format::repartition as wire;
use crate::input::decode::Decoder;
use crate::kafka::raw_log::CommittedReader;
use crate::metrics::Health;
use crate::state::store::StateStore;
use crate::windowing::spec::Event;
use crate::windowing::watermark::SourceWatermark;
use catch_up::CatchUp;
use cycle::settle;
use errors::CycleError;
use output::Output;
use parts::{Part, Source};
use rdkafka::consumer::Consumer;
use rdkafka::Offset;
use setup::{codecs, ensure_topics, open_store};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use telemetry::Telemetry;
use transaction::Transaction;

mod catch_up;
mod claims;
mod cycle;
mod errors;
mod hop;
mod membership;
mod output;
mod parts;
mod process;
mod rebalance;
mod roster;
mod scaling;
mod setup;
mod sources;
mod telemetry;
mod transaction;
mod watchdog;

pub use errors::RunError;
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
}

/// How records reach the windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    /// The input is partitioned by the grouping key: each input partition is a `Part`.
    Direct,
    /// The repartition hop, into this many repartition partitions.
    Hop {
        /// Partitions of the repartition topic.
        partitions: i32,
    },
    /// `--passthrough`: input records are copied to the output topic.
    Passthrough,
}

/// Everything the loop and the rebalance callbacks share.
pub struct Core {
    spec: PipelineSpec,
    k: KafkaSpec,
    store: StateStore,
    /// The open transaction and its producer.
    txn: Transaction,
    decoder: Decoder,
    /// Where panes and dead letters go (JSON or Avro).
    output: Output,
    topology: Topology,
    /// The windowing partitions, by partition number.
    parts: BTreeMap<i32, Part>,
    /// The hop's first stage (and passthrough): input partitions by (topic index, partition).
    sources: BTreeMap<(u16, i32), Source>,
    /// The names of every input partition: the watermark sources of each repartition partition.
    source_names: Vec<String>,
    /// The hop's second stage: the repartition topic's raw log, followed.
    hop_reader: Option<CommittedReader>,
    /// The second stage decodes every event into this one buffer.
    hop_event: Event,
    /// The second stage decodes every watermark record's reports into this one buffer.
    hop_reports: Vec<(wire::Origin, SourceWatermark)>,
    /// The first stage's event and partial records being built, one per repartition partition.
    hop_packs: Vec<wire::Pack>,
    hop_partials: Vec<wire::PartialPack>,
    /// Whether input partitions are read to their end: a source is idle only when caught up.
    catch_up: CatchUp,
    /// Partitions of the offsets topic (the first stage's offset markers).
    offsets_partitions: i32,
    /// The error that must stop the loop, set by a rebalance callback.
    fatal: Option<RunError>,
    /// The fingerprint of what shapes this pipeline's state ([`PipelineSpec::fingerprint`]).
    fingerprint: String,
    health: Arc<Health>,
    /// Where a partition on which nothing has ever committed starts (`auto.offset.reset`).
    reset: Offset,
    /// Metrics, and what this member did, for its last log line.
    telemetry: Telemetry,
    /// When the repartition topic was last purged below the committed positions.
    last_purge: Instant,
    /// The partitions this member holds, for the group watchdog.
    owned_here: watchdog::Held,
    /// This member's claims of its partitions, for fencing from the log.
    claims: claims::Claims,
}

/// How often the second stage reads the repartition topic while it finds nothing.
const TAIL_EVERY: Duration = Duration::from_millis(5);

/// Records the consumer hands over in a row, at most, before the second stage reads again.
const POLL_BATCH: usize = 1_000;
/// Within a poll batch, how many records go by between looks at the clock (for the commit
/// interval and the next read of the repartition topic).
const CLOCK_EVERY: usize = 64;

/// Runs the pipeline as a member of its consumer group until `shutdown` is set or a fatal error.
pub fn run(
    spec: PipelineSpec,
    mode: Mode,
    health: Arc<Health>,
    shutdown: Arc<AtomicBool>,
) -> Result<(), RunError> {
    let k = spec.kafka.clone().ok_or(RunError::NoKafka)?;
    let layout = ensure_topics(&k, mode)?;
    let topology = match mode {
        Mode::Passthrough => Topology::Passthrough,
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
        .map_err(|e| RunError::Startup(format!("{}: {e}", k.state_dir.display())))?;
    let store = open_store(&k, &layout, mode)?;
    let claims = claims::Claims::start(&k.bootstrap_servers, &k.claims_topic, &k.instance_id)
        .map_err(|e| {
            RunError::Startup(format!("reading the claims topic {}: {e}", k.claims_topic))
        })?;
    let txn = Transaction::start(&k)?;
    let (decoder, encoder) = codecs(&spec, &k)?;
    let consumer_settings = consumer_config(&k);
    let reset_name = consumer_settings
        .get("auto.offset.reset")
        .unwrap_or("earliest")
        .to_string();
    let reset = crate::clients::reset_position(&reset_name).ok_or_else(|| {
        RunError::Startup(format!(
            "auto.offset.reset = {reset_name:?} is not supported"
        ))
    })?;
    let hop_reader = match topology {
        Topology::Hop { .. } => Some(
            CommittedReader::connect(
                &k.bootstrap_servers,
                &k.repartition_topic,
                k.transaction_timeout,
            )
            .map_err(|e| RunError::Startup(format!("reading the repartition topic: {e}")))?,
        ),
        _ => None,
    };
    let fingerprint = spec.fingerprint();
    let input_partitions = layout.source_names.len();
    let owned_here = watchdog::Held::default();
    let mut topics: Vec<String> = k.input_topics.clone();
    if matches!(topology, Topology::Hop { .. }) {
        topics.push(k.repartition_topic.clone());
    }
    let core = Arc::new(Mutex::new(Core {
        decoder,
        output: Output::new(encoder, &k),
        spec,
        k: k.clone(),
        store,
        txn,
        topology,
        parts: BTreeMap::new(),
        sources: BTreeMap::new(),
        source_names: layout.source_names,
        hop_reader,
        hop_event: Event::default(),
        hop_reports: Vec::new(),
        hop_packs: Vec::new(),
        hop_partials: Vec::new(),
        catch_up: CatchUp::new(&k.bootstrap_servers),
        offsets_partitions: layout.offsets_partitions,
        fatal: None,
        fingerprint,
        health,
        reset,
        telemetry: Telemetry::new(),
        last_purge: Instant::now(),
        owned_here: owned_here.clone(),
        claims,
    }));
    let mut member = Membership::join(
        core.clone(),
        &k,
        input_partitions,
        consumer_settings,
        topics.clone(),
        owned_here,
    )?;
    let poll = Duration::from_millis((k.commit_interval as u64 / 4).clamp(1, 50));
    // The second stage reads the repartition topic every few milliseconds (at once again while it
    // finds records); in between, the consumer hands over records without waiting, and waits at
    // most until the next read when it has none.
    let hop_poll = poll.min(TAIL_EVERY);
    let mut last_tail = Instant::now() - TAIL_EVERY;
    let mut tail_busy = false;
    let mut result = Ok(());
    'run: while !shutdown.load(Ordering::Relaxed) {
        if let Err(e) = member.rejoin_if_asked() {
            result = Err(e);
            break 'run;
        }
        let tailing = core
            .lock()
            .expect("lock")
            .hop_reader
            .as_ref()
            .is_some_and(|t| !t.is_idle());
        if tailing && (tail_busy || last_tail.elapsed() >= TAIL_EVERY) {
            last_tail = Instant::now();
            let mut c = core.lock().expect("lock");
            let read = c.read_repartition();
            let behind = c.hop_reader.as_ref().is_some_and(|r| r.is_behind());
            tail_busy = behind || matches!(read, Ok(n) if n > 0);
            if let Err(e) = settle(&mut c, &member.consumer, read.map(|_| ()), true) {
                result = Err(e);
                break 'run;
            }
        }
        let timeout = if tail_busy {
            Duration::ZERO
        } else if tailing {
            hop_poll
        } else {
            poll
        };
        for i in 0..POLL_BATCH {
            let msg = member.idle.poll(
                &member.consumer,
                if i == 0 { timeout } else { Duration::ZERO },
            );
            let mut c = core.lock().expect("lock");
            if let Some(e) = c.fatal.take() {
                result = Err(e);
                break 'run;
            }
            let idle = msg.is_none();
            let step = match msg {
                Some(Ok(m)) => c.on_message(&m),
                Some(Err(e)) => match member.consumer.client().fatal_error() {
                    // Fencing of a static member by a newer one with the same
                    // group.instance.id, or another fatal consumer error: stop, as for a fatal
                    // producer error.
                    Some((code, reason)) => Err(CycleError::Fatal(format!(
                        "fatal consumer error {code:?}: {reason} ({e})"
                    ))),
                    None => {
                        tracing::warn!("consumer: {e}");
                        member.note_consumer_error(&e);
                        Ok(())
                    }
                },
                None => c.on_tick(),
            };
            // The clock is read every CLOCK_EVERY records (and when there are none): reading it
            // after each record showed in profiles.
            let look_at_clock = idle || i % CLOCK_EVERY == CLOCK_EVERY - 1;
            if let Err(e) = settle(&mut c, &member.consumer, step, look_at_clock) {
                result = Err(e);
                break 'run;
            }
            if idle || (tailing && look_at_clock && last_tail.elapsed() >= TAIL_EVERY) {
                break;
            }
        }
    }
    member.leave(result)
}
