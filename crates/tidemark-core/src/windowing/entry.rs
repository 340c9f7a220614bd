//! The saved format of window state, in one place: the keys and values of the entries a
//! partition's column family holds (and its changelog carries), how a key's changed state becomes
//! entries at a flush, and how entries become a key's state again on load.
//!
//! Every entry starts with a one-byte tag. Times are sign-flipped big-endian and grouping keys
//! length-prefixed ([`super::keys`]), so byte order is numeric order and all entries of one
//! key and tag form one range.
//!
//! | tag | key | value |
//! |---|---|---|
//! | 1 window | `len(key) key start end` | [`put_win_state`] |
//! | 2 slice | `len(key) key slice_start` | [`put_slice`]: the slice's accumulator |
//! | 3 cursor | `len(key) key` | [`put_cursor`]: next LATE pane index per window end |
//! | 4 watermark | (the tag only) | the partition's watermark, 8 bytes big-endian |
//! | 5 session | `len(key) key start` | end (8 bytes little-endian), then [`put_win_state`] |
//! | 6 source | `len(name) name` | [`put_source`]: what a watermark source last reported |
//!
//! Sessions of earlier versions were stored as tag 1 (end in the key); they still load, and the
//! next flush rewrites them as tag 5 and deletes the old entries. Tag 0 is never a state key: the
//! changelog's markers use it.

use super::aggregate::{value, Acc, AggSpec};
use super::assigner::Window;
use super::changes::Changes;
use super::keys::{get_key, get_time, put_key, put_time};
use super::keystate::{Cursor, KeyState, WinState};
use super::watermark::SourceWatermark;
use std::collections::BTreeMap;

/// Tag of a per-window entry: `tag | key | start | end`.
pub const TAG_WINDOW: u8 = 1;
/// Tag of a sliding-window slice entry: `tag | key | slice_start`.
pub const TAG_SLICE: u8 = 2;
/// Tag of a per-key slice cursor entry: `tag | key`.
pub const TAG_CURSOR: u8 = 3;
/// Tag of the partition's watermark entry: the single byte `tag`.
pub const TAG_WATERMARK: u8 = 4;
/// Tag of a session entry: `tag | key | start`. A session's end moves with every element that
/// extends it, so it is part of the value: an extension rewrites one entry instead of writing a
/// tombstone for the old window and a value for the new one.
pub const TAG_SESSION: u8 = 5;
/// Tag of a watermark source's entry: `tag | name`, the name length-prefixed like a grouping
/// key. One per source the partition hears from ([`super::watermark::Valve`]).
pub const TAG_SOURCE: u8 = 6;

/// Why a stored key could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyDecodeError {
    /// The bytes ended early.
    #[error("state key truncated")]
    Truncated,
    /// The tag byte is not one tidemark writes.
    #[error("unknown state key tag {0}")]
    UnknownTag(u8),
    /// A time or grouping key inside does not decode.
    #[error(transparent)]
    Encoding(#[from] super::keys::KeyDecodeError),
    /// Bytes were left over after decoding.
    #[error("state key has trailing bytes")]
    Trailing,
}

/// A decoded state key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum StateKey {
    /// A per-window entry.
    Window {
        /// The grouping key.
        key: String,
        /// Window start (inclusive).
        start: i64,
        /// Window end (exclusive).
        end: i64,
    },
    /// A sliding-window slice.
    Slice {
        /// The grouping key.
        key: String,
        /// Slice start (inclusive).
        start: i64,
    },
    /// The per-key cursor of sliced sliding windows.
    Cursor {
        /// The grouping key.
        key: String,
    },
    /// A session, by its start (the end is in the value).
    Session {
        /// The grouping key.
        key: String,
        /// Session start (inclusive).
        start: i64,
    },
    /// The partition's watermark.
    Watermark,
    /// What a watermark source last reported.
    Source {
        /// The source's name.
        name: String,
    },
}

/// Appends a per-window state key.
pub fn put_window_key(out: &mut Vec<u8>, key: &str, start: i64, end: i64) {
    out.push(TAG_WINDOW);
    put_key(out, key);
    put_time(out, start);
    put_time(out, end);
}

/// Appends a session state key.
pub fn put_session_key(out: &mut Vec<u8>, key: &str, start: i64) {
    out.push(TAG_SESSION);
    put_key(out, key);
    put_time(out, start);
}

/// Appends a slice state key.
pub fn put_slice_key(out: &mut Vec<u8>, key: &str, start: i64) {
    out.push(TAG_SLICE);
    put_key(out, key);
    put_time(out, start);
}

