//! Expressions over one input record, written in SQL.
//!
//! A pipeline's filter, key parts, timestamp and aggregation inputs are SQL expressions:
//! `event_type = 'click' AND price > 0`, `lower(geo.country)`, `price * quantity`,
//! `coalesce(amount, 0)`. They are parsed once with the `sqlparser` crate (the parser DataFusion
//! and Arroyo use) and compiled into an [`Expr`] tree whose field references are *slots*: indexes
//! into the list of distinct field paths the pipeline reads ([`Paths`]). A decoder picks those
//! paths out of each record once and hands them to [`Expr::eval`] through the [`Row`] trait, so
//! evaluation never re-parses text, never looks a field up by name, and allocates only when an
//! expression builds a new string (`lower`, `concat`, a cast to text).
//!
//! Values are [`Datum`]s: NULL, booleans, 64-bit integers, doubles and strings. NULL follows
//! SQL's three-valued logic: comparisons and arithmetic with a NULL are NULL, `NULL AND FALSE` is
//! false, `NULL OR TRUE` is true, and a filter that is NULL rejects its record. A value of the
//! wrong type for an operation (a string where a number is needed), an integer overflow or a
//! division by zero is an [`EvalError`]; the record step turns it into a dead letter with reason
//! `expression`.
//!
//! The module is pure: it imports nothing from the rest of tidemark, and the same expression
//! gives the same value for the same record in `simulate` and `run`.

mod check;
mod eval;
mod parse;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;

pub use check::{infer, Ty};
pub use parse::parse;

/// A value in an expression: a record's field, a literal or an intermediate result.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum<'a> {
    /// SQL NULL: an absent field, a JSON `null`, or the result of an operation on NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// A 64-bit signed integer (JSON integers, Avro `int` and `long`).
    Int(i64),
    /// A double (JSON numbers with a fraction or exponent, Avro `float` and `double`).
    Float(f64),
    /// A string, borrowed from the record or the expression where it can be.
    Str(Cow<'a, str>),
}

impl Datum<'_> {
    /// The SQL name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Datum::Null => "NULL",
            Datum::Bool(_) => "a boolean",
            Datum::Int(_) => "an integer",
            Datum::Float(_) => "a double",
            Datum::Str(_) => "a string",
        }
    }

    /// Whether the value is NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Datum::Null)
    }

    /// The value as a double, for an integer or a double.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Datum::Int(i) => Some(*i as f64),
            Datum::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// The value with everything it borrows copied.
    pub fn into_owned(self) -> Datum<'static> {
        match self {
            Datum::Null => Datum::Null,
            Datum::Bool(b) => Datum::Bool(b),
            Datum::Int(i) => Datum::Int(i),
            Datum::Float(f) => Datum::Float(f),
            Datum::Str(s) => Datum::Str(Cow::Owned(s.into_owned())),
        }
    }
}

impl fmt::Display for Datum<'_> {
    /// Text as SQL's cast to a string writes it: `NULL`, `true`, `42`, `1.5`, the string itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Datum::Null => f.write_str("NULL"),
            Datum::Bool(b) => write!(f, "{b}"),
            Datum::Int(i) => write!(f, "{i}"),
            Datum::Float(x) => match serde_json::Number::from_f64(*x) {
                Some(n) => write!(f, "{n}"),
                None => write!(f, "{x}"),
            },
            Datum::Str(s) => f.write_str(s),
        }
    }
}

/// Where an expression's values come from: the record's fields, by slot.
pub trait Row {
    /// The value at field slot `slot` (see [`Paths`]); NULL when the record lacks it.
    fn field(&self, slot: usize) -> Datum<'_>;
}

/// The distinct field paths a pipeline's expressions read; a path's index is its slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paths(Vec<Vec<String>>);

impl Paths {
    /// The slot of `path`, added if new.
    pub fn slot(&mut self, path: Vec<String>) -> usize {
        match self.0.iter().position(|p| *p == path) {
            Some(i) => i,
            None => {
                self.0.push(path);
                self.0.len() - 1
            }
        }
    }

    /// Every path, in slot order.
    pub fn all(&self) -> &[Vec<String>] {
        &self.0
    }

    /// The number of paths.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no expression reads a field.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>` or `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division when both sides are integers, as in PostgreSQL)
    Div,
    /// `%`
    Rem,
}

