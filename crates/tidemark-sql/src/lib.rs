//! tidemark's SQL front end. A SQL file of Flink-style statements is compiled into the same
//! pipeline document a TOML pipeline file holds (so `validate` checks both alike and `explain`
//! can show the query as a pipeline file), and into the columns of the query's rows.
//!
//! Statements: `SET 'key' = 'value'` (a pipeline file's key, dotted: `SET 'kafka.application_id'
//! = 'clicks'`), `CREATE TABLE` (a Kafka source, or the sink an `INSERT` writes to), `CREATE
//! VIEW` (renaming, computing and filtering one table's rows, [`view`]), and one
//! query, `INSERT INTO sink SELECT ...` or a bare `SELECT ...` (which `simulate` runs). A query
//! is a window aggregation as Flink writes it ([`query`]).
#![forbid(unsafe_code)]

pub mod ddl;
pub mod emit;
pub mod problems;
pub mod query;
pub mod tokens;
pub mod view;

pub use query::OutColumn;

use ddl::{ColumnKind, Table};
use problems::Problems;
use query::{Plan, Window};
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;
use tokens::{is_kw, join};

/// A compiled SQL file.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The pipeline document: what a TOML pipeline file would hold.
    pub pipeline: toml::Table,
    /// The query's output columns, in `SELECT` order.
    pub columns: Vec<OutColumn>,
    /// The names the query's records go by: the table or view it reads, and for a view the
    /// table its rows come from (what `simulate --input NAME=FILE` may bind a file to).
    pub sources: Vec<String>,
}

/// Everything wrong with a SQL file, each where it is: the part of the query it is about, or
/// else its statement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .problems.iter().map(|(l, c, p)| format!("  - line {l}, column {c}: {p}")).collect::<Vec<_>>().join("\n"))]
pub struct SqlError {
    /// (line, column, what is wrong), 1-based.
    pub problems: Vec<(u64, u64, String)>,
}

