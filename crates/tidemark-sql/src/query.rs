//! A windowing query, `SELECT ... FROM TABLE(TUMBLE|HOP|SESSION(...)) [WHERE ...] GROUP BY
//! window_start, window_end[, keys]`, read from the parser's tree into what a pipeline needs.

use crate::ddl::{ColumnKind, Table};
use crate::problems::Problems;
use crate::tokens::{join, split_top_level, statements, word};
use sqlparser::ast::{
    DateTimeField, DuplicateTreatment, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    GroupByExpr, Interval, Select, SelectItem, SetExpr, TableFactor, Value,
};
use sqlparser::tokenizer::Token;

/// The window a query's table function asks for; durations in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub enum Window {
    /// `TUMBLE(t, DESCRIPTOR(c), size [, offset])`.
    Tumbling { size: i64, offset: i64 },
    /// `HOP(t, DESCRIPTOR(c), slide, size [, offset])`.
    Sliding { size: i64, slide: i64, offset: i64 },
    /// `CUMULATE(t, DESCRIPTOR(c), step, size [, offset])`.
    Cumulate { size: i64, step: i64, offset: i64 },
    /// `SESSION(t PARTITION BY keys, DESCRIPTOR(c), gap)`.
    Session { gap: i64, partition: Vec<String> },
    /// A plain `GROUP BY` over the table: one window per key that never closes, fired by the
    /// `EMIT` clause.
    Global,
    /// No `GROUP BY` and no aggregate: one row per record ([`Plan::rows`]).
    None,
}

/// What a query reads and computes.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The source table's name.
    pub source: String,
    /// The window.
    pub window: Window,
    /// The time attribute's column (`DESCRIPTOR(c)`).
    pub time_column: String,
    /// The filter (`WHERE`), as expression text.
    pub filter: Option<String>,
    /// The grouping keys besides the window: expression text and column name.
    pub keys: Vec<(String, String)>,
    /// The aggregations: output column, operation, input expression text, parameters.
    pub aggregations: Vec<Aggregation>,
    /// The output columns, in `SELECT` order.
    pub columns: Vec<OutColumn>,
    /// The `HAVING` condition over aggregation names.
    pub having: Option<String>,
    /// A query of [`Window::None`]: the columns of the row each record becomes.
    pub rows: Vec<RowColumn>,
}

/// One column of a query that writes a row per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowColumn {
    /// The column's name.
    pub name: String,
    /// Its value, an expression over the source's fields.
    pub expr: String,
    /// Whether the value is epoch milliseconds of a time column (`TO_TIMESTAMP_LTZ`), written
    /// as a `TIMESTAMP(3)`.
    pub timestamp: bool,
    /// The scale of a `DECIMAL` value as Flink types it (`0.908 * price`: 3), to which the
    /// double tidemark computes is rounded when written.
    pub scale: Option<u32>,
}

