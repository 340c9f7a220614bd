//! The command line: `validate`, `simulate`, `run`, `replay`, `sink-postgres`, `produce`, `audit`
//! and `tail`.

use crate::config;
use crate::state::store::StateStore;
use crate::{audit, coordinator, produce, simulate};
use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a pipeline file and print every problem found.
    Validate {
        /// The pipeline file (TOML).
        #[arg(long)]
        config: PathBuf,
    },
    /// Run a pipeline over a file of JSON events, without Kafka.
    Simulate {
        /// The pipeline file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Events and control lines, one JSON object per line.
        #[arg(long)]
        input: PathBuf,
        /// Where to write panes (default: standard output).
        #[arg(long)]
        output: Option<PathBuf>,
        /// Where to write dead letters (default: standard error).
        #[arg(long)]
        dead_letter: Option<PathBuf>,
        /// RocksDB directory for window state (default: a temporary directory, removed afterwards).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Run the pipeline as a member of its Kafka consumer group, exactly once.
    Run {
        /// The pipeline file (TOML) with a [kafka] section.
        #[arg(long)]
        config: PathBuf,
        /// Copy input records to the output topic through the same transactional commit cycle,
        /// without windows or state: the baseline of the Kafka benchmark.
        #[arg(long)]
        passthrough: bool,
    },
    /// Move a stopped pipeline back to earlier input offsets: its state restarts empty there, and
    /// its output is recomputed in a new epoch that supersedes the old one at idempotent sinks.
    #[command(group(clap::ArgGroup::new("to").required(true).args(["to_earliest", "to_datetime", "to_offsets", "by_duration"])))]
    Replay {
        /// The pipeline file (TOML) with a [kafka] section.
        #[arg(long)]
        config: PathBuf,
        /// Every partition from its first offset.
        #[arg(long)]
        to_earliest: bool,
        /// Every partition from its first record at or after this time (RFC 3339).
        #[arg(long)]
        to_datetime: Option<String>,
        /// These partitions from these offsets, as PARTITION:OFFSET[,...]; others stay.
        #[arg(long)]
        to_offsets: Option<String>,
        /// Every partition from its first record at or after now minus this duration (e.g. 2h).
        #[arg(long)]
        by_duration: Option<String>,
        /// Print the plan and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Carry the pipeline's committed panes (and dead letters) into PostgreSQL, exactly once.
    SinkPostgres {
        /// The pipeline file (TOML) with [kafka] and [postgres] sections.
        #[arg(long)]
        config: PathBuf,
        /// Serve /metrics, /healthz and /readyz here (host:port).
        #[arg(long)]
        metrics_address: Option<std::net::SocketAddr>,
    },
    /// Produce synthetic clickstream events (JSON) to a topic.
    Produce {
        /// Bootstrap servers.
        #[arg(long, env = "TIDEMARK_BOOTSTRAP_SERVERS")]
        bootstrap_servers: String,
        /// Target topic (created when missing).
        #[arg(long)]
        topic: String,
        /// Partitions when the topic is created.
        #[arg(long, default_value_t = 3)]
        partitions: i32,
        /// Number of events.
        #[arg(long, default_value_t = 10_000)]
        events: u64,
        /// Events per second; 0 = as fast as possible.
        #[arg(long, default_value_t = 1_000)]
        rate: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 100)]
        keys: u64,
        /// Maximum disorder in ms (applied to 10% of events).
        #[arg(long, default_value_t = 2_000)]
        disorder_ms: i64,
        /// Share of late records (stamped an hour back), 0..1.
        #[arg(long, default_value_t = 0.0)]
        late_share: f64,
        /// Share of malformed records, 0..1.
        #[arg(long, default_value_t = 0.0)]
        malformed_share: f64,
        /// What the events describe.
        #[arg(long, value_enum, default_value_t = produce::Kind::Clickstream)]
        kind: produce::Kind,
        /// Encoding: json, avro (plain binary) or avro-confluent (needs --schema-id).
        #[arg(long, default_value = "json")]
        format: String,
        /// Schema id written in Confluent-framed records.
        #[arg(long)]
        schema_id: Option<u32>,
    },
    /// GET an http:// URL and exit 0 on status 200 (a container health check: the runtime image
    /// has no curl).
    Probe {
        /// For example `http://127.0.0.1:9464/readyz`.
        #[arg(long)]
        url: String,
    },
    /// Read a topic's raw log, resolve its transactions, and check panes for duplicates and gaps
    /// (or, on a dead-letter topic, that each source record is dead-lettered once).
    Audit {
        /// Bootstrap servers.
        #[arg(long, env = "TIDEMARK_BOOTSTRAP_SERVERS")]
        bootstrap_servers: String,
        /// The topic to audit.
        #[arg(long)]
        topic: String,
        /// Print every committed pane (JSON lines) to standard output.
        #[arg(long)]
        print: bool,
        /// With --print: values are Avro (`plain` or `confluent`), panes in
        /// schemas/window_result.avsc and dead letters in schemas/dead_letter.avsc; printed as JSON.
        #[arg(long)]
        avro: Option<String>,
    },
    /// Follow an output topic and print its committed panes as an aligned table (key, window in
    /// local time, timing, pane, count, aggregates), each once; Ctrl-C stops it.
    Tail {
        /// Bootstrap servers.
        #[arg(long, env = "TIDEMARK_BOOTSTRAP_SERVERS")]
        bootstrap_servers: String,
        /// The output topic.
        #[arg(long)]
        topic: String,
        /// Values are Avro `WindowResult`s (`plain` or `confluent` framing).
        #[arg(long)]
        avro: Option<String>,
        /// Print what is committed now and stop instead of following.
        #[arg(long)]
        once: bool,
    },
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

