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
use crate::record::JsonDecoder;
use crate::sink::json::encode_pane;
use crate::state::store::StateStore;
use crate::windowing::engine::{Admission, Engine, EngineError};
use crate::windowing::time::MAX_ABS_TIMESTAMP;
use crate::windowing::watermark::WatermarkTracker;
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

fn watermark_json(wm: i64) -> Value {
    if wm == i64::MIN {
        Value::Null
    } else {
        json!(wm)
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

/// Runs `spec` over `input`, writing panes to `panes` and dead letters to `dead_letters`.
pub fn run(
    spec: &PipelineSpec,
    store: &StateStore,
    input: impl BufRead,
    panes: &mut dyn Write,
    dead_letters: &mut dyn Write,
) -> Result<Summary, SimulateError> {
    let mut engine = Engine::open(spec, store, 0)?;
    let decoder = JsonDecoder::new(spec.input.clone());
    let mut tracker = WatermarkTracker::new(spec.watermark);
    let mut summary = Summary::default();
    let mut now: i64 = 0;

    let mut dead = |summary: &mut Summary,
                    line_no: u64,
                    line: &str,
                    reason: &str,
                    wm: i64,
                    extra: Value|
     -> std::io::Result<()> {
        let mut obj = json!({
            "reason": reason,
            "line": line_no,
            "watermark": watermark_json(wm),
            "original": line,
        });
        if let (Value::Object(o), Value::Object(e)) = (&mut obj, extra) {
            o.extend(e);
        }
        if reason == "late" {
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
        let wm = engine.watermark();
        // A line that is not UTF-8 cannot be an event: a dead letter that keeps its bytes.
        let line = match String::from_utf8(bytes) {
            Ok(line) => line,
            Err(e) => {
                let valid_up_to = e.utf8_error().valid_up_to();
                let bytes = e.into_bytes();
                dead(
                    &mut summary,
                    line_no,
                    &String::from_utf8_lossy(&bytes),
                    "malformed",
                    wm,
                    json!({
                        "detail": format!("not valid UTF-8 (byte {valid_up_to})"),
                        "original_base64": BASE64.encode(&bytes),
                    }),
                )?;
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                dead(
                    &mut summary,
                    line_no,
                    &line,
                    "malformed",
                    wm,
                    json!({"detail": format!("not JSON: {e}")}),
                )?;
                continue;
            }
        };
        if let Some(v) = value.get("$watermark") {
            match control_value(v, "$watermark") {
                Ok(ms) => {
                    let wm = tracker.set_manual(ms);
                    engine.advance_watermark(wm)?;
                }
                Err(detail) => dead(
                    &mut summary,
                    line_no,
                    &line,
                    "malformed",
                    wm,
                    json!({"detail": detail}),
                )?,
            }
        } else if let Some(v) = value.get("$advance_processing_time") {
            match control_value(v, "$advance_processing_time") {
                Ok(ms) if ms >= 0 => {
                    now = now.saturating_add(ms);
                    engine.advance_processing_time(now)?;
                    let wm = tracker.on_processing_time(now);
                    engine.advance_watermark(wm)?;
                }
                Ok(_) | Err(_) => dead(
                    &mut summary,
                    line_no,
                    &line,
                    "malformed",
                    wm,
                    json!({"detail": "$advance_processing_time must be a non-negative integer number of milliseconds"}),
                )?,
            }
        } else {
            match decoder.decode_value(&value) {
                Err(e) => dead(
                    &mut summary,
                    line_no,
                    &line,
                    "malformed",
                    wm,
                    json!({"detail": e.to_string()}),
                )?,
                Ok(ev) => {
                    summary.events += 1;
                    if let Admission::Late { watermark } = engine.process(&ev)? {
                        dead(
                            &mut summary,
                            line_no,
                            &line,
                            "late",
                            watermark,
                            json!({"event_time": ev.ts, "late_by_ms": watermark.saturating_sub(ev.ts)}),
                        )?;
                    }
                    let wm = tracker.on_record(ev.ts, now);
                    engine.advance_watermark(wm)?;
                    if summary.events % FLUSH_EVERY == 0 {
                        engine.flush()?;
                    }
                }
            }
        }
        for pane in engine.take_panes() {
            summary.panes += 1;
            writeln!(panes, "{}", encode_pane(&pane, &spec.aggregations))?;
        }
    }
    engine.finish()?;
    for pane in engine.take_panes() {
        summary.panes += 1;
        writeln!(panes, "{}", encode_pane(&pane, &spec.aggregations))?;
    }
    engine.flush()?;
    panes.flush()?;
    dead_letters.flush()?;
    Ok(summary)
}
