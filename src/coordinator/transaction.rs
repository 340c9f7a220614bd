//! The open transaction: the transactional producer, the deliveries of what it produced (the
//! producer context counts the outstanding ones, remembers the first delivery error and each
//! changelog partition's last offset), how much work it holds, and the transactional calls the
//! commit cycle's steps make. It is the one place records are handed to the producer.

use super::errors::{with_retry, Cause, CycleError, RunError};
use crate::clients::producer_config;
use crate::config::KafkaSpec;
use crate::metrics as m;
use metrics::{counter, Counter};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, TopicPartitionList};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tracks deliveries of the open transaction.
#[derive(Debug, Default)]
struct Deliveries {
    outstanding: AtomicUsize,
    error: Mutex<Option<KafkaError>>,
    /// Last delivered changelog offset per partition.
    changelog: Mutex<FxHashMap<i32, i64>>,
    /// `tidemark_records_out_total` handles per topic and partition (every delivery looks one up:
    /// FxHash, not SipHash, which showed in profiles).
    out: Mutex<FxHashMap<String, FxHashMap<i32, Counter>>>,
}

/// Producer context: counts deliveries; the opaque is 0 for output, `1 + partition` for changelog.
struct TxnContext(Arc<Deliveries>);

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

/// The open transaction and the producer that writes it.
pub(super) struct Transaction {
    producer: ThreadedProducer<TxnContext>,
    deliveries: Arc<Deliveries>,
    /// `transaction.timeout.ms`: the bound of every transactional call.
    timeout: Duration,
    /// Records processed into the open transaction (for `max_batch_records`).
    records: usize,
    /// Whether the open transaction holds anything to commit.
    dirty: bool,
    last_commit: Instant,
    /// Transactions committed and aborted since the start.
    committed: u64,
    aborted: u64,
    /// Transactions aborted since the last commit: repeated aborts back off ([`abort_pause`]).
    aborts_in_a_row: u32,
}

impl Transaction {
    /// Creates the transactional producer, fences its predecessors (`init_transactions`) and
    /// begins the first transaction.
    pub(super) fn start(k: &KafkaSpec) -> Result<Transaction, RunError> {
        let deliveries = Arc::new(Deliveries::default());
        let producer: ThreadedProducer<TxnContext> = producer_config(k)
            .create_with_context(TxnContext(deliveries.clone()))
            .map_err(|e| RunError::Startup(Cause::kafka("creating the producer", e)))?;
        let timeout = Duration::from_millis(k.transaction_timeout as u64);
        producer
            .init_transactions(timeout.max(Duration::from_secs(30)))
            .map_err(|e| RunError::Fatal(Cause::kafka("init_transactions", e)))?;
        producer
            .begin_transaction()
            .map_err(|e| RunError::Fatal(Cause::kafka("begin_transaction", e)))?;
        Ok(Transaction {
            producer,
            deliveries,
            timeout,
            records: 0,
            dirty: false,
            last_commit: Instant::now(),
            committed: 0,
            aborted: 0,
            aborts_in_a_row: 0,
        })
    }