fn load_config(path: &Path) -> anyhow::Result<config::PipelineSpec> {
    match config::load(path) {
        Ok((spec, warnings)) => {
            for w in warnings {
                tracing::warn!("{}: {w}", path.display());
            }
            Ok(spec)
        }
        Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
    }
}

/// A flag set when SIGTERM or SIGINT arrives (watched on a thread of its own).
fn stop_on_signal() -> Arc<AtomicBool> {
    let shutdown = Arc::new(AtomicBool::new(false));
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
            flag.store(true, Ordering::Relaxed);
        });
    });
    shutdown
}

/// Runs a parsed command line; the returned code is the process exit status.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Validate { config: path } => match config::load(&path) {
            Ok((spec, warnings)) => {
                for w in &warnings {
                    println!("warning: {w}");
                }
                if let Some(k) = &spec.kafka {
                    println!(
                        "note: tidemark run groups by the record key of {:?}; input.key is used by simulate only (grouping by a field needs repartitioning, which is not built)",
                        k.input_topic
                    );
                }
                println!("{}: ok (pipeline {:?})", path.display(), spec.engine.name);
                Ok(0)
            }
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                Ok(2)
            }
        },
        Command::Simulate {
            config: path,
            input,
            output,
            dead_letter,
            state_dir,
        } => {
            let spec = load_config(&path)?;
            let tmp;
            let dir = match state_dir {
                Some(d) => d,
                None => {
                    tmp = tempfile::tempdir().context("creating a temporary state directory")?;
                    tmp.path().to_path_buf()
                }
            };
            let store = StateStore::open(&dir)
                .with_context(|| format!("opening state in {}", dir.display()))?;
            let reader = BufReader::new(
                File::open(&input).with_context(|| format!("opening {}", input.display()))?,
            );
            let mut panes: Box<dyn Write> = match &output {
                Some(p) => Box::new(BufWriter::new(
                    File::create(p).with_context(|| format!("creating {}", p.display()))?,
                )),
                None => Box::new(BufWriter::new(std::io::stdout().lock())),
            };
            let mut dead: Box<dyn Write> = match &dead_letter {
                Some(p) => Box::new(BufWriter::new(
                    File::create(p).with_context(|| format!("creating {}", p.display()))?,
                )),
                None => Box::new(std::io::stderr()),
            };
            let s = simulate::run(&spec, &store, reader, &mut panes, &mut dead)?;
            eprintln!(
                "simulate: {} lines, {} events, {} panes, {} late, {} malformed",
                s.lines, s.events, s.panes, s.late, s.malformed
            );
            Ok(0)
        }
        Command::Run {
            config: path,
            passthrough,
        } => {
            let spec = load_config(&path)?;
            let health = Arc::new(crate::metrics::Health::default());
            if let Some(addr) = spec.metrics_address {
                let bound = crate::metrics::install(addr, health.clone())
                    .context("starting the metrics endpoint")?;
                tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
            }
            let mode = if passthrough {
                coordinator::Mode::Passthrough
            } else {
                coordinator::Mode::Windows
            };
            let shutdown = stop_on_signal();
            match coordinator::run(spec, mode, health, shutdown) {
                Ok(()) => Ok(0),
                Err(e @ coordinator::RunError::Incompatible(_)) => {
                    eprintln!("tidemark run: {e}");
                    Ok(2)
                }
                Err(e) => {
                    eprintln!("tidemark run: {e}");
                    Ok(1)
                }
            }
        }
        Command::SinkPostgres {
            config: path,
            metrics_address,
        } => {
            let spec = load_config(&path)?;
            if let Some(addr) = metrics_address {
                let health = Arc::new(crate::metrics::Health::default());
                health.set_ready(true);
                let bound = crate::metrics::install(addr, health)
                    .context("starting the metrics endpoint")?;
                tracing::info!(address = %bound, "serving /metrics");
            }
            let shutdown = stop_on_signal();
            match crate::connect::postgres::run(spec, shutdown) {
                Ok(()) => Ok(0),
                Err(e @ crate::connect::postgres::SinkError::Schema(_))
                | Err(e @ crate::connect::postgres::SinkError::Missing(_)) => {
                    eprintln!("tidemark sink-postgres: {e}");
                    Ok(2)
                }
                Err(e) => {
                    eprintln!("tidemark sink-postgres: {e}");
                    Ok(1)
                }
            }
        }
        Command::Replay {
            config: path,
            to_earliest,
            to_datetime,
            to_offsets,
            by_duration,
            dry_run,
        } => {
            let spec = load_config(&path)?;
            let target = if to_earliest {
                Ok(crate::replay::Target::Earliest)
            } else if let Some(t) = to_datetime {
                chrono::DateTime::parse_from_rfc3339(&t)
                    .map(|d| crate::replay::Target::Time(d.timestamp_millis()))
                    .map_err(|e| {
                        format!(
                            "--to-datetime {t:?}: {e} (use RFC 3339, e.g. 2026-12-01T09:30:00Z)"
                        )
                    })
            } else if let Some(o) = to_offsets {
                crate::replay::Target::parse_offsets(&o).map_err(|e| format!("--to-offsets: {e}"))
            } else if let Some(d) = by_duration {
                crate::windowing::time::parse_duration(&d)
                    .map(|ms| crate::replay::Target::Time(crate::clock::wall_ms() - ms))
                    .map_err(|e| format!("--by-duration {d:?}: {e}"))
            } else {
                Err("one of --to-earliest, --to-datetime, --to-offsets, --by-duration".to_string())
            };
            let target = match target {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("tidemark replay: {e}");
                    return Ok(2);
                }
            };
            let result = crate::replay::plan(&spec, &target).and_then(|plan| {
                print!("{}", plan.table());
                if dry_run {
                    println!("dry run: nothing changed");
                } else {
                    crate::replay::commit(&spec, &plan)?;
                    println!(
                        "committed: epoch {} starts at the target offsets; start the members to reprocess",
                        plan.epoch
                    );
                }
                Ok(())
            });
            match result {
                Ok(()) => Ok(0),
                Err(e) => {
                    eprintln!("tidemark replay: {e}");
                    Ok(if e.is_refusal() { 2 } else { 1 })
                }
            }
        }
        Command::Produce {
            bootstrap_servers,
            topic,
            partitions,
            events,
            rate,
            keys,
            disorder_ms,
            late_share,
            malformed_share,
            kind,
            format,
            schema_id,
        } => {
            let format = match (format.as_str(), schema_id) {
                ("json", None) => produce::Format::Json,
                ("avro", None) => produce::Format::Avro,
                ("avro-confluent", Some(id)) => produce::Format::AvroConfluent(id),
                ("avro-confluent", None) => {
                    anyhow::bail!("--format avro-confluent needs --schema-id")
                }
                ("json" | "avro", Some(_)) => {
                    anyhow::bail!("--schema-id applies to --format avro-confluent only")
                }
                (other, _) => {
                    anyhow::bail!("unknown --format {other:?}: json, avro or avro-confluent")
                }
            };
            let sent = produce::run(&produce::ProduceOptions {
                bootstrap_servers,
                topic: topic.clone(),
                partitions,
                events,
                rate,
                keys,
                disorder_ms,
                late_share,
                malformed_share,
                kind,
                format,
            })?;
            eprintln!("produce: {sent} events to {topic}");
            Ok(0)
        }
        Command::Probe { url } => Ok(probe(&url)?),
        Command::Tail {
            bootstrap_servers,
            topic,
            avro,
            once,
        } => {
            let framing = parse_framing(avro.as_deref())?;
            let mut header_for: Option<Vec<String>> = None;
            let local = chrono::Local;
            crate::tail::follow(
                &bootstrap_servers,
                &topic,
                once,
                std::time::Duration::from_millis(500),
                |r| {
                    let Some(row) = printable(r, framing)
                        .ok()
                        .and_then(|text| serde_json::from_str(&text).ok())
                        .and_then(|v| crate::tail::PaneRow::from_json(&v))
                    else {
                        return Ok(()); // not a pane (a dead letter, say)
                    };
                    let names: Vec<String> = row.aggregates.iter().map(|a| a.0.clone()).collect();
                    if header_for.as_ref() != Some(&names) {
                        println!("{}", crate::tail::header(&row.aggregates));
                        header_for = Some(names);
                    }
                    println!("{}", crate::tail::line(&row, &local));
                    Ok(())
                },
            )?;
            Ok(0)
        }
        Command::Audit {
            bootstrap_servers,
            topic,
            print,
            avro,
        } => {
            let framing = parse_framing(avro.as_deref())?;
            let log = crate::kafka::raw_log::read_topic(&bootstrap_servers, &topic)?;
            let report = audit::check_panes(&log.committed);
            if print {
                for r in &log.committed {
                    println!("{}", printable(r, framing)?);
                }
            }
            eprintln!(
                "audit {topic}: {} committed records, {} aborted, {} in open transactions, {} aborted records served to read_committed by this broker",
                log.committed.len(),
                log.aborted,
                log.open,
                log.aborted_served_to_read_committed
            );
            // A topic of dead letters is checked per source record; any other as panes.
            let dead = audit::check_dead_letters(&log.committed);
            if dead.dead_letters > 0 && report.panes == 0 {
                let reasons: Vec<String> = dead
                    .by_reason
                    .iter()
                    .map(|(r, n)| format!("{r} {n}"))
                    .collect();
                eprintln!(
                    "dead letters: {} ({}); {} source records dead-lettered more than once; {} records without dead-letter headers",
                    dead.dead_letters,
                    reasons.join(", "),
                    dead.duplicates.len(),
                    dead.not_dead_letters
                );
                for (epoch, n) in &dead.by_epoch {
                    eprintln!("  epoch {epoch}: {n} dead letters");
                }
                for (t, p, o, n) in dead.duplicates.iter().take(20) {
                    eprintln!("  duplicate: {t}/{p}@{o} dead-lettered {n} times");
                }
                return Ok(if dead.duplicates.is_empty() { 0 } else { 3 });
            }
            eprintln!(
                "panes: {} in {} windows; {} duplicated (dedup_id, epoch, pane_index); {} windows with pane-index gaps; {} records without pane headers",
                report.panes,
                report.windows,
                report.duplicates.len(),
                report.gaps.len(),
                report.not_panes
            );
            for (epoch, (panes, windows)) in &report.by_epoch {
                eprintln!("  epoch {epoch}: {panes} panes in {windows} windows");
            }
            for (id, epoch, idx, n) in report.duplicates.iter().take(20) {
                eprintln!(
                    "  duplicate: dedup_id {id} epoch {epoch} pane {idx} committed {n} times"
                );
            }
            Ok(if report.duplicates.is_empty() { 0 } else { 3 })
        }
    }
}