/// The scale Flink gives `e`'s value when it is a `DECIMAL`: a literal with a fraction has its
/// digits, an integer column 0, `DECIMAL(p, s)` s; `+` and `-` the larger scale, `*` the sum,
/// `ROUND(x, n)` n. `None` when the value is no `DECIMAL` (a double, an integer expression, a
/// string, a division, a function of other kinds).
fn decimal_scale(e: &Expr, table: &Table, tables: &[Table]) -> Option<u32> {
    /// (whether a DECIMAL takes part, the scale).
    fn walk(e: &Expr, table: &Table, tables: &[Table]) -> Option<(bool, u32)> {
        use sqlparser::ast::{BinaryOperator as B, UnaryOperator as U};
        let of_type = |ty: &str| -> Option<(bool, u32)> {
            let ty = ty.trim().to_ascii_uppercase();
            if type_is(&ty, &INTEGERS) {
                return Some((false, 0));
            }
            let rest = ty
                .strip_prefix("DECIMAL")
                .or_else(|| ty.strip_prefix("NUMERIC"))?;
            let scale = rest
                .trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .split(',')
                .nth(1)
                .map_or(Some(0), |s| s.trim().parse().ok())?;
            Some((true, scale))
        };
        match e {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) if n.contains(['e', 'E']) => None,
                Value::Number(n, _) => Some(match n.split_once('.') {
                    Some((_, frac)) => (true, frac.len() as u32),
                    None => (false, 0),
                }),
                _ => None,
            },
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => of_type(&declared_type(
                &substitute(&e.to_string(), table),
                table,
                tables,
            )?),
            Expr::Nested(inner) => walk(inner, table, tables),
            Expr::UnaryOp {
                op: U::Minus | U::Plus,
                expr,
            } => walk(expr, table, tables),
            Expr::Cast { data_type, .. } => of_type(&data_type.to_string()),
            Expr::BinaryOp { left, op, right } => {
                let (l, r) = (walk(left, table, tables)?, walk(right, table, tables)?);
                match op {
                    B::Plus | B::Minus => Some((l.0 || r.0, l.1.max(r.1))),
                    B::Multiply => Some((l.0 || r.0, l.1 + r.1)),
                    _ => None,
                }
            }
            Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("ROUND") => {
                match arguments(&f.args).as_slice() {
                    [(_, x)] => walk(x, table, tables).map(|(d, _)| (d, 0)),
                    [(_, x), (_, Expr::Value(n))] => {
                        let Value::Number(n, _) = &n.value else {
                            return None;
                        };
                        let (d, _) = walk(x, table, tables)?;
                        Some((d, n.parse().ok()?))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }
    match walk(e, table, tables)? {
        (true, scale) => Some(scale),
        (false, _) => None,
    }
}

/// The aggregate functions a query may call, by name.
const AGGREGATES: [&str; 19] = [
    "COUNT",
    "SUM",
    "MIN",
    "MAX",
    "AVG",
    "STDDEV_POP",
    "STDDEV_SAMP",
    "STDDEV",
    "VAR_POP",
    "VAR_SAMP",
    "VARIANCE",
    "FIRST_VALUE",
    "LAST_VALUE",
    "APPROX_COUNT_DISTINCT",
    "APPROX_PERCENTILE",
    "PERCENTILE_APPROX",
    "DURATION",
    "TOP_K",
    "LISTAGG",
];

/// Whether a `SELECT` item is an aggregate call.
fn is_aggregate(item: &SelectItem) -> bool {
    let e = match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return false,
    };
    matches!(e, Expr::Function(f) if AGGREGATES.iter().any(|a| f.name.to_string().eq_ignore_ascii_case(a)))
}

/// The columns of a query without `GROUP BY` or aggregates over `table`: one row per record,
/// as Flink's append-only `SELECT ... FROM t [WHERE ...]` writes.
fn row_columns(
    select: &Select,
    table: &Table,
    tables: &[Table],
    problems: &mut Problems,
) -> Vec<RowColumn> {
    // A column of the table by name: its expression over the source's fields, and whether it
    // is a time column's epoch.
    let column = |name: &str| -> Result<(String, bool), String> {
        match table.column(name).map(|c| &c.kind) {
            Some(ColumnKind::Computed { expr }) => match crate::ddl::epoch_call(expr) {
                Some((arg, unit)) => {
                    let ms = substitute(&join(arg), table);
                    Ok((
                        if unit == "s" {
                            format!("({ms}) * 1000")
                        } else {
                            ms
                        },
                        true,
                    ))
                }
                None => Ok((substitute(&join(expr), table), false)),
            },
            Some(ColumnKind::Metadata { key }) => Err(format!(
                "{name}: metadata ({key}) cannot be a column of a row yet"
            )),
            Some(ColumnKind::Physical { .. }) | None => Ok((substitute(name, table), false)),
        }
    };
    let mut rows = Vec::new();
    for (i, item) in select.projection.iter().enumerate() {
        let (expr, alias) = match item {
            SelectItem::Wildcard(_) => {
                for c in &table.columns {
                    match column(&c.name) {
                        Ok((expr, timestamp)) => rows.push(RowColumn {
                            name: c.name.clone(),
                            expr,
                            timestamp,
                            scale: decimal_scale(
                                &Expr::Identifier(sqlparser::ast::Ident::new(&c.name)),
                                table,
                                tables,
                            ),
                        }),
                        Err(why) => problems.at(item, why),
                    }
                }
                continue;
            }
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            other => {
                problems.at(other, format!("SELECT {other}: name the columns"));
                continue;
            }
        };
        let (name, value) = match expr {
            Expr::Identifier(id) => (id.value.clone(), column(&id.value)),
            Expr::CompoundIdentifier(parts) => (
                parts.last().map(|p| p.value.clone()).unwrap_or_default(),
                Ok((substitute(&expr.to_string(), table), false)),
            ),
            // Flink names an unnamed expression after its position.
            other => (
                format!("EXPR${i}"),
                Ok((substitute(&other.to_string(), table), false)),
            ),
        };
        let scale = decimal_scale(expr, table, tables);
        match value {
            Ok((text, timestamp)) => rows.push(RowColumn {
                name: alias.unwrap_or(name),
                expr: text,
                timestamp,
                scale,
            }),
            Err(why) => problems.at(expr, why),
        }
    }
    rows
}

/// One aggregation of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregation {
    /// The output column.
    pub name: String,
    /// tidemark's operation.
    pub op: &'static str,
    /// The input expression text, when the operation reads one.
    pub field: Option<String>,
    /// `approx_percentile`'s quantile.
    pub q: Option<f64>,
    /// `approx_percentile`'s relative error.
    pub relative_error: Option<f64>,
    /// `top_k`'s k.
    pub k: Option<i64>,
}

