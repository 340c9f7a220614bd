//! The record step: what happens to one input record, written once for `simulate` and `run`.
//!
//! It has two halves, because a pipeline that repartitions runs them in two places:
//!
//! * [`Front`] — one per **source** (an input partition; a file of `simulate`): it turns a
//!   decoding failure into a `malformed` rejection, rejects an event time too far ahead of the
//!   clock (`future_timestamp`, when a guard is set), and moves the source's watermark with each
//!   event time. It reports that watermark, and whether the source is idle, as a
//!   [`SourceWatermark`].
//! * [`Back`] — one per **engine partition**: it passes events to the engine, which may call them
//!   `late`, and moves the engine's watermark to what its sources report (the minimum over those
//!   that are not idle; [`crate::windowing::watermark::Valve`]).
//!
//! [`Step`] joins them in one place: one `Back` and the `Front`s of its sources. For each record
//! [`Step::record`]
//!
//! 1. lets processing time fire due early panes;
//! 2. counts a record the pipeline's filter rejected, and turns a decoding failure into a
//!    rejection (`malformed`, or `expression` when an expression cannot be evaluated);
//! 3. rejects an event time too far ahead of the clock (`future_timestamp`), when a guard is set;
//! 4. passes the event to the engine, which may call it `late`;
//! 5. moves the source's watermark with the event time, and the engine's with its sources';
//! 6. returns the fired panes and the rejection, if any.
//!
//! `simulate` runs a `Step` over its files, and so does `run` over an input partition when the
//! input is already partitioned by the grouping key. When it is not, `run` runs each input
//! partition's `Front` in the first stage and each repartition partition's `Back` in the second,
//! with the events and the watermark reports travelling through the repartition topic between
//! them. Rejections become dead letters; how they are written (a JSON line, a Kafka record with
//! headers) is the caller's business, as are offsets, headers and transactions. The step imports
//! nothing but the windowing core, so "run computes what simulate computes" holds by
//! construction.

use crate::windowing::aggregate::Acc;
use crate::windowing::backend::StateBackend;
use crate::windowing::engine::{Admission, Engine, EngineError, Pane};
use crate::windowing::spec::{EngineSpec, Event};
use crate::windowing::watermark::{SourceWatermark, WatermarkSpec, WatermarkTracker};

/// Why a record is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The record could not be decoded into an event.
    Malformed,
    /// The event time is further ahead of the processing-time clock than the guard allows.
    FutureTimestamp,
    /// Every window of the event has expired (or, with late firing `none`, has fired).
    Late,
    /// The record's Kafka key is not its grouping key, on an input declared to be partitioned by
    /// it.
    KeyMismatch,
    /// An expression of the pipeline (filter, key, timestamp, aggregation input) cannot be
    /// evaluated on the record: a value of the wrong type, an overflow, a division by zero.
    Expression,
    /// The record cannot be carried: its grouping key is longer than
    /// [`crate::windowing::spec::MAX_KEY_BYTES`], or a string it gives an aggregation is
    /// longer than the aggregation may keep ([`crate::windowing::spec::RecordBudget`]); also
    /// the reason of a pane too large for one output record.
    TooLarge,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 6] = [
        Reason::Malformed,
        Reason::FutureTimestamp,
        Reason::Late,
        Reason::KeyMismatch,
        Reason::Expression,
        Reason::TooLarge,
    ];

    /// The reason as dead letters spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::FutureTimestamp => "future_timestamp",
            Reason::Late => "late",
            Reason::KeyMismatch => "key_mismatch",
            Reason::Expression => "expression",
            Reason::TooLarge => "too_large",
        }
    }
}

/// A rejected record: what its dead letter must say.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// Why.
    pub reason: Reason,
    /// A sentence for people.
    pub detail: String,
    /// The watermark when the record arrived (`None` before the first watermark).
    pub watermark: Option<i64>,
    /// The event time, when the record decoded.
    pub event_time: Option<i64>,
    /// How far behind the watermark a late event was.
    pub late_by_ms: Option<i64>,
}

impl Rejection {
    /// The rejection of an event at event time `ts` whose every window had expired at
    /// `watermark`.
    pub fn late(ts: i64, watermark: i64) -> Rejection {
        let mut detail =
            format!("every window of event time {ts} has expired at watermark {watermark}");
        if looks_like_seconds(ts, watermark) {
            detail.push_str(
                "; the event time reads as epoch seconds: if it is, set [input] timestamp_unit = \"s\"",
            );
        }
        Rejection {
            reason: Reason::Late,
            detail,
            watermark: Some(watermark),
            event_time: Some(ts),
            late_by_ms: Some(watermark.saturating_sub(ts)),
        }
    }
}

