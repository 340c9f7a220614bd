//! Validation of what the windowing core runs: the window, allowed lateness, watermark, trigger
//! and aggregations.

use super::checker::Checker;
use super::{RawConfig, RawWindow};
use crate::format::pane::RESERVED_FIELDS as RESERVED_PANE_FIELDS;
use crate::windowing::aggregate::{self, AggSpec, Input, Params};
use crate::windowing::assigner::WindowKind;
use crate::windowing::spec::{EngineSpec, RecordBudget};
use crate::windowing::time::format_duration;
use crate::windowing::trigger::{Accumulation, LateFiring, TriggerSpec};
use crate::windowing::watermark::WatermarkSpec;

/// The validated lateness, watermark and trigger.
#[derive(Debug)]
pub(super) struct Timing {
    pub(super) allowed_lateness: i64,
    pub(super) watermark: WatermarkSpec,
    pub(super) trigger: TriggerSpec,
}

impl Timing {
    /// The engine's spec, with the window and aggregations validated beside it.
    pub(super) fn into_engine(
        self,
        name: String,
        window: WindowKind,
        aggregations: Vec<AggSpec>,
    ) -> EngineSpec {
        EngineSpec {
            name,
            window,
            allowed_lateness: self.allowed_lateness,
            watermark: self.watermark,
            trigger: self.trigger,
            aggregations,
            having: None,
            cache: Default::default(),
        }
    }
}

/// A count of elements: `Some(None)` when absent, `Some(Some(n))` for a valid count, `None` after
/// a violation.
fn count(c: &mut Checker, field: &str, raw: Option<i64>) -> Option<Option<u32>> {
    match raw {
        None => Some(None),
        Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => Some(Some(n as u32)),
        Some(n) => {
            c.fail(
                field,
                format!("must be a whole number from 1 to {}, got {n}", u32::MAX),
            );
            None
        }
    }
}

pub(super) fn validate_window(cfg: &RawConfig, c: &mut Checker) -> Option<WindowKind> {
    let Some(window) = &cfg.window else {
        if cfg.columns.is_empty() {
            c.fail(
                "window",
                "missing: a pipeline either windows ([window] and [[aggregations]]) or writes one row per record ([[columns]])",
            );
            return None;
        }
        // A pipeline of rows runs no window; the engine's spec it carries is never read.
        return Some(WindowKind::Global { idle_expiry: None });
    };
    match window {
        RawWindow::Tumbling { size, offset } => {
            let size = c.duration("window.size", Some(size), 0, true);
            let offset = c.duration("window.offset", offset.as_deref(), 0, false);
            let (size, offset) = (size?, offset?);
            if offset >= size {
                c.fail(
                    "window.offset",
                    format!("must be shorter than the size ({})", format_duration(size)),
                );
                return None;
            }
            Some(WindowKind::Tumbling { size, offset })
        }
        RawWindow::Sliding {
            size,
            slide,
            offset,
        } => {
            let size = c.duration("window.size", Some(size), 0, true);
            let slide = c.duration("window.slide", Some(slide), 0, true);
            let offset = c.duration("window.offset", offset.as_deref(), 0, false);
            let (size, slide, offset) = (size?, slide?, offset?);
            if slide > size {
                c.fail(
                    "window.slide",
                    format!(
                        "slide ({}) is longer than size ({}): events would fall between windows",
                        format_duration(slide),
                        format_duration(size)
                    ),
                );
                return None;
            }
            if offset >= slide {
                c.fail(
                    "window.offset",
                    format!(
                        "must be shorter than the slide ({})",
                        format_duration(slide)
                    ),
                );
                return None;
            }
            if size / slide > 100 {
                c.warnings.push(format!(
                    "window.slide: size/slide = {}: every event is in that many windows and every key emits a pane per slide",
                    size / slide
                ));
            }
            Some(WindowKind::Sliding {
                size,
                slide,
                offset,
            })
        }
        RawWindow::Cumulate { size, step, offset } => {
            let size = c.duration("window.size", Some(size), 0, true);
            let step = c.duration("window.step", Some(step), 0, true);
            let offset = c.duration("window.offset", offset.as_deref(), 0, false);
            let (size, step, offset) = (size?, step?, offset?);
            if size % step != 0 {
                c.fail(
                    "window.step",
                    format!(
                        "the size ({}) must be a whole number of steps ({})",
                        format_duration(size),
                        format_duration(step)
                    ),
                );
                return None;
            }
            if offset >= size {
                c.fail(
                    "window.offset",
                    format!("must be shorter than the size ({})", format_duration(size)),
                );
                return None;
            }
            if size / step > 100 {
                c.warnings.push(format!(
                    "window.step: size/step = {}: every event is in up to that many windows",
                    size / step
                ));
            }
            Some(WindowKind::Cumulate { size, step, offset })
        }
        RawWindow::Session {
            gap,
            merge_touching,
        } => {
            let gap = c.duration("window.gap", Some(gap), 0, true)?;
            Some(WindowKind::Session {
                gap,
                merge_touching: *merge_touching,
            })
        }
        RawWindow::Global { idle_expiry } => {
            let idle_expiry = match idle_expiry {
                None => {
                    c.warnings.push(
                        "window.idle_expiry: not set, so a global window keeps the state of every key it ever saw; set it to drop keys that went quiet".into(),
                    );
                    None
                }
                Some(raw) => Some(c.duration("window.idle_expiry", Some(raw), 0, true)?),
            };
            Some(WindowKind::Global { idle_expiry })
        }
    }
}

