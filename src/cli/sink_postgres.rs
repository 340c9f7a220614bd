//! `tidemark sink-postgres`: the pipeline's committed output into PostgreSQL.

use super::{load_config, stop_on_signal};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

/// Carry the pipeline's committed panes (and dead letters) into PostgreSQL, exactly once.
#[derive(Debug, Args)]
pub struct SinkPostgres {
    /// The pipeline file (TOML) with [kafka] and [postgres] sections.
    #[arg(long)]
    config: PathBuf,
    /// Serve /metrics, /healthz and /readyz here (host:port).
    #[arg(long)]
    metrics_address: Option<std::net::SocketAddr>,
}

impl SinkPostgres {
    /// Runs until SIGTERM or SIGINT (exit status 0), a refusal (2) or a failure (1).
    pub fn execute(self) -> anyhow::Result<i32> {
        let spec = load_config(&self.config)?;
        if let Some(addr) = self.metrics_address {
            let health = Arc::new(crate::metrics::Health::default());
            health.set_ready(true);
            let bound =
                crate::metrics::install(addr, health).context("starting the metrics endpoint")?;
            tracing::info!(address = %bound, "serving /metrics");
        }
        let shutdown = stop_on_signal();
        match crate::connect::postgres::run(spec, &shutdown) {
            Ok(()) => Ok(0),
            Err(e) => {
                eprintln!("tidemark sink-postgres: {e}");
                Ok(if e.is_refusal() { 2 } else { 1 })
            }
        }
    }
}
