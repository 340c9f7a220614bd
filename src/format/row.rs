//! Rows: a pane as the row of a SQL query (the query's columns, in its `SELECT` order, with the
//! window bounds written as Flink writes a `TIMESTAMP(3)`, `2026-12-07 14:01:00.000`, UTC), and
//! the row a record becomes in a pipeline of `[[columns]]` ([`RowSpec`]).

use super::pane::{write_output, KeyShape};
use crate::pipeline::{Decoded, Reason, Rejection};
use crate::windowing::aggregate::AggSpec;
use crate::windowing::engine::Pane;
use serde_json::Value;
use tidemark_sql::OutColumn;

/// Appends epoch milliseconds as `YYYY-MM-DD HH:MM:SS.sss` in UTC. The digits are written one
/// by one: a format string is parsed on every call, and a query writes two or three of these
/// per row (that parsing was a twentieth of `simulate --sql`'s time).
fn push_timestamp(out: &mut String, ms: i64) {
    use chrono::{Datelike, Timelike};
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) if (0..=9999).contains(&t.year()) => {
            let digits = |out: &mut String, n: u32, width: u32| {
                for i in (0..width).rev() {
                    out.push(char::from(b'0' + (n / 10u32.pow(i) % 10) as u8));
                }
            };
            digits(out, t.year() as u32, 4);
            out.push('-');
            digits(out, t.month(), 2);
            out.push('-');
            digits(out, t.day(), 2);
            out.push(' ');
            digits(out, t.hour(), 2);
            out.push(':');
            digits(out, t.minute(), 2);
            out.push(':');
            digits(out, t.second(), 2);
            out.push('.');
            digits(out, t.timestamp_subsec_millis(), 3);
        }
        Some(t) => out.push_str(&t.format("%Y-%m-%d %H:%M:%S%.3f").to_string()),
        None => out.push_str(&ms.to_string()),
    }
}

/// The row of `pane` (whose values are those of `aggregations`) for `columns`, a key of
/// `shape`; one line of JSON. It is written from the pane itself, not from the pane's JSON.
pub fn sql_row(
    pane: &Pane,
    aggregations: &[AggSpec],
    columns: &[OutColumn],
    shape: KeyShape,
) -> String {
    let mut out = String::with_capacity(128);
    out.push('{');
    // The parts of a key of several parts, read once from the JSON array they travel as.
    let parts: Option<Vec<Value>> = match shape {
        KeyShape::Many => serde_json::from_str(&pane.key).ok(),
        _ => None,
    };
    let value_of = |name: &str| {
        aggregations
            .iter()
            .position(|a| a.name == name)
            .and_then(|i| pane.values.get(i))
    };
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let name = match c {
            OutColumn::WindowStart(n)
            | OutColumn::WindowEnd(n)
            | OutColumn::WindowTime(n)
            | OutColumn::Key { name: n, .. }
            | OutColumn::Aggregate(n)
            | OutColumn::IntegerMean(n) => n,
        };
        out.push_str(&Value::from(name.as_str()).to_string());
        out.push(':');
        match c {
            OutColumn::WindowStart(_) => push_json(&mut out, pane.window.start),
            OutColumn::WindowEnd(_) => push_json(&mut out, pane.window.end),
            OutColumn::WindowTime(_) => push_json(&mut out, pane.window.end - 1),
            OutColumn::Key { part, number, .. } => {
                let v = match (shape, &parts) {
                    (KeyShape::None, _) => Value::Null,
                    (KeyShape::One, _) => Value::from(pane.key.as_str()),
                    (KeyShape::Many, Some(p)) => p.get(*part).cloned().unwrap_or(Value::Null),
                    (KeyShape::Many, None) => Value::Null,
                };
                // A one-part key travels as text; a numeric one is written back as its number.
                let v = match (&v, number) {
                    (Value::String(t), true) => {
                        serde_json::from_str::<serde_json::Number>(t).map_or(v, Value::Number)
                    }
                    _ => v,
                };
                out.push_str(&v.to_string());
            }
            OutColumn::Aggregate(n) => match value_of(n) {
                Some(v) => write_output(&mut out, v),
                None => out.push_str("null"),
            },
            OutColumn::IntegerMean(n) => match value_of(n).and_then(|v| v.as_f64()) {
                Some(m) => out.push_str(&(m.trunc() as i64).to_string()),
                None => out.push_str("null"),
            },
        }
    }
    out.push('}');
    out
}