/// One column of a query's rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutColumn {
    /// `window_start`, under a name.
    WindowStart(String),
    /// `window_end`, under a name.
    WindowEnd(String),
    /// `window_time` (the window's end less 1 ms), under a name.
    WindowTime(String),
    /// Grouping key `part`, under a name.
    Key {
        /// The column's name.
        name: String,
        /// Which part of the key.
        part: usize,
        /// Whether the key's declared type is a number: a key travels as text, and a row
        /// writes it back as a number (a column of type `BIGINT`, a field of a `ROW`, a `CAST`
        /// to a number, `MOD`).
        number: bool,
    },
    /// An aggregation's value, under its name.
    Aggregate(String),
    /// `AVG` of an integer column, under its name: an integer, the mean truncated toward zero
    /// (Flink's result type).
    IntegerMean(String),
}

/// Reads a `SELECT` over `tables`; `problems` gets everything it cannot take.
pub fn plan(select: &Select, tables: &[Table], problems: &mut Problems) -> Option<Plan> {
    if select.distinct.is_some() {
        problems.push("SELECT DISTINCT is not supported; group by the columns instead");
    }
    let [from] = select.from.as_slice() else {
        problems.push("a query reads one window table function: FROM TABLE(TUMBLE(...))");
        return None;
    };
    if let Some(join) = from.joins.first() {
        problems.at(
            &join.relation,
            "joins are not supported yet: a query reads one table or window table function",
        );
    }
    // A plain table: a global window; a window table function: its window.
    let (table, mut window, mut time_column) = match &from.relation {
        TableFactor::Table { name, .. } => {
            let source = name.to_string();
            let Some(table) = tables.iter().find(|t| t.name.eq_ignore_ascii_case(&source)) else {
                problems.at(
                    name,
                    format!("FROM {source}: no table {source:?} was created"),
                );
                return None;
            };
            let time = table
                .watermark
                .as_ref()
                .map(|(c, _)| c.clone())
                .unwrap_or_default();
            (table, Window::Global, time)
        }
        TableFactor::TableFunction {
            expr: Expr::Function(call),
            ..
        } => window_function(call, tables, problems)?,
        other => {
            problems.at(other, format!(
                "FROM {other}: a query reads a table, or a window table function, FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)), HOP, CUMULATE or SESSION"
            ));
            return None;
        }
    };
    let subst = |e: &Expr| substitute(&e.to_string(), table);
    // A view's own filter comes first.
    let filter = match (table.filter.clone(), select.selection.as_ref().map(subst)) {
        (Some(view), Some(own)) => Some(format!("({view}) AND ({own})")),
        (view, own) => own.or(view),
    };

    // GROUP BY: the window's bounds and the keys.
    let group: Vec<&Expr> = match &select.group_by {
        GroupByExpr::Expressions(exprs, mods) if mods.is_empty() => exprs.iter().collect(),
        _ => {
            problems.push("GROUP BY lists the window's bounds and the keys");
            return None;
        }
    };
    // No GROUP BY and no aggregate over a plain table: a row per record.
    if window == Window::Global
        && group.is_empty()
        && select.having.is_none()
        && !select.projection.iter().any(is_aggregate)
    {
        return Some(Plan {
            source: table.name.clone(),
            window: Window::None,
            time_column,
            filter,
            keys: Vec::new(),
            aggregations: Vec::new(),
            columns: Vec::new(),
            having: None,
            rows: row_columns(select, table, tables, problems),
        });
    }
    let is_bound = |e: &Expr, name: &str| matches!(e, Expr::Identifier(i) if i.value.eq_ignore_ascii_case(name));
    // Spark's forms: `GROUP BY window(ts, size[, slide]), ...` or `session_window(ts, gap)`
    // over a plain table.
    let spark = group.iter().position(|e| spark_window(e).is_some());
    if let (Some(i), Window::Global) = (spark, &window) {
        match spark_window(group[i]).expect("found above") {
            Ok((w, column)) => {
                if table
                    .watermark
                    .as_ref()
                    .is_some_and(|(c, _)| !c.eq_ignore_ascii_case(&column))
                {
                    problems.push(format!(
                        "{}: the window's time column {column} is not the one WATERMARK FOR names",
                        group[i]
                    ));
                }
                (window, time_column) = (w, column);
            }
            Err(why) => problems.at(group[i], format!("{}: {why}", group[i])),
        }
    }
    let group: Vec<&Expr> = group
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != spark)
        .map(|(_, e)| *e)
        .collect();
    let bounds = spark.is_some()
        || group.iter().any(|e| is_bound(e, "window_start"))
            && group.iter().any(|e| is_bound(e, "window_end"));
    let global = window == Window::Global;
    if global
        && group
            .iter()
            .any(|e| is_bound(e, "window_start") || is_bound(e, "window_end"))
    {
        problems.push("a query over a plain table has no window_start or window_end: group by keys only, or read a window table function");
    } else if !global && !bounds {
        problems.at(
            &select.group_by,
            "GROUP BY must include window_start and window_end, as Flink requires",
        );
    }
    let key_exprs: Vec<&Expr> = group
        .iter()
        .copied()
        .filter(|e| !is_bound(e, "window_start") && !is_bound(e, "window_end"))
        .collect();

    // SELECT: window columns, keys and aggregates, in order.
    let mut keys: Vec<(String, String)> = key_exprs
        .iter()
        .map(|e| {
            let name = match e {
                Expr::Identifier(i) => i.value.clone(),
                Expr::CompoundIdentifier(parts) => {
                    parts.last().map(|p| p.value.clone()).unwrap_or_default()
                }
                other => other.to_string(),
            };
            (subst(e), name)
        })
        .collect();
    let mut columns = Vec::new();
    let mut aggregations = Vec::new();
    for (i, item) in select.projection.iter().enumerate() {
        let (expr, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            other => {
                problems.at(other, format!("SELECT {other}: name the columns"));
                continue;
            }
        };
        if is_bound(expr, "window_start") {
            columns.push(OutColumn::WindowStart(
                alias.unwrap_or("window_start".into()),
            ));
        } else if is_bound(expr, "window_end") {
            columns.push(OutColumn::WindowEnd(alias.unwrap_or("window_end".into())));
        } else if is_bound(expr, "window_time") {
            columns.push(OutColumn::WindowTime(alias.unwrap_or("window_time".into())));
        } else if let Some(part) = key_exprs.iter().position(|k| *k == expr) {
            let name = alias.unwrap_or_else(|| keys[part].1.clone());
            keys[part].1 = name.clone();
            let number = is_number(&keys[part].0, table, tables);
            columns.push(OutColumn::Key { name, part, number });
        } else if let Expr::Function(f) = expr {
            let name = alias.unwrap_or(format!("EXPR${i}"));
            match aggregate(f, &name, &subst) {
                Ok(a) => {
                    // AVG keeps its argument's type in Flink: of integers, an integer.
                    let integer = a.op == "mean"
                        && a.field.as_deref().is_some_and(|f| {
                            declared_type(f, table, tables).is_some_and(|t| type_is(&t, &INTEGERS))
                        });
                    columns.push(if integer {
                        OutColumn::IntegerMean(name)
                    } else {
                        OutColumn::Aggregate(name)
                    });
                    aggregations.push(a);
                }
                Err(why) => problems.at(f, why),
            }
        } else {
            problems.at(expr, format!(
                "SELECT {expr}: a column is window_start, window_end, window_time, a GROUP BY key or an aggregate"
            ));
        }
    }
    if let Window::Session { partition, .. } = &window {
        let names: Vec<String> = key_exprs.iter().map(|e| e.to_string()).collect();
        if !partition.is_empty() && partition != &names {
            problems.push(format!(
                "SESSION partitions by {} but the query groups by {}: they must be the same",
                partition.join(", "),
                names.join(", ")
            ));
        }
    }
    // HAVING: each aggregate call becomes the name of the SELECT's aggregation of the same
    // call, or of one added for the condition alone (not a column of the rows).
    let having = select.having.as_ref().and_then(|h| {
        let mut named: Vec<(String, String)> = select
            .projection
            .iter()
            .filter_map(|item| match item {
                SelectItem::ExprWithAlias {
                    expr: e @ Expr::Function(_),
                    alias,
                } => Some((e.to_string(), alias.value.clone())),
                _ => None,
            })
            .collect();
        for (i, item) in select.projection.iter().enumerate() {
            if let SelectItem::UnnamedExpr(e @ Expr::Function(_)) = item {
                named.push((e.to_string(), format!("EXPR${i}")));
            }
        }
        let mut rewrite = |call: &sqlparser::ast::Function| -> Result<String, String> {
            let text = call.to_string();
            if let Some((_, name)) = named.iter().find(|(t, _)| *t == text) {
                if aggregations.iter().any(|a| a.name == *name) {
                    return Ok(name.clone());
                }
            }
            let name = format!("HAVING${}", aggregations.len());
            let a = aggregate(call, &name, &subst)?;
            aggregations.push(a);
            named.push((text, name.clone()));
            Ok(name)
        };
        match having_text(h, &mut rewrite) {
            Ok(text) => Some(text),
            Err(why) => {
                problems.at(h, format!("HAVING {h}: {why}"));
                None
            }
        }
    });
    Some(Plan {
        source: table.name.clone(),
        window,
        time_column,
        filter,
        keys,
        aggregations,
        columns,
        having,
        rows: Vec::new(),
    })
}