/// The rules that tie the trigger to the window kind: a global window never reaches its end,
/// so it needs an early trigger and has nothing late.
pub(super) fn validate_trigger_for_window(
    cfg: &RawConfig,
    window: Option<WindowKind>,
    timing: Option<&Timing>,
    c: &mut Checker,
) {
    let (Some(window), Some(t), Some(_)) = (window, timing, &cfg.window) else {
        return; // (a pipeline of rows has no window; its own rules are checked apart)
    };
    match window {
        WindowKind::Global { .. } => {
            if t.trigger.early_every.is_none() && t.trigger.early_count.is_none() {
                c.fail(
                    "trigger",
                    "a global window never reaches its end, so with only the default trigger it never fires: set trigger.early_count, trigger.early_every or both",
                );
            }
            if cfg.trigger.late_count.is_some() {
                c.fail(
                    "trigger.late_count",
                    "a global window never closes, so no element is late: remove late_count",
                );
            }
            if t.allowed_lateness > 0 {
                c.fail(
                    "allowed_lateness",
                    "a global window never closes, so nothing is late: remove allowed_lateness (use window.idle_expiry to drop quiet keys)",
                );
            }
        }
        WindowKind::Sliding { size, slide, .. } => {
            if t.trigger.early_every.is_some() || t.trigger.counts() {
                c.warnings.push(format!(
                    "sliding window with early or counted firings: every window keeps its own state (size/slide = {} copies per event), not shared slices",
                    size / slide
                ));
            }
        }
        WindowKind::Tumbling { .. } | WindowKind::Cumulate { .. } | WindowKind::Session { .. } => {}
    }
}