/// The row each record becomes in a pipeline of `[[columns]]`: the columns, in order. The
/// record's event carries one value per column, in the same order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSpec {
    /// The columns.
    pub columns: Vec<RowColumn>,
}

/// One column of a [`RowSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowColumn {
    /// Its name in the row.
    pub name: String,
    /// Whether its value is epoch milliseconds written as a `TIMESTAMP(3)`.
    pub timestamp: bool,
    /// The decimals a double is rounded to when written (a `DECIMAL`'s scale).
    pub scale: Option<u32>,
}

impl RowSpec {
    /// The row of `values` (one per column, in order): one line of JSON, the columns in order.
    /// Integers stay integers, doubles that are not finite are NULL, and a timestamp column
    /// writes a number as `YYYY-MM-DD HH:MM:SS.sss` (a string it is given, as it is).
    pub fn row(&self, values: &[crate::windowing::aggregate::Value]) -> String {
        use tidemark_core::expr::Datum;
        let mut out = String::with_capacity(16 + 24 * self.columns.len());
        out.push('{');
        for (i, c) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&Value::from(c.name.as_str()).to_string());
            out.push(':');
            match values.get(i).unwrap_or(&Datum::Null) {
                Datum::Null => out.push_str("null"),
                Datum::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                Datum::Int(n) if c.timestamp => push_json(&mut out, *n),
                Datum::Float(f) if c.timestamp && f.is_finite() => {
                    push_json(&mut out, f.floor() as i64)
                }
                Datum::Int(n) => out.push_str(&n.to_string()),
                Datum::Float(f) => {
                    let f = match c.scale {
                        // Half away from zero, as a DECIMAL rounds; the double nearest the
                        // decimal is written in its shortest form.
                        Some(s) => {
                            let p = 10f64.powi(s as i32);
                            (f * p).round() / p
                        }
                        None => *f,
                    };
                    out.push_str(&Value::from(f).to_string())
                }
                Datum::Str(t) => out.push_str(&Value::from(t.as_ref()).to_string()),
            }
        }
        out.push('}');
        out
    }
}

/// What one record of a pipeline of rows did: the record step of such a pipeline, the same in
/// `simulate` and `run`.
#[derive(Debug, Clone, PartialEq)]
pub enum RowOutcome {
    /// The pipeline's filter rejected it (counted, not an error).
    Filtered,
    /// Its row, one line of JSON.
    Row(String),
    /// Why it has no row: it did not decode, an expression failed, or its row is larger than
    /// an output record.
    Rejected(Rejection),
}

impl RowSpec {
    /// The record step of a pipeline of rows: the row of a `decoded` record, or why it has
    /// none. A row longer than `record_bytes` is rejected `too_large`.
    pub fn record(&self, decoded: Decoded, record_bytes: usize) -> RowOutcome {
        let rejected = |reason: Reason, detail: String, event_time: Option<i64>| {
            RowOutcome::Rejected(Rejection {
                reason,
                detail,
                watermark: None,
                event_time,
                late_by_ms: None,
            })
        };
        match decoded {
            Ok(None) => RowOutcome::Filtered,
            Err((reason, detail)) => rejected(reason, detail, None),
            Ok(Some(ev)) => {
                let row = self.row(&ev.values);
                if row.len() > record_bytes {
                    let detail = format!(
                        "the row takes {} bytes, more than the {record_bytes} of an output record",
                        row.len()
                    );
                    return rejected(Reason::TooLarge, detail, Some(ev.ts));
                }
                RowOutcome::Row(row)
            }
        }
    }
}