/// The `--avro` option: `plain` or `confluent` framing, or JSON values when absent.
fn parse_framing(avro: Option<&str>) -> anyhow::Result<Option<crate::avro::Framing>> {
    avro.map(|f| {
        crate::avro::Framing::parse(f)
            .with_context(|| format!("--avro {f:?}: \"plain\" or \"confluent\""))
    })
    .transpose()
}

/// GETs `url` (http:// only); exit status 0 when it answers 200, 1 otherwise.
fn probe(url: &str) -> anyhow::Result<i32> {
    match crate::http::request(url, "GET", "", "", "") {
        Ok((200, _)) => Ok(0),
        Ok((code, _)) => {
            eprintln!("{url}: status {code}");
            Ok(1)
        }
        Err(e) => {
            eprintln!("{url}: {e}");
            Ok(1)
        }
    }
}

/// A committed record's value as one line: as is, or Avro decoded to JSON (a dead letter when the
/// record has a `tidemark.reason` header, a pane otherwise).
fn printable(
    r: &crate::kafka::raw_log::RawRecord,
    framing: Option<crate::avro::Framing>,
) -> anyhow::Result<String> {
    let value = r.value.as_deref().unwrap_or_default();
    let Some(framing) = framing else {
        return Ok(String::from_utf8_lossy(value).into_owned());
    };
    let dead_letter = audit::is_dead_letter(r);
    let text = if dead_letter {
        crate::avro::DEAD_LETTER_SCHEMA
    } else {
        crate::avro::WINDOW_RESULT_SCHEMA
    };
    let schema = crate::avro::parse_schema("output schema", text)?;
    let decoded = crate::avro::decode_value(&schema, framing, value)
        .map_err(|e| anyhow::anyhow!("offset {}: {e}", r.offset))?;
    let json = serde_json::Value::try_from(decoded)
        .map_err(|e| anyhow::anyhow!("offset {}: {e}", r.offset))?;
    Ok(json.to_string())
}
