//! `tidemark sink postgres`: the output topic into a PostgreSQL table, exactly once.
//!
//! This folder is what only PostgreSQL needs: its section of the pipeline file ([`settings`]),
//! and behind the [`super::Sink`] seam the connection, the tables (created, or checked column by
//! column), and one database transaction per batch (the reading of committed records, batching
//! and retries are [`super::run`]'s):
//!
//! 1. COPY the batch's panes (already reduced to the last pane per `dedup_id`) into a temporary
//!    table;
//! 2. upsert them into the panes table with one `INSERT ... ON CONFLICT (dedup_id) DO UPDATE ...
//!    WHERE (epoch, pane_index) < (EXCLUDED.epoch, EXCLUDED.pane_index)`: a row is replaced only by
//!    a later pane of the same epoch or by any pane of a later epoch (a replay wins);
//! 3. delete rows a RETRACT pane voids (unless a later pane superseded the retraction);
//! 4. insert dead letters (keyed by source topic, partition, offset and epoch);
//! 5. store the next offset of every partition read, in `tidemark_sink_offsets`;
//! 6. commit.
//!
//! Applying a pane twice changes nothing (step 2's condition), so a batch written again after a
//! crash or a failed commit leaves the table as if each committed pane had been applied once.

use super::{Batch, BatchError, BatchStats, Batching, DeadLetterRow, Offsets, Sink, SinkError};
use crate::config::PipelineSpec;
use crate::format::pane::PaneRecord;
use crate::format::Decoder;
use crate::windowing::aggregate::{AggSpec, OutputType};
use crate::windowing::trigger::Timing;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub mod settings;
mod tls;

pub use settings::{PostgresSpec, RawPostgres, SECTION};

/// The offsets table, shared by every sink group in a database.
pub const OFFSETS_TABLE: &str = "tidemark_sink_offsets";