/// Whether an event time `ts`, late at `watermark`, would be within a year of the watermark if it
/// were epoch seconds rather than milliseconds (the most common mistake of a new pipeline).
fn looks_like_seconds(ts: i64, watermark: i64) -> bool {
    const YEAR_MS: i64 = 366 * 86_400_000;
    (1..100_000_000_000).contains(&ts)
        && watermark > 1_000_000_000_000
        && (ts * 1_000 - watermark).abs() < YEAR_MS
}

/// A record as its decoder left it: an event, `None` when the pipeline's filter rejected it, or
/// why it cannot be used (the reason, `malformed` or `expression`, and a sentence).
pub type Decoded = Result<Option<Event>, (Reason, String)>;

/// What one record did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Whether the pipeline's filter rejected the record (counted, not an error).
    pub filtered: bool,
    /// The record's rejection, if it was rejected.
    pub rejection: Option<Rejection>,
    /// Panes fired while processing the record, in order.
    pub panes: Vec<Pane>,
    /// For an admitted-or-late event behind the watermark: by how much (for the lateness metric).
    pub behind_watermark_ms: Option<i64>,
}

/// What the front half made of a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Checked {
    /// An event, for the engine.
    Event(Event),
    /// The pipeline's filter rejected the record.
    Filtered,
    /// A rejection (malformed, or from the future), with the event time when it decoded.
    Rejected {
        /// Why.
        reason: Reason,
        /// A sentence for people.
        detail: String,
        /// The event time, when the record decoded.
        event_time: Option<i64>,
    },
}

/// The front half of the step for one source: checks records and tracks the source's watermark.
#[derive(Debug, Clone)]
pub struct Front {
    tracker: WatermarkTracker,
    max_future_skew: Option<i64>,
    /// Processing time the front started: a source without records is idle this long after it.
    since: i64,
}

impl Front {
    /// A front resuming at watermark `wm` (`i64::MIN` for none), started at processing time
    /// `since`. `max_future_skew` (ms) guards against event times ahead of the processing-time
    /// clock; `None` turns it off.
    pub fn resume(spec: WatermarkSpec, wm: i64, max_future_skew: Option<i64>, since: i64) -> Front {
        Front {
            tracker: WatermarkTracker::resume(spec, wm),
            max_future_skew,
            since,
        }
    }

    /// Checks a record as its decoder left it, at processing time `now`; an event moves the
    /// source's watermark (a filtered record does not).
    pub fn check(&mut self, decoded: Decoded, now: i64) -> Checked {
        match decoded {
            Err((reason, detail)) => Checked::Rejected {
                reason,
                detail,
                event_time: None,
            },
            Ok(None) => Checked::Filtered,
            Ok(Some(ev)) => match self.max_future_skew {
                Some(skew) if ev.ts > now.saturating_add(skew) => Checked::Rejected {
                    reason: Reason::FutureTimestamp,
                    detail: format!(
                        "event time {} is more than {skew} ms ahead of the wall clock {now}",
                        ev.ts
                    ),
                    event_time: Some(ev.ts),
                },
                _ => {
                    self.tracker.on_record(ev.ts, now);
                    Checked::Event(ev)
                }
            },
        }
    }

    /// Lets processing time reach `now`: the source's watermark follows it when the source is
    /// idle (`caught_up`, and silent for the idle timeout).
    pub fn tick(&mut self, now: i64, caught_up: bool) {
        self.tracker.on_processing_time(now, caught_up);
    }

    /// Sets the source's watermark by hand (from then on only this moves it).
    pub fn set_manual(&mut self, ms: i64) {
        self.tracker.set_manual(ms);
    }

    /// What the source reports at `now`; it is idle only when `caught_up` (no records wait to be
    /// read) and silent for the idle timeout.
    pub fn report(&self, now: i64, caught_up: bool) -> SourceWatermark {
        self.tracker.report(now, self.since, caught_up)
    }

    /// The source's watermark.
    pub fn watermark(&self) -> i64 {
        self.tracker.current()
    }
}

/// The back half of the step for one engine partition: the engine and its watermark sources.
#[derive(Debug)]
pub struct Back {
    engine: Engine,
}

