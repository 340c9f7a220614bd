//! Error classification: which failures of a transactional step are retried, which abort the
//! transaction and replay from the committed offsets, and which stop the member.

use crate::kafka::roster::TopicPartition;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::time::Duration;

/// Errors that stop `tidemark run`.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration has no `[kafka]` section.
    #[error("the pipeline has no [kafka] section")]
    NoKafka,
    /// Setting up clients, topics or state failed.
    #[error("startup: {0}")]
    Startup(String),
    /// The state was written by another pipeline definition (its fingerprint differs): the
    /// process must not touch it. The CLI exits with status 2.
    #[error("{0}")]
    Incompatible(String),
    /// A fatal Kafka error or fencing: the process must stop.
    #[error("fatal: {0}")]
    Fatal(String),
}

/// How a failed transactional step must be handled.
#[derive(Debug)]
pub(super) enum CycleError {
    /// Abort, rewind to the committed offsets, continue.
    Abortable(String),
    /// Stop the process.
    Fatal(String),
    /// Another member has claimed these partitions since this member did (the claims module
    /// says how that is found): abort, drop them, and join the group again.
    Superseded(Vec<TopicPartition>),
}

impl CycleError {
    /// The error in words.
    pub(super) fn describe(&self) -> String {
        match self {
            CycleError::Abortable(m) | CycleError::Fatal(m) => m.clone(),
            CycleError::Superseded(parts) => {
                format!("partitions claimed by another member: {parts:?}")
            }
        }
    }
}

pub(super) fn classify(what: &str, e: KafkaError) -> Result<bool, CycleError> {
    // Ok(true) = retry.
    let fenced = matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    );
    if fenced {
        return Err(CycleError::Fatal(format!(
            "{what}: producer fenced by a newer instance: {e}"
        )));
    }
    if let KafkaError::Transaction(t) = &e {
        if t.is_fatal() {
            return Err(CycleError::Fatal(format!("{what}: {e}")));
        }
        if t.is_retriable() {
            return Ok(true);
        }
        if t.txn_requires_abort() {
            return Err(CycleError::Abortable(format!("{what}: {e}")));
        }
    }
    Err(CycleError::Abortable(format!("{what}: {e}")))
}

/// Runs a transactional call, retrying retriable errors a bounded number of times.
pub(super) fn with_retry(
    what: &str,
    mut call: impl FnMut() -> Result<(), KafkaError>,
) -> Result<(), CycleError> {
    for attempt in 0.. {
        match call() {
            Ok(()) => return Ok(()),
            Err(e) => {
                if classify(what, e)? && attempt < 20 {
                    std::thread::sleep(Duration::from_millis(50 * (attempt + 1)));
                    continue;
                }
                return Err(CycleError::Abortable(format!(
                    "{what}: gave up after retries"
                )));
            }
        }
    }
    unreachable!()
}
