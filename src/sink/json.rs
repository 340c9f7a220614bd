//! JSON encodings of panes and dead letters.
//!
//! A pane is one object with `key`, `window_start`, `window_end` (epoch ms), `timing`, `pane_index`,
//! `dedup_id`, `epoch` (the pipeline's replay epoch: 0, plus one per `tidemark replay`), `count` and
//! one field per aggregation, in that order. Whole-number results print as
//! integers; min, max and mean of an empty pane are `null`.

use crate::windowing::aggregate::AggSpec;
use crate::windowing::engine::Pane;
use serde_json::Value;
use std::fmt::Write;

/// Writes a float as JSON: integral values within ±2^53 as integers, non-finite values as null.
pub fn write_number(out: &mut String, v: f64) {
    if !v.is_finite() {
        out.push_str("null");
    } else if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{}", Value::from(v));
    }
}

/// Encodes a pane of replay epoch `epoch` as one line of JSON (without the newline).
pub fn encode_pane(pane: &Pane, epoch: u64, aggregations: &[AggSpec]) -> String {
    let mut out = String::with_capacity(160);
    out.push_str("{\"key\":");
    out.push_str(&Value::from(pane.key.as_str()).to_string());
    let _ = write!(
        out,
        ",\"window_start\":{},\"window_end\":{},\"timing\":\"{}\",\"pane_index\":{},\"dedup_id\":\"{}\",\"epoch\":{},\"count\":{}",
        pane.window.start,
        pane.window.end,
        pane.timing.as_str(),
        pane.pane_index,
        pane.dedup_id,
        epoch,
        pane.count
    );
    for (spec, value) in aggregations.iter().zip(&pane.values) {
        out.push(',');
        out.push_str(&Value::from(spec.name.as_str()).to_string());
        out.push(':');
        match value {
            Some(v) => write_number(&mut out, *v),
            None => out.push_str("null"),
        }
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windowing::aggregate::AggOp;
    use crate::windowing::assigner::Window;
    use crate::windowing::engine::dedup_id;
    use crate::windowing::trigger::Timing;

    #[test]
    fn pane_json_has_fixed_field_order_and_nulls() {
        let pane = Pane {
            key: "u\"1".into(),
            window: Window::new(0, 60_000),
            timing: Timing::OnTime,
            pane_index: 0,
            dedup_id: dedup_id("p", "u\"1", Window::new(0, 60_000)),
            count: 0,
            values: [Some(3.0), None, Some(2.5)].into_iter().collect(),
        };
        let aggs = vec![
            AggSpec {
                name: "s".into(),
                op: AggOp::Sum,
                field: Some(0),
            },
            AggSpec {
                name: "lo".into(),
                op: AggOp::Min,
                field: Some(0),
            },
            AggSpec {
                name: "avg".into(),
                op: AggOp::Mean,
                field: Some(0),
            },
        ];
        assert_eq!(
            encode_pane(&pane, 0, &aggs),
            format!(
                r#"{{"key":"u\"1","window_start":0,"window_end":60000,"timing":"ON_TIME","pane_index":0,"dedup_id":"{}","epoch":0,"count":0,"s":3,"lo":null,"avg":2.5}}"#,
                pane.dedup_id
            )
        );
    }
}
