//! `CREATE TABLE` as Flink writes it, read from tokens: physical columns (any type, nested
//! `ROW<...>` included), computed columns (`c AS expr`), metadata columns (`c TYPE METADATA FROM
//! 'timestamp'`), `WATERMARK FOR c AS expr`, `PRIMARY KEY (...) NOT ENFORCED`, and the
//! `WITH ('key' = 'value', ...)` options.

use crate::problems::Problems;
use crate::tokens::{closing, is_kw, join, split_top_level, word};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::Token;

/// A table as declared.
#[derive(Debug, Clone)]
pub struct Table {
    /// Its name.
    pub name: String,
    /// Its columns, in order.
    pub columns: Vec<Column>,
    /// The watermark: the time attribute's column and the expression text.
    pub watermark: Option<(String, Vec<Token>)>,
    /// The `WITH` options, in order.
    pub options: Vec<(String, String)>,
    /// The rows a view keeps, over its source's fields (computed columns inlined); `None` for a
    /// table, or a view without `WHERE`.
    pub filter: Option<String>,
    /// For a view, the table (not a view) its rows come from.
    pub root: Option<String>,
}

/// One column.
#[derive(Debug, Clone)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: ColumnKind,
}

/// What a column is.
#[derive(Debug, Clone)]
pub enum ColumnKind {
    /// A field of the record's value, with its type as written.
    Physical {
        /// The type, as text.
        ty: String,
    },
    /// An expression over other columns.
    Computed {
        /// Its tokens.
        expr: Vec<Token>,
    },
    /// A property of the Kafka record (`METADATA FROM 'timestamp'`).
    Metadata {
        /// The metadata key (`timestamp`).
        key: String,
    },
}

impl Table {
    /// The column named `name` (case-insensitive, as Flink's identifiers are by default here).
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The option `key`.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads `CREATE [TEMPORARY] TABLE [IF NOT EXISTS] name (items) [WITH (options)]`; `problems`
/// gets every item it cannot read.
pub fn create_table(tokens: &[Token], problems: &mut Problems) -> Option<Table> {
    let mut i = 1; // after CREATE
    if tokens.get(i).is_some_and(|t| is_kw(t, Keyword::TEMPORARY)) {
        i += 1;
    }
    i += 1; // TABLE
    if tokens.get(i).is_some_and(|t| is_kw(t, Keyword::IF)) {
        i += 3; // IF NOT EXISTS
    }
    let Some(name) = tokens.get(i).and_then(word) else {
        problems.push("CREATE TABLE needs a table name");
        return None;
    };
    let name = name.to_string();
    i += 1;
    let mut table = Table {
        name: name.clone(),
        columns: Vec::new(),
        watermark: None,
        options: Vec::new(),
        filter: None,
        root: None,
    };
    // A sink's columns are its query's: tidemark lets them be left out.
    let rest = if tokens.get(i).is_some_and(|t| is_kw(t, Keyword::WITH)) {
        &tokens[i..]
    } else {
        if tokens.get(i) != Some(&Token::LParen) {
            problems.push(format!(
                "CREATE TABLE {name}: expected its columns in parentheses"
            ));
            return None;
        }
        let Some(end) = closing(tokens, i) else {
            problems.push(format!("CREATE TABLE {name}: unbalanced parentheses"));
            return None;
        };
        for item in split_top_level(&tokens[i + 1..end]) {
            column_item(&mut table, item, problems);
        }
        &tokens[end + 1..]
    };
    if !rest.is_empty() {
        if !is_kw(&rest[0], Keyword::WITH) || rest.get(1) != Some(&Token::LParen) {
            problems.push(format!(
                "CREATE TABLE {name}: expected WITH (...) after the columns, found {}",
                join(rest)
            ));
            return Some(table);
        }
        let close = closing(rest, 1).unwrap_or(rest.len());
        for opt in split_top_level(&rest[2..close]) {
            match opt {
                [Token::SingleQuotedString(k), Token::Eq, Token::SingleQuotedString(v)] => {
                    table.options.push((k.clone(), v.clone()))
                }
                other => problems.push(format!(
                    "CREATE TABLE {name}: an option is 'key' = 'value', not {}",
                    join(other)
                )),
            }
        }
    }
    Some(table)
}

fn column_item(table: &mut Table, item: &[Token], problems: &mut Problems) {
    let name = &table.name;
    match item {
        [] => problems.push(format!("CREATE TABLE {name}: an empty column")),
        [w, f, col, r#as, expr @ ..]
            if word(w).is_some_and(|w| w.eq_ignore_ascii_case("watermark"))
                && is_kw(f, Keyword::FOR)
                && is_kw(r#as, Keyword::AS) =>
        {
            match word(col) {
                Some(c) => table.watermark = Some((c.to_string(), expr.to_vec())),
                None => problems.push(format!("CREATE TABLE {name}: WATERMARK FOR needs a column")),
            }
        }
        [p, k, ..] if is_kw(p, Keyword::PRIMARY) && is_kw(k, Keyword::KEY) => {}
        [c, r#as, expr @ ..] if is_kw(r#as, Keyword::AS) => match word(c) {
            Some(c) => table.columns.push(Column {
                name: c.to_string(),
                kind: ColumnKind::Computed {
                    expr: expr.to_vec(),
                },
            }),
            None => problems.push(format!(
                "CREATE TABLE {name}: a computed column needs a name"
            )),
        },
        [c, ty @ ..] => {
            let Some(c) = word(c) else {
                problems.push(format!(
                    "CREATE TABLE {name}: a column needs a name, not {}",
                    join(item)
                ));
                return;
            };
            let meta = ty
                .iter()
                .position(|t| word(t).is_some_and(|w| w.eq_ignore_ascii_case("metadata")));
            let kind = match meta {
                None => ColumnKind::Physical { ty: join(ty) },
                Some(m) => {
                    let key = match &ty[m + 1..] {
                        [f, Token::SingleQuotedString(k), ..] if is_kw(f, Keyword::FROM) => {
                            k.clone()
                        }
                        _ => c.to_string(),
                    };
                    ColumnKind::Metadata { key }
                }
            };
            table.columns.push(Column {
                name: c.to_string(),
                kind,
            });
        }
    }
}

/// `TO_TIMESTAMP_LTZ(x, 3)` or `(x, 0)`: the argument's tokens and the unit of its epoch.
pub fn epoch_call(expr: &[Token]) -> Option<(&[Token], &'static str)> {
    let [Token::Word(f), Token::LParen, inner @ .., Token::RParen] = expr else {
        return None;
    };
    if !f.value.eq_ignore_ascii_case("TO_TIMESTAMP_LTZ") {
        return None;
    }
    let parts = split_top_level(inner);
    match parts.as_slice() {
        [arg] => Some((arg, "ms")),
        [arg, [Token::Number(p, _)]] if p == "3" => Some((arg, "ms")),
        [arg, [Token::Number(p, _)]] if p == "0" => Some((arg, "s")),
        _ => None,
    }
}