/// Quotes a (possibly schema-qualified) identifier.
fn quote(name: &str) -> String {
    name.split('.')
        .map(|p| format!("\"{}\"", p.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(".")
}

/// The panes table's columns and their PostgreSQL types, in order: the dedup id, the key
/// columns (`key` for a key of one part, one per part for several, none without a key), the
/// pane's fields and one column per aggregation.
pub fn pane_columns(
    key_columns: &[String],
    aggregations: &[AggSpec],
) -> Vec<(String, &'static str)> {
    let mut cols: Vec<(String, &'static str)> = vec![("dedup_id".to_string(), "text")];
    cols.extend(key_columns.iter().map(|k| (k.clone(), "text")));
    cols.extend(
        [
            ("window_start", "timestamp with time zone"),
            ("window_end", "timestamp with time zone"),
            ("epoch", "bigint"),
            ("pane_index", "integer"),
            ("timing", "text"),
            ("count", "bigint"),
        ]
        .iter()
        .map(|(n, t)| (n.to_string(), *t)),
    );
    for a in aggregations {
        let ty = match a.op.output() {
            OutputType::Integer => "bigint",
            OutputType::Double => "double precision",
            OutputType::Any | OutputType::Top => "jsonb",
        };
        cols.push((a.name.clone(), ty));
    }
    cols.push(("updated_at".into(), "timestamp with time zone"));
    cols
}

const DEAD_COLUMNS: [(&str, &str); 11] = [
    ("source_topic", "text"),
    ("source_partition", "integer"),
    ("source_offset", "bigint"),
    ("epoch", "bigint"),
    ("reason", "text"),
    ("detail", "text"),
    ("watermark", "timestamp with time zone"),
    ("late_by_ms", "bigint"),
    ("key", "bytea"),
    ("value", "bytea"),
    ("updated_at", "timestamp with time zone"),
];

const OFFSET_COLUMNS: [(&str, &str); 4] = [
    ("group_id", "text"),
    ("topic", "text"),
    ("partition", "integer"),
    ("next_offset", "bigint"),
];

/// Creates a table if it is missing (when allowed), then checks that its columns are exactly
/// `want`; a difference is a startup error that names it.
fn ensure_table(
    db: &mut postgres::Client,
    name: &str,
    want: &[(impl AsRef<str>, &str)],
    key: &str,
    create: bool,
) -> Result<(), SinkError> {
    let want: Vec<(&str, &str)> = want.iter().map(|(n, t)| (n.as_ref(), *t)).collect();
    let (schema, table) = match name.split_once('.') {
        Some((s, t)) => (Some(s.to_string()), t.to_string()),
        None => (None, name.to_string()),
    };
    let read = |db: &mut postgres::Client| -> Result<Vec<(String, String)>, SinkError> {
        let rows = db
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_schema = COALESCE($1, current_schema()) AND table_name = $2 \
                 ORDER BY ordinal_position",
                &[&schema, &table],
            )
            .map_err(|e| tables(format!("reading the columns of {name}"), e))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    };
    let mut have = read(db)?;
    if have.is_empty() {
        if !create {
            return Err(SinkError::Schema(format!(
                "table {name} does not exist (and postgres.create_tables is false)"
            )));
        }
        let cols: Vec<String> = want
            .iter()
            .map(|(n, t)| {
                let null = if *n == "updated_at" {
                    " NOT NULL DEFAULT now()"
                } else {
                    ""
                };
                format!("{} {t}{null}", quote(n))
            })
            .collect();
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({key}))",
            quote(name),
            cols.join(", ")
        );
        db.batch_execute(&ddl)
            .map_err(|e| tables(format!("creating {name}"), e))?;
        tracing::info!(table = name, "created table");
        have = read(db)?;
    }
    let have_map: BTreeMap<&str, &str> =
        have.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    let mut problems = Vec::new();
    for &(n, t) in &want {
        match have_map.get(n) {
            None => problems.push(format!("column {n} ({t}) is missing")),
            Some(&h) if h != t => problems.push(format!("column {n} is {h}, expected {t}")),
            Some(_) => {}
        }
    }
    for (n, _) in &have {
        if !want.iter().any(|(w, _)| w == n) {
            problems.push(format!("column {n} is not one the sink writes"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SinkError::Schema(format!(
            "table {name} exists with other columns: {}",
            problems.join("; ")
        )))
    }
}

/// Text-format COPY field: `\N` for null, backslash escapes for the rest.
fn copy_field(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        None => out.extend_from_slice(b"\\N"),
        Some(s) => {
            for b in s.bytes() {
                match b {
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\r' => out.extend_from_slice(b"\\r"),
                    _ => out.push(b),
                }
            }
        }
    }
}

/// A failed check or creation of a table.
fn tables(what: impl Into<String>, e: postgres::Error) -> SinkError {
    SinkError::Tables {
        what: what.into(),
        source: e.into(),
    }
}

/// A bound as PostgreSQL text; a global window's bounds (and any time past chrono's range)
/// become `-infinity` and `infinity`.
fn timestamp(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.3f+00").to_string(),
        None if ms < 0 => "-infinity".into(),
        None => "infinity".into(),
    }
}

/// A PostgreSQL failure as a batch error, with the server's message: transient unless the
/// server refused the data itself ([`is_transient`]).
fn db(e: postgres::Error) -> BatchError {
    let what = format!("postgres: {}", db_message(&e));
    if is_transient(&e) {
        BatchError::Transient {
            what,
            source: e.into(),
        }
    } else {
        BatchError::Refused {
            what,
            source: e.into(),
        }
    }
}

/// Whether a PostgreSQL error passes: no answer from the server (a lost connection, a timeout),
/// or an SQLSTATE of class 08 (connection), 40 (transaction rollback: serialization failures,
/// deadlocks), 53 (insufficient resources), 57 (operator intervention: a shutdown) or 58
/// (system error). Everything else (data exceptions, constraint violations, a wrong column) is
/// the data's or the table's and would fail again.
fn is_transient(e: &postgres::Error) -> bool {
    match e.as_db_error() {
        None => true,
        Some(d) => matches!(&d.code().code()[..2], "08" | "40" | "53" | "57" | "58"),
    }
}

fn io(e: std::io::Error) -> BatchError {
    BatchError::Transient {
        what: format!("copy: {e}"),
        source: e.into(),
    }
}

