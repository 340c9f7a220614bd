//! `tidemark audit`: exactly-once checked from a topic's raw log.

use super::parse_framing;
use crate::audit;
use clap::Args;

/// Read a topic's raw log, resolve its transactions, and check panes for duplicates and gaps (or,
/// on a dead-letter topic, that each source record is dead-lettered once).
#[derive(Debug, Args)]
pub struct Audit {
    #[command(flatten)]
    connection: super::connection::Connection,
    /// The topic to audit.
    #[arg(long)]
    topic: String,
    /// Print every committed record (JSON lines) to standard output.
    #[arg(long)]
    print: bool,
    /// With --print: values are Avro (`plain` or `confluent`), panes in
    /// schemas/window_result.avsc and dead letters in schemas/dead_letter.avsc; printed as JSON.
    #[arg(long)]
    avro: Option<String>,
}

impl Audit {
    /// Prints the report; exit status 0 when nothing is duplicated, 3 otherwise.
    pub fn execute(self) -> anyhow::Result<i32> {
        let decoder = crate::format::Decoder::new(parse_framing(self.avro.as_deref())?);
        let topic = &self.topic;
        let settings = self.connection.settings()?;
        let log = crate::kafka::raw_log::read_topic(&settings.brokers, topic)?;
        let report = audit::check_panes(&log.committed);
        if self.print {
            for r in &log.committed {
                let text = decoder
                    .text(r)
                    .map_err(|e| anyhow::anyhow!("offset {}: {e}", r.offset))?;
                println!("{text}");
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
            eprintln!("  duplicate: dedup_id {id} epoch {epoch} pane {idx} committed {n} times");
        }
        Ok(if report.duplicates.is_empty() { 0 } else { 3 })
    }
}