/// Compiles a SQL file's text.
pub fn compile(text: &str) -> Result<Compiled, SqlError> {
    let mut problems: Vec<(u64, u64, String)> = Vec::new();
    let stmts = tokens::statements(text).map_err(|e| SqlError {
        problems: vec![(1, 1, e)],
    })?;
    let mut settings: Vec<(String, String)> = Vec::new();
    let mut tables: Vec<Table> = Vec::new();
    let mut query: Option<(&tokens::Statement, Option<String>, usize)> = None;
    for s in &stmts {
        let mut local = Problems::default();
        let t = &s.tokens;
        if is_kw(&t[0], Keyword::SET) {
            match &t[1..] {
                [Token::SingleQuotedString(k), Token::Eq, Token::SingleQuotedString(v)] => {
                    settings.push((k.clone(), v.clone()))
                }
                _ => local.push("SET is written SET 'key' = 'value'".to_string()),
            }
        } else if is_kw(&t[0], Keyword::CREATE)
            && t.iter().take(3).any(|x| is_kw(x, Keyword::TABLE))
        {
            if let Some(table) = ddl::create_table(t, &mut local) {
                tables.push(table);
            }
        } else if is_kw(&t[0], Keyword::CREATE) && t.iter().take(3).any(|x| is_kw(x, Keyword::VIEW))
        {
            if let Some(view) = view::create_view(s, &tables, &mut local) {
                tables.push(view);
            }
        } else if is_kw(&t[0], Keyword::INSERT) || is_kw(&t[0], Keyword::SELECT) {
            // The query's name of its sink, and where its SELECT begins.
            let (sink, body) = if is_kw(&t[0], Keyword::INSERT) {
                match t.as_slice() {
                    [_, into, name, _, ..] if is_kw(into, Keyword::INTO) => {
                        (tokens::word(name).map(str::to_string), 3)
                    }
                    _ => {
                        local.push("INSERT is written INSERT INTO sink SELECT ...");
                        (None, t.len())
                    }
                }
            } else {
                (None, 0)
            };
            if query.is_some() {
                local.push("a file holds one query (INSERT or SELECT) for now");
            } else {
                query = Some((s, sink, body));
            }
        } else {
            local.push(format!(
                "{}: a SQL pipeline holds SET, CREATE TABLE, CREATE VIEW, and one INSERT INTO ... SELECT or SELECT",
                join(&t[..t.len().min(3)])
            ));
        }
        problems.extend(
            local
                .located(s.start())
                .map(|(at, p)| (at.line, at.column, p)),
        );
    }
    let Some((stmt, sink, from)) = query else {
        problems.push((
            1,
            1,
            "no query: write INSERT INTO sink SELECT ... or SELECT ...".into(),
        ));
        return Err(SqlError { problems });
    };
    let mut local = Problems::default();
    // `EMIT ...` ends the query: tidemark's clause, read here, the rest by the parser.
    let end = stmt.tokens[from..]
        .iter()
        .position(|t| tokens::word(t).is_some_and(|w| w.eq_ignore_ascii_case("emit")))
        .map_or(stmt.tokens.len(), |i| from + i);
    let emit = if end < stmt.tokens.len() {
        emit::clause(&stmt.tokens[end + 1..], &mut local)
    } else {
        Vec::new()
    };
    let located = stmt.located(from..end);
    let body: Vec<Token> = located.iter().map(|t| t.token.clone()).collect();
    let rewritten = tokens::rewrite_table_arguments(&tokens::rewrite_spark_windows(&body));
    let parsed = Parser::new(&GenericDialect {})
        .with_tokens_with_locations(tokens::relocate(&located, rewritten))
        .parse_query();
    let plan = match &parsed {
        Ok(q) => match query::select_of(q) {
            Some(select) => query::plan(select, &tables, &mut local),
            None => {
                local.at(
                    q.as_ref(),
                    "the query is one SELECT, without ORDER BY, LIMIT or UNION",
                );
                None
            }
        },
        Err(e) => {
            local.push(format!("the query does not parse: {e}"));
            None
        }
    };
    let pipeline = plan.as_ref().map(|p| {
        let sink_table = sink.as_deref().and_then(|s| {
            let t = tables.iter().find(|t| t.name.eq_ignore_ascii_case(s));
            if t.is_none() {
                local.push(format!("INSERT INTO {s}: no table {s:?} was created"));
            }
            t
        });
        let mut doc = document(p, &tables, sink_table, &mut local);
        for (k, v) in &emit {
            set(&mut doc, k, v);
        }
        // SET has the last word.
        for (k, v) in &settings {
            set(&mut doc, k, v);
        }
        doc
    });
    problems.extend(
        local
            .located(stmt.start())
            .map(|(at, p)| (at.line, at.column, p)),
    );
    match (pipeline, plan) {
        (Some(pipeline), Some(plan)) if problems.is_empty() => {
            let root = tables
                .iter()
                .find(|t| t.name == plan.source)
                .and_then(|t| t.root.clone());
            Ok(Compiled {
                pipeline,
                columns: plan.columns,
                sources: std::iter::once(plan.source).chain(root).collect(),
            })
        }
        _ => Err(SqlError { problems }),
    }
}