/// The dedup id of the row that input record `topic`/`partition`/`offset` of pipeline `name`
/// becomes: the same id whenever the record is read again, so an idempotent sink keeps one.
pub fn row_dedup_id(name: &str, topic: &str, partition: i32, offset: i64) -> String {
    format!("{name}/{topic}/{partition}/{offset}")
}

/// The headers of a row record: its dedup id and the replay epoch that wrote it.
pub fn row_headers(dedup_id: &str, epoch: u64) -> rdkafka::message::OwnedHeaders {
    use rdkafka::message::Header;
    rdkafka::message::OwnedHeaders::new_with_capacity(2)
        .insert(Header {
            key: super::pane::DEDUP_ID_HEADER,
            value: Some(dedup_id),
        })
        .insert(Header {
            key: super::pane::EPOCH_HEADER,
            value: Some(&epoch.to_string()),
        })
}

/// Appends epoch milliseconds `ms` as a JSON string holding the timestamp.
fn push_json(out: &mut String, ms: i64) {
    out.push('"');
    push_timestamp(out, ms);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The digits written one by one say what chrono's format says, years 0 to 9999 and
        /// beyond.
        #[test]
        fn a_timestamp_is_written_as_chrono_formats_it(ms in -70_000_000_000_000i64..300_000_000_000_000) {
            let want = chrono::DateTime::from_timestamp_millis(ms)
                .unwrap()
                .format("%Y-%m-%d %H:%M:%S%.3f")
                .to_string();
            let mut got = String::new();
            push_timestamp(&mut got, ms);
            proptest::prop_assert_eq!(got, want);
        }
    }

    use crate::windowing::aggregate::Output;
    use crate::windowing::assigner::Window;
    use crate::windowing::engine::dedup_id;
    use crate::windowing::trigger::Timing;
    use tidemark_core::expr::Datum;

    fn pane(key: &str, values: Vec<Output>) -> Pane {
        let window = Window::new(60_000, 120_000);
        Pane {
            key: key.into(),
            window,
            timing: Timing::OnTime,
            pane_index: 0,
            dedup_id: dedup_id("p", key, window),
            count: 2,
            values: values.into_iter().collect(),
        }
    }

    #[test]
    fn a_pane_becomes_the_row_of_its_query() {
        let aggs = [
            AggSpec::new("n", "count", None),
            AggSpec::new("avg", "mean", Some(0)),
        ];
        let values = vec![
            Output::Value(Datum::Int(2)),
            Output::Value(Datum::Float(-7.5)),
        ];
        let columns = [
            OutColumn::WindowStart("ws".into()),
            OutColumn::Key {
                name: "bucket".into(),
                part: 1,
                number: true,
            },
            OutColumn::Aggregate("n".into()),
            OutColumn::IntegerMean("avg".into()),
            OutColumn::WindowTime("wt".into()),
        ];
        assert_eq!(
            sql_row(
                &pane(r#"["u1",3]"#, values.clone()),
                &aggs,
                &columns,
                KeyShape::Many
            ),
            r#"{"ws":"1970-01-01 00:01:00.000","bucket":3,"n":2,"avg":-7,"wt":"1970-01-01 00:01:59.999"}"#
        );
        // A key of one part travels as text; a numeric one is written as its number.
        let columns = [
            OutColumn::Key {
                name: "auction".into(),
                part: 0,
                number: true,
            },
            OutColumn::Key {
                name: "same".into(),
                part: 0,
                number: false,
            },
        ];
        assert_eq!(
            sql_row(&pane("1007", values), &aggs, &columns, KeyShape::One),
            r#"{"auction":1007,"same":"1007"}"#
        );
    }
}
