//! `tidemark simulate`: runs a pipeline over files of records, deterministically, without Kafka.
//!
//! Each input line is a record as it would appear on the topic, or a control line. Records are
//! decoded by the decoder `tidemark run` uses ([`crate::input::decode::Decoder`]): under JSON
//! input each line is the record's value; under Avro input each line is the **base64** of the
//! value's bytes (a plain datum, or Confluent-framed), and Confluent schema ids resolve against
//! `input.schema_ids` or the Schema Registry, as in `run`. Control lines are JSON objects:
//! `{"$watermark": MS}` sets the watermark of the input it appears in (from then on only such lines
//! move it) and `{"$advance_processing_time": MS}` moves the processing-time clock (which starts
//! at 0) forward. At end of input the watermark goes to plus infinity, so every remaining window
//! fires. A record's Kafka timestamp (what `timestamp = "$record_timestamp"` reads) is the
//! processing-time clock when the line is read, as if the broker stamped it on arrival, unless
//! the line is an envelope: `{"$record_timestamp": MS, "$value": RECORD}` with the JSON record
//! (or, under Avro input, the base64 of its bytes) in `$value`.
//!
//! **Several inputs** (`--input` more than once) are several watermark sources, as the input
//! partitions of a pipeline that repartitions are: the engine's watermark is the minimum over the
//! inputs that are not idle (see [`crate::windowing::watermark`]). They are read in turns, one
//! line of each input in the order given, skipping inputs that have ended, so a run is
//! reproducible byte for byte. An input that has ended keeps its watermark (it is idle only once
//! processing time has moved past its last record by the idle timeout).
//!
//! Panes are written as JSON lines; dead letters (reason `late` or `malformed`) carry the original
//! line, its number (and its input's name when there are several) and the watermark when it
//! arrived. No input line stops a simulation: a line that is not valid UTF-8 is a `malformed`
//! dead letter that also keeps its bytes (`original_base64`).

use crate::config::PipelineSpec;
use crate::format::dead_letter::pane_too_large;
use crate::format::pane::{self, KeyShape};
use crate::format::row::RowOutcome;
use crate::input::avro::SchemaRegistry;
use crate::input::decode::Decoder;
use crate::input::{DecodeError, Meta};
use crate::pipeline::{Decoded, Reason, Rejection, Step};
use crate::windowing::aggregate::AggSpec;
use crate::windowing::backend::StateBackend;
use crate::windowing::engine::{EngineError, Pane};
use crate::windowing::time::MAX_ABS_TIMESTAMP;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use tidemark_sql::OutColumn;

/// How often (in events) the engine's state is flushed to RocksDB during a simulation. One
/// flush writes every state changed since the last as one batch, so a longer stretch coalesces
/// more changes to one key into one write; the dirty states it holds meanwhile are bounded by
/// this many events.
pub const FLUSH_EVERY: u64 = 100_000;

/// Errors that stop a simulation (bad input lines never do: they become dead letters).
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// Reading input or writing output failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The engine (its state store) failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The decoder could not be built, or a service it needs (the Schema Registry) is down.
    #[error("decoder: {0}")]
    Decoder(String),
}

/// What a simulation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Input lines read (blank lines included).
    pub lines: u64,
    /// Events decoded.
    pub events: u64,
    /// Panes written.
    pub panes: u64,
    /// Dead letters written, reason `late`.
    pub late: u64,
    /// Dead letters written for any other reason (`malformed`, `expression`, ...).
    pub malformed: u64,
    /// Records the pipeline's filter rejected.
    pub filtered: u64,
}

/// One input of a simulation: its name (in dead letters, and as the watermark source) and its
/// lines.
pub struct Input<'a> {
    /// The input's name.
    pub name: String,
    /// Its lines.
    pub reader: Box<dyn BufRead + 'a>,
}

