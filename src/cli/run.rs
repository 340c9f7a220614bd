//! `tidemark run`: the pipeline as a member of its consumer group.

use super::stop_on_signal;
use crate::coordinator;
use anyhow::Context;
use clap::Args;
use std::sync::Arc;

/// Run the pipeline as a member of its Kafka consumer group, exactly once.
#[derive(Debug, Args)]
pub struct Run {
    /// The pipeline, with its Kafka settings.
    #[command(flatten)]
    pipeline: super::PipelineArgs,
    /// Copy input records to the output topic through the same transactional commit cycle,
    /// without windows or state: the baseline of the Kafka benchmark.
    #[arg(long)]
    passthrough: bool,
}

impl Run {
    /// Runs until SIGTERM or SIGINT (exit status 0), a refusal (2) or a fatal error (1).
    pub fn execute(self) -> anyhow::Result<i32> {
        let spec = self.pipeline.load_logged()?.spec;
        let health = Arc::new(crate::metrics::Health::default());
        if let Some(addr) = spec.metrics_address {
            let bound = crate::metrics::install(addr, health.clone())
                .context("starting the metrics endpoint")?;
            tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
        }
        let mode = if self.passthrough {
            coordinator::Mode::Passthrough
        } else {
            coordinator::Mode::Windows
        };
        let stop = stop_on_signal();
        match coordinator::run(spec, mode, health, stop) {
            Ok(()) => {
                tracing::info!("left the consumer group");
                Ok(0)
            }
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
}
