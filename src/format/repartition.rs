//! The repartition hop's records: what the first stage writes to the topic
//! `<application_id>-repartition` and the second stage reads back, never parsing the original
//! JSON or Avro again.
//!
//! **Event records** carry one decoded event. Their key is the grouping key, and their partition
//! is Kafka's default partitioner's choice for that key ([`partition_for`]: murmur2, as the Java
//! client computes it), so a producer keyed by the grouping field writes its records where the hop
//! writes theirs. Their value (version 2, little-endian):
//!
//! `2 | kind 0 | event time i64 | source topic index u16 | source partition i32 |
//! source offset i64 | appended i64 | n u8 | n values`
//!
//! each value as [`crate::windowing::aggregate::value::put_value`] writes it (a tag byte, then
//! the number or the length-prefixed string). Version 1 wrote every value as an `f64` and is
//! still read.
//!
//! (`appended`: when the input record was appended to its topic, epoch ms, for the pane latency
//! metric.)
//!
//! **Packed event records** carry many events bound for one repartition partition, so that the
//! producer's and the fetch's per-record costs are paid once per pack instead of once per event
//! (the first stage writes these; single event records are still read). They have no key, and
//! their partition is still [`partition_for`] of each event's key. Their value:
//!
//! `2 | kind 3 | n u32 | n entries`, each entry `key length u16 | key (UTF-8) | event time i64 |
//! source topic index u16 | source partition i32 | source offset i64 | appended i64 | m u8 |
//! m values` (version 1: `f64` values).
//!
//! **Partial records** carry partials ([`crate::windowing::fold`]): the events of one key and one
//! set of windows from one input partition, folded into one accumulator by the first stage. They
//! have no key, and their partition is [`partition_for`] of each partial's key. Their value:
//!
//! `2 | kind 4 | n u32 | n entries`, each entry `key length u16 | key (UTF-8) | source topic
//! index u16 | source partition i32 | appended i64 | latest event time i64 | m varint | first
//! offset i64 | first event time i64 | m - 1 × (offset delta varint, event time delta zigzag
//! varint) | accumulator length varint | accumulator` (the accumulator as
//! [`crate::windowing::aggregate::Acc::encode`] writes it; offsets ascend). A partial of 100
//! events costs about 3 bytes per event besides its accumulator, where 100 event entries cost
//! 40 bytes or more each.
//!
//! **Watermark records** carry watermark reports of sources
//! ([`crate::windowing::watermark::SourceWatermark`]): at each commit, a first stage writes one
//! record to every repartition partition, after the data it covers, holding the reports of all
//! its sources whose report changed. With S sources and P repartition partitions that is P
//! records a cycle per member, not S × P. They have no key; their value:
//!
//! `1 | kind 2 | n u16 | n reports`, each report
//! `source topic index u16 | source partition i32 | appended i64 | watermark i64 | flags u8 |
//! [last record time i64] [idle claim time i64]` (flag bit 0: last record time present; bit 1:
//! idle claim present; `appended`: when the source's last record was appended). Kind 1, one report
//! without the count, was written before the reports were batched, and is still read.
//!
//! A source topic is named by its index in the pipeline's sorted list of input topics, which is
//! part of the pipeline fingerprint, so both stages always agree on it.

use crate::windowing::aggregate::value::{get_value, get_varint, put_value, put_varint, Value};
use crate::windowing::fold::Partial;
use crate::windowing::spec::{Event, MAX_KEY_BYTES};
use crate::windowing::watermark::SourceWatermark;

/// The format version written first in every watermark record's value.
const VERSION: u8 = 1;
/// The format version of event records: values with their types.
const EVENTS_VERSION: u8 = 2;
const KIND_EVENT: u8 = 0;
/// One source's report (the first format, still read).
const KIND_WATERMARK: u8 = 1;
/// The reports of several sources.
const KIND_WATERMARKS: u8 = 2;
/// Many events.
const KIND_EVENTS: u8 = 3;
/// Many partials.
const KIND_PARTIALS: u8 = 4;

