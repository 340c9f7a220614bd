//! `approx_count_distinct`: a HyperLogLog sketch (Flajolet et al. 2007) with the small-range
//! correction (linear counting), mergeable, in bounded space.
//!
//! With precision `p` the sketch has `m = 2^p` registers and a relative standard error of
//! `1.04 / sqrt(m)`: the default `p = 14` gives 0.81% with 16 KiB per window at most. Until a
//! window has seen `m / 8` registers set they are kept sparse (sorted index and rank pairs), so a
//! window with few distinct values costs a few bytes per value.
//!
//! Values are hashed with SipHash-1-3 under a fixed key over their canonical encoding
//! ([`Scalar::put`]): the same value gives the same register in every process and release, so
//! sketches saved by one merge with sketches made by another. The HyperLogLog crates on crates.io
//! hash with hashers whose output is not fixed across releases or do not serialise them, which is
//! why this one is written here.

use super::value::{take, Scalar, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, SavedSize, State};
use siphasher::sip::SipHasher13;
use std::hash::Hasher;
use std::sync::Arc;

/// The default precision: 2^14 registers, a standard error of 0.81%.
pub const DEFAULT_PRECISION: u8 = 14;

#[derive(Debug)]
struct Hll {
    p: u8,
}

/// `approx_count_distinct`: an estimate of the number of distinct non-NULL values.
pub fn approx_count_distinct(params: &Params) -> Result<Arc<dyn Aggregate>, String> {
    only("approx_count_distinct", params, &["precision"])?;
    match params.precision.unwrap_or(DEFAULT_PRECISION) {
        p @ 4..=18 => Ok(Arc::new(Hll { p })),
        p => Err(format!(
            "approx_count_distinct precision must be from 4 to 18, not {p}"
        )),
    }
}

impl Aggregate for Hll {
    fn name(&self) -> &'static str {
        "approx_count_distinct"
    }

    fn params(&self) -> String {
        format!("precision = {}", self.p)
    }

    fn input(&self) -> Input {
        Input::Any
    }

    fn output(&self) -> OutputType {
        OutputType::Integer
    }

    fn saved_size(&self) -> SavedSize {
        // Version, precision, form and a sparse count, then at most one byte per register.
        SavedSize::AtMost(7 + (1 << self.p))
    }

    fn new_state(&self) -> Box<dyn State> {
        Box::new(Sketch::new(self.p))
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let st = Sketch::decode(&mut bytes, self.p)?;
        bytes.is_empty().then_some(Box::new(st) as Box<dyn State>)
    }
}

/// Registers: sparse as sorted `index << 8 | rank` words, or one byte each.
#[derive(Debug, Clone)]
enum Registers {
    Sparse(Vec<u32>),
    Dense(Vec<u8>),
}

/// A HyperLogLog sketch; also what `count_distinct` continues with past its bound.
#[derive(Debug, Clone)]
pub(super) struct Sketch {
    p: u8,
    regs: Registers,
}

/// The hasher every sketch hashes values with.
fn hasher() -> SipHasher13 {
    SipHasher13::new_with_keys(0x7469_6465_6d61_726b, 0x686c_6c2d_7631_0000)
}

/// The 64-bit hash of a value's scalar ([`Scalar::put`]'s encoding), without allocating;
/// `None` for NULL.
fn hash(v: &Value) -> Option<u64> {
    let mut h = hasher();
    Scalar::write_of(v, &mut h).then(|| h.finish())
}

impl Sketch {
    /// An empty sketch of precision `p` (4 to 18).
    pub(super) fn new(p: u8) -> Sketch {
        Sketch {
            p,
            regs: Registers::Sparse(Vec::new()),
        }
    }

    /// Reads what [`State::encode`] wrote for a sketch of precision `p`, advancing `b`.
    pub(super) fn decode(b: &mut &[u8], p: u8) -> Option<Sketch> {
        let [1, stored, mode] = take::<3>(b)? else {
            return None;
        };
        if stored != p {
            return None;
        }
        let m = 1usize << p;
        let regs = match mode {
            0 => {
                let n = u32::from_le_bytes(take::<4>(b)?) as usize;
                // At most m/8 pairs are ever kept sparse: a larger count is not a sketch (and
                // is not allocated for).
                if n > m {
                    return None;
                }
                let mut pairs = Vec::with_capacity(n);
                for _ in 0..n {
                    let e = u32::from_le_bytes(take::<4>(b)?);
                    if (e >> 8) as usize >= m
                        || pairs.last().is_some_and(|&l: &u32| l >> 8 >= e >> 8)
                    {
                        return None;
                    }
                    pairs.push(e);
                }
                Registers::Sparse(pairs)
            }
            1 => {
                let r = b.get(..m)?.to_vec();
                *b = &b[m..];
                Registers::Dense(r)
            }
            _ => return None,
        };
        Some(Sketch { p, regs })
    }

