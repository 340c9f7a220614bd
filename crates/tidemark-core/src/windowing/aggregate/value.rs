//! Values in the core: what an aggregation reads and what it outputs, their byte encoding, and
//! [`Scalar`], an owned value with a total order for the operations that keep values as keys.

use std::borrow::Cow;
use std::cmp::Ordering;

/// One input value of an aggregation: NULL, a boolean, an integer, a double or a string. It is
/// the expression layer's value, owned.
pub type Value = crate::expr::Datum<'static>;

/// The heap bytes a value holds beyond its own size (an owned string's buffer).
pub fn heap_size(v: &Value) -> usize {
    match v {
        Value::Str(Cow::Owned(s)) => s.capacity(),
        _ => 0,
    }
}

/// A string value.
pub fn string(s: impl Into<String>) -> Value {
    Value::Str(Cow::Owned(s.into()))
}

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const INT: u8 = 3;
const FLOAT: u8 = 4;
const STR: u8 = 5;

/// Appends a value: a tag byte, then 8 little-endian bytes for a number or a 4-byte length and
/// the bytes of a string.
pub fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Int(i) => {
            out.push(INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Float(x) => {
            out.push(FLOAT);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Str(s) => put_str(out, s),
    }
}

/// Appends a string as [`put_value`] writes a string value.
fn put_str(out: &mut Vec<u8>, s: &str) {
    out.push(STR);
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Reads a value written by [`put_value`], advancing `bytes` past it.
pub fn get_value(bytes: &mut &[u8]) -> Option<Value> {
    let (&tag, rest) = bytes.split_first()?;
    *bytes = rest;
    Some(match tag {
        NULL => Value::Null,
        FALSE => Value::Bool(false),
        TRUE => Value::Bool(true),
        INT => Value::Int(i64::from_le_bytes(take::<8>(bytes)?)),
        FLOAT => Value::Float(f64::from_le_bytes(take::<8>(bytes)?)),
        STR => {
            let n = u32::from_le_bytes(take::<4>(bytes)?) as usize;
            let s = bytes.get(..n)?;
            let s = std::str::from_utf8(s).ok()?.to_string();
            *bytes = &bytes[n..];
            string(s)
        }
        _ => return None,
    })
}

/// Reads `N` bytes, advancing `bytes` past them.
pub fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
    let head: [u8; N] = bytes.get(..N)?.try_into().ok()?;
    *bytes = &bytes[N..];
    Some(head)
}

/// Appends `n` as LEB128: seven bits a byte, low first, the high bit set on all but the last.
pub fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads what [`put_varint`] wrote, advancing `bytes`.
pub fn get_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let [b] = take::<1>(bytes)?;
        n |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// Reads a little-endian `u64`, advancing `bytes`.
pub fn take_u64(bytes: &mut &[u8]) -> Option<u64> {
    take::<8>(bytes).map(u64::from_le_bytes)
}

/// Reads a little-endian `f64`, advancing `bytes`.
pub fn take_f64(bytes: &mut &[u8]) -> Option<f64> {
    take::<8>(bytes).map(f64::from_le_bytes)
}

/// A non-NULL value with a total order, for the operations that keep values (distinct counts, top
/// values). Numbers compare by value: an integral double within the 64-bit range is the integer
/// (`2.0` and `2` are one value), and `-0.0` is `0`. Booleans sort before numbers, numbers before
/// strings.
#[derive(Debug, Clone)]
pub enum Scalar {
    /// A boolean.
    Bool(bool),
    /// An integer, or an integral double.
    Int(i64),
    /// A double with a fraction, out of the integer range, or not a number.
    Float(f64),
    /// A string.
    Str(Box<str>),
}

/// A borrowed scalar: what [`Scalar`] compares by, so a value can be looked up among kept
/// scalars without copying it. Made by [`ScalarRef::of`] with the same rules as [`Scalar::of`].
#[derive(Debug, Clone, Copy)]
pub enum ScalarRef<'a> {
    /// A boolean.
    Bool(bool),
    /// An integer, or an integral double.
    Int(i64),
    /// A double with a fraction, out of the integer range, or not a number.
    Float(f64),
    /// A string.
    Str(&'a str),
}

impl<'a> ScalarRef<'a> {
    /// The scalar of a value, borrowed from it; `None` for NULL.
    pub fn of(v: &'a Value) -> Option<ScalarRef<'a>> {
        Some(match v {
            Value::Null => return None,
            Value::Bool(b) => ScalarRef::Bool(*b),
            Value::Int(i) => ScalarRef::Int(*i),
            // `i64::MAX as f64` is 2^63, the first double above the integer range.
            Value::Float(x)
                if x.fract() == 0.0 && *x >= i64::MIN as f64 && *x < i64::MAX as f64 =>
            {
                ScalarRef::Int(*x as i64)
            }
            Value::Float(x) => ScalarRef::Float(*x),
            Value::Str(s) => ScalarRef::Str(s),
        })
    }

    /// The scalar, owned.
    pub fn to_scalar(self) -> Scalar {
        match self {
            ScalarRef::Bool(b) => Scalar::Bool(b),
            ScalarRef::Int(i) => Scalar::Int(i),
            ScalarRef::Float(x) => Scalar::Float(x),
            ScalarRef::Str(s) => Scalar::Str(s.into()),
        }
    }

    fn rank(self) -> u8 {
        match self {
            ScalarRef::Bool(_) => 0,
            ScalarRef::Int(_) | ScalarRef::Float(_) => 1,
            ScalarRef::Str(_) => 2,
        }
    }

    /// The total order of scalars (see [`Scalar`]).
    fn order(self, other: ScalarRef<'_>) -> Ordering {
        match (self, other) {
            (ScalarRef::Bool(a), ScalarRef::Bool(b)) => a.cmp(&b),
            (ScalarRef::Int(a), ScalarRef::Int(b)) => a.cmp(&b),
            (ScalarRef::Float(a), ScalarRef::Float(b)) => a.total_cmp(&b),
            (ScalarRef::Int(a), ScalarRef::Float(b)) => {
                (a as f64).total_cmp(&b).then(Ordering::Less)
            }
            (ScalarRef::Float(a), ScalarRef::Int(b)) => {
                a.total_cmp(&(b as f64)).then(Ordering::Greater)
            }
            (ScalarRef::Str(a), ScalarRef::Str(b)) => a.cmp(b),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}

/// What a map keyed by [`Scalar`] can be searched with: a [`Scalar`] or a [`ScalarRef`]
/// (`map.get_mut(&view as &dyn ScalarKey)`), compared as scalars.
pub trait ScalarKey {
    /// The key as a borrowed scalar.
    fn key(&self) -> ScalarRef<'_>;
}

impl ScalarKey for Scalar {
    fn key(&self) -> ScalarRef<'_> {
        self.view()
    }
}

impl ScalarKey for ScalarRef<'_> {
    fn key(&self) -> ScalarRef<'_> {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn ScalarKey + 'a> for Scalar {
    fn borrow(&self) -> &(dyn ScalarKey + 'a) {
        self
    }
}

impl Ord for dyn ScalarKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().order(other.key())
    }
}

impl PartialOrd for dyn ScalarKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn ScalarKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for dyn ScalarKey + '_ {}

impl Scalar {
    /// The heap bytes the scalar holds beyond its own size (a string's bytes).
    pub fn heap_size(&self) -> usize {
        match self {
            Scalar::Str(s) => s.len(),
            _ => 0,
        }
    }

    /// The scalar of a value; `None` for NULL.
    pub fn of(v: &Value) -> Option<Scalar> {
        ScalarRef::of(v).map(ScalarRef::to_scalar)
    }

    /// The scalar, borrowed.
    pub fn view(&self) -> ScalarRef<'_> {
        match self {
            Scalar::Bool(b) => ScalarRef::Bool(*b),
            Scalar::Int(i) => ScalarRef::Int(*i),
            Scalar::Float(x) => ScalarRef::Float(*x),
            Scalar::Str(s) => ScalarRef::Str(s),
        }
    }

    /// The scalar as a value.
    pub fn to_value(&self) -> Value {
        match self {
            Scalar::Bool(b) => Value::Bool(*b),
            Scalar::Int(i) => Value::Int(*i),
            Scalar::Float(x) => Value::Float(*x),
            Scalar::Str(s) => string(s.as_ref()),
        }
    }

    /// Appends the scalar in [`put_value`]'s encoding.
    pub fn put(&self, out: &mut Vec<u8>) {
        match self {
            // Written in place: a string scalar is hashed for every value HyperLogLog adds.
            Scalar::Str(s) => put_str(out, s),
            other => put_value(out, &other.to_value()),
        }
    }

    /// Feeds `v`'s scalar, in [`Scalar::put`]'s encoding, to `h` without allocating (a string
    /// is written in three pieces, which a streaming hasher takes as one); `false` for NULL.
    pub fn write_of(v: &Value, h: &mut impl std::hash::Hasher) -> bool {
        let (tag, bytes) = match ScalarRef::of(v) {
            None => return false,
            Some(ScalarRef::Str(s)) => {
                h.write(&[STR]);
                h.write(&(s.len() as u32).to_le_bytes());
                h.write(s.as_bytes());
                return true;
            }
            Some(ScalarRef::Bool(false)) => (FALSE, None),
            Some(ScalarRef::Bool(true)) => (TRUE, None),
            Some(ScalarRef::Int(i)) => (INT, Some(i.to_le_bytes())),
            Some(ScalarRef::Float(x)) => (FLOAT, Some(x.to_le_bytes())),
        };
        let mut buf = [tag; 9];
        let n = match bytes {
            Some(b) => {
                buf[1..].copy_from_slice(&b);
                9
            }
            None => 1,
        };
        h.write(&buf[..n]);
        true
    }

    /// Reads a scalar written by [`Scalar::put`].
    pub fn get(bytes: &mut &[u8]) -> Option<Scalar> {
        Scalar::of(&get_value(bytes)?)
    }
}

