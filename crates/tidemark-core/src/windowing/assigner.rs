//! Window assignment: which windows an event time belongs to.
//!
//! Windows are half-open intervals `[start, end)`. Tumbling and sliding windows are aligned to the
//! epoch plus an offset, with floor alignment for negative times. A sliding window starts at every
//! `k * slide + offset`; an event at `ts` belongs to each such window with `start <= ts < start + size`.
//! Sliding windows are stored as *slices* of `gcd(size, slide)`: every window boundary is a slice
//! boundary, so a window is exactly the union of the slices it covers.

use super::time::{ceil_align, floor_align, gcd, Millis};
use serde::Serialize;

/// A half-open event-time interval `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Window {
    /// First millisecond in the window.
    pub start: Millis,
    /// First millisecond after the window.
    pub end: Millis,
}

impl Window {
    /// Builds a window; `start < end` is the caller's duty.
    pub fn new(start: Millis, end: Millis) -> Window {
        Window { start, end }
    }

    /// The global window, `[-inf, +inf)`: the extreme times stand for the infinities.
    pub const GLOBAL: Window = Window {
        start: Millis::MIN,
        end: Millis::MAX,
    };

    /// Whether this is the global window.
    pub fn is_global(&self) -> bool {
        *self == Window::GLOBAL
    }

    /// Whether `ts` lies inside the window.
    pub fn contains(&self, ts: Millis) -> bool {
        self.start <= ts && ts < self.end
    }

    /// Whether two half-open windows share at least one millisecond.
    pub fn intersects(&self, other: &Window) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// The smallest window covering both.
    pub fn span(&self, other: &Window) -> Window {
        Window::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// The kind of window and its validated parameters (all in milliseconds, all positive except
/// offsets, which satisfy `0 <= offset < slide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Fixed, non-overlapping windows of `size`.
    Tumbling {
        /// Window length.
        size: i64,
        /// Shift of the window grid from the epoch.
        offset: i64,
    },
    /// Overlapping windows of `size` starting every `slide` (`slide <= size`).
    Sliding {
        /// Window length.
        size: i64,
        /// Distance between window starts.
        slide: i64,
        /// Shift of the window grid from the epoch.
        offset: i64,
    },
    /// Cumulative windows (Flink's `CUMULATE`): every `size` (aligned as a tumbling window) a new
    /// period starts, and its windows all start there and end every `step`, `[start, start +
    /// step)`, `[start, start + 2 step)`, ... up to `[start, start + size)` (`size` a multiple of
    /// `step`): a running total of the period, final at each step.
    Cumulate {
        /// The period's length: the largest window.
        size: i64,
        /// How far each window ends after the one before.
        step: i64,
        /// Shift of the periods from the epoch.
        offset: i64,
    },
    /// Per-key sessions that close after `gap` without events.
    Session {
        /// Inactivity gap.
        gap: i64,
        /// Whether two sessions that touch (one ends where the next begins: events exactly one
        /// gap apart) merge, as Flink's do; Beam's (the default) stay apart, since half-open
        /// windows that touch do not overlap.
        merge_touching: bool,
    },
    /// One window per key, `[-inf, +inf)`, that the watermark never closes; it fires by count or
    /// processing time only.
    Global {
        /// Event time after a key's latest element at which its unfired elements fire a final
        /// pane and its aggregates are dropped; `None` keeps them for ever.
        idle_expiry: Option<i64>,
    },
}

impl WindowKind {
    /// Size and slide of the window grid; tumbling windows slide by their size. `None` for sessions.
    pub fn grid(&self) -> Option<(i64, i64, i64)> {
        match *self {
            WindowKind::Tumbling { size, offset } => Some((size, size, offset)),
            WindowKind::Sliding {
                size,
                slide,
                offset,
            } => Some((size, slide, offset)),
            WindowKind::Cumulate { .. }
            | WindowKind::Session { .. }
            | WindowKind::Global { .. } => None,
        }
    }