    fn m(&self) -> usize {
        1 << self.p
    }

    fn set(&mut self, idx: usize, rank: u8) {
        let limit = self.m() / 8;
        match &mut self.regs {
            Registers::Dense(r) => r[idx] = r[idx].max(rank),
            Registers::Sparse(pairs) => {
                match pairs.binary_search_by_key(&(idx as u32), |e| e >> 8) {
                    Ok(i) => pairs[i] = pairs[i].max(((idx as u32) << 8) | rank as u32),
                    Err(i) => pairs.insert(i, ((idx as u32) << 8) | rank as u32),
                }
                if pairs.len() > limit {
                    self.densify();
                }
            }
        }
    }

    fn densify(&mut self) {
        if let Registers::Sparse(pairs) = &self.regs {
            let mut r = vec![0u8; self.m()];
            for e in pairs {
                r[(e >> 8) as usize] = (e & 0xff) as u8;
            }
            self.regs = Registers::Dense(r);
        }
    }

    fn estimate(&self) -> u64 {
        let m = self.m() as f64;
        let (mut sum, mut zeros) = (0.0, 0usize);
        match &self.regs {
            Registers::Dense(r) => {
                for &x in r {
                    sum += 1.0 / (1u64 << x) as f64;
                    zeros += (x == 0) as usize;
                }
            }
            Registers::Sparse(pairs) => {
                zeros = self.m() - pairs.len();
                sum = zeros as f64;
                for e in pairs {
                    sum += 1.0 / (1u64 << (e & 0xff)) as f64;
                }
            }
        }
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let raw = alpha * m * m / sum;
        let est = if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        est.round() as u64
    }
}

impl State for Sketch {
    fn add(&mut self, v: &Value, _: i64) {
        let Some(h) = hash(v) else { return };
        let p = self.p as u32;
        let idx = (h >> (64 - p)) as usize;
        // The rank: position of the first one bit after the index bits, at most 64 - p + 1.
        let rank = ((h << p) | (1 << (p - 1))).leading_zeros() as u8 + 1;
        self.set(idx, rank);
    }

    fn merge(&mut self, other: &dyn State) {
        match &same::<Sketch>(other).regs {
            Registers::Sparse(pairs) => {
                for e in pairs {
                    self.set((e >> 8) as usize, (e & 0xff) as u8);
                }
            }
            Registers::Dense(o) => {
                self.densify();
                if let Registers::Dense(r) = &mut self.regs {
                    for (a, b) in r.iter_mut().zip(o) {
                        *a = (*a).max(*b);
                    }
                }
            }
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[1, self.p]);
        match &self.regs {
            Registers::Sparse(pairs) => {
                out.push(0);
                out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
                for e in pairs {
                    out.extend_from_slice(&e.to_le_bytes());
                }
            }
            Registers::Dense(r) => {
                out.push(1);
                out.extend_from_slice(r);
            }
        }
    }

    fn evaluate(&self, _elements: u64) -> Output {
        Output::Value(Value::Int(self.estimate() as i64))
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Sketch>()
            + match &self.regs {
                Registers::Sparse(pairs) => pairs.capacity() * 4,
                Registers::Dense(r) => r.capacity(),
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windowing::aggregate::value::string;
    use proptest::prelude::*;

    /// The hash as sketches saved by earlier releases computed it: the whole encoding first,
    /// then one write.
    fn hash_of_encoding(v: &Value) -> Option<u64> {
        let mut buf = Vec::new();
        Scalar::of(v)?.put(&mut buf);
        let mut h = hasher();
        h.write(&buf);
        Some(h.finish())
    }

    fn values() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            (-1e6f64..1e6).prop_map(|x| Value::Float(x.round())),
            any::<f64>().prop_map(Value::Float),
            ".{0,40}".prop_map(string),
        ]
    }

    proptest! {
        #[test]
        fn hashing_without_allocating_gives_the_hash_of_the_encoding(v in values()) {
            prop_assert_eq!(hash(&v), hash_of_encoding(&v));
        }
    }
}
