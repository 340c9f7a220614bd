//! Watermarks: the engine's estimate of event-time completeness.
//!
//! The bounded out-of-orderness strategy sets the watermark to the largest event time seen minus
//! `max_out_of_orderness`. When an input has had no record for `idle_timeout` of processing time,
//! its watermark follows processing time: it advances one millisecond per millisecond elapsed since
//! the last record, starting from the watermark at that record. A manual watermark (set by the
//! `$watermark` control line of `simulate`) switches the strategy off. Watermarks never go back.

use super::time::Millis;

/// The watermark strategy: bounded out-of-orderness, with an optional idle timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkSpec {
    /// Bound on out-of-orderness in milliseconds.
    pub max_out_of_orderness: i64,
    /// Idle timeout in milliseconds, if any.
    pub idle_timeout: Option<i64>,
}

/// Tracks one input's watermark.
#[derive(Debug, Clone)]
pub struct WatermarkTracker {
    spec: WatermarkSpec,
    current: Millis,
    manual: bool,
    last_record_at: Option<Millis>,
    watermark_at_last_record: Millis,
}

impl WatermarkTracker {
    /// A tracker with no data seen: the watermark is `i64::MIN` (minus infinity).
    pub fn new(spec: WatermarkSpec) -> WatermarkTracker {
        WatermarkTracker {
            spec,
            current: i64::MIN,
            manual: false,
            last_record_at: None,
            watermark_at_last_record: i64::MIN,
        }
    }

    /// A tracker resuming from a stored watermark (after a restart or restore).
    pub fn resume(spec: WatermarkSpec, wm: Millis) -> WatermarkTracker {
        WatermarkTracker {
            current: wm,
            watermark_at_last_record: wm,
            ..WatermarkTracker::new(spec)
        }
    }

    /// The current watermark.
    pub fn current(&self) -> Millis {
        self.current
    }

    /// Whether the watermark is set manually.
    pub fn is_manual(&self) -> bool {
        self.manual
    }

    /// Accounts for a record with event time `ts` seen at processing time `now`; returns the watermark.
    pub fn on_record(&mut self, ts: Millis, now: Millis) -> Millis {
        if !self.manual {
            let candidate = ts.saturating_sub(self.spec.max_out_of_orderness);
            self.current = self.current.max(candidate);
        }
        self.last_record_at = Some(now);
        self.watermark_at_last_record = self.current;
        self.current
    }

    /// Accounts for processing time reaching `now`; an idle input's watermark follows it.
    pub fn on_processing_time(&mut self, now: Millis) -> Millis {
        if self.manual {
            return self.current;
        }
        if let (Some(idle), Some(last)) = (self.spec.idle_timeout, self.last_record_at) {
            let silent = now.saturating_sub(last);
            if silent >= idle && self.watermark_at_last_record != i64::MIN {
                let follow = self.watermark_at_last_record.saturating_add(silent);
                self.current = self.current.max(follow);
            }
        }
        self.current
    }

    /// Sets the watermark by hand (never backwards); from now on only manual calls move it.
    pub fn set_manual(&mut self, wm: Millis) -> Millis {
        self.manual = true;
        self.current = self.current.max(wm);
        self.current
    }

    /// Moves the watermark to plus infinity (end of input).
    pub fn finish(&mut self) -> Millis {
        self.current = i64::MAX;
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ooo: i64, idle: Option<i64>) -> WatermarkSpec {
        WatermarkSpec {
            max_out_of_orderness: ooo,
            idle_timeout: idle,
        }
    }

    #[test]
    fn bounded_out_of_orderness_never_goes_back() {
        let mut w = WatermarkTracker::new(spec(5, None));
        assert_eq!(w.current(), i64::MIN);
        assert_eq!(w.on_record(100, 0), 95);
        assert_eq!(w.on_record(90, 0), 95);
        assert_eq!(w.on_record(120, 0), 115);
    }

    #[test]
    fn idle_input_follows_processing_time() {
        let mut w = WatermarkTracker::new(spec(5, Some(1_000)));
        w.on_record(10_000, 0);
        assert_eq!(w.on_processing_time(999), 9_995);
        assert_eq!(w.on_processing_time(1_000), 10_995);
        assert_eq!(w.on_processing_time(3_000), 12_995);
        // A new record never moves it back.
        assert_eq!(w.on_record(10_001, 3_000), 12_995);
    }

    #[test]
    fn manual_watermark_disables_the_strategy() {
        let mut w = WatermarkTracker::new(spec(0, Some(10)));
        w.set_manual(50);
        assert_eq!(w.on_record(1_000, 0), 50);
        assert_eq!(w.on_processing_time(1_000), 50);
        assert_eq!(w.set_manual(40), 50);
        assert_eq!(w.set_manual(60), 60);
    }
}
