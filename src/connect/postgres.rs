//! `tidemark sink-postgres`: the output topic into a PostgreSQL table, exactly once.
//!
//! Members of the consumer group `<application_id>-postgres` share the partitions of the
//! pipeline's output topic (and of its dead-letter topic when a dead-letter table is configured).
//! The group only assigns partitions: the consumer is kept paused, and records are read from the
//! **raw log** with transactions resolved from their COMMIT/ABORT markers, so only records of
//! committed transactions are applied, even on a broker that serves aborted records to
//! `read_committed` consumers.
//!
//! Every `commit_interval`, or once `max_batch_records` records are pending, one database
//! transaction:
//!
//! 1. reduces the batch to the last pane per `dedup_id` (highest `(epoch, pane_index)`);
//! 2. COPYs it into a temporary table;
//! 3. upserts it into the panes table with one `INSERT ... ON CONFLICT (dedup_id) DO UPDATE ...
//!    WHERE (epoch, pane_index) < (EXCLUDED.epoch, EXCLUDED.pane_index)`: a row is replaced only by
//!    a later pane of the same epoch or by any pane of a later epoch (a replay wins);
//! 4. deletes rows a RETRACT pane voids (unless a later pane superseded the retraction);
//! 5. inserts dead letters (keyed by source topic, partition, offset and epoch);
//! 6. stores the next offset of every partition read, in `tidemark_sink_offsets`;
//! 7. commits.
//!
//! On assignment a partition starts at the offset stored in PostgreSQL (0 when there is none);
//! Kafka's group offsets are never used. A failed batch (the database is down or restarting) is
//! dropped, the connection re-established with backoff, and every partition read again from its
//! stored offset: nothing is skipped, and applying a pane twice changes nothing (step 3's
//! condition), so the table ends up as if each committed pane had been applied once.

use crate::audit::epoch_of;
use crate::avro::{decode_value, parse_schema, Framing, OutputFormat, WINDOW_RESULT_SCHEMA};
use crate::config::{KafkaSpec, PipelineSpec, PostgresSpec};
use crate::kafka::raw_log::{Follow, RawRecord, TopicReader};
use crate::metrics as m;
use crate::windowing::aggregate::{AggOp, AggSpec};
use metrics::{counter, gauge, histogram};
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The offsets table, shared by every sink group in a database.
pub const OFFSETS_TABLE: &str = "tidemark_sink_offsets";

/// Errors that stop the sink.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The pipeline file lacks a section the sink needs.
    #[error("the pipeline needs a [{0}] section")]
    Missing(&'static str),
    /// A table exists with other columns than the sink writes.
    #[error("{0}")]
    Schema(String),
    /// A pane could not be decoded and there is no dead-letter table to put it in.
    #[error("{0}")]
    Undecodable(String),
    /// Setting up the Kafka clients failed.
    #[error("startup: {0}")]
    Startup(String),
}

/// One pane as a table row.
#[derive(Debug, Clone, PartialEq)]
pub struct PaneRow {
    /// The pane's dedup id (primary key).
    pub dedup_id: String,
    /// The grouping key.
    pub key: String,
    /// Window start, epoch ms.
    pub window_start: i64,
    /// Window end, epoch ms.
    pub window_end: i64,
    /// Replay epoch.
    pub epoch: i64,
    /// Pane index within the epoch.
    pub pane_index: i64,
    /// EARLY, ON_TIME, LATE or RETRACT.
    pub timing: String,
    /// Elements in the pane.
    pub count: i64,
    /// One value per aggregation, in the pipeline's order.
    pub values: Vec<Option<f64>>,
}

/// One dead letter as a table row.
#[derive(Debug, Clone, PartialEq)]
struct DeadRow {
    topic: String,
    partition: i32,
    offset: i64,
    epoch: i64,
    reason: String,
    detail: String,
    watermark: Option<i64>,
    late_by_ms: Option<i64>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
}