    /// Every aligned window containing `ts`, latest start first. Sessions return their proto-window
    /// `[ts, ts + gap)`; the global window kind returns [`Window::GLOBAL`].
    pub fn assign(&self, ts: Millis) -> WindowIter {
        match self.grid() {
            Some((size, slide, offset)) => {
                let last_start = floor_align(ts, slide, offset);
                WindowIter {
                    next_start: last_start,
                    min_start_exclusive: ts - size,
                    size,
                    slide,
                    global: false,
                    cumulative: false,
                }
            }
            None => match *self {
                // The period's windows that end after `ts`, the longest first.
                WindowKind::Cumulate { size, step, offset } => {
                    let start = floor_align(ts, size, offset);
                    WindowIter {
                        next_start: start + size,
                        min_start_exclusive: ts,
                        size: start,
                        slide: step,
                        global: false,
                        cumulative: true,
                    }
                }
                WindowKind::Session { gap, .. } => WindowIter {
                    next_start: ts,
                    min_start_exclusive: ts - 1,
                    size: gap,
                    slide: gap,
                    global: false,
                    cumulative: false,
                },
                _ => WindowIter {
                    global: true,
                    ..WindowIter::EMPTY
                },
            },
        }
    }
}

/// Iterator over the windows of one event (see [`WindowKind::assign`]). For cumulative windows
/// `next_start` is the next window's end, `min_start_exclusive` the event time, `size` the
/// period's start and `slide` the step.
#[derive(Debug, Clone)]
pub struct WindowIter {
    next_start: Millis,
    min_start_exclusive: Millis,
    size: i64,
    slide: i64,
    /// Yields [`Window::GLOBAL`] once, then nothing.
    global: bool,
    /// Windows of one start, ends moving back by `slide`.
    cumulative: bool,
}

impl WindowIter {
    const EMPTY: WindowIter = WindowIter {
        next_start: 0,
        min_start_exclusive: 0,
        size: 0,
        slide: 0,
        global: false,
        cumulative: false,
    };
}

impl Iterator for WindowIter {
    type Item = Window;

    fn next(&mut self) -> Option<Window> {
        if std::mem::take(&mut self.global) {
            return Some(Window::GLOBAL);
        }
        if self.next_start <= self.min_start_exclusive {
            return None;
        }
        if self.cumulative {
            let w = Window::new(self.size, self.next_start);
            self.next_start -= self.slide;
            return Some(w);
        }
        let w = Window::new(self.next_start, self.next_start + self.size);
        self.next_start -= self.slide;
        Some(w)
    }
}

/// Slice arithmetic for a sliding window grid stored as slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceGrid {
    /// Window length.
    pub size: i64,
    /// Distance between window starts.
    pub slide: i64,
    /// Grid offset.
    pub offset: i64,
    /// Slice length: `gcd(size, slide)`.
    pub slice: i64,
}

impl SliceGrid {
    /// The slice grid of a sliding window.
    pub fn new(size: i64, slide: i64, offset: i64) -> SliceGrid {
        SliceGrid {
            size,
            slide,
            offset,
            slice: gcd(size, slide),
        }
    }

    /// Start of the slice containing `ts`.
    pub fn slice_start(&self, ts: Millis) -> Millis {
        floor_align(ts, self.slice, self.offset)
    }

    /// End of the earliest window containing slice `a`.
    pub fn first_end(&self, a: Millis) -> Millis {
        ceil_align(a - self.size + 1, self.slide, self.offset) + self.size
    }

    /// End of the latest window containing slice `a`.
    pub fn last_end(&self, a: Millis) -> Millis {
        floor_align(a, self.slide, self.offset) + self.size
    }

    /// The smallest window end strictly greater than `t`.
    pub fn end_after(&self, t: Millis) -> Millis {
        // Ends lie on the grid k*slide + offset + size.
        floor_align(t, self.slide, self.offset + self.size) + self.slide
    }