/// The table, window and time column of a window table function's call.
fn window_function<'t>(
    call: &sqlparser::ast::Function,
    tables: &'t [Table],
    problems: &mut Problems,
) -> Option<(&'t Table, Window, String)> {
    let kind = call.name.to_string().to_ascii_uppercase();
    let args = arguments(&call.args);
    let arg = |name: &str, pos: usize| -> Option<&Expr> {
        args.iter()
            .find(|(n, _)| n.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(name)))
            .or_else(|| args.get(pos).filter(|(n, _)| n.is_none()))
            .map(|(_, e)| *e)
    };
    let partition: Vec<String> = args
        .iter()
        .filter_map(|(_, e)| match e {
            Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("__partition_by") => Some(
                arguments(&f.args)
                    .into_iter()
                    .map(|(_, e)| e.to_string())
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .next()
        .unwrap_or_default();
    // Positions after a session's partition keys move by one.
    let shift = usize::from(!partition.is_empty());
    let source = match arg("DATA", 0) {
        Some(Expr::Identifier(t)) => t.value.clone(),
        _ => {
            problems.at(
                call,
                format!("{kind}: the first argument is the table, TABLE t"),
            );
            return None;
        }
    };
    let Some(table) = tables.iter().find(|t| t.name.eq_ignore_ascii_case(&source)) else {
        problems.at(call, format!("{kind}: no table {source:?} was created"));
        return None;
    };
    let time_column = match arg("TIMECOL", 1 + shift) {
        Some(Expr::Function(d)) if d.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") => {
            match arguments(&d.args).as_slice() {
                [(_, Expr::Identifier(c))] => c.value.clone(),
                _ => {
                    problems.at(d, format!("{kind}: DESCRIPTOR names one time column"));
                    return None;
                }
            }
        }
        _ => {
            problems.at(
                call,
                format!("{kind}: the time column is DESCRIPTOR(column)"),
            );
            return None;
        }
    };
    let mut dur = |name: &str, pos: usize, required: bool| -> Option<i64> {
        match arg(name, pos) {
            Some(e) => match duration(e) {
                Ok(ms) => Some(ms),
                Err(why) => {
                    problems.at(e, format!("{kind} {name}: {why}"));
                    None
                }
            },
            None if required => {
                problems.at(call, format!("{kind} needs its {name}"));
                None
            }
            None => Some(0),
        }
    };
    // A duration that is wrong was reported; 1 ms stands in, so that the rest is checked too.
    let window = match kind.as_str() {
        "TUMBLE" => Window::Tumbling {
            size: dur("SIZE", 2, true).unwrap_or(1),
            offset: dur("OFFSET", 3, false).unwrap_or(1),
        },
        "HOP" => Window::Sliding {
            slide: dur("SLIDE", 2, true).unwrap_or(1),
            size: dur("SIZE", 3, true).unwrap_or(1),
            offset: dur("OFFSET", 4, false).unwrap_or(1),
        },
        "SESSION" => Window::Session {
            gap: dur("GAP", 2 + shift, true).unwrap_or(1),
            partition,
        },
        "CUMULATE" => Window::Cumulate {
            step: dur("STEP", 2, true).unwrap_or(1),
            size: dur("SIZE", 3, true).unwrap_or(1),
            offset: dur("OFFSET", 4, false).unwrap_or(1),
        },
        other => {
            problems.push(format!(
                "unknown window function {other}: use TUMBLE, HOP, CUMULATE or SESSION"
            ));
            return None;
        }
    };
    Some((table, window, time_column))
}

/// Spark's window of a `GROUP BY` item: `window(ts, size[, slide[, offset]])` (written
/// `__spark_window` by the token rewrite) or `session_window(ts, gap)`, with its time column;
/// `None` when the item is not one.
fn spark_window(e: &Expr) -> Option<Result<(Window, String), String>> {
    let Expr::Function(f) = e else {
        return None;
    };
    let name = f.name.to_string().to_ascii_lowercase();
    if name != "__spark_window" && name != "session_window" {
        return None;
    }
    let args = arguments(&f.args);
    let column = match args.first() {
        Some((_, Expr::Identifier(c))) => c.value.clone(),
        _ => return Some(Err("the first argument is the time column".into())),
    };
    let mut durations = Vec::new();
    for (_, a) in &args[1..] {
        let text = match a {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) => s.clone(),
                other => return Some(Err(format!("{other} is not a duration like '10 minutes'"))),
            },
            other => return Some(Err(format!("{other} is not a duration like '10 minutes'"))),
        };
        match quantity(&text) {
            Ok(ms) if ms > 0 => durations.push(ms),
            Ok(_) => return Some(Err(format!("{text:?} is not a duration like '10 minutes'"))),
            Err(why) => return Some(Err(why)),
        }
    }
    Some(match (name.as_str(), durations.as_slice()) {
        ("session_window", [gap]) => Ok((
            Window::Session {
                gap: *gap,
                partition: Vec::new(),
            },
            column,
        )),
        ("__spark_window", [size]) => Ok((
            Window::Tumbling {
                size: *size,
                offset: 0,
            },
            column,
        )),
        ("__spark_window", [size, slide]) if size == slide => Ok((
            Window::Tumbling {
                size: *size,
                offset: 0,
            },
            column,
        )),
        ("__spark_window", [size, slide]) => Ok((
            Window::Sliding {
                size: *size,
                slide: *slide,
                offset: 0,
            },
            column,
        )),
        ("__spark_window", [size, slide, offset]) => Ok((
            Window::Sliding {
                size: *size,
                slide: *slide,
                offset: *offset,
            },
            column,
        )),
        _ => Err("window(ts, size[, slide[, start]]) or session_window(ts, gap)".into()),
    })
}