/// The pipeline document of `plan`.
fn document(
    plan: &Plan,
    tables: &[Table],
    sink: Option<&Table>,
    problems: &mut Problems,
) -> toml::Table {
    use toml::Value as V;
    let source = tables
        .iter()
        .find(|t| t.name == plan.source)
        .expect("the plan's source was found among the tables");
    let s = |x: &str| V::String(x.to_string());
    let ms = |n: i64| V::String(format!("{n}ms"));
    let mut doc = toml::Table::new();
    doc.insert("name".into(), s(sink.map_or(&source.name, |t| &t.name)));

    // [input]: format, key, time, filter.
    let mut input = toml::Table::new();
    let mut kafka = toml::Table::new();
    let mut properties = toml::Table::new();
    let mut watermark = toml::Table::new();
    for (k, v) in &source.options {
        match k.as_str() {
            "connector" if v == "kafka" => {}
            "format" | "value.format" => match v.as_str() {
                "json" => {
                    input.insert("format".into(), s("json"));
                }
                "avro-confluent" => {
                    input.insert("format".into(), s("avro"));
                    input.insert("framing".into(), s("confluent"));
                }
                other => problems.push(format!(
                    "{}: format {other:?}: use 'json' or 'avro-confluent'",
                    source.name
                )),
            },
            "avro-confluent.url" | "value.avro-confluent.url" => {
                let mut r = toml::Table::new();
                r.insert("url".into(), s(v));
                doc.insert("schema_registry".into(), V::Table(r));
            }
            "topic" => {
                let topics: Vec<V> = v.split(';').map(|t| s(t.trim())).collect();
                kafka.insert("input_topics".into(), V::Array(topics));
            }
            "properties.bootstrap.servers" => {
                kafka.insert("bootstrap_servers".into(), s(v));
            }
            "properties.group.id" => {
                kafka.insert("application_id".into(), s(v));
            }
            "scan.startup.mode" => {
                let reset = match v.as_str() {
                    "earliest-offset" => "earliest",
                    "latest-offset" => "latest",
                    other => {
                        problems.push(format!(
                            "{}: scan.startup.mode {other:?}: use 'earliest-offset' or 'latest-offset' (and tidemark replay for offsets or timestamps)",
                            source.name
                        ));
                        continue;
                    }
                };
                properties.insert("auto.offset.reset".into(), s(reset));
            }
            "scan.watermark.idle-timeout" => match interval_text(v) {
                Ok(n) => {
                    watermark.insert("idle_timeout".into(), ms(n));
                }
                Err(why) => problems.push(format!("{}: {k}: {why}", source.name)),
            },
            "partitioned-by-key" => {
                kafka.insert("repartition".into(), V::Boolean(v != "true"));
            }
            other if other.starts_with("properties.") => {
                properties.insert(other["properties.".len()..].to_string(), s(v));
            }
            other => problems.push(format!(
                "{}: unknown option {other:?} (topic, format, properties.*, scan.startup.mode, scan.watermark.idle-timeout, partitioned-by-key, avro-confluent.url)",
                source.name
            )),
        }
    }
    let subst = |tokens: &[Token]| query::substitute(&join(tokens), source);
    // The time attribute.
    let time_col = source.column(&plan.time_column);
    let proctime = matches!(time_col.map(|c| &c.kind), Some(ColumnKind::Computed { expr })
        if join(expr).to_ascii_uppercase().replace(' ', "") == "PROCTIME()");
    if plan.window == Window::None {
        // A row per record waits for no watermark: no event time to read.
    } else if proctime || plan.time_column.is_empty() {
        // A plain GROUP BY over a table without a watermark: processing time.
        input.insert("time".into(), s("processing"));
    } else {
        match &source.watermark {
            Some((c, _)) if c.eq_ignore_ascii_case(&plan.time_column) => {}
            _ => problems.push(format!(
                "DESCRIPTOR({}): the time column is the one the table's WATERMARK FOR names, or a PROCTIME() column",
                plan.time_column
            )),
        }
        match time_col.map(|c| &c.kind) {
            Some(ColumnKind::Physical { .. }) => {
                input.insert("timestamp".into(), s(&plan.time_column));
            }
            Some(ColumnKind::Metadata { key }) if key == "timestamp" => {
                input.insert("timestamp".into(), s("$record_timestamp"));
            }
            Some(ColumnKind::Computed { expr }) => match ddl::epoch_call(expr) {
                Some((arg, unit)) => {
                    input.insert(
                        "timestamp".into(),
                        s(&query::substitute(&join(arg), source)),
                    );
                    input.insert("timestamp_unit".into(), s(unit));
                }
                None => {
                    input.insert("timestamp".into(), s(&subst(expr)));
                }
            },
            Some(ColumnKind::Metadata { key }) => problems.push(format!(
                "{}: metadata {key:?} cannot be a time column; 'timestamp' can",
                plan.time_column
            )),
            None => problems.push(format!(
                "DESCRIPTOR({}): {} has no such column",
                plan.time_column, source.name
            )),
        }
        if let Some((c, expr)) = &source.watermark {
            match watermark_delay(c, expr) {
                Ok(n) => {
                    watermark.insert("max_out_of_orderness".into(), ms(n));
                }
                Err(why) => problems.push(format!("WATERMARK FOR {c}: {why}")),
            }
        }
    }
    let keys: Vec<V> = plan
        .keys
        .iter()
        .map(|(expr, alias)| {
            let mut t = toml::Table::new();
            t.insert("expr".into(), s(expr));
            t.insert("alias".into(), s(alias));
            V::Table(t)
        })
        .collect();
    input.insert("key".into(), V::Array(keys));
    if let Some(f) = &plan.filter {
        input.insert("filter".into(), s(f));
    }
    doc.insert("input".into(), V::Table(input));

    let mut window = toml::Table::new();
    match &plan.window {
        Window::None => {
            let columns: Vec<V> = plan
                .rows
                .iter()
                .map(|c| {
                    let mut t = toml::Table::new();
                    t.insert("name".into(), s(&c.name));
                    t.insert("expr".into(), s(&c.expr));
                    if c.timestamp {
                        t.insert("format".into(), s("timestamp"));
                    }
                    if let Some(n) = c.scale {
                        t.insert("scale".into(), V::Integer(i64::from(n)));
                    }
                    V::Table(t)
                })
                .collect();
            doc.insert("columns".into(), V::Array(columns));
        }
        Window::Tumbling { size, offset } => {
            window.insert("type".into(), s("tumbling"));
            window.insert("size".into(), ms(*size));
            if *offset != 0 {
                window.insert("offset".into(), ms(*offset));
            }
        }
        Window::Sliding {
            size,
            slide,
            offset,
        } => {
            window.insert("type".into(), s("sliding"));
            window.insert("size".into(), ms(*size));
            window.insert("slide".into(), ms(*slide));
            if *offset != 0 {
                window.insert("offset".into(), ms(*offset));
            }
        }
        Window::Cumulate { size, step, offset } => {
            window.insert("type".into(), s("cumulate"));
            window.insert("size".into(), ms(*size));
            window.insert("step".into(), ms(*step));
            if *offset != 0 {
                window.insert("offset".into(), ms(*offset));
            }
        }
        Window::Session { gap, .. } => {
            window.insert("type".into(), s("session"));
            window.insert("gap".into(), ms(*gap));
            // Flink's rule: sessions whose events lie exactly one gap apart are one session.
            window.insert("merge_touching".into(), V::Boolean(true));
        }
        Window::Global => {
            window.insert("type".into(), s("global"));
            if plan.columns.iter().any(|c| {
                matches!(
                    c,
                    OutColumn::WindowStart(_) | OutColumn::WindowEnd(_) | OutColumn::WindowTime(_)
                )
            }) {
                problems.push(
                    "a query over a plain table has one window per key that never closes: it has no window_start, window_end or window_time",
                );
            }
        }
    }
    if !window.is_empty() {
        doc.insert("window".into(), V::Table(window));
    }
    if !watermark.is_empty() {
        doc.insert("watermark".into(), V::Table(watermark));
    }
    let aggs: Vec<V> = plan
        .aggregations
        .iter()
        .map(|a| {
            let mut t = toml::Table::new();
            t.insert("name".into(), s(&a.name));
            t.insert("op".into(), s(a.op));
            if let Some(f) = &a.field {
                t.insert("field".into(), s(f));
            }
            if let Some(q) = a.q {
                t.insert("q".into(), V::Float(q));
            }
            if let Some(e) = a.relative_error {
                t.insert("relative_error".into(), V::Float(e));
            }
            if let Some(k) = a.k {
                t.insert("k".into(), V::Integer(k));
            }
            V::Table(t)
        })
        .collect();
    if !aggs.is_empty() {
        doc.insert("aggregations".into(), V::Array(aggs));
    }
    if let Some(h) = &plan.having {
        doc.insert("having".into(), s(h));
    }

    // [kafka], when the source names a broker and an INSERT a sink: its topic is the output.
    if let Some(sink) = sink.filter(|t| t.option("connector") == Some("jdbc")) {
        // The PostgreSQL sink: panes travel through a Kafka topic, exactly once, and `tidemark
        // sink postgres` carries them into the table.
        let mut pg = toml::Table::new();
        let (mut user, mut password) = (None, None);
        for (k, v) in &sink.options {
            match k.as_str() {
                "connector" => {}
                "url" => match postgres_url(v) {
                    Ok(url) => {
                        pg.insert("url".into(), s(&url));
                    }
                    Err(why) => problems.push(format!("{}: url: {why}", sink.name)),
                },
                "username" => user = Some(v.clone()),
                "password" => password = Some(v.clone()),
                "table-name" => {
                    pg.insert("table".into(), s(v));
                }
                "dead-letter-table" => {
                    pg.insert("dead_letter_table".into(), s(v));
                }
                "sink.buffer-flush.interval" => match interval_text(v) {
                    Ok(n) => {
                        pg.insert("commit_interval".into(), ms(n));
                    }
                    Err(why) => problems.push(format!("{}: {k}: {why}", sink.name)),
                },
                "sink.buffer-flush.max-rows" => match v.parse::<i64>() {
                    Ok(n) => {
                        pg.insert("max_batch_records".into(), V::Integer(n));
                    }
                    Err(_) => problems.push(format!("{}: {k}: {v:?} is not a number", sink.name)),
                },
                "topic" => {
                    kafka.insert("output_topic".into(), s(v));
                }
                "dead-letter-topic" => {
                    kafka.insert("dead_letter_topic".into(), s(v));
                }
                other => problems.push(format!(
                    "{}: unknown option {other:?} of a PostgreSQL table (connector = 'jdbc', url, table-name, username, password, dead-letter-table, sink.buffer-flush.interval, sink.buffer-flush.max-rows, and tidemark's topic, the Kafka topic the panes travel through, and dead-letter-topic)",
                    sink.name
                )),
            }
        }
        if let Some(V::String(url)) = pg.get_mut("url") {
            for (name, value) in [("user", user), ("password", password)] {
                if let Some(v) = value {
                    url.push_str(&format!(" {name}={}", libpq_value(&v)));
                }
            }
        }
        for (key, what) in [("url", "url"), ("table", "table-name")] {
            if !pg.contains_key(key) {
                problems.push(format!(
                    "{}: a PostgreSQL table needs its '{what}'",
                    sink.name
                ));
            }
        }
        if !kafka.contains_key("output_topic") {
            problems.push(format!(
                "{}: a PostgreSQL table needs 'topic', the Kafka topic its rows travel through exactly once",
                sink.name
            ));
        }
        let mut sinks = toml::Table::new();
        sinks.insert("postgres".into(), V::Table(pg));
        doc.insert("sink".into(), V::Table(sinks));
        if let Some(V::String(out)) = kafka.get("output_topic").cloned() {
            kafka
                .entry("dead_letter_topic")
                .or_insert_with(|| s(&format!("{out}-dead-letters")));
        }
    } else if let Some(sink) = sink {
        for (k, v) in &sink.options {
            match k.as_str() {
                "connector" if v == "kafka" => {}
                "format" if v == "json" => {}
                "topic" => {
                    kafka.insert("output_topic".into(), s(v));
                }
                "dead-letter-topic" => {
                    kafka.insert("dead_letter_topic".into(), s(v));
                }
                other => problems.push(format!(
                    "{}: unknown sink option {other:?} (connector = 'kafka', topic, format = 'json', dead-letter-topic; or connector = 'jdbc' for PostgreSQL)",
                    sink.name
                )),
            }
        }
        if let Some(V::String(out)) = kafka.get("output_topic").cloned() {
            kafka
                .entry("dead_letter_topic")
                .or_insert_with(|| s(&format!("{out}-dead-letters")));
        }
    }
    if !properties.is_empty() {
        kafka.insert("properties".into(), V::Table(properties));
    }
    // `run` needs a broker and a sink; a bare SELECT is for `simulate`.
    if kafka.contains_key("bootstrap_servers") && kafka.contains_key("output_topic") {
        doc.insert("kafka".into(), V::Table(kafka));
    }
    doc
}

