//! `tidemark simulate`: runs a pipeline over a file of events, deterministically, without Kafka.
//!
//! Each input line is an event as it would appear on the topic, or a control line:
//! `{"$watermark": MS}` sets the watermark (from the first such line on, only these lines move it)
//! and `{"$advance_processing_time": MS}` moves the processing-time clock (which starts at 0)
//! forward. At end of input the watermark goes to plus infinity, so every remaining window fires.
//! Panes are written as JSON lines; dead letters (reason `late` or `malformed`) carry the original
//! line, its number and the watermark when it arrived. No input line stops a simulation: a line
//! that is not valid UTF-8 is a `malformed` dead letter that also keeps its bytes
//! (`original_base64`).

use crate::config::PipelineSpec;
use crate::pipeline::{Reason, Rejection, Step};
use crate::record::JsonDecoder;
use crate::sink::json::encode_pane;
use crate::state::store::StateStore;
use crate::windowing::aggregate::AggSpec;
use crate::windowing::engine::{EngineError, Pane};
use crate::windowing::time::MAX_ABS_TIMESTAMP;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{BufRead, Write};

/// How often (in events) the engine's state is flushed to RocksDB during a simulation.
pub const FLUSH_EVERY: u64 = 10_000;

/// Errors that stop a simulation (bad input lines never do: they become dead letters).
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// Reading input or writing output failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The engine (its state store) failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
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
    /// Dead letters written, reason `malformed`.
    pub malformed: u64,
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

/// Runs `spec` over `input`, writing panes to `panes` and dead letters to `dead_letters`. Every
/// line goes through the same [`Step`] as a record of `tidemark run`.
pub fn run(
    spec: &PipelineSpec,
    store: &StateStore,
    input: impl BufRead,
    panes: &mut dyn Write,
    dead_letters: &mut dyn Write,
) -> Result<Summary, SimulateError> {
    // No future-timestamp guard: the simulated clock starts at 0.
    let mut step = Step::open(&spec.engine, store, 0, None)?;
    let decoder = JsonDecoder::new(spec.input.clone());
    let aggregations = &spec.engine.aggregations;
    let mut summary = Summary::default();
    let mut now: i64 = 0;

    let mut dead = |summary: &mut Summary,
                    line_no: u64,
                    line: &str,
                    r: Rejection,
                    extra: Value|
     -> std::io::Result<()> {
        let mut obj = json!({
            "reason": r.reason.as_str(),
            "line": line_no,
            "watermark": r.watermark,
            "original": line,
        });
        let more = match r.reason {
            Reason::Late => json!({"event_time": r.event_time, "late_by_ms": r.late_by_ms}),
            _ => json!({"detail": r.detail}),
        };
        for e in [more, extra] {
            if let (Value::Object(o), Value::Object(e)) = (&mut obj, e) {
                o.extend(e);
            }
        }
        if r.reason == Reason::Late {
            summary.late += 1;
        } else {
            summary.malformed += 1;
        }
        writeln!(dead_letters, "{obj}")
    };

    for bytes in input.split(b'\n') {
        let mut bytes = bytes?;
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        summary.lines += 1;
        let line_no = summary.lines;
        // What the line is: a control line (handled here), or a record that decoded or did not.
        let (line, decoded, extra) = match String::from_utf8(bytes) {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => {
                let decoded = match serde_json::from_str::<Value>(&line) {
                    Err(e) => Err(format!("not JSON: {e}")),
                    Ok(value) => match control(&value) {
                        None => decoder.decode_value(&value).map_err(|e| e.to_string()),
                        Some(Err(detail)) => Err(detail),
                        Some(Ok(c)) => {
                            let fired = match c {
                                Control::Watermark(ms) => step.set_watermark(ms)?,
                                Control::Advance(ms) => {
                                    now = now.saturating_add(ms);
                                    step.tick(now)?
                                }
                            };
                            write_panes(&mut summary, panes, fired, aggregations)?;
                            continue;
                        }
                    },
                };
                (line, decoded, Value::Null)
            }
            // A line that is not UTF-8 cannot be an event: a dead letter that keeps its bytes.
            Err(e) => {
                let detail = format!("not valid UTF-8 (byte {})", e.utf8_error().valid_up_to());
                let bytes = e.into_bytes();
                let extra = json!({"original_base64": BASE64.encode(&bytes)});
                (
                    String::from_utf8_lossy(&bytes).into_owned(),
                    Err(detail),
                    extra,
                )
            }
        };
        let is_event = decoded.is_ok();
        let out = step.record(decoded, now)?;
        if let Some(r) = out.rejection {
            dead(&mut summary, line_no, &line, r, extra)?;
        }
        write_panes(&mut summary, panes, out.panes, aggregations)?;
        if is_event {
            summary.events += 1;
            if summary.events % FLUSH_EVERY == 0 {
                step.engine_mut().flush()?;
            }
        }
    }
    let fired = step.finish()?;
    write_panes(&mut summary, panes, fired, aggregations)?;
    step.engine_mut().flush()?;
    panes.flush()?;
    dead_letters.flush()?;
    Ok(summary)
}

fn write_panes(
    summary: &mut Summary,
    out: &mut dyn Write,
    panes: Vec<Pane>,
    aggregations: &[AggSpec],
) -> std::io::Result<()> {
    for pane in panes {
        summary.panes += 1;
        writeln!(out, "{}", encode_pane(&pane, 0, aggregations))?;
    }
    Ok(())
}
