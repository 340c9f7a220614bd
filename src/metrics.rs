//! Every metric tidemark exports, named and described in one place, and the HTTP endpoint that
//! serves them.
//!
//! Metrics go through the `metrics` facade; [`install`] puts a Prometheus recorder behind it and
//! serves `/metrics` (Prometheus text format), `/healthz` (the process is alive) and `/readyz`
//! (assigned partitions are restored and being processed) on one address.
//!
//! Labels are bounded: topic, partition, reason, timing, outcome, kind — never a record key.
//! Counters of records, panes and dead letters count what a transaction **committed**, so after a
//! run `tidemark_records_in_total` equals the records consumed from the input, even when
//! transactions were aborted and their records processed again.

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Input records whose processing committed; labels `topic`, `partition`.
pub const RECORDS_IN: &str = "tidemark_records_in_total";
/// Records delivered to output, dead-letter and changelog topics; labels `topic`, `partition`.
pub const RECORDS_OUT: &str = "tidemark_records_out_total";
/// Input records the pipeline's filter rejected, in committed transactions; label `topic`.
pub const RECORDS_FILTERED: &str = "tidemark_records_filtered_total";
/// Committed panes; label `timing` (EARLY, ON_TIME, LATE, RETRACT).
pub const PANES: &str = "tidemark_panes_total";
/// Committed rows of a pipeline of `[[columns]]` (a row per record).
pub const ROWS: &str = "tidemark_rows_total";
/// Committed dead letters; label `reason` (late, malformed, expression, future_timestamp,
/// key_mismatch).
pub const DEAD_LETTERS: &str = "tidemark_dead_letters_total";
/// Event-time watermark of an input partition, in epoch seconds; label `partition`.
pub const WATERMARK: &str = "tidemark_watermark_seconds";
/// Wall clock minus watermark per input partition; label `partition`.
pub const WATERMARK_LAG: &str = "tidemark_watermark_lag_seconds";
/// How far behind the watermark records arrive (only records behind it are observed).
pub const LATENESS: &str = "tidemark_record_lateness_seconds";
/// Pending event-time timers, about one per open window; label `partition`.
pub const OPEN_WINDOWS: &str = "tidemark_open_windows";
/// Estimated RocksDB entries of a partition's state; label `partition`.
pub const STATE_ENTRIES: &str = "tidemark_state_entries";
/// Live RocksDB bytes (SST files plus memtables) of this member's state.
pub const STATE_SIZE: &str = "tidemark_state_size_bytes";
/// Bytes of window state a partition holds in memory, as the states measure themselves.
pub const CACHE_BYTES: &str = "tidemark_state_cache_bytes";
/// The largest state of one key a partition's last flush wrote.
pub const LARGEST_KEY: &str = "tidemark_state_largest_key_bytes";
/// Duration of the commit cycle (produce changelog → commit → local write → begin).
pub const COMMIT_DURATION: &str = "tidemark_commit_duration_seconds";
/// Time from the append of the record that fired a pane (or the tick that fired it) to the
/// commit of the pane's transaction.
pub const PANE_LATENCY: &str = "tidemark_pane_commit_latency_seconds";
/// Transactions by `outcome` (committed, aborted).
pub const TRANSACTIONS: &str = "tidemark_transactions_total";
/// Changelog records applied while restoring; label `partition`.
pub const RESTORE_RECORDS: &str = "tidemark_restore_records_total";
/// Duration of one partition's restore from the changelog.
pub const RESTORE_DURATION: &str = "tidemark_restore_duration_seconds";
/// Time a restore waited for open changelog transactions to resolve.
pub const RESTORE_OPEN_WAIT: &str = "tidemark_restore_open_wait_seconds";
/// Assignments where the consumer group's committed offset (a hint) disagreed with the offset
/// the changelog's committed transactions say; label `partition`. The log's offset is used.
pub const GROUP_OFFSET_MISMATCHES: &str = "tidemark_group_offset_mismatches_total";
/// Rebalance callbacks by `kind` (assign, revoke, lost).
pub const REBALANCES: &str = "tidemark_rebalances_total";
/// Input partitions currently assigned to this member.
pub const ASSIGNED_PARTITIONS: &str = "tidemark_assigned_partitions";
/// Partitions of the pipeline's topics that no member of the group owns, as the group watchdog
/// last saw them: from the group's description, or, on a broker that does not report
/// assignments, from the log (a committed offset that stays put while records wait after it, for
/// a partition this member does not hold).
pub const UNOWNED_PARTITIONS: &str = "tidemark_group_unowned_partitions";
/// Times this member left and rejoined its group because partitions stayed without an owner for
/// longer than the watchdog's bound (three session timeouts).
pub const GROUP_WEDGES: &str = "tidemark_group_wedges_total";
/// Partitions this member dropped because another member had claimed them in the claims topic
/// since its own claim (the group moved them without telling this member); each time, the
/// transaction is aborted and the member joins the group again.
pub const PARTITIONS_SUPERSEDED: &str = "tidemark_partitions_superseded_total";
/// Times this member gave up the cooperative rebalance protocol for the eager one; label
/// `reason`: `stalled` (a rebalance waited on the broker past its bound), `superseded` (the
/// group gave a held partition to another member) or `group` (another member decided it, and
/// the claims topic said so).
pub const ASSIGNOR_FALLBACKS: &str = "tidemark_assignor_fallbacks_total";
/// Times this member left the broker's consumer group for membership from the log; label
/// `reason`: `wedged` (the group stayed wedged after a rejoin) or `group` (another member
/// decided it).
pub const MEMBERSHIP_MOVES: &str = "tidemark_membership_moves_total";
/// Records between the consumer's position and the partition's end; labels `topic`, `partition`.
pub const CONSUMER_LAG: &str = "tidemark_consumer_lag_records";
/// Seconds the partition's lag takes to process at the partition's recent processing rate
/// (one day when it has a lag and made no progress); labels `topic`, `partition`. See
/// `coordinator::scaling` for the formula.
pub const BACKLOG: &str = "tidemark_backlog_seconds";
/// Members the group should have to keep its backlog under `kafka.target_backlog`, from this
/// member's share of the input; the group's figure is the largest any member reports.
pub const RECOMMENDED_MEMBERS: &str = "tidemark_recommended_members";
/// Watermark records of the repartition hop applied by the second stage (committed): what
/// carrying watermarks through the log costs. They are also in `tidemark_records_in_total` of the
/// repartition topic.
pub const HOP_WATERMARK_RECORDS: &str = "tidemark_hop_watermark_records_total";
/// Bytes of the records the hop's first stage wrote to the repartition topic (committed; record
/// values: events, partials and watermark reports).
pub const HOP_BYTES: &str = "tidemark_hop_bytes_total";
/// Partial aggregates the hop's first stage wrote (committed): each stands for the records of one
/// key and one set of windows from one input partition in one commit cycle.
pub const HOP_PARTIALS: &str = "tidemark_hop_partials_total";
/// Input records the hop's first stage folded into partial aggregates (committed), instead of
/// sending each across the hop.
pub const HOP_RECORDS_FOLDED: &str = "tidemark_hop_records_folded_total";
/// Partial aggregates the second stage found behind its watermark (an input that was idle came
/// back behind the others): merged whole, one LATE pane for all their records, or, expired,
/// dead-lettered record by record.
pub const HOP_LATE_PARTIALS: &str = "tidemark_hop_late_partials_total";
/// PostgreSQL sink: pane rows written; label `outcome` (`upserted`, `superseded` = skipped because
/// the table holds a higher `(epoch, pane_index)`, `deleted` by a RETRACT).
pub const SINK_ROWS: &str = "tidemark_sink_rows_total";
/// PostgreSQL sink: dead letters written.
pub const SINK_DEAD_LETTERS: &str = "tidemark_sink_dead_letters_total";
/// PostgreSQL sink: duration of one batch's database transaction.
pub const SINK_BATCH_DURATION: &str = "tidemark_sink_batch_duration_seconds";
/// PostgreSQL sink: records from the offset stored in PostgreSQL to the end of a partition;
/// labels `topic`, `partition`.
pub const SINK_LAG: &str = "tidemark_sink_lag_records";
/// PostgreSQL sink: failed batch transactions (the batch is read again and retried).
pub const SINK_RETRIES: &str = "tidemark_sink_retries_total";

