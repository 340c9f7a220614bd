//! `tidemark sink NAME`: a sink beside the pipeline, carrying its committed output into another
//! system exactly once (`tidemark sink postgres`; `tidemark sink-postgres` is the same).

use super::stop_on_signal;
use anyhow::Context;
use clap::Args;
use std::sync::Arc;

/// Carry the pipeline's committed panes (and dead letters) into another system, exactly once.
#[derive(Debug, Args)]
pub struct Sink {
    /// Which sink: `postgres`. Another name is a usage error (exit status 2), as clap reports
    /// any invalid argument.
    #[arg(value_parser = sink_names())]
    name: String,
    #[command(flatten)]
    args: SinkArgs,
}

/// What every sink takes.
#[derive(Debug, Args)]
pub struct SinkArgs {
    /// The pipeline: a TOML file with [kafka] and the sink's [sink.NAME] sections, or a SQL
    /// file whose INSERT writes into the sink's table.
    #[command(flatten)]
    pipeline: super::PipelineArgs,
    /// Serve /metrics, /healthz and /readyz here (host:port).
    #[arg(long)]
    metrics_address: Option<std::net::SocketAddr>,
}

/// The registered sinks' names, the values `NAME` may take.
fn sink_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(crate::sink::SINKS.iter().map(|s| s.section.name()))
}

impl Sink {
    /// Runs until SIGTERM or SIGINT (exit status 0), a refusal (2) or a failure (1).
    pub fn execute(self) -> anyhow::Result<i32> {
        self.args.execute(&self.name)
    }
}

impl SinkArgs {
    /// Runs the sink `name` until SIGTERM or SIGINT (exit status 0), a refusal (2) or a failure
    /// (1).
    pub fn execute(self, name: &str) -> anyhow::Result<i32> {
        let Some(sink) = crate::sink::SINKS.iter().find(|s| s.section.name() == name) else {
            let names: Vec<&str> = crate::sink::SINKS
                .iter()
                .map(|s| s.section.name())
                .collect();
            anyhow::bail!(
                "no sink is called {name:?} (there are: {})",
                names.join(", ")
            );
        };
        let spec = self.pipeline.load_logged()?.spec;
        if let Some(addr) = self.metrics_address {
            let health = Arc::new(crate::metrics::Health::default());
            health.set_ready(true);
            let bound =
                crate::metrics::install(addr, health).context("starting the metrics endpoint")?;
            tracing::info!(address = %bound, "serving /metrics");
        }
        let shutdown = stop_on_signal();
        match (sink.run)(spec, shutdown.requested()) {
            Ok(()) => Ok(0),
            Err(e) => {
                eprintln!("tidemark sink {name}: {e}");
                Ok(if e.is_refusal() { 2 } else { 1 })
            }
        }
    }
}