/// `allowed_lateness`, `[watermark]` and `[trigger]`; `None` after a violation.
pub(super) fn validate_timing(cfg: &RawConfig, c: &mut Checker) -> Option<Timing> {
    let allowed_lateness = c.duration(
        "allowed_lateness",
        cfg.allowed_lateness.as_deref(),
        0,
        false,
    );
    let ooo = c.duration(
        "watermark.max_out_of_orderness",
        cfg.watermark.max_out_of_orderness.as_deref(),
        0,
        false,
    );
    let processing_time = cfg.input.time.as_deref() == Some("processing");
    if processing_time {
        for (field, set) in [
            (
                "watermark.max_out_of_orderness",
                cfg.watermark.max_out_of_orderness.is_some(),
            ),
            (
                "watermark.idle_timeout",
                cfg.watermark.idle_timeout.is_some(),
            ),
        ] {
            if set {
                c.fail(
                    field,
                    "with time = \"processing\" the watermark is the processing-time clock: remove it",
                );
            }
        }
    }
    let idle = match &cfg.watermark.idle_timeout {
        None => Some(None),
        Some(raw) => c
            .duration("watermark.idle_timeout", Some(raw), 0, true)
            .map(Some),
    };
    let early = match &cfg.trigger.early_every {
        None => Some(None),
        Some(raw) => c
            .duration("trigger.early_every", Some(raw), 0, true)
            .map(Some),
    };
    let early_count = count(c, "trigger.early_count", cfg.trigger.early_count);
    let late_count = count(c, "trigger.late_count", cfg.trigger.late_count);
    let late = match (cfg.trigger.late.as_deref(), late_count) {
        (_, None) => None,
        (None, Some(n)) => Some(LateFiring::from_count(n)),
        (Some("every_element"), Some(Some(1))) => Some(LateFiring::EveryElement),
        (Some("every_element"), Some(Some(_))) => {
            c.fail(
                "trigger.late_count",
                "late = \"every_element\" means late_count = 1: set one of them",
            );
            None
        }
        (Some("none"), Some(Some(_))) => {
            c.fail(
                "trigger.late_count",
                "late = \"none\" fires no late pane: remove late_count, or late",
            );
            None
        }
        (Some("every_element"), Some(None)) => Some(LateFiring::EveryElement),
        (Some("none"), Some(None)) => Some(LateFiring::None),
        (Some(other), _) => {
            c.fail(
                "trigger.late",
                format!("must be \"every_element\" or \"none\", got {other:?}"),
            );
            None
        }
    };
    let accumulation = match cfg.trigger.accumulation.as_deref() {
        None | Some("accumulating") => Some(Accumulation::Accumulating),
        Some("discarding") => Some(Accumulation::Discarding),
        Some(other) => {
            c.fail(
                "trigger.accumulation",
                format!("must be \"accumulating\" or \"discarding\", got {other:?}"),
            );
            None
        }
    };

    Some(Timing {
        allowed_lateness: allowed_lateness?,
        watermark: WatermarkSpec {
            max_out_of_orderness: ooo?,
            idle_timeout: idle?,
            processing_time,
        },
        trigger: TriggerSpec {
            early_every: early?,
            early_count: early_count?,
            late: late?,
            accumulation: accumulation?,
        },
    })
}

/// One distinct input expression of the aggregations, as written.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FieldRead {
    /// The expression's text.
    pub text: String,
    /// Whether an aggregation reads it as a number.
    pub numeric: bool,
    /// The longest string an aggregation reading it may keep ([`RecordBudget::longest_value`]).
    pub longest: Option<usize>,
}

