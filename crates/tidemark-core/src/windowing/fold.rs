//! Partials: the events of one key and one set of windows, folded together before the
//! repartition hop so that one record crosses it where many events would.
//!
//! Events share their windows when they share a *slot*: the stretch of event time between two
//! window starts (a tumbling window itself, one slide of a sliding window, the whole of the
//! global window). A [`Folder`] keeps one [`Partial`] per (key, slot): an accumulator with
//! every event added in input order, and each event's position and event time, so that the
//! partial can still speak for its events one by one (a dead letter names each).
//!
//! A partial is merged whole ([`super::engine::Engine::merge_partial`]): whatever the engine
//! does with it, it does for all of its events at once. That equals what the events would do
//! one by one as long as none of their windows has passed the watermark where they are merged,
//! so the caller folds an event only when its earliest window ends after the watermark the
//! merging side can have reached ([`Folder::admits`]). Session windows (which merge by each
//! event's time), cumulative windows and triggers that count events take no partials
//! ([`unsupported`]).

use super::aggregate::{Acc, AggSpec, Value};
use super::assigner::WindowKind;
use super::spec::{EngineSpec, MAX_PARTIAL_EVENTS};
use super::time::floor_align;
use std::collections::HashMap;
use std::sync::Arc;

/// Why a pipeline's events cannot travel as partials; `None` when they can.
pub fn unsupported(spec: &EngineSpec) -> Option<&'static str> {
    if matches!(spec.window, WindowKind::Session { .. }) {
        Some("session windows merge by each event's time")
    } else if matches!(spec.window, WindowKind::Cumulate { .. }) {
        Some("cumulative windows are not folded yet")
    } else if spec.trigger.counts() {
        Some("the trigger counts events")
    } else {
        None
    }
}

/// The events of one key and one slot, folded in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct Partial {
    /// The grouping key.
    pub key: String,
    /// Every event added, in input order.
    pub acc: Acc,
    /// Each event's position in its input (an offset) and event time, in input order.
    pub events: Vec<(i64, i64)>,
    /// The latest event time among them.
    pub ts: i64,
    /// The latest append time among them (epoch ms), for the pane latency metric.
    pub appended: i64,
}

/// Folds the events of one input into partials, one per (key, slot) and
/// [`MAX_PARTIAL_EVENTS`] events, until they are taken.
#[derive(Debug)]
pub struct Folder {
    aggs: Arc<[AggSpec]>,
    window: WindowKind,
    /// Index into `partials` by slot, then key.
    open: HashMap<i64, HashMap<String, usize>>,
    /// In the order they were opened.
    partials: Vec<Partial>,
    /// How many events the open partials hold.
    events: usize,
}

impl Folder {
    /// A folder for `spec`'s events; `None` when they cannot travel as partials.
    pub fn new(spec: &EngineSpec) -> Option<Folder> {
        if unsupported(spec).is_some() {
            return None;
        }
        Some(Folder {
            aggs: spec.aggregations.iter().cloned().collect(),
            window: spec.window,
            open: HashMap::new(),
            partials: Vec::new(),
            events: 0,
        })
    }

    /// The slot of event time `ts`: events of one slot belong to the same windows.
    fn slot(&self, ts: i64) -> i64 {
        match self.window.grid() {
            Some((_, slide, offset)) => floor_align(ts, slide, offset),
            None => 0,
        }
    }

    /// The end of the earliest window an event at `ts` belongs to.
    pub fn first_end(&self, ts: i64) -> i64 {
        match self.window.grid() {
            // The earliest aligned start after `ts - size`.
            Some((size, slide, offset)) => floor_align(ts.saturating_sub(size), slide, offset)
                .saturating_add(slide)
                .saturating_add(size),
            None => i64::MAX,
        }
    }

    /// Whether an event at `ts` may be folded where the merging side's watermark is at most
    /// `bound`: none of its windows can have passed it.
    pub fn admits(&self, ts: i64, bound: i64) -> bool {
        self.first_end(ts) > bound
    }

