//! `tidemark simulate`: a pipeline over a file of events, without Kafka.

use crate::simulate;
use crate::state::store::StateStore;
use anyhow::Context;
use clap::Args;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;

/// Run a pipeline over files of records, without Kafka.
#[derive(Debug, Args)]
pub struct Simulate {
    #[command(flatten)]
    pipeline: super::PipelineArgs,
    /// Records and control lines, one per line: JSON values, or base64 of Avro values. Give it
    /// several times for several inputs (watermark sources), read in turns. With `--sql`,
    /// `TABLE=FILE` binds the file to the table the query reads (or to the table under its view).
    #[arg(long, required = true)]
    input: Vec<PathBuf>,
    /// Where to write panes, or a SQL query's rows (default: standard output).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Where to write dead letters (default: standard error).
    #[arg(long)]
    dead_letter: Option<PathBuf>,
    /// RocksDB directory for window state (default: a temporary directory, removed afterwards).
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

/// The file an `--input` names: `TABLE=FILE` binds FILE to the table a SQL query reads (one of
/// `sources`), checked; anything else, or a file that exists under the whole name, is a path.
fn bound_file(given: &std::path::Path, sources: &[String]) -> anyhow::Result<PathBuf> {
    let text = given.to_string_lossy();
    let binding = text.split_once('=').filter(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    match binding {
        Some((name, file)) if !sources.is_empty() && !given.exists() => {
            if sources.iter().any(|s| s.eq_ignore_ascii_case(name)) {
                Ok(PathBuf::from(file))
            } else {
                anyhow::bail!(
                    "--input {text}: the query reads {}, not {name}",
                    sources.join(" (a view of ") + &")".repeat(sources.len() - 1)
                )
            }
        }
        _ => Ok(given.to_path_buf()),
    }
}

/// A file to write to, or `default` when none is named.
fn writer(path: &Option<PathBuf>, default: Box<dyn Write>) -> anyhow::Result<Box<dyn Write>> {
    Ok(match path {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => default,
    })
}

impl Simulate {
    /// Runs the simulation and prints a summary on standard error.
    pub fn execute(self) -> anyhow::Result<i32> {
        let loaded = self.pipeline.load_logged()?;
        let spec = loaded.spec;
        let sources = loaded
            .sql
            .as_ref()
            .map(|c| c.sources.clone())
            .unwrap_or_default();
        let columns = loaded.sql.map(|c| c.columns);
        let tmp;
        let dir = match self.state_dir {
            Some(d) => d,
            None => {
                tmp = tempfile::tempdir().context("creating a temporary state directory")?;
                tmp.path().to_path_buf()
            }
        };
        let store = StateStore::open(&dir)
            .with_context(|| format!("opening state in {}", dir.display()))?;
        let mut inputs = Vec::new();
        for given in &self.input {
            let path = bound_file(given, &sources)?;
            let path = &path;
            let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
            inputs.push(simulate::Input::new(
                path.display().to_string(),
                BufReader::new(file),
            ));
        }
        let mut panes = writer(
            &self.output,
            Box::new(BufWriter::new(std::io::stdout().lock())),
        )?;
        let mut dead = writer(&self.dead_letter, Box::new(std::io::stderr()))?;
        let s = simulate::run_query(
            &spec,
            &store,
            inputs,
            &mut panes,
            &mut dead,
            columns.as_deref(),
        )?;
        let written = if spec.rows.is_some() { "rows" } else { "panes" };
        eprintln!(
            "simulate: {} lines, {} events, {} filtered, {} {written}, {} late, {} other dead letters",
            s.lines, s.events, s.filtered, s.panes, s.late, s.malformed
        );
        Ok(0)
    }
}
