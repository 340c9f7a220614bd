//! Order-preserving byte encodings for state and timer keys.
//!
//! RocksDB sorts keys bytewise. These encodings make that order meaningful:
//!
//! * a grouping key is written as a 4-byte big-endian length followed by its bytes, so all entries
//!   of one key form one contiguous range (a prefix scan), ordered by (length, bytes) between keys;
//! * a time is written as 8 big-endian bytes with the sign bit flipped, so negative times sort
//!   before positive ones and the byte order equals the numeric order.
//!
//! What the entries are (their tags, keys and values) is the operator's business: the windowing
//! operator's format is in [`super::entry`]. This layer only requires that every state
//! key starts with a tag byte from 1 to 254 (tag 0 is the changelog's markers').

/// Why a stored key could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyDecodeError {
    /// The bytes ended early.
    #[error("state key truncated")]
    Truncated,
    /// The grouping key is not UTF-8.
    #[error("state key is not UTF-8")]
    NotUtf8,
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
        fn keys_sort_by_length_then_bytes_and_read_back(k1 in "\\PC{0,6}", k2 in "\\PC{0,6}") {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            put_key(&mut a, &k1);
            put_key(&mut b, &k2);
            prop_assert_eq!((k1.len(), k1.as_bytes()).cmp(&(k2.len(), k2.as_bytes())), a.cmp(&b));
            prop_assert_eq!(get_key(&a).unwrap(), (k1.as_str(), &[][..]));
        }
    }
}
