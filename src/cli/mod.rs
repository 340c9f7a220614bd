//! The command line, one room per command (as in mini-redis' `cmd/`): each file holds the
//! command's arguments and its `execute`, which returns the process exit status. `anyhow` lives
//! only here and in `main`.
//!
//! * [`validate`] — check a pipeline file;
//! * [`explain`] — print the plan a pipeline file builds;
//! * [`simulate`] — a pipeline over files of events, without Kafka;
//! * [`run`] — a member of the pipeline's consumer group;
//! * [`replay`] — move a stopped pipeline back to earlier offsets, in a new epoch;
//! * [`sink`] — a sink beside the pipeline: the committed output into PostgreSQL;
//! * [`produce`] — synthetic events to a topic;
//! * [`audit`] — exactly-once checked from a topic's raw log;
//! * [`tail`] — an output topic's committed panes as a live table;
//! * [`probe`] — a container health check, or a pipeline's access to its cluster.

pub mod audit;
mod connection;
pub mod explain;
mod pipeline;
pub mod probe;
pub mod produce;
pub mod replay;
pub mod run;
pub mod simulate;
pub mod sink;
pub mod tail;
pub mod validate;

use crate::coordinator::Stop;
use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
pub use pipeline::PipelineArgs;
use std::sync::Arc;
use std::time::Duration;

/// tidemark: event-time windows over Kafka, exactly once.
#[derive(Debug, Parser)]
#[command(name = "tidemark", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "TIDEMARK_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Subcommands, one room each.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a pipeline file and print every problem found.
    Validate(validate::Validate),
    /// Print the plan a pipeline file builds: decoded fields, filter, key, time, window,
    /// trigger, aggregates with their inputs, topology and outputs.
    Explain(explain::Explain),
    /// Run a pipeline over a file of events, without Kafka.
    Simulate(simulate::Simulate),
    /// Run the pipeline as a member of its Kafka consumer group, exactly once.
    Run(run::Run),
    /// Move a stopped pipeline back to earlier input offsets: its state restarts empty there, and
    /// its output is recomputed in a new epoch that supersedes the old one at idempotent sinks.
    Replay(replay::Replay),
    /// Carry the pipeline's committed panes (and dead letters) into another system, exactly
    /// once: `tidemark sink postgres --config FILE`.
    Sink(sink::Sink),
    /// The same as `tidemark sink postgres`.
    #[command(name = "sink-postgres", hide = true)]
    SinkPostgres(sink::SinkArgs),
    /// Produce synthetic clickstream, payment or sensor events to a topic.
    Produce(produce::Produce),
    /// GET an http:// URL and exit 0 on status 200 (a container health check: the runtime image
    /// has no curl); or, with --config, check that a pipeline reaches its cluster and may do what
    /// it needs there.
    Probe(probe::Probe),
    /// Read a topic's raw log, resolve its transactions, and check panes for duplicates and gaps
    /// (or, on a dead-letter topic, that each source record is dead-lettered once).
    Audit(audit::Audit),
    /// Follow an output topic and print its committed panes as an aligned table (key, window in
    /// local time, timing, pane, count, aggregates), each once; Ctrl-C stops it.
    Tail(tail::Tail),
}

/// Sets up `tracing` logs on standard error.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TIDEMARK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// How long a command told to stop may take to finish its work (a member commits its open
/// transaction and leaves the group) before the process exits without it. A member that exits
/// there before its commit is like one killed (status 1): its open transaction is aborted by the
/// broker or fenced by the next member, and nothing is lost or committed twice. What delays the
/// commit is a broker that is gone: librdkafka waits out its timeouts for the deliveries, the
/// commit and the abort. A member that committed and is still leaving the group (which waits for
/// a rebalance in flight) exits with status 0: the broker removes it when its session times out.
pub const STOP_BOUND: Duration = Duration::from_secs(10);

/// A stop requested when SIGTERM or SIGINT arrives (watched on a thread of its own). The process
/// exits if it is still running [`STOP_BOUND`] later (status 0 if the member had committed, 1
/// otherwise), or with status 1 at once on a second signal.
fn stop_on_signal() -> Arc<Stop> {
    let shutdown = Arc::new(Stop::default());
    let flag = shutdown.clone();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = term.recv() => {},
            }
            tracing::info!("signal received: stopping");
            flag.request();
            let second = async {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {},
                    _ = term.recv() => {},
                }
            };
            let second_signal = tokio::select! {
                _ = second => true,
                _ = tokio::time::sleep(STOP_BOUND) => false,
            };
            if !second_signal && flag.is_committed() {
                tracing::warn!(
                    bound_s = STOP_BOUND.as_secs(),
                    "the open transaction is committed, but leaving the consumer group took \
                     longer than the bound: exiting (the broker removes this member when its \
                     session times out)"
                );
                std::process::exit(0);
            }
            let why = if second_signal {
                "a second signal"
            } else {
                "the stop took longer than its bound"
            };
            tracing::error!(
                bound_s = STOP_BOUND.as_secs(),
                "{why}: exiting without finishing (an open transaction is aborted by the broker \
                 or fenced by the next member)"
            );
            std::process::exit(1);
        });
    });
    shutdown
}

/// Runs a parsed command line; the returned code is the process exit status.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Validate(c) => c.execute(),
        Command::Explain(c) => c.execute(),
        Command::Simulate(c) => c.execute(),
        Command::Run(c) => c.execute(),
        Command::Replay(c) => c.execute(),
        Command::Sink(c) => c.execute(),
        Command::SinkPostgres(c) => c.execute("postgres"),
        Command::Produce(c) => c.execute(),
        Command::Probe(c) => c.execute(),
        Command::Audit(c) => c.execute(),
        Command::Tail(c) => c.execute(),
    }
}

/// The `--avro` option: `plain` or `confluent` framing, or JSON values when absent.
fn parse_framing(avro: Option<&str>) -> anyhow::Result<Option<crate::input::avro::Framing>> {
    avro.map(|f| {
        crate::input::avro::Framing::parse(f)
            .with_context(|| format!("--avro {f:?}: \"plain\" or \"confluent\""))
    })
    .transpose()
}