    /// Folds an event of `key` at event time `ts` with its input values, its position in its
    /// input and its append time.
    pub fn fold(&mut self, key: &str, ts: i64, values: &[Value], position: i64, appended: i64) {
        let slot = self.slot(ts);
        let by_key = self.open.entry(slot).or_default();
        let i = match by_key.get(key) {
            Some(&i) if self.partials[i].events.len() < MAX_PARTIAL_EVENTS => i,
            _ => {
                by_key.insert(key.to_string(), self.partials.len());
                self.partials.push(Partial {
                    key: key.to_string(),
                    acc: Acc::default(),
                    events: Vec::new(),
                    ts,
                    appended,
                });
                self.partials.len() - 1
            }
        };
        let p = &mut self.partials[i];
        p.acc.add(&self.aggs, values, ts);
        p.events.push((position, ts));
        p.ts = p.ts.max(ts);
        p.appended = p.appended.max(appended);
        self.events += 1;
    }

    /// How many events the open partials hold.
    pub fn events(&self) -> usize {
        self.events
    }

    /// Takes the open partials, in the order they were opened.
    pub fn take(&mut self) -> Vec<Partial> {
        self.open.clear();
        self.events = 0;
        std::mem::take(&mut self.partials)
    }

    /// Drops the open partials (their events will be read again).
    pub fn clear(&mut self) {
        self.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windowing::trigger::TriggerSpec;
    use crate::windowing::watermark::WatermarkSpec;

    fn spec(window: WindowKind) -> EngineSpec {
        EngineSpec {
            name: "p".into(),
            window,
            allowed_lateness: 0,
            watermark: WatermarkSpec {
                max_out_of_orderness: 0,
                idle_timeout: None,
                processing_time: false,
            },
            trigger: TriggerSpec::default(),
            aggregations: vec![AggSpec::new("n", "count", None)],
            having: None,
            cache: Default::default(),
        }
    }

    #[test]
    fn the_first_end_is_the_earliest_window_containing_the_time() {
        let sliding = WindowKind::Sliding {
            size: 60,
            slide: 20,
            offset: 5,
        };
        let f = Folder::new(&spec(sliding)).unwrap();
        for ts in -200..200 {
            let earliest = sliding.assign(ts).map(|w| w.end).min().unwrap();
            assert_eq!(f.first_end(ts), earliest, "ts {ts}");
        }
        let global = Folder::new(&spec(WindowKind::Global { idle_expiry: None })).unwrap();
        assert!(global.admits(0, i64::MAX - 1));
    }

    #[test]
    fn a_partial_holds_at_most_its_bound_of_events() {
        let tumbling = WindowKind::Tumbling {
            size: 10,
            offset: 0,
        };
        let mut f = Folder::new(&spec(tumbling)).unwrap();
        for i in 0..(2 * MAX_PARTIAL_EVENTS + 1) {
            f.fold("a", 1, &[], i as i64, 0);
        }
        let sizes: Vec<usize> = f.take().iter().map(|p| p.events.len()).collect();
        assert_eq!(sizes, [MAX_PARTIAL_EVENTS, MAX_PARTIAL_EVENTS, 1]);
    }

    #[test]
    fn events_of_one_key_and_slot_fold_into_one_partial() {
        let tumbling = WindowKind::Tumbling {
            size: 10,
            offset: 0,
        };
        let mut f = Folder::new(&spec(tumbling)).unwrap();
        f.fold("a", 1, &[], 100, 7);
        f.fold("b", 2, &[], 101, 8);
        f.fold("a", 9, &[], 102, 6);
        f.fold("a", 10, &[], 103, 9);
        assert_eq!(f.events(), 4);
        let taken = f.take();
        let shape: Vec<_> = taken
            .iter()
            .map(|p| {
                (
                    p.key.as_str(),
                    p.acc.count,
                    p.events.clone(),
                    p.ts,
                    p.appended,
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("a", 2, vec![(100, 1), (102, 9)], 9, 7),
                ("b", 1, vec![(101, 2)], 2, 8),
                ("a", 1, vec![(103, 10)], 10, 9),
            ]
        );
        assert_eq!(f.events(), 0);
        assert!(f.take().is_empty());
    }

    #[test]
    fn sessions_and_counting_triggers_take_no_partials() {
        assert!(Folder::new(&spec(WindowKind::Session {
            gap: 5,
            merge_touching: false
        }))
        .is_none());
        let mut counted = spec(WindowKind::Global { idle_expiry: None });
        counted.trigger.early_count = Some(3);
        assert!(Folder::new(&counted).is_none());
        assert!(unsupported(&counted).is_some());
    }
}