impl Back {
    /// Opens `partition`'s engine from `store`; `sources` are the watermark sources it must hear
    /// from before its watermark can pass them. The watermark resumes from the one stored with
    /// the state, so replayed records are judged as they were the first time.
    pub fn open<'a, S: StateBackend + Clone + 'static>(
        spec: &EngineSpec,
        store: &S,
        partition: i32,
        sources: impl IntoIterator<Item = &'a str>,
    ) -> Result<Back, EngineError> {
        let mut engine = Engine::open(spec, store, partition)?;
        engine.expect_sources(sources);
        Ok(Back { engine })
    }

    /// Lets processing time reach `now`: due early panes fire.
    pub fn clock(&mut self, now: i64) -> Result<(), EngineError> {
        self.engine.advance_processing_time(now)
    }

    /// Passes an event to the engine: `Ok((rejection, behind))`, where the rejection is set when
    /// the event is late and `behind` says how far behind the watermark it was, if it was.
    pub fn process(&mut self, ev: &Event) -> Result<(Option<Rejection>, Option<i64>), EngineError> {
        let wm = self.engine.watermark();
        let behind = (wm != i64::MIN && ev.ts < wm).then(|| wm - ev.ts);
        let rejection = match self.engine.process(ev)? {
            Admission::Accepted => None,
            Admission::Late { watermark } => Some(Rejection::late(ev.ts, watermark)),
        };
        Ok((rejection, behind))
    }

    /// Passes a partial of `key` to the engine (see [`crate::windowing::fold`]); `ts` is its
    /// latest event time and `earliest` its earliest. `Ok((late, behind))`: `late` holds the
    /// watermark when its events are late (all of them are: they share their windows; each
    /// one's dead letter is [`Rejection::late`]), `behind` how far behind the watermark its
    /// earliest event was, if it was.
    pub fn merge_partial(
        &mut self,
        key: &str,
        ts: i64,
        earliest: i64,
        partial: &Acc,
    ) -> Result<(Option<i64>, Option<i64>), EngineError> {
        let wm = self.engine.watermark();
        let behind = (wm != i64::MIN && earliest < wm).then(|| wm - earliest);
        let late = match self.engine.merge_partial(key, ts, partial)? {
            Admission::Accepted => None,
            Admission::Late { watermark } => Some(watermark),
        };
        Ok((late, behind))
    }

    /// Takes a source's report and moves the watermark to what the sources say at `now`.
    pub fn report(
        &mut self,
        source: &str,
        report: SourceWatermark,
        now: i64,
    ) -> Result<(), EngineError> {
        self.engine.report_source(source, report);
        self.engine.advance_to_sources(now)
    }

    /// Lets processing time reach `now`: early panes, and the watermark of idle sources.
    pub fn tick(&mut self, now: i64) -> Result<(), EngineError> {
        self.clock(now)?;
        self.engine.advance_to_sources(now)
    }

    /// The panes fired since the last call, in order.
    pub fn take_panes(&mut self) -> Vec<Pane> {
        self.engine.take_panes()
    }

    /// The engine (state changes, statistics, the watermark).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, mutably (to take and write state changes, or flush).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
}

/// The whole step in one place: an engine partition and the fronts of its sources.
#[derive(Debug)]
pub struct Step {
    back: Back,
    /// The sources, by index: their names and fronts.
    fronts: Vec<(String, Front)>,
}