impl<'a> Input<'a> {
    /// An input named `name` over `reader`.
    pub fn new(name: impl Into<String>, reader: impl BufRead + 'a) -> Input<'a> {
        Input {
            name: name.into(),
            reader: Box::new(reader),
        }
    }
}

/// Why a control line was rejected.
fn control_value(v: &Value, name: &str) -> Result<i64, String> {
    match v.as_i64() {
        Some(ms) if ms.unsigned_abs() <= MAX_ABS_TIMESTAMP as u64 => Ok(ms),
        _ => Err(format!(
            "{name} must be an integer number of milliseconds within range"
        )),
    }
}

/// A control line.
enum Control {
    /// `{"$watermark": MS}`.
    Watermark(i64),
    /// `{"$advance_processing_time": MS}`.
    Advance(i64),
}

/// The control line `v` is, `None` when it is not one, or why it is rejected.
fn control(v: &Value) -> Option<Result<Control, String>> {
    if let Some(w) = v.get("$watermark") {
        return Some(control_value(w, "$watermark").map(Control::Watermark));
    }
    let a = v.get("$advance_processing_time")?;
    Some(match control_value(a, "$advance_processing_time") {
        Ok(ms) if ms >= 0 => Ok(Control::Advance(ms)),
        _ => Err(
            "$advance_processing_time must be a non-negative integer number of milliseconds"
                .to_string(),
        ),
    })
}

/// What a line is.
enum Line {
    /// A control line, or why it is not a valid one.
    Control(Result<Control, String>),
    /// A record as the decoder left it.
    Record(Decoded),
}

/// A record wrapped with the Kafka record timestamp it would carry:
/// `{"$record_timestamp": MS, "$value": VALUE}`, where `VALUE` is the JSON record (JSON input) or
/// the base64 of its bytes (Avro input).
const ENVELOPE_TIMESTAMP: &str = "$record_timestamp";

/// Reads one line at processing time `now`: control lines and envelopes are recognised by their
/// `$` keys (JSON input) or as the JSON objects among base64 lines (Avro input); records go
/// through the run decoder. A record's Kafka timestamp is its envelope's, or else the clock's
/// (as if the broker stamped it on arrival).
fn classify(
    decoder: &mut Decoder,
    line: &str,
    avro: bool,
    now: i64,
) -> Result<Line, SimulateError> {
    let malformed = |detail: String| Ok(Line::Record(Err((Reason::Malformed, detail))));
    let maybe_control = if avro {
        line.trim_start().starts_with('{')
    } else {
        line.contains("\"$watermark\"")
            || line.contains("\"$advance_processing_time\"")
            || line.contains("\"$record_timestamp\"")
    };
    let mut meta = Meta {
        record_timestamp: Some(now),
        now,
    };
    let mut enveloped = None;
    if maybe_control {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => match (control(&v), v.get(ENVELOPE_TIMESTAMP)) {
                (Some(c), _) => return Ok(Line::Control(c)),
                (None, Some(ts)) => {
                    let ts = match control_value(ts, ENVELOPE_TIMESTAMP) {
                        Ok(ts) => ts,
                        Err(e) => return malformed(e),
                    };
                    meta.record_timestamp = Some(ts);
                    enveloped = Some(match (v.get("$value"), avro) {
                        (Some(Value::String(b64)), true) => match BASE64.decode(b64.trim()) {
                            Ok(b) => b,
                            Err(e) => return malformed(format!("not base64: {e}")),
                        },
                        (Some(value @ Value::Object(_)), false) => value.to_string().into_bytes(),
                        _ => {
                            return malformed(format!(
                                "an envelope holds the record in \"$value\": {}",
                                if avro {
                                    "the base64 of its bytes"
                                } else {
                                    "a JSON object"
                                }
                            ))
                        }
                    });
                }
                (None, None) if avro => {
                    return malformed(
                        "a JSON line among Avro records is not a control line".to_string(),
                    )
                }
                (None, None) => {}
            },
            Err(e) if avro => return malformed(format!("not JSON: {e}")),
            Err(_) => {}
        }
    }
    let bytes = match enveloped {
        Some(b) => b,
        None if avro => match BASE64.decode(line.trim()) {
            Ok(b) => b,
            Err(e) => return malformed(format!("not base64: {e}")),
        },
        None => line.as_bytes().to_vec(),
    };
    match decoder.decode(&bytes, meta) {
        Ok(ev) => Ok(Line::Record(Ok(ev))),
        Err(DecodeError::Unavailable(e)) => Err(SimulateError::Decoder(e)),
        Err(e) => Ok(Line::Record(Err((e.reason(), e.to_string())))),
    }
}

/// Runs `spec` over one input, writing panes to `panes` and dead letters to `dead_letters`.
pub fn run<S: StateBackend + Clone + 'static>(
    spec: &PipelineSpec,
    store: &S,
    input: impl BufRead,
    panes: &mut dyn Write,
    dead_letters: &mut dyn Write,
) -> Result<Summary, SimulateError> {
    run_inputs(
        spec,
        store,
        vec![Input::new("input", input)],
        panes,
        dead_letters,
    )
}