/// Sets the dotted key `key` of `doc` to `value` (kept as a number or boolean when it reads as
/// one); under `kafka.properties.` the rest of the key is one property name, and the value a
/// string.
fn set(doc: &mut toml::Table, key: &str, value: &str) {
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let (path, parsed): (Vec<&str>, _) = match key.strip_prefix("kafka.properties.") {
        // librdkafka's properties are strings, whatever they read as.
        Some(prop) => (
            vec!["kafka", "properties", prop],
            toml::Value::String(value.to_string()),
        ),
        None => (key.split('.').collect(), parsed),
    };
    let mut node = doc;
    for (i, seg) in path.iter().enumerate() {
        if i + 1 == path.len() {
            node.insert(seg.to_string(), parsed);
            return;
        }
        let entry = node
            .entry(seg.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        node = entry.as_table_mut().expect("made a table");
    }
}

/// The delay of `WATERMARK FOR c AS c - INTERVAL ...` (0 for `AS c`), in milliseconds.
fn watermark_delay(column: &str, expr: &[Token]) -> Result<i64, String> {
    let text = join(expr);
    let e = Parser::new(&GenericDialect {})
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| e.to_string())?;
    use sqlparser::ast::{BinaryOperator, Expr};
    let is_col =
        |e: &Expr| matches!(e, Expr::Identifier(i) if i.value.eq_ignore_ascii_case(column));
    match &e {
        e if is_col(e) => Ok(0),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Minus,
            right,
        } if is_col(left) => query::duration(right),
        _ => Err(format!(
            "{text}: a watermark is the column less an interval, {column} - INTERVAL '5' SECOND"
        )),
    }
}