/// The server's message when there is one (the plain Display says only "db error").
fn db_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// Writes one batch in one database transaction (steps 1-6 of the module docs).
fn write_batch(
    db_client: &mut postgres::Client,
    spec: &PostgresSpec,
    aggregations: &[AggSpec],
    batch: &Batch,
    group: &str,
) -> Result<BatchStats, BatchError> {
    let mut stats = BatchStats::default();
    let cols = pane_columns(&spec.key_columns, aggregations);
    let names: Vec<String> = cols[..cols.len() - 1]
        .iter()
        .map(|(n, _)| quote(n))
        .collect();
    let table = quote(&spec.table);
    let mut tx = db_client.transaction().map_err(db)?;
    tx.batch_execute(&format!(
        "CREATE TEMP TABLE IF NOT EXISTS tidemark_batch (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
    ))
    .map_err(db)?;
    // 1. COPY.
    if !batch.panes.is_empty() {
        let mut buf = Vec::with_capacity(batch.panes.len() * 128);
        for p in &batch.panes {
            copy_row(&mut buf, p, spec.key_columns.len(), aggregations);
        }
        let mut w = tx
            .copy_in(&format!(
                "COPY tidemark_batch ({}) FROM STDIN",
                names.join(", ")
            ))
            .map_err(db)?;
        w.write_all(&buf).map_err(io)?;
        w.finish().map_err(db)?;
        // 2. Upsert, keeping the highest (epoch, pane_index).
        let sets: Vec<String> = names
            .iter()
            .filter(|n| *n != "\"dedup_id\"")
            .map(|n| format!("{n} = EXCLUDED.{n}"))
            .collect();
        let upserts = batch
            .panes
            .iter()
            .filter(|p| p.timing != Timing::Retract)
            .count() as u64;
        stats.upserted = tx
            .execute(
                &format!(
                    "INSERT INTO {table} AS t ({cols}) SELECT {cols} FROM tidemark_batch \
                     WHERE timing <> 'RETRACT' \
                     ON CONFLICT (dedup_id) DO UPDATE SET {sets}, updated_at = now() \
                     WHERE (t.epoch, t.pane_index) < (EXCLUDED.epoch, EXCLUDED.pane_index)",
                    cols = names.join(", "),
                    sets = sets.join(", ")
                ),
                &[],
            )
            .map_err(db)?;
        stats.superseded = upserts - stats.upserted;
        // 3. RETRACT deletes, unless superseded.
        stats.deleted = tx
            .execute(
                &format!(
                    "DELETE FROM {table} AS t USING tidemark_batch b \
                     WHERE b.timing = 'RETRACT' AND t.dedup_id = b.dedup_id \
                     AND (t.epoch, t.pane_index) < (b.epoch, b.pane_index)"
                ),
                &[],
            )
            .map_err(db)?;
    }
    // 4. Dead letters.
    if let (Some(dt), false) = (&spec.dead_letter_table, batch.dead_letters.is_empty()) {
        let stmt = tx
            .prepare(&format!(
                "INSERT INTO {} (source_topic, source_partition, source_offset, epoch, reason, detail, \
                 watermark, late_by_ms, key, value) \
                 VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7::bigint / 1000.0), $8, $9, $10) \
                 ON CONFLICT DO NOTHING",
                quote(dt)
            ))
            .map_err(db)?;
        for DeadLetterRow {
            letter: d,
            key,
            value,
        } in &batch.dead_letters
        {
            stats.dead_letters += tx
                .execute(
                    &stmt,
                    &[
                        &d.topic,
                        &d.partition,
                        &d.offset,
                        &(d.epoch as i64),
                        &d.reason,
                        &d.detail,
                        &d.watermark,
                        &d.late_by_ms,
                        key,
                        value,
                    ],
                )
                .map_err(db)?;
        }
    }
    // 5. Offsets.
    let stmt = tx
        .prepare(&format!(
            "INSERT INTO {OFFSETS_TABLE} (group_id, topic, partition, next_offset) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (group_id, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset"
        ))
        .map_err(db)?;
    for ((topic, p), next) in &batch.offsets {
        tx.execute(&stmt, &[&group, topic, p, next]).map_err(db)?;
    }
    // 6. Commit.
    tx.commit().map_err(db)?;
    Ok(stats)
}

/// The text of each of a pane's `parts` key columns: the key for one part; for several, each
/// value of the key's JSON array (a string as is, a number as written), NULL for a part the key
/// does not have.
fn key_fields(key: &str, parts: usize) -> Vec<Option<String>> {
    match parts {
        0 => Vec::new(),
        1 => vec![Some(key.to_string())],
        n => {
            let values: Vec<serde_json::Value> = serde_json::from_str(key).unwrap_or_default();
            (0..n)
                .map(|i| match values.get(i) {
                    None | Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::String(s)) => Some(s.clone()),
                    Some(other) => Some(other.to_string()),
                })
                .collect()
        }
    }
}

