//! [`Problems`]: what is wrong with a SQL file, each where it is. A problem about a part of the
//! query (a function, a column, a clause) carries that part's line and column; any other carries
//! its statement's.

use sqlparser::ast::Spanned;
use sqlparser::tokenizer::Location;

/// The problems of one statement, in the order found.
#[derive(Debug, Default)]
pub struct Problems {
    list: Vec<(Option<Location>, String)>,
}

impl Problems {
    /// Records a problem of the statement as a whole.
    pub fn push(&mut self, problem: impl Into<String>) {
        self.list.push((None, problem.into()));
    }

    /// Records a problem with `node`, at its first token.
    pub fn at(&mut self, node: &impl Spanned, problem: impl Into<String>) {
        let start = node.span().start;
        // A node built from tokens without locations has an empty span.
        let at = (start.line > 0).then_some(start);
        self.list.push((at, problem.into()));
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Every problem with its location, `statement` where it has none of its own.
    pub fn located(self, statement: Location) -> impl Iterator<Item = (Location, String)> {
        self.list
            .into_iter()
            .map(move |(at, p)| (at.unwrap_or(statement), p))
    }
}