/// A PostgreSQL connection string from a JDBC URL (`jdbc:postgresql://host:port/db?k=v&...`,
/// as Flink's JDBC connector takes it) or a libpq string or URL, which pass as they are.
fn postgres_url(v: &str) -> Result<String, String> {
    let Some(rest) = v.strip_prefix("jdbc:") else {
        return Ok(v.to_string());
    };
    let Some(rest) = rest.strip_prefix("postgresql://") else {
        return Err(format!("{v:?}: tidemark's JDBC sink writes to PostgreSQL, jdbc:postgresql://host:port/database"));
    };
    let (authority, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let (db, params) = rest.split_once('?').unwrap_or((rest, ""));
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "5432"));
    let mut out = format!("host={} port={}", libpq_value(host), libpq_value(port));
    if !db.is_empty() {
        out.push_str(&format!(" dbname={}", libpq_value(db)));
    }
    for kv in params.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        out.push_str(&format!(" {k}={}", libpq_value(v)));
    }
    Ok(out)
}

/// `v` as a libpq connection-string value: quoted, with quotes and backslashes escaped.
fn libpq_value(v: &str) -> String {
    format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A Flink duration option (`'30 s'`, `'1 min'`, `'500 ms'`, `'10s'`) in milliseconds.
fn interval_text(v: &str) -> Result<i64, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: i64 = v[..split]
        .parse()
        .map_err(|_| format!("{v:?} is not a duration"))?;
    let unit = match v[split..].trim().to_ascii_lowercase().as_str() {
        "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1,
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        other => return Err(format!("unit {other:?} of {v:?}")),
    };
    Ok(n * unit)
}

#[cfg(test)]
mod tests;