impl Step {
    /// Opens `partition`'s engine from `store` with the named sources, starting at processing
    /// time `now`. Each source's watermark resumes from its report stored with the state; a
    /// single source also resumes from the engine's stored watermark (state written before
    /// sources were stored has only that).
    pub fn open<S: StateBackend + Clone + 'static>(
        spec: &EngineSpec,
        store: &S,
        partition: i32,
        sources: &[String],
        max_future_skew: Option<i64>,
        now: i64,
    ) -> Result<Step, EngineError> {
        let mut back = Back::open(spec, store, partition, sources.iter().map(String::as_str))?;
        let stored = back.engine.sources();
        let engine_wm = back.engine.watermark();
        let fronts = sources
            .iter()
            .map(|name| {
                let mut wm = stored
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(i64::MIN, |(_, r)| r.watermark);
                if sources.len() == 1 {
                    wm = wm.max(engine_wm);
                }
                let front = Front::resume(spec.watermark, wm, max_future_skew, now);
                (name.clone(), front)
            })
            .collect();
        Ok(Step { back, fronts })
    }

    /// Opens `partition`'s engine again from `store`, with the fronts of its sources as they
    /// were (an abort puts back the fronts as of the last commit).
    pub fn reopen<S: StateBackend + Clone + 'static>(
        spec: &EngineSpec,
        store: &S,
        partition: i32,
        fronts: Vec<(String, Front)>,
    ) -> Result<Step, EngineError> {
        let back = Back::open(
            spec,
            store,
            partition,
            fronts.iter().map(|(n, _)| n.as_str()),
        )?;
        Ok(Step { back, fronts })
    }

    /// Processes one record of source `source` (an index into the sources the step was opened
    /// with), as its decoder left it, at processing time `now`.
    pub fn record(
        &mut self,
        source: usize,
        decoded: Decoded,
        now: i64,
    ) -> Result<Outcome, EngineError> {
        // 1. Processing time first: early panes due by now fire before the record counts.
        self.back.clock(now)?;
        let wm = self.back.engine.watermark();
        let watermark = (wm != i64::MIN).then_some(wm);
        let mut out = Outcome::default();
        let (name, front) = &mut self.fronts[source];
        // 2, 3. Filtered, not an event, or from the future.
        match front.check(decoded, now) {
            Checked::Filtered => out.filtered = true,
            Checked::Rejected {
                reason,
                detail,
                event_time,
            } => {
                out.rejection = Some(Rejection {
                    reason,
                    detail,
                    watermark,
                    event_time,
                    late_by_ms: None,
                });
            }
            Checked::Event(ev) => {
                // 4. The engine admits the event or calls it late.
                let (rejection, behind) = self.back.process(&ev)?;
                out.rejection = rejection;
                out.behind_watermark_ms = behind;
                // 5. The event moved its source's watermark; the engine's follows its sources.
                let report = front.report(now, true);
                self.back.report(name, report, now)?;
            }
        }
        // 6. What fired.
        out.panes = self.back.take_panes();
        Ok(out)
    }

    /// Lets processing time move: early firings, and the watermark of idle sources (a source is
    /// idle only when `caught_up`). Returns the panes that fired.
    pub fn tick(&mut self, now: i64, caught_up: bool) -> Result<Vec<Pane>, EngineError> {
        self.back.clock(now)?;
        for (name, front) in &mut self.fronts {
            front.tick(now, caught_up);
            self.back
                .engine
                .report_source(name, front.report(now, caught_up));
        }
        self.back.engine.advance_to_sources(now)?;
        Ok(self.back.take_panes())
    }

    /// Sets source `source`'s watermark by hand (from then on only this moves it). Returns the
    /// panes that fired.
    pub fn set_watermark(&mut self, source: usize, ms: i64) -> Result<Vec<Pane>, EngineError> {
        let now = self.back.engine.processing_time();
        let (name, front) = &mut self.fronts[source];
        front.set_manual(ms);
        let report = front.report(now, true);
        self.back.report(name, report, now)?;
        Ok(self.back.take_panes())
    }

    /// End of input: the watermark goes to plus infinity. Returns the panes that fired.
    pub fn finish(&mut self) -> Result<Vec<Pane>, EngineError> {
        self.back.engine.finish()?;
        Ok(self.back.take_panes())
    }

    /// The engine (state changes, statistics, the watermark).
    pub fn engine(&self) -> &Engine {
        &self.back.engine
    }

    /// The engine, mutably (to take and write state changes, or flush).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.back.engine
    }

    /// The back half (the second stage of the hop drives it directly).
    pub fn back_mut(&mut self) -> &mut Back {
        &mut self.back
    }

    /// Opens `partition`'s engine alone, with no front: its sources report from elsewhere (the
    /// first stage of the hop, through the repartition topic).
    pub fn open_back<S: StateBackend + Clone + 'static>(
        spec: &EngineSpec,
        store: &S,
        partition: i32,
        sources: &[String],
    ) -> Result<Step, EngineError> {
        let back = Back::open(spec, store, partition, sources.iter().map(String::as_str))?;
        Ok(Step {
            back,
            fronts: Vec::new(),
        })
    }

    /// The sources' fronts (kept as of each commit, to put back on abort).
    pub fn fronts(&self) -> &[(String, Front)] {
        &self.fronts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_event_time_in_seconds_says_so() {
        let wm = 1_765_000_000_000;
        assert!(Rejection::late(1_765_000_000, wm)
            .detail
            .contains("timestamp_unit = \"s\""));
        assert!(!Rejection::late(wm - 60_000, wm).detail.contains("seconds"));
        assert!(!Rejection::late(5, 1_000).detail.contains("seconds"));
    }
}
