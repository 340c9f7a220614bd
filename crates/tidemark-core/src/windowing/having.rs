//! [`Having`]: a condition on a pane's aggregate values (SQL's `HAVING`). A pane whose values
//! do not satisfy it is emitted as a RETRACT: the window has no row, and any row an earlier pane
//! of the window wrote is voided. The pane keeps its index, so pane indexes stay gapless and the
//! audit and the sinks read it as any other retraction.

use super::aggregate::{AggSpec, Output};
use crate::expr::{parse, Datum, Expr, Paths, Row};

/// A compiled condition over aggregation names.
#[derive(Debug, Clone)]
pub struct Having {
    text: String,
    expr: Expr,
    /// For each field slot of the expression, the aggregation it reads.
    slots: Vec<usize>,
}

impl PartialEq for Having {
    fn eq(&self, other: &Having) -> bool {
        self.text == other.text
    }
}

/// A pane's values seen as a row whose fields are the aggregations the condition reads.
struct Values<'a> {
    values: &'a [Output],
    slots: &'a [usize],
}

impl Row for Values<'_> {
    fn field(&self, slot: usize) -> Datum<'_> {
        match self.slots.get(slot).and_then(|&i| self.values.get(i)) {
            Some(Output::Value(v)) => v.clone(),
            // A top-k list is not a value a condition can compare.
            Some(Output::Top(_)) | None => Datum::Null,
        }
    }
}

impl Having {
    /// Compiles `text`, an expression whose names are aggregation names of `aggregations`.
    pub fn compile(text: &str, aggregations: &[AggSpec]) -> Result<Having, String> {
        let mut paths = Paths::default();
        let expr = parse(text, &mut paths).map_err(|e| e.to_string())?;
        let mut slots = Vec::new();
        for path in paths.all() {
            let name = path.join(".");
            match aggregations.iter().position(|a| a.name == name) {
                Some(i) => slots.push(i),
                None => {
                    let names: Vec<&str> = aggregations.iter().map(|a| a.name.as_str()).collect();
                    return Err(format!(
                        "{name} is not an aggregation: a condition on panes reads the aggregations ({})",
                        names.join(", ")
                    ));
                }
            }
        }
        Ok(Having {
            text: text.to_string(),
            expr,
            slots,
        })
    }

    /// The condition as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether a pane with `values` (one per aggregation) is kept: the condition is true. NULL,
    /// false, or an error (a comparison of a string with a number) leave the pane out, as SQL's
    /// `HAVING` does.
    pub fn keeps(&self, values: &[Output]) -> bool {
        self.expr
            .eval_filter(&Values {
                values,
                slots: &self.slots,
            })
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aggs() -> Vec<AggSpec> {
        vec![
            AggSpec::new("n", "count", None),
            AggSpec::new("total", "sum", Some(0)),
        ]
    }

    #[test]
    fn a_condition_reads_aggregations_by_name_and_null_fails_it() {
        let h = Having::compile("n >= 3 AND total > 10", &aggs()).unwrap();
        let v = |n: i64, t: Datum<'static>| vec![Output::Value(Datum::Int(n)), Output::Value(t)];
        assert!(h.keeps(&v(3, Datum::Float(10.5))));
        assert!(!h.keeps(&v(2, Datum::Float(10.5))));
        assert!(!h.keeps(&v(3, Datum::Null)));
        assert!(Having::compile("n > 1 OR missing < 2", &aggs())
            .unwrap_err()
            .contains("missing is not an aggregation"));
    }
}