/// Every metric name above, for checks of dashboards and alert rules.
pub const ALL: &[&str] = &[
    RECORDS_IN,
    RECORDS_OUT,
    RECORDS_FILTERED,
    PANES,
    ROWS,
    DEAD_LETTERS,
    WATERMARK,
    WATERMARK_LAG,
    LATENESS,
    OPEN_WINDOWS,
    STATE_ENTRIES,
    STATE_SIZE,
    CACHE_BYTES,
    LARGEST_KEY,
    COMMIT_DURATION,
    PANE_LATENCY,
    TRANSACTIONS,
    RESTORE_RECORDS,
    RESTORE_DURATION,
    RESTORE_OPEN_WAIT,
    GROUP_OFFSET_MISMATCHES,
    REBALANCES,
    ASSIGNED_PARTITIONS,
    CONSUMER_LAG,
    BACKLOG,
    RECOMMENDED_MEMBERS,
    UNOWNED_PARTITIONS,
    GROUP_WEDGES,
    PARTITIONS_SUPERSEDED,
    ASSIGNOR_FALLBACKS,
    MEMBERSHIP_MOVES,
    HOP_WATERMARK_RECORDS,
    HOP_BYTES,
    HOP_PARTIALS,
    HOP_RECORDS_FOLDED,
    HOP_LATE_PARTIALS,
    SINK_ROWS,
    SINK_DEAD_LETTERS,
    SINK_BATCH_DURATION,
    SINK_LAG,
    SINK_RETRIES,
];

