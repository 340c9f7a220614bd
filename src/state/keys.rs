//! Order-preserving byte encodings for state and timer keys.
//!
//! RocksDB sorts keys bytewise. These encodings make that order meaningful:
//!
//! * a grouping key is written as a 4-byte big-endian length followed by its bytes, so all entries
//!   of one key form one contiguous range (a prefix scan), ordered by (length, bytes) between keys;
//! * a time is written as 8 big-endian bytes with the sign bit flipped, so negative times sort
//!   before positive ones and the byte order equals the numeric order.
//!
//! State entries start with a one-byte tag ([`TAG_WINDOW`], [`TAG_SLICE`], [`TAG_CURSOR`],
//! [`TAG_WATERMARK`], [`TAG_SESSION`]) so one column family can hold every kind of entry of an
//! operator's partition.

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

/// Why a stored key could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyDecodeError {
    /// The bytes ended early.
    #[error("state key truncated")]
    Truncated,
    /// The tag byte is not one tidemark writes.
    #[error("unknown state key tag {0}")]
    UnknownTag(u8),
    /// The grouping key is not UTF-8.
    #[error("state key is not UTF-8")]
    NotUtf8,
    /// Bytes were left over after decoding.
    #[error("state key has trailing bytes")]
    Trailing,
}

/// Appends a time in sign-flipped big-endian form.
pub fn put_time(out: &mut Vec<u8>, t: i64) {
    out.extend_from_slice(&((t as u64) ^ (1u64 << 63)).to_be_bytes());
}

/// Reads a time written by [`put_time`].
pub fn get_time(bytes: &[u8]) -> Result<(i64, &[u8]), KeyDecodeError> {
    if bytes.len() < 8 {
        return Err(KeyDecodeError::Truncated);
    }
    let (head, rest) = bytes.split_at(8);
    let raw = u64::from_be_bytes(head.try_into().expect("8 bytes"));
    Ok(((raw ^ (1u64 << 63)) as i64, rest))
}

/// Appends a grouping key as a 4-byte big-endian length and its bytes.
pub fn put_key(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key.as_bytes());
}

/// Reads a grouping key written by [`put_key`].
pub fn get_key(bytes: &[u8]) -> Result<(&str, &[u8]), KeyDecodeError> {
    if bytes.len() < 4 {
        return Err(KeyDecodeError::Truncated);
    }
    let len = u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
    let rest = &bytes[4..];
    if rest.len() < len {
        return Err(KeyDecodeError::Truncated);
    }
    let key = std::str::from_utf8(&rest[..len]).map_err(|_| KeyDecodeError::NotUtf8)?;
    Ok((key, &rest[len..]))
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
        other => return Err(KeyDecodeError::UnknownTag(other)),
    };
    if !rest.is_empty() {
        return Err(KeyDecodeError::Trailing);
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn time_encoding_preserves_order(a in any::<i64>(), b in any::<i64>()) {
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            put_time(&mut ea, a);
            put_time(&mut eb, b);
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
            prop_assert_eq!(get_time(&ea).unwrap().0, a);
        }

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
}
