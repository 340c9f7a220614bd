//! Triggers: when panes fire and what they hold.
//!
//! The on-time pane always fires when the watermark reaches the window end. Early panes fire after a
//! processing-time delay counted from the first element of the current pane (Beam's
//! `AfterProcessingTime.pastFirstElementInPane().plusDelayOf`), after a count of elements since the
//! window's last pane (`AfterPane.elementCountAtLeast`), or whichever of the two comes first. Late
//! panes fire for every late element within allowed lateness, for every N late elements, or never.
//! Elements accepted into a window but not yet in any pane fire one last LATE pane when the window
//! expires (Beam Java's `ClosingBehavior.FIRE_IF_NON_EMPTY`), so nothing accepted is dropped.
//! Accumulating panes hold everything seen so far in the window; discarding panes hold what
//! arrived since the previous pane.

use serde::Serialize;

/// What happens to elements that arrive after the on-time pane, within allowed lateness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateFiring {
    /// Each late element fires a LATE pane at once (`late_count = 1`).
    EveryElement,
    /// A LATE pane fires once this many late elements (at least 2) arrived since the window's
    /// last pane; fewer left at expiry fire one final LATE pane.
    Count(u32),
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
    /// Early firing after this many elements since the window's last pane.
    pub early_count: Option<u32>,
    /// Late firing behaviour.
    pub late: LateFiring,
    /// Pane accumulation mode.
    pub accumulation: Accumulation,
}

impl Default for TriggerSpec {
    fn default() -> Self {
        TriggerSpec {
            early_every: None,
            early_count: None,
            late: LateFiring::EveryElement,
            accumulation: Accumulation::Accumulating,
        }
    }
}

impl LateFiring {
    /// Late firing every `n` late elements (`1` is [`LateFiring::EveryElement`]; `None`, the
    /// default, too).
    pub fn from_count(n: Option<u32>) -> LateFiring {
        match n {
            None | Some(0) | Some(1) => LateFiring::EveryElement,
            Some(n) => LateFiring::Count(n),
        }
    }

    /// Whether a late element that brought the window's unfired elements to `pending` fires a
    /// LATE pane now.
    pub fn fires_at(self, pending: u32) -> bool {
        match self {
            LateFiring::EveryElement | LateFiring::None => true,
            LateFiring::Count(n) => pending >= n,
        }
    }
}

impl TriggerSpec {
    /// Whether the elements since the window's last pane (`pending`) fire an EARLY pane now.
    pub fn early_count_reached(&self, pending: u32) -> bool {
        self.early_count.is_some_and(|n| pending >= n)
    }

    /// Whether the trigger counts elements (needs the per-window layout for sliding windows).
    pub fn counts(&self) -> bool {
        self.early_count.is_some() || matches!(self.late, LateFiring::Count(_))
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