/// Runs `spec` over several inputs read in turns, writing panes to `panes` and dead letters to
/// `dead_letters`. Every record goes through the same [`Step`] as a record of `tidemark run`.
pub fn run_inputs<S: StateBackend + Clone + 'static>(
    spec: &PipelineSpec,
    store: &S,
    inputs: Vec<Input<'_>>,
    panes: &mut dyn Write,
    dead_letters: &mut dyn Write,
) -> Result<Summary, SimulateError> {
    run_query(spec, store, inputs, panes, dead_letters, None)
}

/// As [`run_inputs`], writing each pane as the row of a SQL query's `columns` when given
/// ([`crate::format::row::sql_row`]).
pub fn run_query<S: StateBackend + Clone + 'static>(
    spec: &PipelineSpec,
    store: &S,
    mut inputs: Vec<Input<'_>>,
    panes: &mut dyn Write,
    dead_letters: &mut dyn Write,
    columns: Option<&[OutColumn]>,
) -> Result<Summary, SimulateError> {
    let registry = match &spec.schema_registry {
        None => None,
        Some(r) => Some(
            SchemaRegistry::open(&r.url, r.access.clone())
                .map_err(|e| SimulateError::Decoder(e.to_string()))?,
        ),
    };
    let mut decoder = Decoder::new(&spec.input, spec.avro_input.as_ref(), registry)
        .map_err(|e| SimulateError::Decoder(e.to_string()))?;
    let avro = spec.avro_input.is_some();
    let names: Vec<String> = inputs.iter().map(|i| i.name.clone()).collect();
    let several = inputs.len() > 1;
    // No future-timestamp guard: the simulated clock starts at 0.
    let mut step = Step::open(&spec.engine, store, 0, &names, None, 0)?;
    let mut out = Out {
        panes,
        dead_letters,
        several,
        aggregations: &spec.engine.aggregations,
        shape: KeyShape::of(spec.input.key.len()),
        record_bytes: spec.record_bytes,
        columns,
    };
    let mut summary = Summary::default();
    let mut now: i64 = 0;
    let mut line_numbers = vec![0u64; inputs.len()];
    let mut ended = vec![false; inputs.len()];

    let mut buf = Vec::new();
    while ended.iter().any(|e| !e) {
        for i in 0..inputs.len() {
            if ended[i] {
                continue;
            }
            buf.clear();
            if inputs[i].reader.read_until(b'\n', &mut buf)? == 0 {
                ended[i] = true;
                continue;
            }
            if buf.last() == Some(&b'\n') {
                buf.pop();
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            summary.lines += 1;
            line_numbers[i] += 1;
            let line_no = line_numbers[i];
            // What the line is: a control line (handled here), or a record that decoded or not.
            let (line, decoded, extra) = match String::from_utf8(std::mem::take(&mut buf)) {
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => match classify(&mut decoder, &line, avro, now)? {
                    Line::Control(Ok(c)) => {
                        let fired = match c {
                            Control::Watermark(ms) => step.set_watermark(i, ms)?,
                            Control::Advance(ms) => {
                                now = now.saturating_add(ms);
                                step.tick(now, true)?
                            }
                        };
                        out.panes(&mut summary, fired)?;
                        continue;
                    }
                    Line::Control(Err(detail)) => {
                        (line, Err((Reason::Malformed, detail)), Value::Null)
                    }
                    Line::Record(decoded) => (line, decoded, Value::Null),
                },
                // A line that is not UTF-8 cannot be an event: a dead letter that keeps its bytes.
                Err(e) => {
                    let detail = format!("not valid UTF-8 (byte {})", e.utf8_error().valid_up_to());
                    let bytes = e.into_bytes();
                    let extra = json!({"original_base64": BASE64.encode(&bytes)});
                    (
                        String::from_utf8_lossy(&bytes).into_owned(),
                        Err((Reason::Malformed, detail)),
                        extra,
                    )
                }
            };
            if let Some(rows) = &spec.rows {
                // A pipeline of rows: each record is a row at once, with no window to wait for.
                match rows.record(decoded, spec.record_bytes) {
                    RowOutcome::Filtered => summary.filtered += 1,
                    RowOutcome::Rejected(r) => {
                        out.dead(&mut summary, &inputs[i].name, line_no, &line, r, extra)?
                    }
                    RowOutcome::Row(row) => {
                        summary.events += 1;
                        summary.panes += 1;
                        writeln!(out.panes, "{row}")?;
                    }
                }
                continue;
            }
            let is_event = matches!(decoded, Ok(Some(_)));
            let did = step.record(i, decoded, now)?;
            if did.filtered {
                summary.filtered += 1;
            }
            if let Some(r) = did.rejection {
                out.dead(&mut summary, &inputs[i].name, line_no, &line, r, extra)?;
            }
            out.panes(&mut summary, did.panes)?;
            if is_event {
                summary.events += 1;
                if summary.events % FLUSH_EVERY == 0 {
                    step.engine_mut().flush()?;
                }
            }
        }
    }
    let fired = step.finish()?;
    out.panes(&mut summary, fired)?;
    step.engine_mut().flush()?;
    out.panes.flush()?;
    out.dead_letters.flush()?;
    Ok(summary)
}

/// Where a simulation writes: panes and dead letters as JSON lines.
struct Out<'w> {
    panes: &'w mut dyn Write,
    dead_letters: &'w mut dyn Write,
    /// Whether there are several inputs (dead letters then name theirs).
    several: bool,
    aggregations: &'w [AggSpec],
    shape: KeyShape,
    /// The bytes one output record may take ([`PipelineSpec::record_bytes`]).
    record_bytes: usize,
    /// A SQL query's columns: panes are written as its rows.
    columns: Option<&'w [OutColumn]>,
}

