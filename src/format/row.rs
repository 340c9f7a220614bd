//! A pane as the row of a SQL query: the query's columns, in its `SELECT` order, with the window
//! bounds written as Flink writes a `TIMESTAMP(3)` (`2026-12-07 14:01:00.000`, UTC).

use super::pane::KeyShape;
use serde_json::Value;
use tidemark_sql::OutColumn;

/// Epoch milliseconds as `YYYY-MM-DD HH:MM:SS.sss` in UTC.
pub fn timestamp(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// The row of pane `line` (its JSON) for `columns`, a key of `shape`; one line of JSON.
pub fn sql_row(line: &str, columns: &[OutColumn], shape: KeyShape) -> String {
    let pane: Value = serde_json::from_str(line).unwrap_or(Value::Null);
    let ms = |field: &str| pane[field].as_i64().unwrap_or_default();
    let mut out = String::from("{");
    for (i, c) in columns.iter().enumerate() {
        let (name, value) = match c {
            OutColumn::WindowStart(n) => (n, Value::from(timestamp(ms("window_start")))),
            OutColumn::WindowEnd(n) => (n, Value::from(timestamp(ms("window_end")))),
            OutColumn::WindowTime(n) => (n, Value::from(timestamp(ms("window_end") - 1))),
            OutColumn::Key { name, part, number } => {
                let v = match shape {
                    KeyShape::None => Value::Null,
                    KeyShape::One => pane["key"].clone(),
                    KeyShape::Many => pane["key"][*part].clone(),
                };
                // A one-part key travels as text; a numeric one is written back as its number.
                let v = match (&v, number) {
                    (Value::String(t), true) => {
                        serde_json::from_str::<serde_json::Number>(t).map_or(v, Value::Number)
                    }
                    _ => v,
                };
                (name, v)
            }
            OutColumn::Aggregate(n) => (n, pane[n.as_str()].clone()),
            OutColumn::IntegerMean(n) => {
                let v = &pane[n.as_str()];
                let truncated = v.as_f64().map(|m| m.trunc() as i64);
                (n, truncated.map_or_else(|| v.clone(), Value::from))
            }
        };
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::from(name.as_str()).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pane_becomes_the_row_of_its_query() {
        let pane = r#"{"key":["u1",3],"window_start":60000,"window_end":120000,"count":2,"n":2,"timing":"ON_TIME"}"#;
        let columns = [
            OutColumn::WindowStart("ws".into()),
            OutColumn::Key {
                name: "bucket".into(),
                part: 1,
                number: true,
            },
            OutColumn::Aggregate("n".into()),
            OutColumn::WindowTime("wt".into()),
        ];
        assert_eq!(
            sql_row(pane, &columns, KeyShape::Many),
            r#"{"ws":"1970-01-01 00:01:00.000","bucket":3,"n":2,"wt":"1970-01-01 00:01:59.999"}"#
        );
    }
}