/// Appends a cursor state key.
pub fn put_cursor_key(out: &mut Vec<u8>, key: &str) {
    out.push(TAG_CURSOR);
    put_key(out, key);
}

/// Appends a watermark source's key.
pub fn put_source_key(out: &mut Vec<u8>, name: &str) {
    out.push(TAG_SOURCE);
    put_key(out, name);
}

/// Encodes a per-window state key.
pub fn window_key(key: &str, start: i64, end: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 4 + key.len() + 16);
    put_window_key(&mut out, key, start, end);
    out
}

/// Encodes a slice state key.
pub fn slice_key(key: &str, start: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 4 + key.len() + 8);
    put_slice_key(&mut out, key, start);
    out
}

/// Encodes a cursor state key.
pub fn cursor_key(key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 4 + key.len());
    put_cursor_key(&mut out, key);
    out
}

/// The prefix shared by every entry of `tag` for grouping key `key`.
pub fn key_prefix(tag: u8, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 4 + key.len());
    out.push(tag);
    put_key(&mut out, key);
    out
}

/// The watermark entry's key.
pub const WATERMARK_KEY: [u8; 1] = [TAG_WATERMARK];

/// Decodes any state key.
pub fn decode_state_key(bytes: &[u8]) -> Result<StateKey, KeyDecodeError> {
    let (&tag, rest) = bytes.split_first().ok_or(KeyDecodeError::Truncated)?;
    if tag == TAG_WATERMARK {
        return if rest.is_empty() {
            Ok(StateKey::Watermark)
        } else {
            Err(KeyDecodeError::Trailing)
        };
    }
    let (key, rest) = get_key(rest)?;
    let key = key.to_string();
    let (decoded, rest) = match tag {
        TAG_WINDOW => {
            let (start, rest) = get_time(rest)?;
            let (end, rest) = get_time(rest)?;
            (StateKey::Window { key, start, end }, rest)
        }
        TAG_SLICE => {
            let (start, rest) = get_time(rest)?;
            (StateKey::Slice { key, start }, rest)
        }
        TAG_CURSOR => (StateKey::Cursor { key }, rest),
        TAG_SESSION => {
            let (start, rest) = get_time(rest)?;
            (StateKey::Session { key, start }, rest)
        }
        TAG_SOURCE => (StateKey::Source { name: key }, rest),
        other => return Err(KeyDecodeError::UnknownTag(other)),
    };
    if !rest.is_empty() {
        return Err(KeyDecodeError::Trailing);
    }
    Ok(decoded)
}

/// Marks a slice value of the current form: earlier slice values started with the element
/// count, which is never `u64::MAX`.
const SLICE_MARK: [u8; 8] = [0xff; 8];

/// Appends a slice value: [`SLICE_MARK`], then the slice's accumulator ([`Acc::encode`]).
pub fn put_slice(out: &mut Vec<u8>, acc: &Acc) {
    out.extend_from_slice(&SLICE_MARK);
    acc.encode(out);
}

/// Decodes what [`put_slice`] wrote, or a slice value of an earlier version (the accumulator in
/// its earlier form, without the mark).
pub fn get_slice(aggs: &[AggSpec], bytes: &[u8]) -> Option<Acc> {
    let (mut rest, legacy) = match bytes.strip_prefix(&SLICE_MARK) {
        Some(rest) => (rest, false),
        None => (bytes, true),
    };
    let acc = Acc::decode(aggs, &mut rest, legacy)?;
    rest.is_empty().then_some(acc)
}

/// Appends a window state value (version 3): flags, next pane index, pending elements, the early
/// deadline and latest element time when present, the window's total and pane, and the last
/// emitted pane (sessions), each accumulator as [`Acc::encode`] writes it.
pub fn put_win_state(out: &mut Vec<u8>, st: &WinState) {
    let flags = (st.on_time_done as u8)
        | ((st.early_deadline.is_some() as u8) << 1)
        | ((st.last_emitted.is_some() as u8) << 2)
        | ((st.last_ts.is_some() as u8) << 3);
    out.push(3); // version
    out.push(flags);
    out.extend_from_slice(&st.next_pane.to_le_bytes());
    out.extend_from_slice(&st.pending.to_le_bytes());
    for t in [st.early_deadline, st.last_ts].into_iter().flatten() {
        out.extend_from_slice(&t.to_le_bytes());
    }
    st.total.encode(out);
    st.pane.encode(out);
    if let Some(l) = &st.last_emitted {
        l.encode(out);
    }
}

