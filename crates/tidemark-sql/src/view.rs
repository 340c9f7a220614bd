//! `CREATE [TEMPORARY] VIEW name AS SELECT ... FROM t [WHERE ...]`: a view over one table (or
//! another view) that renames, computes and filters, as Nexmark's queries define `bid`,
//! `auction` and `person` over one stream of events. A view is compiled into a [`Table`] of its
//! own: the same source (options and watermark), its columns as computed columns over the
//! source's fields, and its `WHERE` as a filter that every query over it applies first.

use crate::ddl::{Column, ColumnKind, Table};
use crate::problems::Problems;
use crate::query::{select_of, substitute};
use crate::tokens::{is_kw, statements, word, Statement};
use sqlparser::ast::{Expr, SelectItem, TableFactor};
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

/// Reads `CREATE [TEMPORARY] VIEW [IF NOT EXISTS] name AS query` over `tables` (the tables and
/// views created before it); `problems` gets everything it cannot take.
pub fn create_view(
    statement: &Statement,
    tables: &[Table],
    problems: &mut Problems,
) -> Option<Table> {
    let tokens = statement.tokens.as_slice();
    let mut i = 1; // after CREATE
    if tokens.get(i).is_some_and(|t| is_kw(t, Keyword::TEMPORARY)) {
        i += 1;
    }
    i += 1; // VIEW
    if tokens.get(i).is_some_and(|t| is_kw(t, Keyword::IF)) {
        i += 3; // IF NOT EXISTS
    }
    let Some(name) = tokens.get(i).and_then(word).map(str::to_string) else {
        problems.push("CREATE VIEW needs a view name");
        return None;
    };
    if !tokens.get(i + 1).is_some_and(|t| is_kw(t, Keyword::AS)) {
        problems.push(format!(
            "CREATE VIEW {name}: write CREATE VIEW {name} AS SELECT ... (name the columns in the SELECT)"
        ));
        return None;
    }
    let query = match Parser::new(&GenericDialect {})
        .with_tokens_with_locations(statement.located(i + 2..tokens.len()))
        .parse_query()
    {
        Ok(q) => q,
        Err(e) => {
            problems.push(format!("CREATE VIEW {name}: the query does not parse: {e}"));
            return None;
        }
    };
    let Some(select) = select_of(&query) else {
        problems.push(format!(
            "CREATE VIEW {name}: a view is one SELECT ... FROM table [WHERE ...]"
        ));
        return None;
    };
    let mut refuse = |what: &str| {
        problems.push(format!(
            "CREATE VIEW {name}: {what} in a view is not supported: a view renames, computes and filters the rows of one table"
        ))
    };
    if select.distinct.is_some() {
        refuse("DISTINCT");
    }
    if select.having.is_some() {
        refuse("HAVING");
    }
    if !matches!(&select.group_by, sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty()) {
        refuse("GROUP BY");
    }
    let base = match select.from.as_slice() {
        [from] if from.joins.is_empty() => match &from.relation {
            TableFactor::Table { name: source, .. } => {
                let source = source.to_string();
                match tables.iter().find(|t| t.name.eq_ignore_ascii_case(&source)) {
                    Some(t) => t,
                    None => {
                        problems.push(format!(
                            "CREATE VIEW {name}: no table {source:?} was created before it"
                        ));
                        return None;
                    }
                }
            }
            other => {
                problems.push(format!(
                    "CREATE VIEW {name}: FROM {other}: a view reads one table or view"
                ));
                return None;
            }
        },
        _ => {
            problems.push(format!(
                "CREATE VIEW {name}: a view reads one table or view (joins are not supported yet)"
            ));
            return None;
        }
    };
    let mut view = Table {
        name: name.clone(),
        columns: Vec::new(),
        watermark: None,
        options: base.options.clone(),
        filter: base.filter.clone(),
        root: Some(base.root.clone().unwrap_or_else(|| base.name.clone())),
    };
    // Each column, and the source column it keeps as it is (renamed or not).
    let mut kept: Vec<(Column, Option<String>)> = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                for c in &base.columns {
                    kept.push((c.clone(), Some(c.name.clone())));
                }
            }
            SelectItem::UnnamedExpr(Expr::Identifier(id)) => match base.column(&id.value) {
                Some(c) => kept.push((c.clone(), Some(c.name.clone()))),
                None => problems.at(
                    item,
                    format!(
                        "CREATE VIEW {name}: {} has no column {}",
                        base.name, id.value
                    ),
                ),
            },
            SelectItem::UnnamedExpr(e @ Expr::CompoundIdentifier(parts)) => {
                let column = parts.last().map(|p| p.value.clone()).unwrap_or_default();
                match computed(e, base) {
                    Ok(kind) => kept.push((Column { name: column, kind }, None)),
                    Err(why) => problems.at(e, format!("CREATE VIEW {name}: {e}: {why}")),
                }
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                let from = match expr {
                    Expr::Identifier(id) => base.column(&id.value),
                    _ => None,
                };
                match from {
                    // A renamed metadata or computed column is the same metadata or
                    // expression (a physical one reads its field under the old name).
                    Some(
                        c @ Column {
                            kind: ColumnKind::Metadata { .. } | ColumnKind::Computed { .. },
                            ..
                        },
                    ) => kept.push((
                        Column {
                            name: alias.value.clone(),
                            kind: c.kind.clone(),
                        },
                        Some(c.name.clone()),
                    )),
                    _ => match computed(expr, base) {
                        Ok(kind) => kept.push((
                            Column {
                                name: alias.value.clone(),
                                kind,
                            },
                            from.map(|c| c.name.clone()),
                        )),
                        Err(why) => problems.push(format!("CREATE VIEW {name}: {expr}: {why}")),
                    },
                }
            }
            other => problems.push(format!(
                "CREATE VIEW {name}: SELECT {other}: name the column (expr AS name)"
            )),
        }
    }
    for (column, from) in kept {
        if view.column(&column.name).is_some() {
            problems.push(format!(
                "CREATE VIEW {name}: two columns are named {}",
                column.name
            ));
            continue;
        }
        // The time attribute stays one where the view keeps its column, renamed or not.
        if let (Some(from), Some((c, expr))) = (&from, &base.watermark) {
            if c.eq_ignore_ascii_case(from) {
                let expr = expr
                    .iter()
                    .map(|t| match word(t) {
                        Some(w) if w.eq_ignore_ascii_case(from) => {
                            Token::make_word(&column.name, None)
                        }
                        _ => t.clone(),
                    })
                    .collect();
                view.watermark = Some((column.name.clone(), expr));
            }
        }
        view.columns.push(column);
    }
    if let Some(w) = &select.selection {
        let own = substitute(&w.to_string(), base);
        view.filter = Some(match view.filter.take() {
            Some(outer) => format!("({outer}) AND ({own})"),
            None => own,
        });
    }
    Some(view)
}

/// A computed column holding `e` over `base`'s fields (its computed columns inlined).
fn computed(e: &Expr, base: &Table) -> Result<ColumnKind, String> {
    let text = substitute(&e.to_string(), base);
    let tokens = statements(&text)?
        .into_iter()
        .next()
        .map(|s| s.tokens)
        .ok_or("an empty expression")?;
    Ok(ColumnKind::Computed { expr: tokens })
}