/// The type a `CAST` converts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CastType {
    /// `BIGINT`, `INT`, `INTEGER`, `SMALLINT`, `TINYINT`.
    Int,
    /// `DOUBLE`, `FLOAT`, `REAL`, `DECIMAL`, `NUMERIC`.
    Float,
    /// `VARCHAR`, `TEXT`, `STRING`, `CHAR`.
    Str,
    /// `BOOLEAN`, `BOOL`.
    Bool,
}

/// A built-in function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// `coalesce(a, b, ...)`: the first argument that is not NULL.
    Coalesce,
    /// `lower(s)`.
    Lower,
    /// `upper(s)`.
    Upper,
    /// `concat(a, b, ...)`: the arguments as text, NULLs skipped (as in PostgreSQL).
    Concat,
    /// `substr(s, start [, length])`, 1-based; also `SUBSTRING(s FROM start FOR length)`.
    Substr,
    /// `length(s)` in characters.
    Length,
    /// `abs(x)`.
    Abs,
    /// `round(x [, digits])`, half away from zero.
    Round,
    /// `floor(x)`.
    Floor,
    /// `ceil(x)` or `ceiling(x)`.
    Ceil,
}

impl Func {
    /// The function's SQL name.
    pub fn name(self) -> &'static str {
        match self {
            Func::Coalesce => "coalesce",
            Func::Lower => "lower",
            Func::Upper => "upper",
            Func::Concat => "concat",
            Func::Substr => "substr",
            Func::Length => "length",
            Func::Abs => "abs",
            Func::Round => "round",
            Func::Floor => "floor",
            Func::Ceil => "ceil",
        }
    }
}

/// A compiled expression. Field references hold their slot in the pipeline's [`Paths`].
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A literal.
    Lit(Datum<'static>),
    /// A field of the record.
    Field {
        /// Its slot in [`Paths`].
        slot: usize,
        /// Its dotted path, for messages.
        name: String,
    },
    /// `NOT e`.
    Not(Box<Expr>),
    /// `-e`.
    Neg(Box<Expr>),
    /// `a AND b`.
    And(Box<Expr>, Box<Expr>),
    /// `a OR b`.
    Or(Box<Expr>, Box<Expr>),
    /// A comparison.
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    /// Arithmetic.
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    /// `a || b`: string concatenation (NULL if either side is).
    StrConcat(Box<Expr>, Box<Expr>),
    /// `e IS [NOT] NULL`.
    IsNull {
        /// The operand.
        expr: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `e [NOT] IN (a, b, ...)`.
    In {
        /// The operand.
        expr: Box<Expr>,
        /// The list.
        list: Vec<Expr>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `e [NOT] BETWEEN low AND high`.
    Between {
        /// The operand.
        expr: Box<Expr>,
        /// Lower bound (inclusive).
        low: Box<Expr>,
        /// Upper bound (inclusive).
        high: Box<Expr>,
        /// `NOT BETWEEN`.
        negated: bool,
    },
    /// `e [NOT] LIKE pattern` or `ILIKE` (`%` any run, `_` one character).
    Like {
        /// The operand.
        expr: Box<Expr>,
        /// The pattern.
        pattern: Box<Expr>,
        /// `NOT LIKE`.
        negated: bool,
        /// `ILIKE`.
        case_insensitive: bool,
    },
    /// `CASE [operand] WHEN ... THEN ... [ELSE ...] END`.
    Case {
        /// The simple form's operand.
        operand: Option<Box<Expr>>,
        /// Conditions (or values, in the simple form) and results.
        whens: Vec<(Expr, Expr)>,
        /// The `ELSE` result (NULL when absent).
        otherwise: Option<Box<Expr>>,
    },
    /// `CAST(e AS type)` or `e::type`.
    Cast(Box<Expr>, CastType),
    /// A function call.
    Call(Func, Vec<Expr>),
}

/// Why an expression's text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// The text is not a SQL expression.
    #[error("{text:?} is not a SQL expression: {message}")]
    Syntax {
        /// The expression's text.
        text: String,
        /// The parser's message.
        message: String,
    },
    /// The expression uses SQL that tidemark does not evaluate.
    #[error("{text:?}: {what} is not supported")]
    Unsupported {
        /// The expression's text.
        text: String,
        /// What is not supported.
        what: String,
    },
}

/// Why an expression could not be evaluated on a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);