/// Decodes what [`put_win_state`] wrote, or a value of version 2 (accumulators in their earlier
/// form) or 1 (also no pending count and no latest element time: it was written before count
/// triggers existed, when nothing was left pending).
pub fn get_win_state(aggs: &[AggSpec], bytes: &[u8]) -> Option<WinState> {
    let (&version, rest) = bytes.split_first()?;
    if !(1..=3).contains(&version) {
        return None;
    }
    let legacy = version < 3;
    let (&flags, rest) = rest.split_first()?;
    let next_pane = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
    let mut rest = &rest[4..];
    let mut pending = 0;
    if version >= 2 {
        pending = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
        rest = &rest[4..];
    }
    let early_deadline = take_time(&mut rest, flags & 2 != 0)?;
    let last_ts = take_time(&mut rest, version >= 2 && flags & 8 != 0)?;
    let total = Acc::decode(aggs, &mut rest, legacy)?;
    let pane = Acc::decode(aggs, &mut rest, legacy)?;
    let last_emitted = if flags & 4 != 0 {
        Some(Acc::decode(aggs, &mut rest, legacy)?)
    } else {
        None
    };
    if !rest.is_empty() {
        return None;
    }
    Some(WinState {
        total,
        pane,
        next_pane,
        pending,
        last_ts,
        on_time_done: flags & 1 != 0,
        early_deadline,
        last_emitted,
    })
}

/// Appends a cursor value (version 2: the late pane indexes only).
pub fn put_cursor(out: &mut Vec<u8>, c: &Cursor) {
    out.push(2);
    out.extend_from_slice(&(c.late_panes.len() as u32).to_le_bytes());
    for (end, idx) in &c.late_panes {
        out.extend_from_slice(&end.to_le_bytes());
        out.extend_from_slice(&idx.to_le_bytes());
    }
}

/// Decodes a cursor value of version 1 (which also stored `next_fire`, now derived instead) or 2.
pub fn get_cursor(bytes: &[u8]) -> Option<Cursor> {
    let (&version, mut rest) = bytes.split_first()?;
    match version {
        1 => {
            let (&has, r) = rest.split_first()?;
            rest = if has == 1 { r.get(8..)? } else { r };
        }
        2 => {}
        _ => return None,
    }
    let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    rest = &rest[4..];
    let mut late_panes = BTreeMap::new();
    for _ in 0..n {
        let end = i64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
        let idx = u32::from_le_bytes(rest.get(8..12)?.try_into().ok()?);
        late_panes.insert(end, idx);
        rest = &rest[12..];
    }
    rest.is_empty().then_some(Cursor {
        next_fire: None,
        late_panes,
        running: None,
        scheduled: None,
    })
}

/// Appends a session value: its end, then its window state.
pub fn put_session(out: &mut Vec<u8>, end: i64, st: &WinState) {
    out.extend_from_slice(&end.to_le_bytes());
    put_win_state(out, st);
}

/// Decodes what [`put_session`] wrote: the session's end and state.
pub fn get_session(aggs: &[AggSpec], bytes: &[u8]) -> Option<(i64, WinState)> {
    let end = i64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    Some((end, get_win_state(aggs, &bytes[8..])?))
}

/// Appends a watermark source's value (version 1): its watermark, then flags for the optional
/// last record time and idle claim, then those that are present.
pub fn put_source(out: &mut Vec<u8>, s: &SourceWatermark) {
    out.push(1);
    out.extend_from_slice(&s.watermark.to_le_bytes());
    out.push(u8::from(s.last_record_at.is_some()) | (u8::from(s.idle_at.is_some()) << 1));
    for t in [s.last_record_at, s.idle_at].into_iter().flatten() {
        out.extend_from_slice(&t.to_le_bytes());
    }
}

/// Reads an optional little-endian time that a flag says is present; `None` when the bytes end
/// early.
fn take_time(rest: &mut &[u8], present: bool) -> Option<Option<i64>> {
    if !present {
        return Some(None);
    }
    Some(Some(i64::from_le_bytes(value::take::<8>(rest)?)))
}

/// Decodes what [`put_source`] wrote.
pub fn get_source(bytes: &[u8]) -> Option<SourceWatermark> {
    let (&1, rest) = bytes.split_first()? else {
        return None;
    };
    let watermark = i64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let flags = *rest.get(8)?;
    let mut rest = &rest[9..];
    let last_record_at = take_time(&mut rest, flags & 1 != 0)?;
    let idle_at = take_time(&mut rest, flags & 2 != 0)?;
    rest.is_empty().then_some(SourceWatermark {
        watermark,
        last_record_at,
        idle_at,
    })
}