impl Ord for Scalar {
    fn cmp(&self, other: &Scalar) -> Ordering {
        self.view().order(other.view())
    }
}

impl PartialOrd for Scalar {
    fn partial_cmp(&self, other: &Scalar) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Scalar) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Scalar {}

impl std::hash::Hash for Scalar {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        match self {
            Scalar::Bool(b) => (0u8, *b).hash(h),
            Scalar::Int(i) => (1u8, *i).hash(h),
            Scalar::Float(x) => (2u8, x.to_bits()).hash(h),
            Scalar::Str(s) => (3u8, s).hash(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            any::<f64>().prop_map(Value::Float),
            ".{0,12}".prop_map(string),
        ]
    }

    proptest! {
        #[test]
        fn values_round_trip_bit_for_bit(v in value()) {
            let mut out = Vec::new();
            put_value(&mut out, &v);
            let mut rest = &out[..];
            let back = get_value(&mut rest).unwrap();
            prop_assert!(rest.is_empty());
            let mut again = Vec::new();
            put_value(&mut again, &back);
            prop_assert_eq!(out, again);
        }

        #[test]
        fn a_kept_scalar_is_found_by_its_borrowed_form(a in value(), b in value()) {
            let mut kept = std::collections::BTreeMap::new();
            if let Some(x) = Scalar::of(&a) {
                kept.insert(x, ());
            }
            if let Some(y) = ScalarRef::of(&b) {
                let found = kept.contains_key(&y as &dyn ScalarKey);
                prop_assert_eq!(found, Scalar::of(&a) == Some(y.to_scalar()));
            }
        }

        #[test]
        fn scalar_order_is_total_and_consistent(a in value(), b in value()) {
            if let (Some(x), Some(y)) = (Scalar::of(&a), Scalar::of(&b)) {
                prop_assert_eq!(x.cmp(&y), y.cmp(&x).reverse());
                prop_assert_eq!(x == y, x.cmp(&y) == Ordering::Equal);
            }
        }
    }

    #[test]
    fn integral_doubles_are_integers() {
        assert_eq!(Scalar::of(&Value::Float(2.0)), Scalar::of(&Value::Int(2)));
        assert_eq!(Scalar::of(&Value::Float(-0.0)), Some(Scalar::Int(0)));
        assert!(Scalar::of(&Value::Float(2.5)) > Scalar::of(&Value::Int(2)));
        assert!(Scalar::of(&Value::Bool(true)) < Scalar::of(&Value::Int(-5)));
        assert!(Scalar::of(&string("a")) > Scalar::of(&Value::Float(1e300)));
        assert_eq!(Scalar::of(&Value::Null), None);
        let mut kept = std::collections::BTreeMap::new();
        kept.insert(Scalar::Int(2), 1);
        let two = Value::Float(2.0);
        let view = ScalarRef::of(&two).unwrap();
        assert_eq!(kept.get(&view as &dyn ScalarKey), Some(&1));
    }
}