    /// The smallest window end greater than or equal to `t`.
    pub fn end_at_or_after(&self, t: Millis) -> Millis {
        ceil_align(
            t,
            self.slide,
            (self.offset + self.size).rem_euclid(self.slide),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_windows_share_their_period_start_and_end_every_step() {
        let k = WindowKind::Cumulate {
            size: 60,
            step: 20,
            offset: 5,
        };
        let got: Vec<(i64, i64)> = k.assign(31).map(|w| (w.start, w.end)).collect();
        assert_eq!(got, [(5, 65), (5, 45)]);
        let got: Vec<(i64, i64)> = k.assign(5).map(|w| (w.start, w.end)).collect();
        assert_eq!(got, [(5, 65), (5, 45), (5, 25)]);
        let got: Vec<(i64, i64)> = k.assign(-10).map(|w| (w.start, w.end)).collect();
        assert_eq!(got, [(-55, 5)]);
        for ts in -200..200 {
            for w in k.assign(ts) {
                assert!(w.contains(ts), "{ts} in {w:?}");
                assert_eq!((w.end - w.start) % 20, 0);
                assert!(w.end - w.start <= 60);
            }
            assert_eq!(
                k.assign(ts).count() as i64,
                (floor_align(ts, 60, 5) + 60 - ts + 19) / 20,
                "{ts}"
            );
        }
    }
    use proptest::prelude::*;

    #[test]
    fn tumbling_assignment() {
        let k = WindowKind::Tumbling {
            size: 10,
            offset: 0,
        };
        assert_eq!(k.assign(0).collect::<Vec<_>>(), vec![Window::new(0, 10)]);
        assert_eq!(k.assign(9).collect::<Vec<_>>(), vec![Window::new(0, 10)]);
        assert_eq!(k.assign(10).collect::<Vec<_>>(), vec![Window::new(10, 20)]);
        assert_eq!(k.assign(-1).collect::<Vec<_>>(), vec![Window::new(-10, 0)]);
        let k = WindowKind::Tumbling {
            size: 10,
            offset: 3,
        };
        assert_eq!(k.assign(2).collect::<Vec<_>>(), vec![Window::new(-7, 3)]);
    }

    #[test]
    fn sliding_assignment() {
        let k = WindowKind::Sliding {
            size: 10,
            slide: 5,
            offset: 0,
        };
        assert_eq!(
            k.assign(7).collect::<Vec<_>>(),
            vec![Window::new(5, 15), Window::new(0, 10)]
        );
        let k = WindowKind::Sliding {
            size: 10,
            slide: 4,
            offset: 0,
        };
        // starts 8, 4, 0 (0 <= 9 < 10), but not -4 (ends at 6).
        assert_eq!(k.assign(9).count(), 3);
        assert_eq!(k.assign(10).count(), 2);
    }

    #[test]
    fn session_proto_window() {
        let k = WindowKind::Session {
            gap: 30,
            merge_touching: false,
        };
        assert_eq!(
            k.assign(100).collect::<Vec<_>>(),
            vec![Window::new(100, 130)]
        );
    }

    #[test]
    fn slice_grid_bounds() {
        let g = SliceGrid::new(10, 4, 0);
        assert_eq!(g.slice, 2);
        assert_eq!(g.slice_start(9), 8);
        // Slice [8,10) lies in windows starting at 0, 4, 8 -> ends 10, 14, 18.
        assert_eq!(g.first_end(8), 10);
        assert_eq!(g.last_end(8), 18);
        assert_eq!(g.end_after(10), 14);
        assert_eq!(g.end_after(9), 10);
        assert_eq!(g.end_at_or_after(10), 10);
        assert_eq!(g.end_at_or_after(11), 14);
    }

    fn sliding() -> impl Strategy<Value = (i64, i64, i64)> {
        (1i64..50, 1i64..50, 0i64..50).prop_map(|(a, b, o)| {
            let (slide, size) = if a <= b { (a, b) } else { (b, a) };
            (size, slide, o % slide)
        })
    }

    proptest! {
        #[test]
        fn every_window_contains_the_event_and_none_is_missed(
            (size, slide, offset) in sliding(), ts in -10_000i64..10_000
        ) {
            let k = WindowKind::Sliding { size, slide, offset };
            let got: Vec<Window> = k.assign(ts).collect();
            for w in &got {
                prop_assert!(w.contains(ts));
                prop_assert_eq!((w.start - offset).rem_euclid(slide), 0);
                prop_assert_eq!(w.end - w.start, size);
            }
            // Brute force over every aligned start near ts.
            let mut expected = Vec::new();
            let mut s = floor_align(ts - size - slide, slide, offset);
            while s <= ts {
                if Window::new(s, s + size).contains(ts) {
                    expected.push(Window::new(s, s + size));
                }
                s += slide;
            }
            expected.reverse();
            prop_assert_eq!(&got, &expected);
            // size/slide windows when it divides evenly, else floor or ceil.
            let n = got.len() as i64;
            if size % slide == 0 {
                prop_assert_eq!(n, size / slide);
            } else {
                prop_assert!(n == size / slide || n == size / slide + 1);
            }
        }

        #[test]
        fn tumbling_windows_never_straddle_a_boundary(size in 1i64..100, offset in 0i64..100, ts in -10_000i64..10_000) {
            let offset = offset % size;
            let k = WindowKind::Tumbling { size, offset };
            let ws: Vec<Window> = k.assign(ts).collect();
            prop_assert_eq!(ws.len(), 1);
            prop_assert!(ws[0].contains(ts));
            // The neighbour just across the end boundary is in the next window, never in both.
            let next: Vec<Window> = k.assign(ws[0].end).collect();
            prop_assert_eq!(next[0].start, ws[0].end);
        }

        #[test]
        fn a_window_is_the_union_of_its_slices(
            (size, slide, offset) in sliding(), ts in -10_000i64..10_000
        ) {
            let g = SliceGrid::new(size, slide, offset);
            let a = g.slice_start(ts);
            prop_assert!(a <= ts && ts < a + g.slice);
            let windows: Vec<Window> = WindowKind::Sliding { size, slide, offset }.assign(ts).collect();
            // Window boundaries are slice boundaries.
            for w in &windows {
                prop_assert_eq!((w.start - offset).rem_euclid(g.slice), 0);
                prop_assert_eq!((w.end - offset).rem_euclid(g.slice), 0);
            }
            let ends: Vec<i64> = windows.iter().map(|w| w.end).collect();
            prop_assert_eq!(*ends.iter().min().unwrap(), g.first_end(a));
            prop_assert_eq!(*ends.iter().max().unwrap(), g.last_end(a));
            prop_assert!(g.end_after(ts) > ts);
            prop_assert!(g.end_after(ts) - slide <= ts);
        }
    }
}