/// The watermark entry's value.
pub fn watermark_value(wm: i64) -> [u8; 8] {
    wm.to_be_bytes()
}

/// Decodes the watermark entry's value.
pub fn get_watermark(bytes: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(bytes.try_into().ok()?))
}

/// Adds a changed key's dirty entries to `changes` (the full value, or a tombstone, of each) and
/// marks the key clean. Sessions (`sessions`) are stored by start, with the end in the value.
pub(super) fn key_changes(key: &str, ks: &mut KeyState, changes: &mut Changes, sessions: bool) {
    ks.listed = false;
    window_changes(key, ks, changes, sessions);
    let KeyState {
        slices,
        dirty_slices,
        ..
    } = ks;
    dirty_slices.take_each(|s| {
        changes.push(
            |out| put_slice_key(out, key, s),
            slices
                .get(&s)
                .map(|a| |out: &mut Vec<u8>| put_slice(out, a)),
        );
    });
    if std::mem::take(&mut ks.dirty_cursor) {
        changes.push(
            |out| put_cursor_key(out, key),
            ks.cursor
                .as_ref()
                .filter(|c| !c.late_panes.is_empty())
                .map(|c| |out: &mut Vec<u8>| put_cursor(out, c)),
        );
    }
}

/// Adds the changed windows of a key (values) and its removed ones (tombstones) to `changes`.
fn window_changes(key: &str, ks: &mut KeyState, changes: &mut Changes, sessions: bool) {
    let no_value = None::<fn(&mut Vec<u8>)>;
    let windows = &mut ks.windows;
    let mut removed = windows.take_removed();
    removed.sort_unstable();
    removed.dedup();
    let mut last_start = None;
    for (w, legacy) in removed {
        let window_key = |out: &mut Vec<u8>| put_window_key(out, key, w.start, w.end);
        if !sessions {
            // Removed and then created again since the last flush: the value below wins.
            if !windows.contains_key(&w) {
                changes.push(window_key, no_value);
            }
            continue;
        }
        if legacy {
            changes.push(window_key, no_value);
        }
        // One tombstone per start, and none when a session with that start exists (its value
        // below replaces the entry).
        if last_start != Some(w.start) && !windows.has_start(w.start) {
            changes.push(|out| put_session_key(out, key, w.start), no_value);
        }
        last_start = Some(w.start);
    }
    windows.take_dirty(|w, st, legacy| {
        if !sessions {
            changes.push(
                |out| put_window_key(out, key, w.start, w.end),
                Some(|out: &mut Vec<u8>| put_win_state(out, st)),
            );
            return;
        }
        if legacy {
            changes.push(|out| put_window_key(out, key, w.start, w.end), no_value);
        }
        changes.push(
            |out| put_session_key(out, key, w.start),
            Some(|out: &mut Vec<u8>| put_session(out, w.end, st)),
        );
    });
}

