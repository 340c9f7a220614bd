//! The changes of one flush: the full current value or a tombstone of every changed state entry,
//! sorted by encoded key. The same list is the store's batch and the changelog.

/// One change inside [`Changes`]: byte ranges of its key and value in the shared buffer.
#[derive(Debug, Clone, Copy)]
struct ChangeEntry {
    /// The key's first 16 bytes, big-endian, so most comparisons while sorting are one integer
    /// comparison instead of a memcmp.
    prefix: u128,
    key: (u32, u32),
    value: Option<(u32, u32)>,
}

/// The dirty entries of one flush, sorted by encoded key: for each, the full current value or a
/// tombstone. Keys and values live in one buffer, so a flush allocates twice, not per entry.
#[derive(Debug, Default, Clone)]
pub struct Changes {
    buf: Vec<u8>,
    entries: Vec<ChangeEntry>,
}

impl Changes {
    /// An empty list with room for `bytes` of keys and values and `entries` changes.
    pub fn with_capacity(bytes: usize, entries: usize) -> Changes {
        Changes {
            buf: Vec::with_capacity(bytes),
            entries: Vec::with_capacity(entries),
        }
    }

    /// Bytes of keys and values, and number of changes.
    pub fn sizes(&self) -> (usize, usize) {
        (self.buf.len(), self.entries.len())
    }

    /// Number of changed entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The changes in key order: encoded key and new value, or `None` for a tombstone.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        let slice = |(a, b): (u32, u32)| &self.buf[a as usize..b as usize];
        self.entries
            .iter()
            .map(move |e| (slice(e.key), e.value.map(slice)))
    }

    /// Appends one change: `write_key` writes the encoded key, `write_value` the value (`None`: a
    /// tombstone).
    pub(in crate::windowing) fn push(
        &mut self,
        write_key: impl FnOnce(&mut Vec<u8>),
        write_value: Option<impl FnOnce(&mut Vec<u8>)>,
    ) {
        let k0 = self.buf.len() as u32;
        write_key(&mut self.buf);
        let k1 = self.buf.len() as u32;
        let mut head = [0u8; 16];
        let key_bytes = &self.buf[k0 as usize..k1 as usize];
        let n = key_bytes.len().min(16);
        head[..n].copy_from_slice(&key_bytes[..n]);
        let prefix = u128::from_be_bytes(head);
        let value = write_value.map(|w| {
            w(&mut self.buf);
            (k1, self.buf.len() as u32)
        });
        self.entries.push(ChangeEntry {
            prefix,
            key: (k0, k1),
            value,
        });
    }

    /// Sorts the changes by encoded key.
    pub(in crate::windowing) fn sort(&mut self) {
        let buf = &self.buf;
        self.entries.sort_unstable_by(|a, b| {
            a.prefix.cmp(&b.prefix).then_with(|| {
                buf[a.key.0 as usize..a.key.1 as usize]
                    .cmp(&buf[b.key.0 as usize..b.key.1 as usize])
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The integer prefixes only speed the sort up: the order is the keys' bytewise order,
        /// also for keys that are prefixes of each other or end in zero bytes.
        #[test]
        fn changes_sort_in_bytewise_key_order(
            keys in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..40),
                0..60,
            )
        ) {
            let mut c = Changes::default();
            for k in &keys {
                c.push(|out| out.extend_from_slice(k), None::<fn(&mut Vec<u8>)>);
            }
            c.sort();
            let got: Vec<Vec<u8>> = c.iter().map(|(k, _)| k.to_vec()).collect();
            let mut want = keys.clone();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