/// Appends one pane as a line of text-format COPY data, in the columns' order.
fn copy_row(buf: &mut Vec<u8>, p: &PaneRecord, key_parts: usize, aggregations: &[AggSpec]) {
    let mut fields: Vec<Option<String>> = vec![Some(p.dedup_id.clone())];
    fields.extend(key_fields(&p.key, key_parts));
    fields.extend([
        Some(timestamp(p.window_start)),
        Some(timestamp(p.window_end)),
        Some(p.epoch.to_string()),
        Some(p.pane_index.to_string()),
        Some(p.timing.as_str().to_string()),
        Some(p.count.to_string()),
    ]);
    for a in aggregations {
        let v = p
            .aggregate_value(&a.name)
            .unwrap_or(&serde_json::Value::Null);
        fields.push(match (a.op.output(), v) {
            (_, serde_json::Value::Null) => None,
            (OutputType::Integer, v) => v.as_f64().map(|x| (x as i64).to_string()),
            (OutputType::Double, v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(|x| format!("{x:?}")),
            (OutputType::Any | OutputType::Top, v) => Some(v.to_string()),
        });
    }
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            buf.push(b'\t');
        }
        copy_field(buf, f.as_deref());
    }
    buf.push(b'\n');
}

/// Connects to the database at `url` (TLS as its `sslmode` and `sslrootcert` say), trying
/// again while the server cannot be reached; settings that cannot work (an untrusted
/// certificate, a TLS setting that does not load) stop the sink. `None`: shut down first.
fn connect(url: &str, shutdown: &AtomicBool) -> Result<Option<postgres::Client>, SinkError> {
    let startup = |what: &str, e: tls::ConnectFailure| SinkError::Startup {
        what: what.to_string(),
        source: Box::new(e),
    };
    let target = tls::Target::parse(url)
        .map_err(|e| startup("reading the PostgreSQL connection string", e.into()))?;
    let mut delay = Duration::from_millis(100);
    while !shutdown.load(Ordering::Relaxed) {
        match target.connect() {
            Ok(c) => return Ok(Some(c)),
            Err(e) if e.is_retryable() => {
                tracing::warn!("connecting to PostgreSQL: {e}; retrying in {delay:?}");
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(startup("connecting to PostgreSQL", e)),
        }
    }
    Ok(None)
}

/// The advisory lock the sink's members hold while they create or check tables: PostgreSQL's
/// `CREATE TABLE IF NOT EXISTS` is not safe against a concurrent one (the loser fails on the
/// type's unique index), and the members of a sink start together.
const TABLES_LOCK: i64 = 0x7469_6465_6d61_726b; // "tidemark"

/// Creates (or checks) the offsets and panes tables for `aggregations`: what the sink does at
/// start, for benchmarks and tools. Members starting together take turns.
pub fn ensure_tables(
    db: &mut postgres::Client,
    spec: &PostgresSpec,
    aggregations: &[AggSpec],
) -> Result<(), SinkError> {
    let schema = |what: &str, e: postgres::Error| tables(what, e);
    db.execute("SELECT pg_advisory_lock($1)", &[&TABLES_LOCK])
        .map_err(|e| schema("locking for the table check", e))?;
    let ensured = ensure_tables_locked(db, spec, aggregations);
    db.execute("SELECT pg_advisory_unlock($1)", &[&TABLES_LOCK])
        .map_err(|e| schema("unlocking after the table check", e))?;
    ensured
}

fn ensure_tables_locked(
    db: &mut postgres::Client,
    spec: &PostgresSpec,
    aggregations: &[AggSpec],
) -> Result<(), SinkError> {
    ensure_table(
        db,
        OFFSETS_TABLE,
        &OFFSET_COLUMNS,
        "group_id, topic, partition",
        spec.create_tables,
    )?;
    ensure_table(
        db,
        &spec.table,
        &pane_columns(&spec.key_columns, aggregations),
        "dedup_id",
        spec.create_tables,
    )?;
    if let Some(dt) = &spec.dead_letter_table {
        ensure_table(
            db,
            dt,
            &DEAD_COLUMNS,
            "source_topic, source_partition, source_offset, epoch",
            spec.create_tables,
        )?;
    }
    Ok(())
}

/// Writes a batch in one database transaction, exactly as the sink does (for benchmarks).
pub fn write_pane_batch(
    db: &mut postgres::Client,
    spec: &PostgresSpec,
    aggregations: &[AggSpec],
    batch: &Batch,
    group: &str,
) -> Result<BatchStats, BatchError> {
    write_batch(db, spec, aggregations, batch, group)
}

fn not_connected() -> BatchError {
    BatchError::NotConnected
}

/// The PostgreSQL sink: its settings, the pipeline's aggregations and the connection.
pub struct PostgresSink {
    spec: PostgresSpec,
    aggregations: Vec<AggSpec>,
    db: Option<postgres::Client>,
}

impl PostgresSink {
    /// A sink with the `[postgres]` settings, for panes with these aggregations.
    pub fn new(spec: PostgresSpec, aggregations: &[AggSpec]) -> PostgresSink {
        PostgresSink {
            spec,
            aggregations: aggregations.to_vec(),
            db: None,
        }
    }

    fn client(&mut self) -> Result<&mut postgres::Client, BatchError> {
        self.db.as_mut().ok_or_else(not_connected)
    }
}

impl Sink for PostgresSink {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn keeps_dead_letters(&self) -> bool {
        self.spec.dead_letter_table.is_some()
    }

    fn connect(&mut self, shutdown: &AtomicBool) -> Result<bool, SinkError> {
        self.db = None;
        let Some(mut db) = connect(&self.spec.url, shutdown)? else {
            return Ok(false);
        };
        ensure_tables(&mut db, &self.spec, &self.aggregations)?;
        self.db = Some(db);
        Ok(true)
    }

    fn stored_offsets(&mut self, group: &str) -> Result<Offsets, BatchError> {
        let rows = self
            .client()?
            .query(
                &format!(
                    "SELECT topic, partition, next_offset FROM {OFFSETS_TABLE} WHERE group_id = $1"
                ),
                &[&group],
            )
            .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    (r.get::<_, String>(0), r.get::<_, i32>(1)),
                    r.get::<_, i64>(2),
                )
            })
            .collect())
    }

    fn write(&mut self, batch: &Batch, group: &str) -> Result<BatchStats, BatchError> {
        let db = self.db.as_mut().ok_or_else(not_connected)?;
        write_batch(db, &self.spec, &self.aggregations, batch, group)
    }
}

