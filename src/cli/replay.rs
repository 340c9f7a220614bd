//! `tidemark replay`: moves a stopped pipeline back to earlier input offsets.

use crate::replay::Target;
use clap::Args;

/// Move a stopped pipeline back to earlier input offsets: its state restarts empty there, and its
/// output is recomputed in a new epoch that supersedes the old one at idempotent sinks.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("to").required(true).args(["to_earliest", "to_datetime", "to_offsets", "by_duration"])))]
pub struct Replay {
    /// The pipeline, with its Kafka settings.
    #[command(flatten)]
    pipeline: super::PipelineArgs,
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
    /// While the consumer group still has members, wait up to this long (e.g. 60s) for it to
    /// empty instead of refusing at once.
    #[arg(long, value_name = "D")]
    wait: Option<String>,
}

impl Replay {
    /// The target the options name, or why it cannot be used.
    fn target(&self) -> Result<Target, String> {
        if self.to_earliest {
            Ok(Target::Earliest)
        } else if let Some(t) = &self.to_datetime {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|d| Target::Time(d.timestamp_millis()))
                .map_err(|e| {
                    format!("--to-datetime {t:?}: {e} (use RFC 3339, e.g. 2026-12-01T09:30:00Z)")
                })
        } else if let Some(o) = &self.to_offsets {
            Target::parse_offsets(o).map_err(|e| format!("--to-offsets: {e}"))
        } else if let Some(d) = &self.by_duration {
            crate::windowing::time::parse_duration(d)
                .map(|ms| Target::Time(crate::clock::wall_ms() - ms))
                .map_err(|e| format!("--by-duration {d:?}: {e}"))
        } else {
            Err("one of --to-earliest, --to-datetime, --to-offsets, --by-duration".to_string())
        }
    }

    /// Prints the plan and commits it (exit status 0), or says why not: 2 for a refusal (members
    /// running, a bad target), 1 for a failure.
    pub fn execute(self) -> anyhow::Result<i32> {
        let spec = self.pipeline.load_logged()?.spec;
        let target = match self.target() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("tidemark replay: {e}");
                return Ok(2);
            }
        };
        let wait = match self
            .wait
            .as_deref()
            .map(crate::windowing::time::parse_duration)
        {
            None => None,
            Some(Ok(ms)) => Some(std::time::Duration::from_millis(ms.max(0) as u64)),
            Some(Err(e)) => {
                eprintln!("tidemark replay: --wait: {e}");
                return Ok(2);
            }
        };
        let result = crate::replay::plan(&spec, &target, wait).and_then(|plan| {
            print!("{}", plan.table());
            if self.dry_run {
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
}