/// A call's arguments: (name when named, expression); wildcards left out.
fn arguments(args: &FunctionArguments) -> Vec<(Option<String>, &Expr)> {
    let FunctionArguments::List(list) = args else {
        return Vec::new();
    };
    list.args
        .iter()
        .filter_map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some((None, e)),
            FunctionArg::Named {
                name,
                arg: FunctionArgExpr::Expr(e),
                ..
            } => Some((Some(name.value.clone()), e)),
            _ => None,
        })
        .collect()
}

/// The aggregation a call names, as tidemark's operation.
fn aggregate(
    f: &sqlparser::ast::Function,
    name: &str,
    subst: &dyn Fn(&Expr) -> String,
) -> Result<Aggregation, String> {
    let fname = f.name.to_string().to_ascii_uppercase();
    if f.over.is_some() {
        return Err(format!(
            "{name}: {fname}(...) OVER (...) is an OVER window, which is not supported: aggregate over a window table function"
        ));
    }
    if f.filter.is_some() {
        return Err(format!(
            "{name}: {fname}(...) FILTER (WHERE ...) is not supported: filter in WHERE"
        ));
    }
    let FunctionArguments::List(list) = &f.args else {
        return Err(format!("{fname}: expected arguments"));
    };
    let distinct = list.duplicate_treatment == Some(DuplicateTreatment::Distinct);
    let star = matches!(
        list.args.as_slice(),
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)]
    );
    let args = arguments(&f.args);
    let number = |e: &Expr| -> Option<f64> {
        match e {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => n.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    };
    let mut a = Aggregation {
        name: name.to_string(),
        op: "",
        field: args.first().map(|(_, e)| subst(e)),
        q: None,
        relative_error: None,
        k: None,
    };
    a.op = match (fname.as_str(), distinct) {
        ("COUNT", false) if star || matches!(args.as_slice(), [(_, e)] if number(e).is_some()) => {
            a.field = None;
            "count"
        }
        ("COUNT", false) => "count_values",
        ("COUNT", true) => "count_distinct",
        ("SUM", false) => "sum",
        ("MIN", false) => "min",
        ("MAX", false) => "max",
        ("AVG", false) => "mean",
        ("STDDEV_POP", false) => "stddev_pop",
        ("STDDEV_SAMP" | "STDDEV", false) => "stddev_samp",
        ("VAR_POP", false) => "var_pop",
        ("VAR_SAMP" | "VARIANCE", false) => "var_samp",
        ("FIRST_VALUE", false) => "first",
        ("LAST_VALUE", false) => "last",
        ("APPROX_COUNT_DISTINCT", false) => "approx_count_distinct",
        ("APPROX_PERCENTILE" | "PERCENTILE_APPROX", false) => {
            a.q = args.get(1).and_then(|(_, e)| number(e));
            a.relative_error = args.get(2).and_then(|(_, e)| number(e));
            if a.q.is_none() {
                return Err(format!("{name}: {fname}(x, q) needs a quantile q between 0 and 1"));
            }
            "approx_percentile"
        }
        ("DURATION", false) if args.is_empty() => {
            a.field = None;
            "duration"
        }
        ("TOP_K", false) => {
            a.k = args.get(1).and_then(|(_, e)| number(e)).map(|k| k as i64);
            "top_k"
        }
        (other, true) => return Err(format!("{name}: {other}(DISTINCT ...) is not supported")),
        (other, false) => {
            return Err(format!(
                "{name}: {other} is not an aggregate tidemark knows (COUNT, SUM, MIN, MAX, AVG, STDDEV_POP, STDDEV_SAMP, VAR_POP, VAR_SAMP, FIRST_VALUE, LAST_VALUE, APPROX_COUNT_DISTINCT, APPROX_PERCENTILE, TOP_K, DURATION)"
            ))
        }
    };
    if !matches!(a.op, "count" | "duration") && args.is_empty() {
        return Err(format!("{name}: {fname} needs an argument"));
    }
    Ok(a)
}