/// Where a record came from: an input topic (by index), partition and offset, and when it was
/// appended there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// Index of the input topic in the pipeline's sorted list of input topics.
    pub topic: u16,
    /// Input partition.
    pub partition: i32,
    /// Offset in the input partition (for watermark records, unused: 0).
    pub offset: i64,
    /// When the input record (for watermark records: the source's last record) was appended,
    /// epoch ms.
    pub appended: i64,
}

/// One record of the repartition topic, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum HopRecord {
    /// An event and the input record it came from.
    Event(Event, Origin),
    /// Sources' watermark reports, in the order written; the origins' offsets are 0.
    Watermarks(Vec<(Origin, SourceWatermark)>),
    /// The events of a packed record and the input records they came from, in the order written.
    Events(Vec<(Event, Origin)>),
    /// The partials of a partial record, in the order written.
    Partials(Vec<PartialRecord>),
}

/// Why a repartition record does not decode (it was not written by the first stage), or why an
/// event cannot be written to one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopError {
    /// A record without a value.
    #[error("repartition record: no value")]
    MissingValue,
    /// A record naming an input topic the pipeline does not have.
    #[error("repartition record: a record of an unknown source")]
    UnknownSource,
    /// A partial whose accumulator does not decode with the pipeline's aggregations, or does not
    /// hold as many events as it lists.
    #[error("repartition record: a partial whose accumulator does not match its events")]
    BadPartial,
    /// The value ends before a field it announces.
    #[error("repartition record: truncated")]
    Truncated,
    /// Bytes follow the last entry.
    #[error("repartition record: trailing bytes")]
    TrailingBytes,
    /// A format version this build does not read.
    #[error("repartition record: unknown version {0}")]
    UnknownVersion(u8),
    /// A record kind this build does not read, or not the kind the reader was given.
    #[error("repartition record: unknown kind {0}")]
    UnknownKind(u8),
    /// An event record without a key.
    #[error("repartition record: an event without a key")]
    NoKey,
    /// A key that is not UTF-8.
    #[error("repartition record: the key is not UTF-8")]
    KeyNotUtf8,
    /// A value that does not decode.
    #[error("repartition record: a value that does not decode")]
    BadValue,
    /// A partial that lists no event.
    #[error("repartition record: a partial without events")]
    EmptyPartial,
    /// A grouping key too long to write (see [`MAX_KEY_BYTES`]).
    #[error(
        "a grouping key of {0} bytes is longer than the {MAX_KEY_BYTES} bytes the hop carries"
    )]
    KeyTooLong(usize),
    /// More values than one entry can hold (255).
    #[error("{0} values are more than the 255 one event carries")]
    TooManyValues(usize),
}

/// The length of `key` as the hop writes it, or why it cannot be written.
fn key_len(key: &[u8]) -> Result<[u8; 2], HopError> {
    u16::try_from(key.len())
        .map(u16::to_le_bytes)
        .map_err(|_| HopError::KeyTooLong(key.len()))
}

/// The number of values as the hop writes it, or why it cannot be written.
fn value_count(values: &[Value]) -> Result<u8, HopError> {
    u8::try_from(values.len()).map_err(|_| HopError::TooManyValues(values.len()))
}

/// Appends an event record's value; nothing when the event has too many values.
pub fn put_event(out: &mut Vec<u8>, ev: &Event, origin: Origin) -> Result<(), HopError> {
    let n = value_count(&ev.values)?;
    out.reserve(25 + 9 * ev.values.len());
    out.push(EVENTS_VERSION);
    out.push(KIND_EVENT);
    out.extend_from_slice(&ev.ts.to_le_bytes());
    out.extend_from_slice(&origin.topic.to_le_bytes());
    out.extend_from_slice(&origin.partition.to_le_bytes());
    out.extend_from_slice(&origin.offset.to_le_bytes());
    out.extend_from_slice(&origin.appended.to_le_bytes());
    out.push(n);
    for v in &ev.values {
        put_value(out, v);
    }
    Ok(())
}