/// Runs `tidemark sink postgres` until `shutdown` is set.
pub fn run(spec: PipelineSpec, shutdown: &AtomicBool) -> Result<(), SinkError> {
    let k = spec.kafka.clone().ok_or(SinkError::Missing("kafka"))?;
    let pg = PostgresSpec::of(&spec)
        .map_err(SinkError::Schema)?
        .ok_or(SinkError::Missing("sink.postgres"))?;
    let batching = Batching {
        commit_interval: pg.commit_interval,
        max_batch_records: pg.max_batch_records,
    };
    let mut sink = PostgresSink::new(pg, &spec.engine.aggregations);
    let decoder = Decoder::for_output(&spec.output_format);
    super::run(&k, &decoder, batching, &mut sink, shutdown)
}

#[cfg(test)]
mod tests {
    use super::{key_fields, pane_columns, timestamp};

    #[test]
    fn a_key_of_several_parts_fills_one_column_per_part() {
        let cols = |k: &[&str]| {
            let k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
            pane_columns(&k, &[])
                .into_iter()
                .map(|(n, _)| n)
                .take(k.len() + 2)
                .collect::<Vec<_>>()
        };
        assert_eq!(cols(&["key"]), ["dedup_id", "key", "window_start"]);
        assert_eq!(
            cols(&["page", "country"]),
            ["dedup_id", "page", "country", "window_start"]
        );
        assert_eq!(cols(&[]), ["dedup_id", "window_start"]);
        assert_eq!(key_fields("alice", 1), [Some("alice".to_string())]);
        assert_eq!(
            key_fields(r#"["/cart",7,"a\"b"]"#, 3),
            [
                Some("/cart".to_string()),
                Some("7".to_string()),
                Some("a\"b".to_string())
            ]
        );
        assert!(key_fields("", 0).is_empty());
    }

    #[test]
    fn a_global_windows_bounds_are_the_infinities() {
        assert_eq!(timestamp(i64::MIN), "-infinity");
        assert_eq!(timestamp(i64::MAX), "infinity");
        assert_eq!(timestamp(0), "1970-01-01 00:00:00.000+00");
        assert_eq!(timestamp(-1), "1969-12-31 23:59:59.999+00");
    }
}