impl Out<'_> {
    /// Writes the dead letter of line `line_no` of `input`, rejected as `r`, with `extra`
    /// fields.
    fn dead(
        &mut self,
        summary: &mut Summary,
        input: &str,
        line_no: u64,
        line: &str,
        r: Rejection,
        extra: Value,
    ) -> std::io::Result<()> {
        let mut obj = json!({
            "reason": r.reason.as_str(),
            "line": line_no,
            "watermark": r.watermark,
            "original": line,
        });
        let more = match r.reason {
            Reason::Late => json!({"event_time": r.event_time, "late_by_ms": r.late_by_ms}),
            _ => json!({"detail": crate::format::dead_letter::bounded_detail(r.detail)}),
        };
        let input = if self.several {
            json!({ "input": input })
        } else {
            Value::Null
        };
        for e in [more, extra, input] {
            if let (Value::Object(o), Value::Object(e)) = (&mut obj, e) {
                o.extend(e);
            }
        }
        if r.reason == Reason::Late {
            summary.late += 1;
        } else {
            summary.malformed += 1;
        }
        writeln!(self.dead_letters, "{obj}")
    }

    /// Writes `panes`; one too large for an output record becomes a `too_large` dead letter
    /// naming it, as in `run`.
    fn panes(&mut self, summary: &mut Summary, panes: Vec<Pane>) -> std::io::Result<()> {
        for p in panes {
            // A SQL query writes rows, not pane lines: a pane's line is written only when its
            // bound does not show it small enough, to find whether `run` would refuse it.
            let small = self.columns.is_some()
                && p.key.len() + pane::json_len_bound(&p, self.aggregations) <= self.record_bytes;
            let line = if small {
                String::new()
            } else {
                pane::to_json(&p, 0, self.aggregations, self.shape)
            };
            let bytes = p.key.len() + line.len();
            if let Some(detail) = pane_too_large(bytes, self.record_bytes) {
                summary.malformed += 1;
                let obj = json!({
                    "reason": Reason::TooLarge.as_str(),
                    "detail": detail,
                    "dedup_id": p.dedup_id.as_str(),
                    "window_start": p.window.start,
                    "window_end": p.window.end,
                    "pane_index": p.pane_index,
                    "timing": p.timing.as_str(),
                });
                writeln!(self.dead_letters, "{obj}")?;
                continue;
            }
            summary.panes += 1;
            match self.columns {
                None => writeln!(self.panes, "{line}")?,
                // A RETRACT voids a window's row (a session merge, a pane failing HAVING): it
                // is no row of its own.
                Some(_) if p.timing == crate::windowing::trigger::Timing::Retract => {}
                Some(columns) => {
                    let row =
                        crate::format::row::sql_row(&p, self.aggregations, columns, self.shape);
                    writeln!(self.panes, "{row}")?
                }
            }
        }
        Ok(())
    }
}