/// `[[aggregations]]`: the valid aggregations, and the distinct input expressions they
/// read (aggregations refer to them by index; `validate_input` compiles them). Operations that
/// keep values get their share of a record of `record_bytes` ([`RecordBudget`]).
pub(super) fn validate_aggregations(
    cfg: &RawConfig,
    record_bytes: usize,
    c: &mut Checker,
) -> (Vec<AggSpec>, Vec<FieldRead>) {
    let mut fields: Vec<FieldRead> = Vec::new();
    let mut aggregations = Vec::new();
    if cfg.aggregations.is_empty() && cfg.columns.is_empty() {
        c.fail("aggregations", "at least one aggregation is required");
    } else if cfg.aggregations.len() > aggregate::MAX_AGGREGATIONS {
        c.fail(
            "aggregations",
            format!(
                "{} aggregations are more than the {} one pipeline may have",
                cfg.aggregations.len(),
                aggregate::MAX_AGGREGATIONS
            ),
        );
    }
    for (i, agg) in cfg.aggregations.iter().enumerate() {
        let at = format!("aggregations[{i}]");
        if agg.name.is_empty() {
            c.fail(&format!("{at}.name"), "must not be empty");
        } else if RESERVED_PANE_FIELDS.contains(&agg.name.as_str()) {
            c.fail(
                &format!("{at}.name"),
                format!(
                    "{:?} is a built-in pane field; choose another name",
                    agg.name
                ),
            );
        } else if cfg.aggregations[..i].iter().any(|a| a.name == agg.name) {
            c.fail(
                &format!("{at}.name"),
                format!("duplicate output name {:?}", agg.name),
            );
        }
        let params = Params {
            q: agg.q,
            k: agg.k,
            precision: agg.precision,
            relative_error: agg.relative_error,
            max_values: agg.max_values,
            max_bytes: None,
        };
        let op = match aggregate::operation(agg.op.trim(), &params) {
            Ok(op) => Some(op),
            Err(why) => {
                c.fail(&format!("{at}.op"), why);
                None
            }
        };
        let field = match (op.as_ref().map(|o| o.input()), &agg.field) {
            (Some(Input::Nothing), Some(_)) => {
                c.fail(&format!("{at}.field"), format!("{} takes no field", agg.op));
                None
            }
            (Some(Input::Nothing), None) | (None, _) => None,
            (Some(input), None) => {
                let what = if input == Input::Number {
                    "a numeric field"
                } else {
                    "a field"
                };
                c.fail(&format!("{at}.field"), format!("{} needs {what}", agg.op));
                None
            }
            (Some(input), Some(text)) => {
                let text = text.trim().to_string();
                let numeric = input == Input::Number;
                let idx = match fields.iter().position(|f| f.text == text) {
                    Some(i) => {
                        fields[i].numeric |= numeric;
                        i
                    }
                    None => {
                        fields.push(FieldRead {
                            text,
                            numeric,
                            longest: None,
                        });
                        fields.len() - 1
                    }
                };
                Some(idx)
            }
        };
        if let Some(note) = op.as_ref().and_then(|o| o.state_note()) {
            c.warnings.push(format!("{at} ({}): {note}", agg.op));
        }
        if let Some(op) = op {
            aggregations.push((
                AggSpec {
                    name: agg.name.clone(),
                    op,
                    field,
                },
                params,
            ));
        }
    }

    share_record(&mut aggregations, &mut fields, record_bytes, c);
    (aggregations.into_iter().map(|(a, _)| a).collect(), fields)
}

/// Gives each operation that keeps values its share of a record of `record_bytes`, and each
/// field the longest string its readers may keep; a violation when the record is too small.
fn share_record(
    aggregations: &mut [(AggSpec, Params)],
    fields: &mut [FieldRead],
    record_bytes: usize,
    c: &mut Checker,
) {
    let budget = match RecordBudget::new(record_bytes, aggregations.iter().map(|a| &*a.0.op)) {
        Ok(b) => b,
        Err(e) => return c.fail("aggregations", e.to_string()),
    };
    for (agg, params) in aggregations.iter_mut() {
        let Some(longest) = budget.longest_value(&*agg.op) else {
            continue;
        };
        if let Some(f) = agg.field.and_then(|i| fields.get_mut(i)) {
            f.longest = Some(f.longest.map_or(longest, |l| l.min(longest)));
        }
        params.max_bytes = Some(budget.share);
        match aggregate::operation(agg.op.name(), params) {
            Ok(op) => agg.op = op,
            Err(why) => c.fail("aggregations", why),
        }
    }
}

/// `having`: a condition over the aggregations' names, compiled; `None` when absent or after a
/// violation.
pub(super) fn validate_having(
    cfg: &RawConfig,
    aggregations: &[AggSpec],
    c: &mut Checker,
) -> Option<std::sync::Arc<crate::windowing::having::Having>> {
    let text = cfg.having.as_deref()?;
    match crate::windowing::having::Having::compile(text, aggregations) {
        Ok(h) => Some(std::sync::Arc::new(h)),
        Err(why) => {
            c.fail("having", format!("{text:?}: {why}"));
            None
        }
    }
}
