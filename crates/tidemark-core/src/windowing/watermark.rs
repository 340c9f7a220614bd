//! Watermarks: the engine's estimate of event-time completeness.
//!
//! The bounded out-of-orderness strategy sets the watermark to the largest event time seen minus
//! `max_out_of_orderness`. When an input is caught up (no record waits to be read) and has had no
//! record for `idle_timeout` of processing time, its watermark follows processing time: it
//! advances one millisecond per millisecond elapsed since the last record, starting from the
//! watermark at that record. A manual watermark (set by the
//! `$watermark` control line of `simulate`) switches the strategy off. Watermarks never go back.
//!
//! A partition of the engine may hear from several **sources** (the input partitions of a
//! pipeline that repartitions, or the files of `simulate`). Its watermark is then the minimum over
//! the sources that are not idle ([`Valve`]): a source is idle when it is caught up and has had no
//! record for `idle_timeout`, and it says so itself; when every source is idle, each one's
//! watermark follows processing time from its last record, as a single input's does, and the
//! minimum of those is taken. A source that has never had a record holds the watermark back
//! until it is idle. With one source this is exactly the single-input rule above.

use super::time::Millis;
use std::collections::{BTreeMap, BTreeSet};

/// The watermark strategy: bounded out-of-orderness, with an optional idle timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkSpec {
    /// Bound on out-of-orderness in milliseconds.
    pub max_out_of_orderness: i64,
    /// Idle timeout in milliseconds, if any.
    pub idle_timeout: Option<i64>,
    /// Processing time: events are stamped with their arrival, and the watermark is the
    /// processing-time clock itself, moving with it whether records arrive or not.
    pub processing_time: bool,
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

    /// What this input reports to a [`Valve`] at processing time `now`: its watermark, when it
    /// had its last record, and whether it is idle (`caught_up`, not manual, and silent for the
    /// idle timeout since its last record, or since `since` when it has had none). An idle
    /// input reports the watermark it had at its last record: the valve makes it follow
    /// processing time from there, so the report does not change while the input stays idle.
    pub fn report(&self, now: Millis, since: Millis, caught_up: bool) -> SourceWatermark {
        let silent_since = self.last_record_at.unwrap_or(since);
        let idle = !self.manual
            && caught_up
            && self
                .spec
                .idle_timeout
                .is_some_and(|t| now.saturating_sub(silent_since) >= t);
        SourceWatermark {
            watermark: if idle {
                self.watermark_at_last_record
            } else {
                self.current
            },
            last_record_at: self.last_record_at,
            idle_at: idle.then_some(now),
        }
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

    /// Accounts for processing time reaching `now`; an idle input's watermark follows it. An
    /// input is idle only when `caught_up` (no record waits to be read): one that is silent
    /// because its records are slow to arrive, or its reader is busy elsewhere, keeps its
    /// watermark, or its backlog would be late when it comes.
    pub fn on_processing_time(&mut self, now: Millis, caught_up: bool) -> Millis {
        if self.spec.processing_time && !self.manual {
            self.current = self.current.max(now);
            return self.current;
        }
        if self.manual || !caught_up {
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

/// What a source says about its watermark (see [`WatermarkTracker::report`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceWatermark {
    /// The source's watermark (as of its last record while it is idle); `i64::MIN` before any.
    pub watermark: Millis,
    /// Processing time of the source's last record; `None` before any.
    pub last_record_at: Option<Millis>,
    /// Processing time at which the source last said it is idle; `None` when it is not idle. A
    /// claim holds for one idle timeout: a source that stops reporting (its owner died and no
    /// one else owns it yet) is not idle for longer, so it holds the watermark back.
    pub idle_at: Option<Millis>,
}

impl SourceWatermark {
    /// A source not heard from yet: it holds the watermark back until it reports.
    pub const UNKNOWN: SourceWatermark = SourceWatermark {
        watermark: i64::MIN,
        last_record_at: None,
        idle_at: None,
    };

    /// Whether the source's idle claim holds at `now` for an idle timeout of `lease`.
    fn idle(&self, now: Millis, lease: Option<Millis>) -> bool {
        match (self.idle_at, lease) {
            (Some(at), Some(lease)) => now < at.saturating_add(lease.max(1)),
            _ => false,
        }
    }

    /// The watermark of an idle source at `now`: it follows processing time from its last record.
    fn following(&self, now: Millis) -> Option<Millis> {
        let last = self.last_record_at?;
        (self.watermark != i64::MIN).then(|| {
            self.watermark
                .max(self.watermark.saturating_add(now.saturating_sub(last)))
        })
    }
}

/// The per-source watermarks of one engine partition, and their combination (see the module
/// docs). Sources are named; their reports are kept with the partition's state, so a restored
/// partition resumes them exactly.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Valve {
    sources: BTreeMap<String, SourceWatermark>,
    /// Sources whose report changed since the last flush.
    dirty: BTreeSet<String>,
    /// How long an idle claim holds (the idle timeout).
    lease: Option<Millis>,
}

impl Valve {
    /// An empty valve whose idle claims hold for `idle_timeout`.
    pub fn new(idle_timeout: Option<Millis>) -> Valve {
        Valve {
            lease: idle_timeout,
            ..Valve::default()
        }
    }

    /// Registers a source that must report before the watermark can pass it (nothing happens
    /// when it is known already).
    pub fn expect(&mut self, name: &str) {
        if !self.sources.contains_key(name) {
            self.sources
                .insert(name.to_string(), SourceWatermark::UNKNOWN);
        }
    }

    /// Takes a source's report. Its watermark never goes back (a restarted source may report a
    /// lower one); its last record time and idle claim are the report's.
    pub fn update(&mut self, name: &str, report: SourceWatermark) {
        let old = self
            .sources
            .get(name)
            .copied()
            .unwrap_or(SourceWatermark::UNKNOWN);
        let new = SourceWatermark {
            watermark: old.watermark.max(report.watermark),
            last_record_at: old.last_record_at.max(report.last_record_at),
            idle_at: report.idle_at,
        };
        // A refreshed idle claim is kept in memory only: stored, it would be rewritten at every
        // flush of an idle partition, and a claim read back stale only makes the source hold the
        // watermark back until it reports again.
        let stored_change = (new.watermark, new.last_record_at, new.idle_at.is_some())
            != (old.watermark, old.last_record_at, old.idle_at.is_some());
        if stored_change || !self.sources.contains_key(name) {
            self.dirty.insert(name.to_string());
        }
        self.sources.insert(name.to_string(), new);
    }

    /// Puts back a report read from the state store.
    pub fn load(&mut self, name: &str, report: SourceWatermark) {
        self.sources.insert(name.to_string(), report);
    }

    /// The sources and their reports, by name.
    pub fn sources(&self) -> impl Iterator<Item = (&str, &SourceWatermark)> + '_ {
        self.sources.iter().map(|(n, s)| (n.as_str(), s))
    }

    /// The reports changed since the last call, by name; the list is emptied.
    pub fn take_dirty(&mut self) -> Vec<(String, SourceWatermark)> {
        std::mem::take(&mut self.dirty)
            .into_iter()
            .filter_map(|n| self.sources.get(&n).map(|s| (n, *s)))
            .collect()
    }

    /// The combined watermark at `now`: the minimum over sources that are not idle; when every
    /// source is idle, the minimum of their watermarks following processing time (sources that
    /// never had a record left out). `None` when there is nothing to say (no source, or none
    /// with a record while all are idle).
    pub fn current(&self, now: Millis) -> Option<Millis> {
        let active = self
            .sources
            .values()
            .filter(|s| !s.idle(now, self.lease))
            .map(|s| s.watermark)
            .min();
        match active {
            Some(wm) => Some(wm),
            None => self.sources.values().filter_map(|s| s.following(now)).min(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ooo: i64, idle: Option<i64>) -> WatermarkSpec {
        WatermarkSpec {
            max_out_of_orderness: ooo,
            idle_timeout: idle,
            processing_time: false,
        }
    }

    #[test]
    fn under_processing_time_the_watermark_is_the_clock() {
        let mut w = WatermarkTracker::new(WatermarkSpec {
            processing_time: true,
            ..spec(0, None)
        });
        // Without a record, and while records wait to be read.
        assert_eq!(w.on_processing_time(1_000, false), 1_000);
        assert_eq!(w.on_record(1_500, 1_500), 1_500);
        assert_eq!(w.on_processing_time(1_200, true), 1_500);
        assert_eq!(w.on_processing_time(9_000, true), 9_000);
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
        assert_eq!(w.on_processing_time(999, true), 9_995);
        assert_eq!(w.on_processing_time(1_000, true), 10_995);
        assert_eq!(w.on_processing_time(3_000, true), 12_995);
        // A new record never moves it back.
        assert_eq!(w.on_record(10_001, 3_000), 12_995);
    }

    /// An input that is silent but not caught up (its records wait to be read) is not idle: its
    /// watermark stays, and so does its report's.
    #[test]
    fn a_silent_input_that_is_not_caught_up_keeps_its_watermark() {
        let mut w = WatermarkTracker::new(spec(5, Some(1_000)));
        w.on_record(10_000, 0);
        assert_eq!(w.on_processing_time(3_000, false), 9_995);
        let report = w.report(3_000, 0, false);
        assert_eq!(report.watermark, 9_995);
        assert_eq!(report.idle_at, None);
        let mut v = Valve::new(Some(1_000));
        v.update("s", report);
        assert_eq!(v.current(3_000), Some(9_995));
        // Caught up, it follows processing time from its last record.
        assert_eq!(w.on_processing_time(3_000, true), 12_995);
    }

    /// A valve over one source gives exactly the single-input watermark, idle following included.
    #[test]
    fn a_valve_of_one_source_is_the_single_input_rule() {
        let spec = spec(5, Some(1_000));
        let mut w = WatermarkTracker::new(spec);
        let mut v = Valve::new(spec.idle_timeout);
        let mut engine = i64::MIN;
        let mut step = |w: &mut WatermarkTracker, v: &mut Valve, now: i64, record: Option<i64>| {
            match record {
                Some(ts) => {
                    w.on_record(ts, now);
                }
                None => {
                    w.on_processing_time(now, true);
                }
            }
            v.update("s", w.report(now, 0, true));
            engine = engine.max(v.current(now).unwrap_or(i64::MIN));
            assert_eq!(engine, w.current(), "at {now}");
        };
        step(&mut w, &mut v, 0, Some(10_000));
        step(&mut w, &mut v, 999, None);
        step(&mut w, &mut v, 3_000, None);
        step(&mut w, &mut v, 3_000, Some(10_001));
        step(&mut w, &mut v, 3_500, None);
        step(&mut w, &mut v, 5_000, None);
        step(&mut w, &mut v, 6_000, Some(20_000));
    }

    #[test]
    fn the_valve_takes_the_minimum_over_sources_that_are_not_idle() {
        let at = |wm: i64, last: i64| SourceWatermark {
            watermark: wm,
            last_record_at: Some(last),
            idle_at: None,
        };
        let mut v = Valve::new(Some(1_000));
        assert_eq!(v.current(0), None, "no source");
        v.expect("a");
        v.expect("b");
        v.update("a", at(500, 0));
        assert_eq!(v.current(0), Some(i64::MIN), "b has not reported");
        v.update("b", at(300, 0));
        assert_eq!(v.current(0), Some(300));
        // b goes idle: a alone rules.
        v.update(
            "b",
            SourceWatermark {
                idle_at: Some(2_000),
                ..at(300, 0)
            },
        );
        assert_eq!(v.current(2_000), Some(500));
        // Its claim runs out after one idle timeout without a refresh: b holds back again.
        assert_eq!(v.current(3_000), Some(300));
        // A lower report never moves a source back.
        v.update("a", at(100, 10));
        assert_eq!(
            v.sources().find(|(n, _)| *n == "a").unwrap().1.watermark,
            500
        );
        // Both idle: each follows processing time from its last record, and the minimum rules.
        for (name, wm, last) in [("a", 500, 10), ("b", 300, 0)] {
            v.update(
                name,
                SourceWatermark {
                    idle_at: Some(4_000),
                    ..at(wm, last)
                },
            );
        }
        // a follows to 500 + 3,990, b to 300 + 4,000: b is the lower.
        assert_eq!(v.current(4_000), Some(4_300));
        assert_eq!(v.take_dirty().len(), 2);
        assert!(v.take_dirty().is_empty());
    }

    #[test]
    fn manual_watermark_disables_the_strategy() {
        let mut w = WatermarkTracker::new(spec(0, Some(10)));
        w.set_manual(50);
        assert_eq!(w.on_record(1_000, 0), 50);
        assert_eq!(w.on_processing_time(1_000, true), 50);
        assert_eq!(w.set_manual(40), 50);
        assert_eq!(w.set_manual(60), 60);
    }
}