/// An interval in milliseconds: `INTERVAL '10' SECOND` (any unit from millisecond to day),
/// or `INTERVAL '10 seconds'`.
pub fn duration(e: &Expr) -> Result<i64, String> {
    let Expr::Interval(Interval {
        value,
        leading_field,
        ..
    }) = e
    else {
        return Err(format!("{e} is not an INTERVAL"));
    };
    let text = match value.as_ref() {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            other => return Err(format!("{other} is not a number of units")),
        },
        other => return Err(format!("{other} is not a number of units")),
    };
    match leading_field {
        Some(f) => times(text.trim(), unit_of_field(f)?),
        None => quantity(&text),
    }
}

/// A number of units written `'10 minutes'` (Spark's durations, and an `INTERVAL` without a
/// field), in milliseconds.
fn quantity(text: &str) -> Result<i64, String> {
    let mut parts = text.split_whitespace();
    let n = parts.next().unwrap_or_default();
    let unit = parts.next().ok_or(format!("'{text}' needs a unit"))?;
    times(n, unit_of_word(unit)?)
}

/// `n` (text) units of `unit` milliseconds.
fn times(n: &str, unit: i64) -> Result<i64, String> {
    let n: i64 = n
        .parse()
        .map_err(|_| format!("{n:?} is not a whole number"))?;
    n.checked_mul(unit)
        .ok_or_else(|| format!("{n} units of {unit} ms is too long"))
}

