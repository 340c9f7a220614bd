//! The `EMIT` clause, tidemark's, which ends a query and says when its windows fire: early by
//! time or count, late by row or count or not at all, the allowed lateness, and whether panes
//! accumulate. Items are separated by commas, in any order:
//!
//! ```sql
//! EMIT EARLY EVERY INTERVAL '10' SECOND,   -- trigger.early_every
//!      EARLY EVERY 100 ROWS,                -- trigger.early_count
//!      LATE EVERY ROW,                      -- trigger.late = "every_element" (the default)
//!      LATE EVERY 10 ROWS,                  -- trigger.late_count
//!      NO LATE,                             -- trigger.late = "none"
//!      ALLOWED LATENESS INTERVAL '5' MINUTE, -- allowed_lateness
//!      ACCUMULATING | DISCARDING            -- trigger.accumulation
//! ```

use crate::problems::Problems;
use crate::tokens::{join, split_top_level, word};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

/// The pipeline keys the clause `tokens` sets, with their values; `problems` gets the items it
/// cannot read.
pub fn clause(tokens: &[Token], problems: &mut Problems) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if tokens.is_empty() {
        problems.push("EMIT needs what to emit: EARLY EVERY ..., LATE ..., ALLOWED LATENESS ..., ACCUMULATING or DISCARDING");
    }
    for item in split_top_level(tokens) {
        let words: Vec<String> = item
            .iter()
            .map(|t| word(t).map_or(String::new(), str::to_ascii_uppercase))
            .collect();
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let rows = |n: &Token| match n {
            Token::Number(n, _) => n.parse::<u32>().ok().filter(|n| *n > 0),
            _ => None,
        };
        let set = match (w.as_slice(), item) {
            (["EARLY", "EVERY", "INTERVAL", ..], [_, _, rest @ ..]) => {
                interval(rest).map(|ms| ("trigger.early_every", format!("{ms}ms")))
            }
            (["EARLY", "EVERY", "", "ROWS" | "ROW"], [_, _, n, _]) => {
                rows(n).map(|n| ("trigger.early_count", n.to_string()))
            }
            (["LATE", "EVERY", "ROW"], _) => Some(("trigger.late", "every_element".into())),
            (["LATE", "EVERY", "", "ROWS" | "ROW"], [_, _, n, _]) => {
                rows(n).map(|n| ("trigger.late_count", n.to_string()))
            }
            (["NO", "LATE"], _) => Some(("trigger.late", "none".into())),
            (["ALLOWED", "LATENESS", "INTERVAL", ..], [_, _, rest @ ..]) => {
                interval(rest).map(|ms| ("allowed_lateness", format!("{ms}ms")))
            }
            (["ACCUMULATING"], _) => Some(("trigger.accumulation", "accumulating".into())),
            (["DISCARDING"], _) => Some(("trigger.accumulation", "discarding".into())),
            _ => None,
        };
        match set {
            Some((k, v)) => out.push((k.to_string(), v)),
            None => problems.push(format!(
                "EMIT {}: an item is EARLY EVERY INTERVAL '10' SECOND, EARLY EVERY n ROWS, LATE EVERY ROW, LATE EVERY n ROWS, NO LATE, ALLOWED LATENESS INTERVAL '5' MINUTE, ACCUMULATING or DISCARDING",
                join(item)
            )),
        }
    }
    out
}

/// An `INTERVAL ...` written as tokens, in milliseconds.
fn interval(tokens: &[Token]) -> Option<i64> {
    let e = Parser::new(&GenericDialect {})
        .with_tokens(tokens.to_vec())
        .parse_expr()
        .ok()?;
    crate::query::duration(&e).ok().filter(|ms| *ms > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::statements;
    use sqlparser::tokenizer::Location;

    #[test]
    fn every_item_sets_its_key() {
        let s = statements(
            "EARLY EVERY INTERVAL '10' SECOND, EARLY EVERY 5 ROWS, LATE EVERY 3 ROWS, \
             ALLOWED LATENESS INTERVAL '2' MINUTE, DISCARDING",
        )
        .unwrap();
        let mut problems = Problems::default();
        let got = clause(&s[0].tokens, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let got: Vec<(&str, &str)> = got.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            [
                ("trigger.early_every", "10000ms"),
                ("trigger.early_count", "5"),
                ("trigger.late_count", "3"),
                ("allowed_lateness", "120000ms"),
                ("trigger.accumulation", "discarding"),
            ]
        );
        let s = statements("EARLY SOMETIMES, NO LATE").unwrap();
        let got = clause(&s[0].tokens, &mut problems);
        assert_eq!(got, [("trigger.late".to_string(), "none".to_string())]);
        let problems: Vec<String> = problems
            .located(Location::new(1, 1))
            .map(|(_, p)| p)
            .collect();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("EMIT EARLY SOMETIMES"),
            "{problems:?}"
        );
    }
}