/// Histogram buckets in seconds, shared by every histogram: fine around the commit interval
/// (latency, commit duration), coarse up to an hour (lateness, restores).
pub const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.35, 0.5,
    0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The recorder could not be built or installed (a second install in one process).
    #[error("installing the Prometheus recorder: {0}")]
    Install(#[source] metrics_exporter_prometheus::BuildError),
    /// The address could not be bound.
    #[error("serving metrics on {0}: {1}")]
    Bind(String, std::io::Error),
}

/// Registers the description and unit of every metric with the installed recorder.
pub fn describe() {
    describe_counter!(RECORDS_IN, "Input records whose processing committed.");
    describe_counter!(RECORDS_OUT, "Records delivered per topic and partition.");
    describe_counter!(
        RECORDS_FILTERED,
        "Input records the pipeline's filter rejected, per topic."
    );
    describe_counter!(PANES, "Committed panes by timing.");
    describe_counter!(
        ROWS,
        "Committed rows of a pipeline of columns, one per record."
    );
    describe_counter!(DEAD_LETTERS, "Committed dead letters by reason.");
    describe_gauge!(
        UNOWNED_PARTITIONS,
        "Partitions of the pipeline's topics no member of the group owns (or, where the broker does not report assignments, that make no progress while records wait)."
    );
    describe_counter!(
        GROUP_WEDGES,
        "Rejoins after partitions stayed without an owner for three session timeouts."
    );
    describe_counter!(
        PARTITIONS_SUPERSEDED,
        "Partitions dropped because another member claimed them after this member did (the transaction aborts and the member rejoins)."
    );
    describe_counter!(
        ASSIGNOR_FALLBACKS,
        "Times this member gave up the cooperative rebalance protocol for the eager one, by reason."
    );
    describe_counter!(
        MEMBERSHIP_MOVES,
        "Times this member left the broker's consumer group for membership from the log, by reason."
    );
    describe_counter!(
        HOP_WATERMARK_RECORDS,
        "Watermark records of the repartition hop applied by the second stage."
    );
    describe_counter!(
        HOP_BYTES,
        Unit::Bytes,
        "Bytes of the records the repartition hop's first stage wrote to the repartition topic."
    );
    describe_counter!(
        HOP_PARTIALS,
        "Partial aggregates the repartition hop's first stage wrote."
    );
    describe_counter!(
        HOP_RECORDS_FOLDED,
        "Input records the repartition hop's first stage folded into partial aggregates."
    );
    describe_counter!(
        HOP_LATE_PARTIALS,
        "Partial aggregates the repartition hop's second stage found behind its watermark."
    );
    describe_gauge!(WATERMARK, Unit::Seconds, "Watermark per input partition.");
    describe_gauge!(
        WATERMARK_LAG,
        Unit::Seconds,
        "Wall clock minus watermark per input partition."
    );
    describe_histogram!(
        LATENESS,
        Unit::Seconds,
        "How far behind the watermark records arrive."
    );
    describe_gauge!(
        OPEN_WINDOWS,
        "Pending event-time timers (about one per open window)."
    );
    describe_gauge!(STATE_ENTRIES, "Estimated RocksDB entries per partition.");
    describe_gauge!(
        STATE_SIZE,
        Unit::Bytes,
        "Live RocksDB bytes of this member."
    );
    describe_gauge!(
        CACHE_BYTES,
        Unit::Bytes,
        "Window state a partition holds in memory (bounded by kafka.cache_memory after each commit)."
    );
    describe_gauge!(
        LARGEST_KEY,
        Unit::Bytes,
        "The largest state of one key written by a partition's last flush."
    );
    describe_histogram!(COMMIT_DURATION, Unit::Seconds, "Commit cycle duration.");
    describe_histogram!(
        PANE_LATENCY,
        Unit::Seconds,
        "Append of the firing record to the commit of its pane."
    );
    describe_counter!(TRANSACTIONS, "Transactions by outcome.");
    describe_counter!(RESTORE_RECORDS, "Changelog records applied by restores.");
    describe_histogram!(
        RESTORE_DURATION,
        Unit::Seconds,
        "Partition restore duration."
    );
    describe_histogram!(
        RESTORE_OPEN_WAIT,
        Unit::Seconds,
        "Time a restore waited for open changelog transactions."
    );
    describe_counter!(
        GROUP_OFFSET_MISMATCHES,
        "Assignments where the group offset disagreed with the changelog."
    );
    describe_counter!(
        REBALANCES,
        "Rebalance callbacks by kind (assign, revoke, lost)."
    );
    describe_gauge!(
        ASSIGNED_PARTITIONS,
        "Input partitions assigned to this member."
    );
    describe_gauge!(
        CONSUMER_LAG,
        "Records from the position to the end of a partition."
    );
    describe_gauge!(
        BACKLOG,
        Unit::Seconds,
        "Lag of a partition divided by its recent processing rate."
    );
    describe_gauge!(
        RECOMMENDED_MEMBERS,
        "Members the group should have to keep the backlog under the target."
    );
    describe_counter!(SINK_ROWS, "PostgreSQL sink: pane rows by outcome.");
    describe_counter!(SINK_DEAD_LETTERS, "PostgreSQL sink: dead letters written.");
    describe_histogram!(
        SINK_BATCH_DURATION,
        Unit::Seconds,
        "PostgreSQL sink: batch transaction duration."
    );
    describe_gauge!(
        SINK_LAG,
        "PostgreSQL sink: records from the stored offset to the end of a partition."
    );
    describe_counter!(
        SINK_RETRIES,
        "PostgreSQL sink: failed batch transactions retried."
    );
}