fn unit_of_field(f: &DateTimeField) -> Result<i64, String> {
    unit_of_word(&f.to_string())
}

fn unit_of_word(w: &str) -> Result<i64, String> {
    Ok(match w.to_ascii_lowercase().trim_end_matches('s') {
        "millisecond" => 1,
        "second" => 1_000,
        "minute" => 60_000,
        "hour" => 3_600_000,
        "day" => 86_400_000,
        other => {
            return Err(format!(
                "unit {other:?}: use MILLISECOND, SECOND, MINUTE, HOUR or DAY"
            ))
        }
    })
}

/// `text` with each computed column of `table` replaced by its expression, in parentheses.
pub fn substitute(text: &str, table: &Table) -> String {
    let Ok(stmts) = statements(text) else {
        return text.to_string();
    };
    let Some(s) = stmts.first() else {
        return text.to_string();
    };
    let mut out: Vec<Token> = Vec::new();
    for (i, t) in s.tokens.iter().enumerate() {
        let computed = match t {
            // Not a field (`row.f`), a qualifier (`row.f`'s `row`) or a function's name.
            Token::Word(w)
                if out.last() != Some(&Token::Period)
                    && !matches!(s.tokens.get(i + 1), Some(Token::LParen | Token::Period)) =>
            {
                table.column(&w.value).and_then(|c| match &c.kind {
                    ColumnKind::Computed { expr } => Some(expr.clone()),
                    _ => None,
                })
            }
            _ => None,
        };
        match computed {
            Some(expr) => {
                out.push(Token::LParen);
                out.extend(expr);
                out.push(Token::RParen);
            }
            None => out.push(t.clone()),
        }
    }
    // Written back as the parser writes expressions (`LOWER(page)`, not `LOWER ( page )`).
    let text = join(&out);
    sqlparser::parser::Parser::new(&sqlparser::dialect::GenericDialect {})
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_expr())
        .map_or(text, |e| e.to_string())
}