/// Decodes pane records of the pipeline's output format into rows (the Avro schema is parsed
/// once).
#[derive(Debug)]
pub struct PaneDecoder {
    /// Avro framing and the `WindowResult` schema; `None` for JSON panes.
    avro: Option<(Framing, apache_avro::Schema)>,
    aggregations: Vec<AggSpec>,
}

impl PaneDecoder {
    /// A decoder for `format` with the pipeline's aggregations.
    pub fn new(format: &OutputFormat, aggregations: &[AggSpec]) -> Result<PaneDecoder, String> {
        let avro = match format {
            OutputFormat::Json => None,
            OutputFormat::Avro { framing, .. } => Some((
                *framing,
                parse_schema("window_result.avsc", WINDOW_RESULT_SCHEMA)
                    .map_err(|e| e.to_string())?,
            )),
        };
        Ok(PaneDecoder {
            avro,
            aggregations: aggregations.to_vec(),
        })
    }

    /// Decodes one pane record into a row.
    pub fn decode(&self, r: &RawRecord) -> Result<PaneRow, String> {
        let bytes = r.value.as_deref().ok_or("a pane record without a value")?;
        let v: Value = match &self.avro {
            None => serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?,
            Some((framing, schema)) => {
                let decoded = decode_value(schema, *framing, bytes)?;
                Value::try_from(decoded).map_err(|e| e.to_string())?
            }
        };
        pane_row(&v, &self.aggregations)
    }
}

/// A pane's JSON form (the JSON output, or an Avro pane converted) as a row.
fn pane_row(v: &Value, aggregations: &[AggSpec]) -> Result<PaneRow, String> {
    let int = |name: &str| {
        v.get(name)
            .and_then(Value::as_i64)
            .ok_or_else(|| format!("field {name} missing or not an integer"))
    };
    let text = |name: &str| {
        v.get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("field {name} missing or not a string"))
    };
    let aggregates = v.get("aggregates").and_then(Value::as_object);
    let values = aggregations
        .iter()
        .map(|a| {
            aggregates
                .and_then(|m| m.get(&a.name))
                .or_else(|| v.get(&a.name))
                .and_then(Value::as_f64)
        })
        .collect();
    Ok(PaneRow {
        dedup_id: text("dedup_id")?,
        key: text("key")?,
        window_start: int("window_start")?,
        window_end: int("window_end")?,
        epoch: v.get("epoch").and_then(Value::as_i64).unwrap_or(0),
        pane_index: int("pane_index")?,
        timing: text("timing")?,
        count: int("count")?,
        values,
    })
}

fn dead_row(r: &RawRecord) -> Option<DeadRow> {
    let num = |h: &str| r.header(h).and_then(|s| s.parse::<i64>().ok());
    Some(DeadRow {
        topic: r.header("tidemark.source_topic")?.to_string(),
        partition: num("tidemark.source_partition")? as i32,
        offset: num("tidemark.source_offset")?,
        epoch: epoch_of(r) as i64,
        reason: r.header("tidemark.reason")?.to_string(),
        detail: r.header("tidemark.detail").unwrap_or("").to_string(),
        watermark: num("tidemark.watermark"),
        late_by_ms: num("tidemark.late_by_ms"),
        key: r.key.as_ref().map(|k| k.to_vec()),
        value: r.value.as_ref().map(|v| v.to_vec()),
    })
}