    /// Hands a record to the producer, in the open transaction (waiting while its queue is
    /// full).
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
                    return Err(CycleError::kafka("produce", e));
                }
            }
        }
    }

    /// Counts `n` records processed into the open transaction.
    pub(super) fn add_records(&mut self, n: usize) {
        self.records += n;
        self.dirty = true;
    }

    /// Marks the open transaction as holding something to commit (output, or a report).
    pub(super) fn touch(&mut self) {
        self.dirty = true;
    }

    /// Whether the open transaction holds anything to commit.
    pub(super) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Whether the open transaction should commit now: it holds work, and it holds
    /// `max_records` records or (when `look_at_clock`) `interval` has passed since the last
    /// commit.
    pub(super) fn due(&self, max_records: usize, interval: Duration, look_at_clock: bool) -> bool {
        self.dirty
            && (self.records >= max_records
                || look_at_clock && self.last_commit.elapsed() >= interval)
    }

    /// Waits until everything produced in the open transaction is delivered (or the first
    /// failure).
    pub(super) fn await_deliveries(&self) -> Result<(), CycleError> {
        let deadline = Instant::now() + self.timeout;
        while self.deliveries.outstanding.load(Ordering::Acquire) > 0 {
            if Instant::now() > deadline {
                return Err(CycleError::Abortable(Cause::found(
                    "deliveries did not complete within the transaction timeout",
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Some(e) = self.deliveries.error.lock().expect("lock").take() {
            return Err(CycleError::kafka("delivery", e));
        }
        Ok(())
    }

    /// Puts the consumer positions `tpl` into the transaction, with the consumer's group
    /// metadata (nothing when `tpl` is empty).
    pub(super) fn send_offsets<C: ConsumerContext>(
        &self,
        tpl: &TopicPartitionList,
        consumer: &BaseConsumer<C>,
    ) -> Result<(), CycleError> {
        if tpl.count() == 0 {
            return Ok(());
        }
        let cgm = consumer
            .group_metadata()
            .ok_or_else(|| CycleError::Abortable(Cause::found("no consumer group metadata yet")))?;
        with_retry("send_offsets_to_transaction", || {
            self.producer
                .send_offsets_to_transaction(tpl, &cgm, self.timeout)
        })
    }

    /// Commits the open transaction.
    pub(super) fn commit(&mut self) -> Result<(), CycleError> {
        with_retry("commit_transaction", || {
            self.producer.commit_transaction(self.timeout)
        })?;
        self.committed += 1;
        self.aborts_in_a_row = 0;
        Ok(())
    }

    /// After a commit: the last delivered changelog offset of each partition it wrote to.
    pub(super) fn take_changelog_offsets(&self) -> FxHashMap<i32, i64> {
        std::mem::take(&mut *self.deliveries.changelog.lock().expect("lock"))
    }

    /// After a commit, once its state is written: the next transaction holds nothing yet.
    pub(super) fn settle(&mut self) {
        self.records = 0;
        self.dirty = false;
        self.last_commit = Instant::now();
    }

    /// Begins the next transaction.
    pub(super) fn begin(&self) -> Result<(), CycleError> {
        self.producer
            .begin_transaction()
            .map_err(|e| CycleError::kafka("begin_transaction", e))
    }

    /// Aborts the open transaction (`why` is logged), unless the producer has a fatal error:
    /// abort is never called after fencing, the member stops instead. Begin the next one with
    /// [`Transaction::begin_after_abort`].
    pub(super) fn abort(&mut self, why: &str) -> Result<(), RunError> {
        if let Some(fatal) = self.fatal_error() {
            return Err(RunError::Fatal(Cause::found(format!(
                "{fatal} (while handling: {why})"
            ))));
        }
        tracing::warn!("aborting transaction: {why}");
        // Wait for outstanding deliveries to settle (they fail or land in the aborted transaction).
        let deadline = Instant::now() + self.timeout;
        while self.deliveries.outstanding.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.producer
            .abort_transaction(self.timeout)
            .map_err(|e| RunError::Fatal(Cause::kafka("abort_transaction", e)))?;
        self.deliveries.error.lock().expect("lock").take();
        self.deliveries.changelog.lock().expect("lock").clear();
        self.aborted += 1;
        counter!(m::TRANSACTIONS, "outcome" => "aborted").increment(1);
        self.records = 0;
        self.dirty = false;
        Ok(())
    }

    /// Begins the transaction after an abort.
    pub(super) fn begin_after_abort(&self) -> Result<(), RunError> {
        self.producer
            .begin_transaction()
            .map_err(|e| RunError::Fatal(Cause::kafka("begin_transaction after abort", e)))
    }

    /// After an abort of the commit cycle: waits as [`abort_pause`] says for the aborts in a
    /// row, so a member whose broker is gone neither spins nor floods its log.
    pub(super) fn back_off(&mut self) {
        self.aborts_in_a_row = self.aborts_in_a_row.saturating_add(1);
        std::thread::sleep(abort_pause(self.aborts_in_a_row));
    }

    /// librdkafka's fatal error, if the producer has one (fencing surfaces here even when the
    /// failed call itself reported something milder, such as purged deliveries).
    pub(super) fn fatal_error(&self) -> Option<String> {
        self.producer
            .client()
            .fatal_error()
            .map(|(code, reason)| format!("fatal producer error {code:?}: {reason}"))
    }

    /// Transactions committed and aborted since the start.
    pub(super) fn outcomes(&self) -> (u64, u64) {
        (self.committed, self.aborted)
    }
}

/// How long to wait after the `n`th abort in a row before the next cycle: nothing after the
/// first (a lost race is retried at once), then 10 ms doubling to at most a second, so a member
/// whose broker is gone neither spins nor floods its log, and resumes within a second of its
/// return.
fn abort_pause(n: u32) -> Duration {
    match n {
        0 | 1 => Duration::ZERO,
        n => Duration::from_millis(10u64 << (n - 2).min(7)).min(Duration::from_secs(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::abort_pause;
    use std::time::Duration;

    #[test]
    fn repeated_aborts_back_off_to_a_second() {
        let pauses: Vec<u64> = (1..=10)
            .map(|n| abort_pause(n).as_millis() as u64)
            .collect();
        assert_eq!(pauses, [0, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(abort_pause(u32::MAX), Duration::from_secs(1));
    }
}