/// A pack is written once it holds this many bytes (or at the end of the cycle).
pub const PACK_BYTES: usize = 64 << 10;

/// A packed record being built (see the module documentation): entries of one kind are appended,
/// and [`Packed::finish`] gives the value to write. [`Pack`] holds events, [`PartialPack`]
/// partials.
#[derive(Debug, Clone)]
pub struct Packed<K> {
    buf: Vec<u8>,
    n: u32,
    kind: std::marker::PhantomData<K>,
}

/// What a [`Packed`] record holds: its kind byte.
pub trait PackKind {
    /// The kind written after the version byte.
    const KIND: u8;
}

/// Entries of packed event records.
#[derive(Debug, Clone, Copy)]
pub struct Events;

impl PackKind for Events {
    const KIND: u8 = KIND_EVENTS;
}

/// Entries of packed partial records.
#[derive(Debug, Clone, Copy)]
pub struct Partials;

impl PackKind for Partials {
    const KIND: u8 = KIND_PARTIALS;
}

/// A packed event record being built.
pub type Pack = Packed<Events>;

/// A packed partial record being built.
pub type PartialPack = Packed<Partials>;

impl<K: PackKind> Default for Packed<K> {
    fn default() -> Packed<K> {
        let mut buf = Vec::with_capacity(PACK_BYTES + 256);
        buf.extend_from_slice(&[EVENTS_VERSION, K::KIND, 0, 0, 0, 0]);
        Packed {
            buf,
            n: 0,
            kind: std::marker::PhantomData,
        }
    }
}

impl<K> Packed<K> {
    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Whether it is full enough to be written now.
    pub fn is_full(&self) -> bool {
        self.buf.len() >= PACK_BYTES
    }

    /// The record's value, with the count written in.
    pub fn finish(&mut self) -> &[u8] {
        self.buf[2..6].copy_from_slice(&self.n.to_le_bytes());
        &self.buf
    }

    /// Empties it for the next pack, keeping its buffer.
    pub fn clear(&mut self) {
        self.buf.truncate(6);
        self.n = 0;
    }
}

impl Pack {
    /// Appends an event and the input record it came from; nothing, and why, when its key is
    /// too long or it has too many values.
    pub fn push(&mut self, ev: &Event, origin: Origin) -> Result<(), HopError> {
        let key = ev.key.as_bytes();
        let key_len = key_len(key)?;
        let n = value_count(&ev.values)?;
        self.buf.extend_from_slice(&key_len);
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(&ev.ts.to_le_bytes());
        self.buf.extend_from_slice(&origin.topic.to_le_bytes());
        self.buf.extend_from_slice(&origin.partition.to_le_bytes());
        self.buf.extend_from_slice(&origin.offset.to_le_bytes());
        self.buf.extend_from_slice(&origin.appended.to_le_bytes());
        self.buf.push(n);
        for v in &ev.values {
            put_value(&mut self.buf, v);
        }
        self.n += 1;
        Ok(())
    }
}

/// Reads the events of a packed record one at a time into a reused buffer.
pub struct PackReader<'a> {
    r: Reader<'a>,
    left: u32,
    version: u8,
}

