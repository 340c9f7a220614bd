//! `tidemark tail`: an output topic's committed panes as a live table.

use super::parse_framing;
use clap::Args;

/// Follow an output topic and print its committed panes as an aligned table (key, window in
/// local time, timing, pane, count, aggregates), each once; Ctrl-C stops it.
#[derive(Debug, Args)]
pub struct Tail {
    #[command(flatten)]
    connection: super::connection::Connection,
    /// The output topic.
    #[arg(long)]
    topic: String,
    /// Values are Avro `WindowResult`s (`plain` or `confluent` framing).
    #[arg(long)]
    avro: Option<String>,
    /// Print what is committed now and stop instead of following.
    #[arg(long)]
    once: bool,
}

impl Tail {
    /// Follows the topic (until stopped, or once).
    pub fn execute(self) -> anyhow::Result<i32> {
        let decoder = crate::format::Decoder::new(parse_framing(self.avro.as_deref())?);
        let mut header_for: Option<Vec<String>> = None;
        let local = chrono::Local;
        let settings = self.connection.settings()?;
        crate::tail::follow(
            &settings.brokers,
            &self.topic,
            self.once,
            std::time::Duration::from_millis(500),
            |r| {
                let Some(row) = r.value.as_deref().and_then(|v| decoder.pane(v).ok()) else {
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
}