/// Health as the HTTP endpoint reports it.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
}

impl Health {
    /// Marks the member ready (partitions restored, processing) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether the member is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// Installs the Prometheus recorder and serves `/metrics`, `/healthz` and `/readyz` on `addr`
/// from a background thread; returns the bound address (useful with port 0).
pub fn install(addr: SocketAddr, health: Arc<Health>) -> Result<SocketAddr, MetricsError> {
    let listener = TcpListener::bind(addr).map_err(|e| MetricsError::Bind(addr.to_string(), e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| MetricsError::Bind(addr.to_string(), e))?;
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(MetricsError::Install)?
        .install_recorder()
        .map_err(MetricsError::Install)?;
    describe();
    std::thread::Builder::new()
        .name("tidemark-metrics".into())
        .spawn(move || serve(listener, handle, health))
        .map_err(|e| MetricsError::Bind(addr.to_string(), e))?;
    Ok(bound)
}

fn serve(listener: TcpListener, handle: PrometheusHandle, health: Arc<Health>) {
    let mut last_upkeep = Instant::now();
    for stream in listener.incoming().flatten() {
        if last_upkeep.elapsed() > Duration::from_secs(5) {
            handle.run_upkeep();
            last_upkeep = Instant::now();
        }
        if let Err(e) = respond(stream, &handle, &health) {
            tracing::debug!("metrics endpoint: {e}");
        }
    }
}

fn respond(stream: TcpStream, handle: &PrometheusHandle, health: &Health) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // Drain the headers; requests have no body.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let (status, content_type, body) = match path {
        "/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4",
            handle.render().into_bytes(),
        ),
        "/healthz" => ("200 OK", "text/plain", b"ok\n".to_vec()),
        "/readyz" if health.is_ready() => ("200 OK", "text/plain", b"ready\n".to_vec()),
        "/readyz" => (
            "503 Service Unavailable",
            "text/plain",
            b"not ready\n".to_vec(),
        ),
        _ => ("404 Not Found", "text/plain", b"not found\n".to_vec()),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    out.write_all(&body)?;
    out.flush()
}
