//! Validation of `[[columns]]`: a pipeline that writes one row per record instead of windowing
//! (SQL's `SELECT ... FROM t [WHERE ...]` without `GROUP BY`). Such a pipeline has no window,
//! aggregations, trigger, lateness or `having`, keeps no state, and writes JSON; its columns'
//! expressions become the input's values, one per column, in order.

use super::checker::Checker;
use super::engine::FieldRead;
use super::RawConfig;
use crate::format::row::{RowColumn, RowSpec};

/// `[[columns]]`: the row spec and the expressions `validate_input` compiles (one per column,
/// in order), or `(None, [])` for a windowing pipeline. Every rule a pipeline of rows breaks is
/// recorded.
pub(super) fn validate_rows(cfg: &RawConfig, c: &mut Checker) -> (Option<RowSpec>, Vec<FieldRead>) {
    if cfg.columns.is_empty() {
        return (None, Vec::new());
    }
    const WHY: &str = "a pipeline of [[columns]] writes one row per record";
    if cfg.window.is_some() {
        c.fail("window", format!("{WHY}: remove [window], or the columns"));
    }
    if !cfg.aggregations.is_empty() {
        c.fail(
            "aggregations",
            format!("{WHY}: remove [[aggregations]], or the columns"),
        );
    }
    if cfg.having.is_some() {
        c.fail("having", format!("{WHY}: it has no aggregations to test"));
    }
    if cfg.allowed_lateness.is_some() {
        c.fail(
            "allowed_lateness",
            format!("{WHY}: nothing waits for the watermark, so nothing is late"),
        );
    }
    let t = &cfg.trigger;
    if t.early_every.is_some()
        || t.early_count.is_some()
        || t.late.is_some()
        || t.late_count.is_some()
        || t.accumulation.is_some()
    {
        c.fail(
            "trigger",
            format!("{WHY} as it is read: there are no panes to trigger"),
        );
    }
    if cfg
        .output
        .as_ref()
        .and_then(|o| o.format.as_deref())
        .is_some_and(|f| f != "json")
    {
        c.fail(
            "output.format",
            format!("{WHY} as JSON for now: use \"json\""),
        );
    }
    if cfg.sink.as_ref().is_some_and(|s| !s.is_empty()) || cfg.postgres.is_some() {
        c.fail(
            "sink",
            format!("{WHY}; the sinks take panes for now: read the output topic instead"),
        );
    }
    let mut columns: Vec<RowColumn> = Vec::new();
    let mut fields = Vec::new();
    for (i, col) in cfg.columns.iter().enumerate() {
        let name = col.name.trim();
        if name.is_empty() {
            c.fail(&format!("columns[{i}].name"), "must not be empty");
        } else if columns.iter().any(|k| k.name == name) {
            c.fail(
                &format!("columns[{i}].name"),
                format!("two columns are named {name:?}"),
            );
        }
        let timestamp = match col.format.as_deref().map(str::trim) {
            None => false,
            Some("timestamp") => true,
            Some(other) => {
                c.fail(
                    &format!("columns[{i}].format"),
                    format!("unknown format {other:?}: use \"timestamp\" (epoch milliseconds written as a TIMESTAMP(3)), or leave it out"),
                );
                false
            }
        };
        if let Some(s) = col.scale.filter(|s| *s > 15) {
            c.fail(
                &format!("columns[{i}].scale"),
                format!("{s} decimals are more than a double holds: use 0 to 15"),
            );
        }
        columns.push(RowColumn {
            name: name.to_string(),
            timestamp,
            scale: col.scale,
        });
        fields.push(FieldRead {
            text: col.expr.trim().to_string(),
            numeric: false,
            longest: None,
        });
    }
    (Some(RowSpec { columns }), fields)
}