/// Quotes a (possibly schema-qualified) identifier.
fn quote(name: &str) -> String {
    name.split('.')
        .map(|p| format!("\"{}\"", p.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(".")
}

/// The panes table's columns and their PostgreSQL types, in order.
pub fn pane_columns(aggregations: &[AggSpec]) -> Vec<(String, &'static str)> {
    let mut cols: Vec<(String, &'static str)> = [
        ("dedup_id", "text"),
        ("key", "text"),
        ("window_start", "timestamp with time zone"),
        ("window_end", "timestamp with time zone"),
        ("epoch", "bigint"),
        ("pane_index", "integer"),
        ("timing", "text"),
        ("count", "bigint"),
    ]
    .iter()
    .map(|(n, t)| (n.to_string(), *t))
    .collect();
    for a in aggregations {
        let ty = if a.op == AggOp::Count {
            "bigint"
        } else {
            "double precision"
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
            .map_err(|e| SinkError::Schema(format!("reading the columns of {name}: {e}")))?;
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
            .map_err(|e| SinkError::Schema(format!("creating {name}: {e}")))?;
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

fn timestamp(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f+00").to_string())
        .unwrap_or_else(|| "infinity".into())
}

/// What one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchStats {
    /// Rows inserted or replaced.
    pub upserted: u64,
    /// Panes skipped because the table holds a higher `(epoch, pane_index)`.
    pub superseded: u64,
    /// Rows deleted by RETRACT panes.
    pub deleted: u64,
    /// Dead letters inserted.
    pub dead_letters: u64,
}

/// Why a batch was not written.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// PostgreSQL refused or the connection broke.
    #[error("postgres: {}", db_message(.0))]
    Db(#[from] postgres::Error),
    /// Writing the COPY data failed.
    #[error("copy: {0}")]
    Io(#[from] std::io::Error),
}

/// The server's message when there is one (the plain Display says only "db error").
fn db_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// Writes one batch in one database transaction (steps 1-7 of the module docs).
fn write_batch(
    db: &mut postgres::Client,
    spec: &PostgresSpec,
    aggregations: &[AggSpec],
    panes: &[PaneRow],
    dead: &[DeadRow],
    offsets: &BTreeMap<(String, i32), i64>,
    group: &str,
) -> Result<BatchStats, BatchError> {
    let mut stats = BatchStats::default();
    // 1. The last pane per dedup id.
    let mut last: HashMap<&str, &PaneRow> = HashMap::with_capacity(panes.len());
    for p in panes {
        let e = last.entry(p.dedup_id.as_str()).or_insert(p);
        if (p.epoch, p.pane_index) > (e.epoch, e.pane_index) {
            *e = p;
        }
    }
    let cols = pane_columns(aggregations);
    let names: Vec<String> = cols[..cols.len() - 1]
        .iter()
        .map(|(n, _)| quote(n))
        .collect();
    let table = quote(&spec.table);
    let mut tx = db.transaction()?;
    tx.batch_execute(&format!(
        "CREATE TEMP TABLE IF NOT EXISTS tidemark_batch (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
    ))?;
    // 2. COPY.
    if !last.is_empty() {
        let mut buf = Vec::with_capacity(last.len() * 128);
        for p in last.values() {
            let mut fields: Vec<Option<String>> = vec![
                Some(p.dedup_id.clone()),
                Some(p.key.clone()),
                Some(timestamp(p.window_start)),
                Some(timestamp(p.window_end)),
                Some(p.epoch.to_string()),
                Some(p.pane_index.to_string()),
                Some(p.timing.clone()),
                Some(p.count.to_string()),
            ];
            for (a, v) in aggregations.iter().zip(&p.values) {
                fields.push(v.filter(|x| x.is_finite()).map(|x| {
                    if a.op == AggOp::Count {
                        (x as i64).to_string()
                    } else {
                        format!("{x:?}")
                    }
                }));
            }
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    buf.push(b'\t');
                }
                copy_field(&mut buf, f.as_deref());
            }
            buf.push(b'\n');
        }
        let mut w = tx.copy_in(&format!(
            "COPY tidemark_batch ({}) FROM STDIN",
            names.join(", ")
        ))?;
        w.write_all(&buf)?;
        w.finish()?;
        // 3. Upsert, keeping the highest (epoch, pane_index).
        let sets: Vec<String> = names
            .iter()
            .filter(|n| *n != "\"dedup_id\"")
            .map(|n| format!("{n} = EXCLUDED.{n}"))
            .collect();
        let upserts = last.values().filter(|p| p.timing != "RETRACT").count() as u64;
        stats.upserted = tx.execute(
            &format!(
                "INSERT INTO {table} AS t ({cols}) SELECT {cols} FROM tidemark_batch \
                 WHERE timing <> 'RETRACT' \
                 ON CONFLICT (dedup_id) DO UPDATE SET {sets}, updated_at = now() \
                 WHERE (t.epoch, t.pane_index) < (EXCLUDED.epoch, EXCLUDED.pane_index)",
                cols = names.join(", "),
                sets = sets.join(", ")
            ),
            &[],
        )?;
        stats.superseded = upserts - stats.upserted;
        // 4. RETRACT deletes, unless superseded.
        stats.deleted = tx.execute(
            &format!(
                "DELETE FROM {table} AS t USING tidemark_batch b \
                 WHERE b.timing = 'RETRACT' AND t.dedup_id = b.dedup_id \
                 AND (t.epoch, t.pane_index) < (b.epoch, b.pane_index)"
            ),
            &[],
        )?;
    }
    // 5. Dead letters.
    if let (Some(dt), false) = (&spec.dead_letter_table, dead.is_empty()) {
        let stmt = tx.prepare(&format!(
            "INSERT INTO {} (source_topic, source_partition, source_offset, epoch, reason, detail, \
             watermark, late_by_ms, key, value) \
             VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7::bigint / 1000.0), $8, $9, $10) \
             ON CONFLICT DO NOTHING",
            quote(dt)
        ))?;
        for d in dead {
            stats.dead_letters += tx.execute(
                &stmt,
                &[
                    &d.topic,
                    &d.partition,
                    &d.offset,
                    &d.epoch,
                    &d.reason,
                    &d.detail,
                    &d.watermark,
                    &d.late_by_ms,
                    &d.key,
                    &d.value,
                ],
            )?;
        }
    }
    // 6. Offsets.
    let stmt = tx.prepare(&format!(
        "INSERT INTO {OFFSETS_TABLE} (group_id, topic, partition, next_offset) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (group_id, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset"
    ))?;
    for ((topic, p), next) in offsets {
        tx.execute(&stmt, &[&group, topic, p, next])?;
    }
    // 7. Commit.
    tx.commit()?;
    Ok(stats)
}

/// One assigned partition being read.
#[derive(Debug)]
struct Part {
    /// Where the next read starts (and what is stored once the batch commits).
    follow: Follow,
    /// The partition's end at the last read.
    end: i64,
}

fn connect(url: &str, shutdown: &AtomicBool) -> Option<postgres::Client> {
    let mut delay = Duration::from_millis(100);
    while !shutdown.load(Ordering::Relaxed) {
        match postgres::Client::connect(url, postgres::NoTls) {
            Ok(c) => return Some(c),
            Err(e) => {
                tracing::warn!("connecting to PostgreSQL: {e}; retrying in {delay:?}");
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    None
}

fn stored_offsets(
    db: &mut postgres::Client,
    group: &str,
) -> Result<BTreeMap<(String, i32), i64>, postgres::Error> {
    Ok(db
        .query(
            &format!(
                "SELECT topic, partition, next_offset FROM {OFFSETS_TABLE} WHERE group_id = $1"
            ),
            &[&group],
        )?
        .iter()
        .map(|r| {
            (
                (r.get::<_, String>(0), r.get::<_, i32>(1)),
                r.get::<_, i64>(2),
            )
        })
        .collect())
}

/// Creates (or checks) the offsets and panes tables for `aggregations`: what the sink does at
/// start, for benchmarks and tools.
pub fn ensure_tables(
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
        &pane_columns(aggregations),
        "dedup_id",
        spec.create_tables,
    )
}

/// Writes a batch of panes and offsets in one database transaction, exactly as the sink does
/// (for benchmarks).
pub fn write_pane_batch(
    db: &mut postgres::Client,
    spec: &PostgresSpec,
    aggregations: &[AggSpec],
    panes: &[PaneRow],
    offsets: &BTreeMap<(String, i32), i64>,
    group: &str,
) -> Result<BatchStats, BatchError> {
    write_batch(db, spec, aggregations, panes, &[], offsets, group)
}

/// Runs the sink until `shutdown` is set.
pub fn run(spec: PipelineSpec, shutdown: Arc<AtomicBool>) -> Result<(), SinkError> {
    let k: KafkaSpec = spec.kafka.clone().ok_or(SinkError::Missing("kafka"))?;
    let pg = spec
        .postgres
        .clone()
        .ok_or(SinkError::Missing("postgres"))?;
    let aggs = spec.engine.aggregations.clone();
    let group = format!("{}-postgres", k.application_id);
    let Some(mut db) = connect(&pg.url, &shutdown) else {
        return Ok(());
    };
    let decoder = PaneDecoder::new(&spec.output_format, &aggs).map_err(SinkError::Startup)?;
    ensure_tables(&mut db, &pg, &aggs)?;
    if let Some(dt) = &pg.dead_letter_table {
        ensure_table(
            &mut db,
            dt,
            &DEAD_COLUMNS,
            "source_topic, source_partition, source_offset, epoch",
            pg.create_tables,
        )?;
    }
    let mut topics = vec![k.output_topic.clone()];
    if pg.dead_letter_table.is_some() {
        topics.push(k.dead_letter_topic.clone());
    }
    let consumer: BaseConsumer = crate::source::base_config(&k)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .create()
        .map_err(|e| SinkError::Startup(format!("creating the consumer: {e}")))?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&names)
        .map_err(|e| SinkError::Startup(format!("subscribing: {e}")))?;
    let mut readers: BTreeMap<String, TopicReader> = BTreeMap::new();
    let mut follows: BTreeMap<(String, i32), Part> = BTreeMap::new();
    let mut panes: Vec<PaneRow> = Vec::new();
    let mut dead: Vec<DeadRow> = Vec::new();
    let mut last_commit = Instant::now();
    let interval = Duration::from_millis(pg.commit_interval as u64);
    let poll = (interval / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
    let mut failed = false;
    let mut moved = false;
    loop {
        let stopping = shutdown.load(Ordering::Relaxed);
        // The consumer only keeps the membership: its partitions stay paused.
        if let Some(Err(e)) = consumer.poll(if stopping { Duration::ZERO } else { poll }) {
            tracing::warn!("consumer: {e}");
        }
        let assignment = consumer.assignment().unwrap_or_default();
        let _ = consumer.pause(&assignment);
        let assigned: BTreeSet<(String, i32)> = assignment
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        // Partitions that left: write what was read from them first.
        let gone = follows.keys().any(|tp| !assigned.contains(tp));
        let pending = panes.len() + dead.len();
        let write = failed
            || ((pending > 0 || moved)
                && (last_commit.elapsed() >= interval
                    || pending >= pg.max_batch_records
                    || gone
                    || stopping));
        if write {
            let offsets: BTreeMap<(String, i32), i64> = follows
                .iter()
                .map(|(tp, f)| (tp.clone(), f.follow.from))
                .collect();
            let started = Instant::now();
            let result = if failed {
                None
            } else {
                Some(write_batch(
                    &mut db, &pg, &aggs, &panes, &dead, &offsets, &group,
                ))
            };
            match result {
                Some(Ok(s)) => {
                    histogram!(m::SINK_BATCH_DURATION).record(started.elapsed().as_secs_f64());
                    counter!(m::SINK_ROWS, "outcome" => "upserted").increment(s.upserted);
                    counter!(m::SINK_ROWS, "outcome" => "superseded").increment(s.superseded);
                    counter!(m::SINK_ROWS, "outcome" => "deleted").increment(s.deleted);
                    counter!(m::SINK_DEAD_LETTERS).increment(s.dead_letters);
                    for ((t, p), f) in &follows {
                        gauge!(m::SINK_LAG, "topic" => t.clone(), "partition" => p.to_string())
                            .set((f.end - f.follow.from).max(0) as f64);
                    }
                    panes.clear();
                    dead.clear();
                    moved = false;
                }
                other => {
                    if let Some(Err(e)) = other {
                        tracing::warn!("writing a batch to PostgreSQL: {e}; reconnecting, then reading again from the stored offsets");
                    }
                    counter!(m::SINK_RETRIES).increment(1);
                    // Drop the batch and every position: they are taken up again below, from
                    // the offsets stored in PostgreSQL.
                    panes.clear();
                    dead.clear();
                    follows.clear();
                    moved = false;
                    std::thread::sleep(Duration::from_millis(200));
                    match connect(&pg.url, &shutdown) {
                        Some(c) => db = c,
                        None => return Ok(()),
                    }
                    failed = false;
                }
            }
            last_commit = Instant::now();
        }
        if stopping {
            tracing::info!("stopped");
            return Ok(());
        }
        follows.retain(|tp, _| assigned.contains(tp));
        let new: Vec<(String, i32)> = assigned
            .iter()
            .filter(|tp| !follows.contains_key(*tp))
            .cloned()
            .collect();
        if !new.is_empty() {
            match stored_offsets(&mut db, &group) {
                Ok(stored) => {
                    for tp in new {
                        let from = stored.get(&tp).copied().unwrap_or(0);
                        tracing::info!(
                            topic = tp.0,
                            partition = tp.1,
                            from,
                            "partition assigned: reading from the offset stored in PostgreSQL"
                        );
                        follows.insert(
                            tp,
                            Part {
                                follow: Follow::starting_at(from),
                                end: from,
                            },
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!("reading stored offsets: {e}");
                    failed = true;
                    continue;
                }
            }
        }
        // Read what committed since, partition by partition.
        for topic in &topics {
            let parts: Vec<i32> = follows
                .keys()
                .filter(|(t, _)| t == topic)
                .map(|(_, p)| *p)
                .collect();
            if parts.is_empty() {
                continue;
            }
            if !readers.contains_key(topic) {
                match TopicReader::connect(&k.bootstrap_servers, topic) {
                    Ok(r) => {
                        readers.insert(topic.clone(), r);
                    }
                    Err(e) => {
                        tracing::warn!("connecting to read {topic}: {e}");
                        continue;
                    }
                }
            }
            let reader = readers.get_mut(topic).expect("inserted");
            let logs = match reader
                .read_partitions(&parts, |p| follows[&(topic.clone(), p)].follow.from)
            {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("reading {topic}: {e}");
                    readers.remove(topic);
                    continue;
                }
            };
            let dead_topic = *topic == k.dead_letter_topic && pg.dead_letter_table.is_some();
            for (p, log) in logs {
                let f = follows.get_mut(&(topic.clone(), p)).expect("followed");
                let before = f.follow.from;
                for r in f.follow.fresh(&log) {
                    if dead_topic {
                        if let Some(d) = dead_row(r) {
                            dead.push(d);
                        }
                        continue;
                    }
                    match decoder.decode(r) {
                        Ok(row) => panes.push(row),
                        Err(why) => {
                            let detail =
                                format!("{topic}/{p}@{}: pane does not decode: {why}", r.offset);
                            if pg.dead_letter_table.is_none() {
                                return Err(SinkError::Undecodable(format!("{detail} (configure postgres.dead_letter_table to keep such records and go on)")));
                            }
                            tracing::warn!("{detail}");
                            dead.push(DeadRow {
                                topic: topic.clone(),
                                partition: p,
                                offset: r.offset,
                                epoch: epoch_of(r) as i64,
                                reason: "undecodable_pane".into(),
                                detail,
                                watermark: None,
                                late_by_ms: None,
                                key: r.key.as_ref().map(|k| k.to_vec()),
                                value: r.value.as_ref().map(|v| v.to_vec()),
                            });
                        }
                    }
                }
                moved |= f.follow.from != before;
                f.end = log.next_offset;
            }
        }
    }
}
