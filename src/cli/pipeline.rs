//! Where a command reads its pipeline: `--config FILE.toml` or `--sql FILE.sql`, one of them.

use crate::config;
use std::path::Path;

/// Where a command reads its pipeline: a TOML file (`--config`) or SQL statements (`--sql`).
#[derive(Debug, Clone, clap::Args)]
#[group(required = true, multiple = false)]
pub struct PipelineArgs {
    /// The pipeline file (TOML).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// The pipeline as SQL: SET, CREATE TABLE and one windowing query (docs/sql.md).
    #[arg(long)]
    sql: Option<std::path::PathBuf>,
}

impl PipelineArgs {
    /// The file named.
    pub fn path(&self) -> &Path {
        self.config
            .as_deref()
            .or(self.sql.as_deref())
            .expect("clap requires one of --config and --sql")
    }

    /// Reads and validates the pipeline.
    pub fn load(&self) -> Result<config::Loaded, config::ConfigError> {
        let sinks = crate::sink::sections();
        match (&self.config, &self.sql) {
            (_, Some(sql)) => config::load_sql(sql, &sinks),
            (Some(toml), None) => {
                config::load(toml, &sinks).map(|(spec, warnings)| config::Loaded {
                    spec,
                    warnings,
                    sql: None,
                })
            }
            (None, None) => unreachable!("clap requires one of --config and --sql"),
        }
    }

    /// Reads and validates the pipeline, logging its warnings; an error names the file.
    pub fn load_logged(&self) -> anyhow::Result<config::Loaded> {
        let path = self.path();
        match self.load() {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    tracing::warn!("{}: {w}", path.display());
                }
                Ok(loaded)
            }
            Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
        }
    }
}
