//! `tidemark tail`: a readable live view of an output topic.
//!
//! It follows every partition of the topic through the raw-log reader ([`crate::kafka::raw_log`]), so it
//! shows only panes of committed transactions (resolved from COMMIT/ABORT markers, whatever the
//! broker serves to `read_committed` consumers), each once, and prints them as an aligned table:
//! key, window in local time, timing, pane index, count and the aggregates.

use crate::format::pane::PaneRecord;
use crate::kafka::raw_log::{Following, LogReader, RawLogError, RawRecord};
use crate::kafka::secure::Brokers;
use std::time::Duration;

/// A window as local times: the start in full, the end as a time when it is on the same day.
pub fn window_text(
    start: i64,
    end: i64,
    tz: &impl chrono::TimeZone<Offset: std::fmt::Display>,
) -> String {
    if (start, end) == (i64::MIN, i64::MAX) {
        return "global".into();
    }
    let at = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).map(|t| t.with_timezone(tz));
    match (at(start), at(end)) {
        (Some(s), Some(e)) if s.date_naive() == e.date_naive() => format!(
            "{} – {}",
            s.format("%Y-%m-%d %H:%M:%S%.3f"),
            e.format("%H:%M:%S%.3f")
        ),
        (Some(s), Some(e)) => format!(
            "{} – {}",
            s.format("%Y-%m-%d %H:%M:%S%.3f"),
            e.format("%Y-%m-%d %H:%M:%S%.3f")
        ),
        _ => format!("{start} – {end}"),
    }
}

/// An aggregate's cell: numbers rounded to three decimals, NULL as `-`, other values as JSON.
fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "-".to_string(),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
            Some(x) => format!("{x:.3}"),
            None => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// Column widths of the table.
const KEY: usize = 16;
const WINDOW: usize = 38;
const TIMING: usize = 8;
const PANE: usize = 4;
const EPOCH: usize = 5;
const VALUE: usize = 12;

/// The header line for panes with these aggregates.
pub fn header(aggregates: &[(String, serde_json::Value)]) -> String {
    let mut line = format!(
        "{:<KEY$} {:<WINDOW$} {:<TIMING$} {:>PANE$} {:>EPOCH$} {:>VALUE$}",
        "key", "window", "timing", "pane", "epoch", "count"
    );
    for (name, _) in aggregates {
        line.push_str(&format!(" {name:>VALUE$}"));
    }
    line
}

/// One aligned table line.
pub fn line(row: &PaneRecord, tz: &impl chrono::TimeZone<Offset: std::fmt::Display>) -> String {
    let mut line = format!(
        "{:<KEY$} {:<WINDOW$} {:<TIMING$} {:>PANE$} {:>EPOCH$} {:>VALUE$}",
        row.key,
        window_text(row.window_start, row.window_end, tz),
        row.timing.as_str(),
        row.pane_index,
        row.epoch,
        row.count
    );
    for (_, v) in &row.aggregates {
        line.push_str(&format!(" {:>VALUE$}", cell(v)));
    }
    line
}

/// Follows every partition of `topic` from its start, handing each committed record to `show`
/// once; polls every `every`, and stops once every partition is read to its end when `once` is
/// set. A partition added to the topic is followed from the next poll on.
pub fn follow(
    brokers: &Brokers,
    topic: &str,
    once: bool,
    every: Duration,
    mut show: impl FnMut(&RawRecord) -> Result<(), RawLogError>,
) -> Result<(), RawLogError> {
    let mut reader = LogReader::connect(brokers)?;
    let mut following = Following::new(topic);
    let mut fresh = Vec::new();
    loop {
        if !following.is_behind() {
            for p in reader.partitions(topic)? {
                if following.resume_at(p).is_none() {
                    following.follow(p, 0);
                }
            }
        }
        reader.poll(&mut following, 0, |r| fresh.push(r))?;
        for r in fresh.drain(..) {
            show(&r)?;
        }
        if following.is_behind() {
            continue;
        }
        if once {
            return Ok(());
        }
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_line_up_under_the_header() {
        let row = PaneRecord {
            key: "alice".into(),
            window_start: 1_767_225_600_000,
            window_end: 1_767_225_660_000,
            timing: crate::windowing::trigger::Timing::Late,
            pane_index: 2,
            dedup_id: "x".into(),
            epoch: 1,
            count: 4,
            aggregates: vec![
                ("clicks".into(), serde_json::Value::from(4)),
                ("avg".into(), serde_json::Value::from(2.0 / 3.0)),
            ],
        };
        let utc = chrono::Utc;
        let (h, l) = (header(&row.aggregates), line(&row, &utc));
        // Widths count characters: the en dash is one column.
        assert_eq!(h.len(), l.chars().count(), "{h}\n{l}");
        assert!(
            l.starts_with("alice            2026-01-01 00:00:00.000 – 00:01:00.000"),
            "{l}"
        );
        assert!(l.ends_with("           4        0.667"), "{l}");
        assert_eq!(
            window_text(0, 86_400_000, &utc),
            "1970-01-01 00:00:00.000 – 1970-01-02 00:00:00.000"
        );
        assert_eq!(window_text(i64::MIN, i64::MAX, &utc), "global");
    }
}