/// Applies one stored entry to a key state; `None` if the value does not decode. A window entry
/// (tag 1) of a session pipeline is a session of the older format, which the next flush
/// rewrites.
pub(super) fn apply_entry(
    ks: &mut KeyState,
    decoded: StateKey,
    value: &[u8],
    sessions: bool,
    aggs: &[AggSpec],
) -> Option<()> {
    match decoded {
        StateKey::Window { start, end, .. } => {
            ks.windows.insert_loaded(
                Window::new(start, end),
                get_win_state(aggs, value)?,
                sessions,
            );
        }
        StateKey::Session { start, .. } => {
            let (end, st) = get_session(aggs, value)?;
            ks.windows.insert_loaded(Window::new(start, end), st, false);
        }
        StateKey::Slice { start, .. } => {
            *ks.slices.get_or_default(start) = get_slice(aggs, value)?;
        }
        StateKey::Cursor { .. } => ks.cursor = Some(get_cursor(value)?),
        StateKey::Watermark | StateKey::Source { .. } => {}
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut v = Vec::new();
        f(&mut v);
        v
    }

    proptest! {
        #[test]
        fn window_keys_sort_like_their_tuples(
            k1 in "[a-c]{0,3}", s1 in any::<i64>(), e1 in any::<i64>(),
            k2 in "[a-c]{0,3}", s2 in any::<i64>(), e2 in any::<i64>(),
        ) {
            let a = window_key(&k1, s1, e1);
            let b = window_key(&k2, s2, e2);
            let ta = (k1.len(), k1.as_bytes(), s1, e1);
            let tb = (k2.len(), k2.as_bytes(), s2, e2);
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
            prop_assert_eq!(
                decode_state_key(&a).unwrap(),
                StateKey::Window { key: k1.clone(), start: s1, end: e1 }
            );
        }

        #[test]
        fn entries_of_one_key_share_a_prefix(k in "\\PC{0,8}", s in any::<i64>(), e in any::<i64>()) {
            prop_assert!(window_key(&k, s, e).starts_with(&key_prefix(TAG_WINDOW, &k)));
            prop_assert!(slice_key(&k, s).starts_with(&key_prefix(TAG_SLICE, &k)));
            prop_assert_eq!(decode_state_key(&slice_key(&k, s)).unwrap(), StateKey::Slice { key: k.clone(), start: s });
            prop_assert_eq!(decode_state_key(&cursor_key(&k)).unwrap(), StateKey::Cursor { key: k.clone() });
            let mut session = Vec::new();
            put_session_key(&mut session, &k, s);
            prop_assert!(session.starts_with(&key_prefix(TAG_SESSION, &k)));
            prop_assert_eq!(decode_state_key(&session).unwrap(), StateKey::Session { key: k.clone(), start: s });
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_state_key(&bytes);
        }
    }

    #[test]
    fn a_key_that_is_a_prefix_of_another_does_not_mix_ranges() {
        // With a plain concatenation "ab"+time could interleave with "abc"+time; the length prefix
        // keeps every key's range contiguous.
        let p = key_prefix(TAG_WINDOW, "ab");
        assert!(!window_key("abc", 0, 1).starts_with(&p));
    }

    /// (window start, tombstone?) of each change a key's windows yield, in key order.
    fn flushed(ks: &mut KeyState) -> Vec<(i64, bool)> {
        let mut c = Changes::default();
        key_changes("k", ks, &mut c, false);
        c.sort();
        c.iter()
            .map(|(k, v)| {
                let StateKey::Window { start, .. } = decode_state_key(k).unwrap() else {
                    panic!("not a window key")
                };
                (start, v.is_none())
            })
            .collect()
    }

    #[test]
    fn windows_flush_values_and_tombstones_once() {
        let w = |s: i64| Window::new(s, s + 10);
        let mut ks = KeyState::default();
        for s in [20, 0, 10] {
            ks.windows.get_or_insert_with(w(s), || WinState::new(false));
        }
        assert_eq!(
            ks.windows.iter().map(|(w, _)| w.start).collect::<Vec<_>>(),
            [0, 10, 20],
            "sorted"
        );
        assert!(flushed(&mut ks).is_empty(), "nothing touched yet");
        ks.touch_window(w(10));
        ks.touch_window(w(0));
        assert_eq!(flushed(&mut ks), [(0, false), (10, false)]);
        assert!(flushed(&mut ks).is_empty(), "clean after a flush");
        // Touched, then removed: a tombstone, once (remove records it; a later touch adds nothing).
        ks.touch_window(w(20));
        ks.windows.remove(&w(20));
        ks.touch_window(w(20));
        assert_eq!(flushed(&mut ks), [(20, true)]);
        // Removed, then created again and touched: only the value.
        ks.windows.remove(&w(0));
        ks.windows.get_or_insert_with(w(0), || WinState::new(true));
        ks.touch_window(w(0));
        assert_eq!(flushed(&mut ks), [(0, false)]);
        assert_eq!(ks.windows.len(), 2);
        assert_eq!(
            ks.windows
                .before(w(10))
                .map(|(w, _)| w.start)
                .collect::<Vec<_>>(),
            [0]
        );
    }

    fn aggs() -> Vec<AggSpec> {
        vec![
            AggSpec::new("n", "count", None),
            AggSpec::new("s", "sum", Some(0)),
            AggSpec::new("hi", "max", Some(1)),
            AggSpec::new("u", "count_distinct", Some(2)),
        ]
    }

    fn add(acc: &mut Acc, x: f64, y: f64, s: &str) {
        use crate::windowing::aggregate::value::{string, Value};
        acc.add(&aggs(), &[Value::Float(x), Value::Float(y), string(s)], 0);
    }

    /// The accumulator's saved form before version 3: the count, then sum/min/max per field.
    fn legacy_acc(count: u64, fields: &[(f64, f64, f64)]) -> Vec<u8> {
        let mut out = count.to_le_bytes().to_vec();
        out.push(fields.len() as u8);
        for (s, lo, hi) in fields {
            for x in [s, lo, hi] {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        out
    }

    #[test]
    fn win_state_round_trips() {
        let aggs = aggs();
        let mut st = WinState::new(true);
        add(&mut st.total, 1.0, 2.0, "a");
        st.next_pane = 3;
        st.early_deadline = Some(-5);
        st.last_emitted = Some(st.total.clone());
        st.pending = 7;
        assert_eq!(
            get_win_state(&aggs, &enc(|o| put_win_state(o, &st))),
            Some(st.clone())
        );
        st.last_ts = Some(i64::MIN + 1);
        st.early_deadline = None;
        assert_eq!(
            get_win_state(&aggs, &enc(|o| put_win_state(o, &st))),
            Some(st.clone())
        );
        // Version 1 had no pending count and no latest element time, and accumulators of the
        // earlier form.
        let mut v1 = vec![1, 1];
        v1.extend_from_slice(&3u32.to_le_bytes());
        v1.extend_from_slice(&legacy_acc(2, &[(5.0, 1.0, 4.0), (0.0, -1.0, 9.0)]));
        v1.extend_from_slice(&legacy_acc(0, &[]));
        let old = get_win_state(&aggs, &v1).unwrap();
        assert_eq!((old.next_pane, old.pending, old.last_ts), (3, 0, None));
        assert!(old.on_time_done);
        let values: Vec<Option<f64>> = (0..3).map(|i| old.total.value(&aggs, i).as_f64()).collect();
        assert_eq!(values, [Some(2.0), Some(5.0), Some(9.0)]);
        assert!(old.pane.is_empty());
        let plain = WinState::new(false);
        assert_eq!(
            get_win_state(&aggs, &enc(|o| put_win_state(o, &plain))),
            Some(plain.clone())
        );
        assert_eq!(get_win_state(&aggs, &[9, 9]), None);
        assert_eq!(
            get_session(&aggs, &enc(|o| put_session(o, 77, &plain))),
            Some((77, plain))
        );
    }

    #[test]
    fn cursor_round_trips() {
        let mut c = Cursor::default();
        c.late_panes.insert(10, 2);
        c.late_panes.insert(-10, 0);
        assert_eq!(get_cursor(&enc(|o| put_cursor(o, &c))), Some(c.clone()));
        // Version 1 also held next_fire, which is now derived on load: it is skipped.
        let mut v1 = vec![1, 1];
        v1.extend_from_slice(&42i64.to_le_bytes());
        v1.extend_from_slice(&enc(|o| put_cursor(o, &c))[1..]);
        assert_eq!(get_cursor(&v1), Some(c.clone()));
        assert_eq!(get_cursor(&[1, 0, 0, 0, 0, 0]), Some(Cursor::default()));
        assert_eq!(get_cursor(&[3, 0, 0, 0, 0]), None);
    }

    #[test]
    fn a_source_report_round_trips() {
        for s in [
            SourceWatermark::UNKNOWN,
            SourceWatermark {
                watermark: -7,
                last_record_at: Some(12),
                idle_at: None,
            },
            SourceWatermark {
                watermark: 99,
                last_record_at: Some(1),
                idle_at: Some(2),
            },
        ] {
            let bytes = enc(|o| put_source(o, &s));
            assert_eq!(get_source(&bytes), Some(s));
            assert_eq!(get_source(&bytes[..bytes.len() - 1]), None);
        }
        let key = enc(|o| put_source_key(o, "clicks/3"));
        assert_eq!(
            decode_state_key(&key).unwrap(),
            StateKey::Source {
                name: "clicks/3".into()
            }
        );
    }

    #[test]
    fn a_slice_round_trips_and_earlier_slices_load() {
        let aggs = aggs();
        let mut a = Acc::default();
        add(&mut a, 1.5, -2.0, "x");
        add(&mut a, 0.5, 4.0, "y");
        let bytes = enc(|o| put_slice(o, &a));
        assert_eq!(get_slice(&aggs, &bytes), Some(a));
        assert_eq!(get_slice(&aggs, &bytes[..bytes.len() - 1]), None);
        let old = get_slice(&aggs, &legacy_acc(4, &[(10.0, 1.0, 4.0), (3.0, 0.0, 3.0)])).unwrap();
        assert_eq!(old.count, 4);
        assert_eq!(old.value(&aggs, 1).as_f64(), Some(10.0));
        assert_eq!(old.value(&aggs, 2).as_f64(), Some(3.0));
    }
}
