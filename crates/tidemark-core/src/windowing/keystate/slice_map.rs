//! A key's slices of sliced sliding windows, and the slices changed since the last flush.

use crate::windowing::aggregate::Acc;
use std::collections::VecDeque;

/// The slices of one key, sorted by slice start. New slices come at the back and expired ones
/// leave at the front, so a sorted deque does what a B-tree map did here, with contiguous range
/// scans and no node allocations.
#[derive(Debug, Clone, Default)]
pub struct SliceMap {
    slots: VecDeque<(i64, Acc)>,
}

impl SliceMap {
    fn find(&self, start: i64) -> Result<usize, usize> {
        let i = self.lower_bound(start);
        match self.slots.get(i) {
            Some((a, _)) if *a == start => Ok(i),
            _ => Err(i),
        }
    }

    /// Whether there are no slices.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The heap bytes the slices hold beyond the map itself, their states included.
    pub fn heap_size(&self) -> usize {
        let acc = std::mem::size_of::<Acc>();
        self.slots.capacity() * std::mem::size_of::<(i64, Acc)>()
            + self
                .slots
                .iter()
                .map(|(_, a)| a.size() - acc)
                .sum::<usize>()
    }

    /// The slice starting at `start`.
    pub fn get(&self, start: &i64) -> Option<&Acc> {
        self.find(*start).ok().map(|i| &self.slots[i].1)
    }

    /// The slice starting at `start`, created empty when absent.
    pub fn get_or_default(&mut self, start: i64) -> &mut Acc {
        let i = match self.find(start) {
            Ok(i) => i,
            Err(i) => {
                self.slots.insert(i, (start, Acc::default()));
                i
            }
        };
        &mut self.slots[i].1
    }

    /// Removes the slice starting at `start`.
    pub fn remove(&mut self, start: &i64) -> Option<Acc> {
        let i = self.find(*start).ok()?;
        self.slots.remove(i).map(|(_, acc)| acc)
    }

    /// The earliest slice.
    pub fn first_key_value(&self) -> Option<(&i64, &Acc)> {
        self.slots.front().map(|(a, acc)| (a, acc))
    }

    /// Slice starts in order.
    pub fn keys(&self) -> impl Iterator<Item = &i64> + '_ {
        self.slots.iter().map(|(a, _)| a)
    }

    /// The slices whose start lies in `range`, in order.
    pub fn range(
        &self,
        range: impl std::ops::RangeBounds<i64>,
    ) -> impl Iterator<Item = (&i64, &Acc)> + '_ {
        use std::ops::Bound;
        let lo = match range.start_bound() {
            Bound::Included(&a) => self.lower_bound(a),
            Bound::Excluded(&a) => self.above(a),
            Bound::Unbounded => 0,
        };
        let hi = match range.end_bound() {
            Bound::Included(&b) => self.above(b),
            Bound::Excluded(&b) => self.lower_bound(b),
            Bound::Unbounded => self.slots.len(),
        };
        self.slots.range(lo..hi.max(lo)).map(|(a, acc)| (a, acc))
    }

    /// Index of the first slice starting after `a`.
    fn above(&self, a: i64) -> usize {
        a.checked_add(1)
            .map_or(self.slots.len(), |b| self.lower_bound(b))
    }

    /// Index of the first slice starting at or after `a`. The windows that fire and the slices that
    /// expire lie near the ends, so both ends are checked first and the search gallops in from the
    /// back (a binary search over a key's slices cost a sixth of the sliding benchmark).
    fn lower_bound(&self, a: i64) -> usize {
        let n = self.slots.len();
        match (self.slots.front(), self.slots.back()) {
            (Some((first, _)), _) if *first >= a => return 0,
            (_, Some((last, _))) if *last < a => return n,
            (None, _) | (_, None) => return 0,
            _ => {}
        }
        // Now slots[0] < a <= slots[n - 1].
        let (mut hi, mut step) = (n - 1, 1);
        loop {
            let lo = hi.saturating_sub(step);
            if self.slots[lo].0 < a {
                // The answer lies in (lo, hi].
                let mut l = lo + 1;
                let mut h = hi;
                while l < h {
                    let mid = l + (h - l) / 2;
                    if self.slots[mid].0 < a {
                        l = mid + 1;
                    } else {
                        h = mid;
                    }
                }
                return l;
            }
            hi = lo;
            step *= 2;
        }
    }
}

/// The slices of a key changed since the last flush, each once. A key changes one or two slices
/// between flushes, so two live inline and only more than that allocate: a list that allocated
/// for every key at every flush cost a malloc and a free per key, and one that kept its allocation
/// cost 16 MB of peak RSS in the sliding benchmark.
#[derive(Debug, Clone, Default)]
pub struct DirtySlices {
    inline: [i64; 2],
    len: u8,
    more: Vec<i64>,
}

impl DirtySlices {
    /// The heap bytes of the list beyond its inline part.
    pub fn heap_size(&self) -> usize {
        self.more.capacity() * 8
    }

    /// Lists `start` (once).
    pub fn insert(&mut self, start: i64) {
        let n = usize::from(self.len);
        if self.inline[..n].contains(&start) || self.more.contains(&start) {
            return;
        }
        if n < self.inline.len() {
            self.inline[n] = start;
            self.len += 1;
        } else {
            self.more.push(start);
        }
    }

    /// Calls `f` with each slice start and empties the list.
    pub fn take_each(&mut self, mut f: impl FnMut(i64)) {
        for &s in &self.inline[..usize::from(self.len)] {
            f(s);
        }
        self.len = 0;
        for s in std::mem::take(&mut self.more) {
            f(s);
        }
    }
}