impl<'a> PackReader<'a> {
    /// A reader over a packed record's value (one [`decode_into`] accepted as
    /// [`Decoded::Events`]).
    pub fn new(value: &'a [u8]) -> Result<PackReader<'a>, HopError> {
        let mut r = Reader(value);
        let version = r.u8()?;
        if !(1..=EVENTS_VERSION).contains(&version) || r.u8()? != KIND_EVENTS {
            return Err(HopError::UnknownKind(KIND_EVENTS));
        }
        let left = r.u32()?;
        Ok(PackReader { r, left, version })
    }

    /// Decodes the next event into `ev` and returns its origin; `None` after the last.
    pub fn next_into(&mut self, ev: &mut Event) -> Result<Option<Origin>, HopError> {
        if self.left == 0 {
            return if self.r.0.is_empty() {
                Ok(None)
            } else {
                Err(HopError::TrailingBytes)
            };
        }
        self.left -= 1;
        let key_len = usize::from(self.r.u16()?);
        if self.r.0.len() < key_len {
            return Err(HopError::Truncated);
        }
        let (key, rest) = self.r.0.split_at(key_len);
        self.r.0 = rest;
        let key = std::str::from_utf8(key).map_err(|_| HopError::KeyNotUtf8)?;
        ev.key.clear();
        ev.key.push_str(key);
        ev.ts = self.r.i64()?;
        let origin = Origin {
            topic: self.r.u16()?,
            partition: self.r.i32()?,
            offset: self.r.i64()?,
            appended: self.r.i64()?,
        };
        self.r.values(self.version, &mut ev.values)?;
        Ok(Some(origin))
    }
}

impl PartialPack {
    /// Appends a partial of input partition `partition` of input topic `topic` (by index);
    /// nothing, and why, when its key is too long.
    pub fn push(&mut self, p: &Partial, topic: u16, partition: i32) -> Result<(), HopError> {
        let key = p.key.as_bytes();
        let key_len = key_len(key)?;
        let Some((&(first_offset, first_ts), rest)) = p.events.split_first() else {
            return Ok(()); // a partial always holds an event; an empty one says nothing
        };
        self.buf.extend_from_slice(&key_len);
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(&topic.to_le_bytes());
        self.buf.extend_from_slice(&partition.to_le_bytes());
        self.buf.extend_from_slice(&p.appended.to_le_bytes());
        self.buf.extend_from_slice(&p.ts.to_le_bytes());
        put_varint(&mut self.buf, p.events.len() as u64);
        self.buf.extend_from_slice(&first_offset.to_le_bytes());
        self.buf.extend_from_slice(&first_ts.to_le_bytes());
        let (mut offset, mut ts) = (first_offset, first_ts);
        for &(o, t) in rest {
            put_varint(&mut self.buf, o.wrapping_sub(offset) as u64);
            put_varint(&mut self.buf, zigzag(t.wrapping_sub(ts)));
            (offset, ts) = (o, t);
        }
        let mut acc = Vec::new();
        p.acc.encode(&mut acc);
        put_varint(&mut self.buf, acc.len() as u64);
        self.buf.extend_from_slice(&acc);
        self.n += 1;
        Ok(())
    }
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

/// One partial of a partial record, read back: its key, the input partition its events came
/// from, their offsets and event times, and its accumulator in saved form (decoded with the
/// pipeline's aggregations by [`crate::windowing::aggregate::Acc::decode`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PartialRecord {
    /// The grouping key.
    pub key: String,
    /// The input partition (its offset unused: 0) and the latest append time of its events.
    pub origin: Origin,
    /// The latest event time.
    pub ts: i64,
    /// Each event's offset and event time, in input order.
    pub events: Vec<(i64, i64)>,
    /// The accumulator's saved form.
    pub acc: Vec<u8>,
}

/// Reads every partial of a partial record's value (one [`decode_into`] accepted as
/// [`Decoded::Partials`]).
pub fn read_partials(value: &[u8]) -> Result<Vec<PartialRecord>, HopError> {
    let mut r = Reader(value);
    let version = r.u8()?;
    if version != EVENTS_VERSION || r.u8()? != KIND_PARTIALS {
        return Err(HopError::UnknownKind(KIND_PARTIALS));
    }
    let n = r.u32()?;
    let mut out = Vec::with_capacity(n.min(1 << 16) as usize);
    let bad = || HopError::Truncated;
    for _ in 0..n {
        let key_len = usize::from(r.u16()?);
        if r.0.len() < key_len {
            return Err(bad());
        }
        let (key, rest) = r.0.split_at(key_len);
        r.0 = rest;
        let key = std::str::from_utf8(key).map_err(|_| HopError::KeyNotUtf8)?;
        let (topic, partition, appended, ts) = (r.u16()?, r.i32()?, r.i64()?, r.i64()?);
        let m = get_varint(&mut r.0).ok_or_else(bad)?;
        if m == 0 || m > r.0.len() as u64 {
            return Err(HopError::EmptyPartial);
        }
        let mut events = Vec::with_capacity(m as usize);
        let (mut offset, mut t) = (r.i64()?, r.i64()?);
        events.push((offset, t));
        for _ in 1..m {
            offset = offset.wrapping_add(get_varint(&mut r.0).ok_or_else(bad)? as i64);
            t = t.wrapping_add(unzigzag(get_varint(&mut r.0).ok_or_else(bad)?));
            events.push((offset, t));
        }
        let len = usize::try_from(get_varint(&mut r.0).ok_or_else(bad)?).map_err(|_| bad())?;
        if r.0.len() < len {
            return Err(bad());
        }
        let (acc, rest) = r.0.split_at(len);
        r.0 = rest;
        out.push(PartialRecord {
            key: key.to_string(),
            origin: Origin {
                topic,
                partition,
                offset: 0,
                appended,
            },
            ts,
            events,
            acc: acc.to_vec(),
        });
    }
    if !r.0.is_empty() {
        return Err(HopError::TrailingBytes);
    }
    Ok(out)
}

/// The most reports one watermark record holds.
pub const MAX_REPORTS: usize = u16::MAX as usize;

/// Appends a watermark record's value: the reports (at most [`MAX_REPORTS`]), in this order (the
/// origins' offsets are not written).
pub fn put_watermarks(out: &mut Vec<u8>, reports: &[(Origin, SourceWatermark)]) {
    assert!(
        reports.len() <= MAX_REPORTS,
        "too many reports for one record"
    );
    out.reserve(4 + 39 * reports.len());
    out.push(VERSION);
    out.push(KIND_WATERMARKS);
    out.extend_from_slice(&(reports.len() as u16).to_le_bytes());
    for (origin, report) in reports {
        put_report(out, *origin, report);
    }
}

/// Appends one report: source, append time, watermark, flags and the optional times.
fn put_report(out: &mut Vec<u8>, origin: Origin, report: &SourceWatermark) {
    out.extend_from_slice(&origin.topic.to_le_bytes());
    out.extend_from_slice(&origin.partition.to_le_bytes());
    out.extend_from_slice(&origin.appended.to_le_bytes());
    out.extend_from_slice(&report.watermark.to_le_bytes());
    out.push(u8::from(report.last_record_at.is_some()) | (u8::from(report.idle_at.is_some()) << 1));
    for t in [report.last_record_at, report.idle_at]
        .into_iter()
        .flatten()
    {
        out.extend_from_slice(&t.to_le_bytes());
    }
}

/// A little-endian reader over a value.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], HopError> {
        let (head, rest) = self.0.split_first_chunk::<N>().ok_or(HopError::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, HopError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, HopError> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn i32(&mut self) -> Result<i32, HopError> {
        Ok(i32::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, HopError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn i64(&mut self) -> Result<i64, HopError> {
        Ok(i64::from_le_bytes(self.take()?))
    }
    fn f64(&mut self) -> Result<f64, HopError> {
        Ok(f64::from_le_bytes(self.take()?))
    }
    /// An event's values: a count, then doubles (version 1) or typed values (version 2).
    fn values(&mut self, version: u8, out: &mut Vec<Value>) -> Result<(), HopError> {
        let n = self.u8()?;
        out.clear();
        for _ in 0..n {
            out.push(if version == 1 {
                Value::Float(self.f64()?)
            } else {
                get_value(&mut self.0).ok_or(HopError::BadValue)?
            });
        }
        Ok(())
    }
    /// One watermark report, as [`put_report`] wrote it.
    fn report(&mut self) -> Result<(Origin, SourceWatermark), HopError> {
        let origin = Origin {
            topic: self.u16()?,
            partition: self.i32()?,
            offset: 0,
            appended: self.i64()?,
        };
        let watermark = self.i64()?;
        let flags = self.u8()?;
        let last_record_at = if flags & 1 != 0 {
            Some(self.i64()?)
        } else {
            None
        };
        let idle_at = if flags & 2 != 0 {
            Some(self.i64()?)
        } else {
            None
        };
        Ok((
            origin,
            SourceWatermark {
                watermark,
                last_record_at,
                idle_at,
            },
        ))
    }
}

/// What [`decode_into`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decoded {
    /// An event record: the event is in the buffer given; this is the input record it came from.
    Event(Origin),
    /// Watermark reports: they are in the buffer given, in the order written.
    Watermarks,
    /// A packed event record, every event well formed: read them with [`PackReader`].
    Events {
        /// How many events it holds.
        count: u32,
        /// The largest source topic index among them (0 when there are none).
        max_topic: u16,
    },
    /// A partial record: read its partials with [`read_partials`] (not checked here).
    Partials,
}

/// Decodes a repartition record from its key and value.
pub fn decode(key: Option<&[u8]>, value: &[u8]) -> Result<HopRecord, HopError> {
    let mut ev = Event::default();
    let mut reports = Vec::new();
    Ok(match decode_into(key, value, &mut ev, &mut reports)? {
        Decoded::Event(origin) => HopRecord::Event(ev, origin),
        Decoded::Watermarks => HopRecord::Watermarks(reports),
        Decoded::Events { .. } => {
            let mut events = Vec::new();
            let mut reader = PackReader::new(value)?;
            while let Some(origin) = reader.next_into(&mut ev)? {
                events.push((ev.clone(), origin));
            }
            HopRecord::Events(events)
        }
        Decoded::Partials => HopRecord::Partials(read_partials(value)?),
    })
}

/// Decodes a repartition record from its key and value; an event is written into `ev`, watermark
/// reports into `reports` (replacing what it held), reusing their buffers (the second stage
/// decodes every record into the same ones). After an error their contents are unspecified.
pub fn decode_into(
    key: Option<&[u8]>,
    value: &[u8],
    ev: &mut Event,
    reports: &mut Vec<(Origin, SourceWatermark)>,
) -> Result<Decoded, HopError> {
    let mut r = Reader(value);
    let version = r.u8()?;
    if !(1..=EVENTS_VERSION).contains(&version) {
        return Err(HopError::UnknownVersion(version));
    }
    let record = match r.u8()? {
        KIND_EVENT => {
            let ts = r.i64()?;
            let origin = Origin {
                topic: r.u16()?,
                partition: r.i32()?,
                offset: r.i64()?,
                appended: r.i64()?,
            };
            r.values(version, &mut ev.values)?;
            let key = key.ok_or(HopError::NoKey)?;
            let key = std::str::from_utf8(key).map_err(|_| HopError::KeyNotUtf8)?;
            ev.key.clear();
            ev.key.push_str(key);
            ev.ts = ts;
            Decoded::Event(origin)
        }
        kind @ (KIND_WATERMARK | KIND_WATERMARKS) => {
            let n = if kind == KIND_WATERMARKS { r.u16()? } else { 1 };
            reports.clear();
            for _ in 0..n {
                reports.push(r.report()?);
            }
            Decoded::Watermarks
        }
        KIND_EVENTS => {
            // Every event is checked here, so that a record is processed whole or not at all.
            let mut reader = PackReader::new(value)?;
            let (mut count, mut max_topic) = (0, 0);
            while let Some(origin) = reader.next_into(ev)? {
                count += 1;
                max_topic = max_topic.max(origin.topic);
            }
            return Ok(Decoded::Events { count, max_topic });
        }
        KIND_PARTIALS if version == EVENTS_VERSION => return Ok(Decoded::Partials),
        other => return Err(HopError::UnknownKind(other)),
    };
    if !r.0.is_empty() {
        return Err(HopError::TrailingBytes);
    }
    Ok(record)
}

/// Kafka's murmur2 hash of `data`, as the Java client's `Utils.murmur2` computes it.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among `partitions`:
/// `(murmur2(key) & 0x7fffffff) % partitions`.
pub fn partition_for(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Apache Kafka's UtilsTest.testMurmur2 vectors.
        for (data, want) in [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            ("abc", 479_470_107),
        ] {
            assert_eq!(murmur2(data.as_bytes()), want, "{data}");
        }
        assert!((0..8).contains(&partition_for(b"user-1", 8)));
    }

    /// Decoding into one buffer leaves nothing of the previous event behind.
    #[test]
    fn decode_into_replaces_the_whole_event() {
        let origin = Origin {
            topic: 0,
            partition: 1,
            offset: 2,
            appended: 3,
        };
        let mut buf = Event::default();
        for ev in [
            Event {
                key: "a-long-key-first".into(),
                ts: 10,
                values: vec![
                    Value::Float(1.0),
                    Value::Int(2),
                    crate::windowing::aggregate::value::string("x"),
                    Value::Null,
                ],
            },
            Event {
                key: "b".into(),
                ts: 20,
                values: vec![Value::Float(4.0)],
            },
            Event {
                key: String::new(),
                ts: 30,
                values: vec![],
            },
        ] {
            let mut v = Vec::new();
            put_event(&mut v, &ev, origin).unwrap();
            let got = decode_into(Some(ev.key.as_bytes()), &v, &mut buf, &mut Vec::new());
            assert_eq!(got, Ok(Decoded::Event(origin)));
            assert_eq!(buf, ev);
        }
    }

    #[test]
    fn packs_round_trip_and_are_checked_whole() {
        let events: Vec<(Event, Origin)> = (0..5)
            .map(|i| {
                let ev = Event {
                    key: format!("k{}", "é".repeat(i)),
                    ts: 1_000 * i as i64 - 2,
                    values: (0..i).map(|j| Value::Float(j as f64 * 0.5)).collect(),
                };
                let origin = Origin {
                    topic: i as u16,
                    partition: 7,
                    offset: 100 + i as i64,
                    appended: 5 + i as i64,
                };
                (ev, origin)
            })
            .collect();
        let mut pack = Pack::default();
        assert!(pack.is_empty());
        assert_eq!(decode(None, pack.finish()), Ok(HopRecord::Events(vec![])));
        for (ev, origin) in &events {
            pack.push(ev, *origin).unwrap();
        }
        assert_eq!(pack.len(), 5);
        let v = pack.finish().to_vec();
        assert_eq!(decode(None, &v), Ok(HopRecord::Events(events.clone())));
        // A record that is cut short or has bytes after its last event is refused as a whole.
        for cut in [v.len() - 1, v.len() - 9, 7] {
            assert!(decode(None, &v[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = v.clone();
        longer.push(1);
        assert!(decode(None, &longer).is_err());
        // A pack is reused after `clear`.
        pack.clear();
        pack.push(&events[2].0, events[2].1).unwrap();
        assert_eq!(
            decode(None, pack.finish()),
            Ok(HopRecord::Events(vec![events[2].clone()]))
        );
    }

    #[test]
    fn partials_round_trip_with_their_events() {
        use crate::windowing::aggregate::{Acc, AggSpec};
        let aggs = [AggSpec::new("s", "sum", Some(0))];
        let mut acc = Acc::default();
        let events = vec![
            (5, 1_000),
            (6, 990),
            (9, 1_700_000_000_000),
            (4_000_000_000, -5),
        ];
        for (i, &(_, ts)) in events.iter().enumerate() {
            acc.add(&aggs, &[Value::Int(i as i64)], ts);
        }
        let p = Partial {
            key: "k\u{0}é".into(),
            acc: acc.clone(),
            events: events.clone(),
            ts: 1_700_000_000_000,
            appended: 77,
        };
        let mut pack = PartialPack::default();
        assert!(pack.is_empty());
        pack.push(&p, 2, 9).unwrap();
        pack.push(&p, 0, 1).unwrap();
        let value = pack.finish().to_vec();
        let mut ev = Event::default();
        let mut reports = Vec::new();
        assert_eq!(
            decode_into(None, &value, &mut ev, &mut reports),
            Ok(Decoded::Partials)
        );
        let read = read_partials(&value).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].key, p.key);
        assert_eq!(read[0].events, events);
        assert_eq!((read[0].ts, read[0].origin.appended), (p.ts, 77));
        assert_eq!((read[0].origin.topic, read[0].origin.partition), (2, 9));
        assert_eq!((read[1].origin.topic, read[1].origin.partition), (0, 1));
        let back = Acc::decode(&aggs, &mut read[0].acc.as_slice(), false).unwrap();
        assert_eq!(back, acc);
        for cut in [1, 7, value.len() - 1] {
            assert!(read_partials(&value[..cut]).is_err(), "cut at {cut}");
        }
        pack.clear();
        assert!(pack.is_empty());
    }

    #[test]
    fn records_round_trip() {
        let ev = Event {
            key: "user-7".into(),
            ts: -12,
            values: vec![Value::Float(1.5), Value::Bool(true)],
        };
        let origin = Origin {
            topic: 3,
            partition: 11,
            offset: 987_654,
            appended: 1_700_000_000_000,
        };
        let mut v = Vec::new();
        put_event(&mut v, &ev, origin).unwrap();
        assert_eq!(
            decode(Some(b"user-7"), &v),
            Ok(HopRecord::Event(ev, origin))
        );
        assert!(decode(None, &v).is_err(), "an event needs its key");
        assert!(decode(Some(b"k"), &v[..v.len() - 1]).is_err());
        let reports: Vec<(Origin, SourceWatermark)> = [
            SourceWatermark::UNKNOWN,
            SourceWatermark {
                watermark: 5,
                last_record_at: Some(6),
                idle_at: Some(7),
            },
            SourceWatermark {
                watermark: -3,
                last_record_at: None,
                idle_at: Some(8),
            },
        ]
        .into_iter()
        .enumerate()
        .map(|(i, report)| {
            let origin = Origin {
                topic: i as u16,
                partition: 2 + i as i32,
                offset: 0,
                appended: 42 + i as i64,
            };
            (origin, report)
        })
        .collect();
        for n in 0..=reports.len() {
            let mut v = Vec::new();
            put_watermarks(&mut v, &reports[..n]);
            assert_eq!(
                decode(None, &v),
                Ok(HopRecord::Watermarks(reports[..n].to_vec()))
            );
            let mut longer = v.clone();
            longer.push(0);
            assert!(decode(None, &longer).is_err(), "trailing bytes");
            if n > 0 {
                assert!(decode(None, &v[..v.len() - 1]).is_err(), "truncated");
            }
        }
        // The first format, one report without a count, is still read.
        let (origin, report) = reports[1];
        let mut v = vec![VERSION, KIND_WATERMARK];
        put_report(&mut v, origin, &report);
        assert_eq!(
            decode(None, &v),
            Ok(HopRecord::Watermarks(vec![(origin, report)]))
        );
        // A buffer that held reports holds only the new record's.
        let mut buf = reports.clone();
        let mut ev = Event::default();
        assert_eq!(
            decode_into(None, &v, &mut ev, &mut buf),
            Ok(Decoded::Watermarks)
        );
        assert_eq!(buf, vec![(origin, report)]);
        assert!(decode(None, &[9, 0]).is_err(), "unknown version");
    }
}
