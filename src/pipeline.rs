//! The record step: what happens to one input record, written once for `simulate` and `run`.
//!
//! A [`Step`] owns one partition's [`Engine`] and [`WatermarkTracker`]. The caller decodes the
//! record (a file line, or a Kafka record's key and value) and hands the result in with its
//! processing time; [`Step::record`] then
//!
//! 1. lets processing time fire due early panes;
//! 2. turns a decoding failure into a `malformed` rejection;
//! 3. rejects an event time too far ahead of the clock (`future_timestamp`), when a guard is set;
//! 4. passes the event to the engine, which may call it `late`;
//! 5. moves the watermark with the event time;
//! 6. returns the fired panes and the rejection, if any.
//!
//! Rejections become dead letters; how they are written (a JSON line, a Kafka record with
//! headers) is the caller's business, as are offsets, headers and transactions. The step imports
//! nothing but the windowing core, so "run computes what simulate computes" holds by construction.

use crate::state::store::StateStore;
use crate::windowing::engine::{Admission, Engine, EngineError, Pane};
use crate::windowing::spec::{EngineSpec, Event};
use crate::windowing::watermark::WatermarkTracker;

/// Why a record is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The record could not be decoded into an event.
    Malformed,
    /// The event time is further ahead of the processing-time clock than the guard allows.
    FutureTimestamp,
    /// Every window of the event has expired (or, with late firing `none`, has fired).
    Late,
}

impl Reason {
    /// The reason as dead letters spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::FutureTimestamp => "future_timestamp",
            Reason::Late => "late",
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

/// What one record did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The record's rejection, if it was rejected.
    pub rejection: Option<Rejection>,
    /// Panes fired while processing the record, in order.
    pub panes: Vec<Pane>,
    /// For an admitted-or-late event behind the watermark: by how much (for the lateness metric).
    pub behind_watermark_ms: Option<i64>,
}

/// One partition's record step: its engine and watermark tracker.
#[derive(Debug)]
pub struct Step {
    engine: Engine,
    tracker: WatermarkTracker,
    max_future_skew: Option<i64>,
}

impl Step {
    /// Opens `partition`'s engine from `store`; the watermark resumes from the one stored with
    /// the state, so replayed records are judged as they were the first time. `max_future_skew`
    /// (ms) guards against event times ahead of the processing-time clock; `None` turns it off.
    pub fn open(
        spec: &EngineSpec,
        store: &StateStore,
        partition: i32,
        max_future_skew: Option<i64>,
    ) -> Result<Step, EngineError> {
        let engine = Engine::open(spec, store, partition)?;
        let tracker = WatermarkTracker::resume(spec.watermark, engine.watermark());
        Ok(Step::new(engine, tracker, max_future_skew))
    }

    /// A step over an opened engine and a tracker (an abort puts back the committed tracker).
    pub fn new(engine: Engine, tracker: WatermarkTracker, max_future_skew: Option<i64>) -> Step {
        Step {
            engine,
            tracker,
            max_future_skew,
        }
    }

    /// Processes one record, decoded or not (`Err` holds why it did not decode), at processing
    /// time `now`.
    pub fn record(
        &mut self,
        decoded: Result<Event, String>,
        now: i64,
    ) -> Result<Outcome, EngineError> {
        // 1. Processing time first: early panes due by now fire before the record counts.
        self.engine.advance_processing_time(now)?;
        let wm = self.engine.watermark();
        let watermark = (wm != i64::MIN).then_some(wm);
        let mut out = Outcome::default();
        let reject = |reason, detail, event_time, late_by_ms| Rejection {
            reason,
            detail,
            watermark,
            event_time,
            late_by_ms,
        };
        match decoded {
            // 2. Not an event.
            Err(detail) => out.rejection = Some(reject(Reason::Malformed, detail, None, None)),
            Ok(ev) => match self.max_future_skew {
                // 3. From the future.
                Some(skew) if ev.ts > now.saturating_add(skew) => {
                    let detail = format!(
                        "event time {} is more than {skew} ms ahead of the wall clock {now}",
                        ev.ts
                    );
                    out.rejection =
                        Some(reject(Reason::FutureTimestamp, detail, Some(ev.ts), None));
                }
                _ => {
                    if wm != i64::MIN && ev.ts < wm {
                        out.behind_watermark_ms = Some(wm - ev.ts);
                    }
                    // 4. The engine admits the event or calls it late.
                    if let Admission::Late { watermark } = self.engine.process(&ev)? {
                        let detail = format!(
                            "every window of event time {} has expired at watermark {watermark}",
                            ev.ts
                        );
                        let late_by = watermark.saturating_sub(ev.ts);
                        out.rejection =
                            Some(reject(Reason::Late, detail, Some(ev.ts), Some(late_by)));
                    }
                    // 5. The event moves the watermark.
                    let wm = self.tracker.on_record(ev.ts, now);
                    self.engine.advance_watermark(wm)?;
                }
            },
        }
        // 6. What fired.
        out.panes = self.engine.take_panes();
        Ok(out)
    }

    /// Lets processing time move: early firings, and the watermark of an idle input. Returns the
    /// panes that fired.
    pub fn tick(&mut self, now: i64) -> Result<Vec<Pane>, EngineError> {
        self.engine.advance_processing_time(now)?;
        let wm = self.tracker.on_processing_time(now);
        self.engine.advance_watermark(wm)?;
        Ok(self.engine.take_panes())
    }

    /// Sets the watermark by hand (from then on only this moves it). Returns the panes that fired.
    pub fn set_watermark(&mut self, ms: i64) -> Result<Vec<Pane>, EngineError> {
        let wm = self.tracker.set_manual(ms);
        self.engine.advance_watermark(wm)?;
        Ok(self.engine.take_panes())
    }

    /// End of input: the watermark goes to plus infinity. Returns the panes that fired.
    pub fn finish(&mut self) -> Result<Vec<Pane>, EngineError> {
        self.engine.finish()?;
        Ok(self.engine.take_panes())
    }

    /// The engine (state changes, statistics, the watermark).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, mutably (to take and write state changes, or flush).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The watermark tracker (kept as of each commit, to put back on abort).
    pub fn tracker(&self) -> &WatermarkTracker {
        &self.tracker
    }
}