/// The `SELECT` of a query, if its body is one.
pub fn select_of(q: &sqlparser::ast::Query) -> Option<&Select> {
    match q.body.as_ref() {
        SetExpr::Select(s) if q.order_by.is_none() && q.limit_clause.is_none() => Some(s),
        _ => None,
    }
}

/// The integer types; the other numbers are `FLOAT`, `DOUBLE`, `DECIMAL`, `NUMERIC`, `REAL`.
const INTEGERS: [&str; 5] = ["TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT"];

/// Whether `ty` (a declared type, upper case) is one of `names`, with or without a precision.
fn type_is(ty: &str, names: &[&str]) -> bool {
    let base = ty.split(['(', ' ']).next().unwrap_or("");
    names.contains(&base)
}

/// Whether the expression `text` (computed columns inlined) has a numeric type.
fn is_number(text: &str, table: &Table, tables: &[Table]) -> bool {
    declared_type(text, table, tables).is_some_and(|t| {
        type_is(&t, &INTEGERS) || type_is(&t, &["FLOAT", "DOUBLE", "DECIMAL", "NUMERIC", "REAL"])
    })
}

/// The declared type of the expression `text` (computed columns inlined), upper case, where it
/// is known: a column or a `ROW` field of the table the query (or its views) read, a `CAST`, or
/// `MOD` (an integer).
fn declared_type(text: &str, table: &Table, tables: &[Table]) -> Option<String> {
    let text = text.trim();
    let text = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(text);
    let upper = text.to_ascii_uppercase();
    if upper.starts_with("MOD(") {
        return Some("INT".into());
    }
    if upper.starts_with("CAST(") {
        return upper
            .rsplit_once(" AS ")
            .map(|(_, ty)| ty.trim_end_matches(')').trim().to_string());
    }
    let root = table
        .root
        .as_deref()
        .and_then(|r| tables.iter().find(|t| t.name == r))
        .unwrap_or(table);
    let path: Vec<&str> = text
        .split('.')
        .map(|p| p.trim().trim_matches('`'))
        .collect();
    let Some(ColumnKind::Physical { ty }) = root.column(path[0]).map(|c| &c.kind) else {
        return None;
    };
    match path.as_slice() {
        [_] => Some(ty.trim().to_ascii_uppercase()),
        [_, field] => {
            // `ROW<a BIGINT, b STRING>`: the field's type, from the fields' top-level list.
            let tokens = statements(ty).ok()?.into_iter().next()?.tokens;
            let open = tokens.iter().position(|t| *t == Token::Lt)?;
            split_top_level(&tokens[open + 1..])
                .into_iter()
                .find_map(|part| {
                    let (name, ty) = part.split_first()?;
                    let ty = ty.strip_suffix(&[Token::Gt]).unwrap_or(ty);
                    word(name)
                        .is_some_and(|n| n.eq_ignore_ascii_case(field))
                        .then(|| join(ty).to_ascii_uppercase())
                })
        }
        _ => None,
    }
}

/// The text of a `HAVING` condition with each aggregate call replaced by the name `call` gives
/// it: comparisons, arithmetic, `AND`/`OR`/`NOT`, `IS [NOT] NULL`, `BETWEEN` and literals over
/// aggregates. A column outside an aggregate is refused: a condition on a key belongs in `WHERE`.
fn having_text(
    e: &Expr,
    call: &mut dyn FnMut(&sqlparser::ast::Function) -> Result<String, String>,
) -> Result<String, String> {
    Ok(match e {
        Expr::Function(f) => call(f)?,
        Expr::Value(v) => v.to_string(),
        Expr::Nested(inner) => format!("({})", having_text(inner, call)?),
        Expr::BinaryOp { left, op, right } => format!(
            "{} {op} {}",
            having_text(left, call)?,
            having_text(right, call)?
        ),
        Expr::UnaryOp { op, expr } => match op {
            sqlparser::ast::UnaryOperator::Not => format!("NOT {}", having_text(expr, call)?),
            _ => format!("{op}{}", having_text(expr, call)?),
        },
        Expr::IsNull(inner) => format!("{} IS NULL", having_text(inner, call)?),
        Expr::IsNotNull(inner) => format!("{} IS NOT NULL", having_text(inner, call)?),
        Expr::Between {
            expr,
            negated,
            low,
            high,
        } => format!(
            "{} {}BETWEEN {} AND {}",
            having_text(expr, call)?,
            if *negated { "NOT " } else { "" },
            having_text(low, call)?,
            having_text(high, call)?
        ),
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
            return Err(format!(
                "{e} is not an aggregate: a condition on a key belongs in WHERE"
            ))
        }
        other => return Err(format!("{other} is not supported in HAVING")),
    })
}
