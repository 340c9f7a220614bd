//! Triggers: when panes fire and what they hold.
//!
//! The on-time pane always fires when the watermark reaches the window end. Early panes fire after a
//! processing-time delay counted from the first element of the current pane (Beam's
//! `AfterProcessingTime.pastFirstElementInPane().plusDelayOf`). Late panes fire for every late
//! element within allowed lateness, or never. Accumulating panes hold everything seen so far in the
//! window; discarding panes hold what arrived since the previous pane.

use serde::Serialize;

/// What happens to elements that arrive after the on-time pane, within allowed lateness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateFiring {
    /// Each late element fires a LATE pane at once.
    EveryElement,
    /// The on-time pane is final; late elements are dead-lettered.
    None,
}

/// What a pane holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accumulation {
    /// Everything seen so far in the window.
    Accumulating,
    /// Only what arrived since the previous pane.
    Discarding,
}

/// A validated trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerSpec {
    /// Early firing delay in milliseconds of processing time.
    pub early_every: Option<i64>,
    /// Late firing behaviour.
    pub late: LateFiring,
    /// Pane accumulation mode.
    pub accumulation: Accumulation,
}

impl Default for TriggerSpec {
    fn default() -> Self {
        TriggerSpec {
            early_every: None,
            late: LateFiring::EveryElement,
            accumulation: Accumulation::Accumulating,
        }
    }
}

/// Why a pane was emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Timing {
    /// Before the watermark reached the window end (processing-time trigger).
    Early,
    /// When the watermark reached the window end.
    OnTime,
    /// For a late element, after the on-time pane.
    Late,
    /// The window was superseded by a session merge; the row with this dedup id is void.
    Retract,
}

impl Timing {
    /// Every timing in declaration order, which is also the order of `timing as usize`, of the
    /// engine's pane counters and of the `Timing` enum symbols in `schemas/window_result.avsc`.
    pub const ALL: [Timing; 4] = [Timing::Early, Timing::OnTime, Timing::Late, Timing::Retract];

    /// The upper-case name used in output and headers.
    pub fn as_str(&self) -> &'static str {
        match self {
            Timing::Early => "EARLY",
            Timing::OnTime => "ON_TIME",
            Timing::Late => "LATE",
            Timing::Retract => "RETRACT",
        }
    }

    /// The timing an upper-case name stands for (the inverse of [`Timing::as_str`]).
    pub fn parse(name: &str) -> Option<Timing> {
        Timing::ALL.into_iter().find(|t| t.as_str() == name)
    }
}
