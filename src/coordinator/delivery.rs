//! Delivery tracking: the producer context that counts the open transaction's outstanding
//! deliveries, remembers the first delivery error and each changelog partition's last offset, and
//! the one place records are handed to the producer.

use super::errors::{classify, CycleError};
use super::Core;
use crate::metrics as m;
use metrics::{counter, Counter};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext};
use rdkafka::ClientContext;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Tracks deliveries of the open transaction.
#[derive(Debug, Default)]
pub(super) struct Deliveries {
    pub(super) outstanding: AtomicUsize,
    pub(super) error: Mutex<Option<KafkaError>>,
    /// Last delivered changelog offset per partition.
    pub(super) changelog: Mutex<FxHashMap<i32, i64>>,
    /// `tidemark_records_out_total` handles per topic and partition (every delivery looks one up:
    /// FxHash, not SipHash, which showed in profiles).
    pub(super) out: Mutex<FxHashMap<String, FxHashMap<i32, Counter>>>,
}

/// Producer context: counts deliveries; the opaque is 0 for output, `1 + partition` for changelog.
pub(super) struct TxnContext(pub(super) Arc<Deliveries>);

impl ClientContext for TxnContext {}

impl ProducerContext for TxnContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        if let Ok(msg) = result {
            // By topic name first, so a delivery allocates nothing once its counter exists.
            let mut out = self.0.out.lock().expect("lock");
            if !out.contains_key(msg.topic()) {
                out.insert(msg.topic().to_string(), FxHashMap::default());
            }
            out.get_mut(msg.topic())
                .expect("inserted above")
                .entry(msg.partition())
                .or_insert_with(|| {
                    counter!(m::RECORDS_OUT, "topic" => msg.topic().to_string(),
                        "partition" => msg.partition().to_string())
                })
                .increment(1);
        }
        match result {
            Ok(m) if opaque > 0 => {
                let mut map = self.0.changelog.lock().expect("lock");
                let e = map.entry(opaque as i32 - 1).or_insert(m.offset());
                *e = (*e).max(m.offset());
            }
            Ok(_) => {}
            Err((e, _)) => *self.0.error.lock().expect("lock") = Some(e.clone()),
        }
        self.0.outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Core {
    pub(super) fn send(&self, record: BaseRecord<'_, [u8], [u8], usize>) -> Result<(), CycleError> {
        self.deliveries.outstanding.fetch_add(1, Ordering::AcqRel);
        let mut record = record;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => {
                    self.deliveries.outstanding.fetch_sub(1, Ordering::AcqRel);
                    return Err(classify("produce", e)
                        .err()
                        .unwrap_or(CycleError::Abortable("produce".into())));
                }
            }
        }
    }
}
