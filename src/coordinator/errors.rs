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
    Startup(#[source] Cause),
    /// The state or the topics were written by another pipeline definition (its fingerprint,
    /// or a partition count, differs): the process must not touch them. The CLI exits with
    /// status 2. The sentence names both sides.
    #[error("{0}")]
    Incompatible(String),
    /// A fatal Kafka error or fencing: the process must stop.
    #[error("fatal: {0}")]
    Fatal(#[source] Cause),
    /// The cluster cannot be reached as configured: a certificate not trusted, credentials
    /// refused, a mechanism not offered, a listener that speaks another protocol. Never retried:
    /// the same settings fail the same way. The sentence says what to fix.
    #[error("cannot connect to the cluster: {0}")]
    Access(#[source] crate::kafka::secure::ConnectError),
}

/// What failed, and why: the cause every coordinator error keeps. Kafka errors keep their type,
/// so that what to do about one is decided on it ([`Cause::decision`]), never on its text.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// A Kafka client call failed.
    #[error("{what}: {source}")]
    Kafka {
        /// The call, and on what.
        what: String,
        /// The client's error.
        #[source]
        source: KafkaError,
    },
    /// A Kafka call that was retried is still failing; the last error.
    #[error("{what}: still failing after {attempts} attempts: {source}")]
    Retried {
        /// The call.
        what: &'static str,
        /// How many times it was made.
        attempts: u32,
        /// The last attempt's error.
        #[source]
        source: KafkaError,
    },
    /// Another part of tidemark failed: the state store, the raw-log reader, a format, the
    /// engine, the schema registry.
    #[error("{what}: {source}")]
    Part {
        /// What was being done.
        what: String,
        /// The part's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A condition the member found itself, with no error beneath it (a timeout, a missing
    /// topic, a fatal error librdkafka reports as a code and a sentence).
    #[error("{0}")]
    Found(String),
}

/// What a failed step of the transactional cycle asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Make the same call again after a pause.
    Retry,
    /// Abort the transaction and replay from the committed offsets.
    Abort,
    /// Stop the member.
    Fatal,
}

impl Cause {
    /// A failed Kafka call.
    pub fn kafka(what: impl Into<String>, source: KafkaError) -> Cause {
        Cause::Kafka {
            what: what.into(),
            source,
        }
    }

    /// A failed part of tidemark.
    pub fn part(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Cause {
        Cause::Part {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// A condition found, in a sentence.
    pub fn found(what: impl Into<String>) -> Cause {
        Cause::Found(what.into())
    }

    /// What to do about it in the transactional cycle. A fenced producer is fatal (librdkafka
    /// reports it as abortable, but a fenced member must stop, never abort); librdkafka's own
    /// classification of a transactional error decides the rest; anything else aborts.
    pub fn decision(&self) -> Decision {
        match self {
            Cause::Kafka { source, .. } => kafka_decision(source),
            Cause::Retried { .. } | Cause::Part { .. } | Cause::Found(_) => Decision::Abort,
        }
    }
}

/// [`Cause::decision`] of a Kafka error.
fn kafka_decision(e: &KafkaError) -> Decision {
    let fenced = matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    );
    match e {
        _ if fenced => Decision::Fatal,
        KafkaError::Transaction(t) if t.is_fatal() => Decision::Fatal,
        KafkaError::Transaction(t) if t.is_retriable() => Decision::Retry,
        _ => Decision::Abort,
    }
}

/// How a failed transactional step must be handled.
#[derive(Debug)]
pub(super) enum CycleError {
    /// Abort, rewind to the committed offsets, continue.
    Abortable(Cause),
    /// Stop the process.
    Fatal(Cause),
    /// Another member has claimed these partitions since this member did (the claims module
    /// says how that is found): abort, drop them, and join the group again.
    Superseded(Vec<TopicPartition>),
}

impl CycleError {
    /// The error of a Kafka call made once (outside [`with_retry`]): fatal or abortable, as
    /// its [`Cause::decision`] says (a retriable error is aborted and replayed).
    pub(super) fn kafka(what: &str, e: KafkaError) -> CycleError {
        let cause = Cause::kafka(what, e);
        match cause.decision() {
            Decision::Fatal => CycleError::Fatal(cause),
            Decision::Retry | Decision::Abort => CycleError::Abortable(cause),
        }
    }

    /// The error in words.
    pub(super) fn describe(&self) -> String {
        match self {
            CycleError::Abortable(c) | CycleError::Fatal(c) => c.to_string(),
            CycleError::Superseded(parts) => {
                format!("partitions claimed by another member: {parts:?}")
            }
        }
    }
}

/// How many times [`with_retry`] makes a call whose error is retriable.
const ATTEMPTS: u32 = 21;

/// Runs a transactional call, retrying retriable errors a bounded number of times (with a
/// growing pause); the last error is kept when it gives up.
pub(super) fn with_retry(
    what: &'static str,
    mut call: impl FnMut() -> Result<(), KafkaError>,
) -> Result<(), CycleError> {
    let mut attempts = 0;
    loop {
        let Err(e) = call() else {
            return Ok(());
        };
        attempts += 1;
        match kafka_decision(&e) {
            Decision::Retry if attempts < ATTEMPTS => {
                std::thread::sleep(Duration::from_millis(50 * u64::from(attempts)));
            }
            Decision::Retry => {
                return Err(CycleError::Abortable(Cause::Retried {
                    what,
                    attempts,
                    source: e,
                }))
            }
            Decision::Abort => return Err(CycleError::Abortable(Cause::kafka(what, e))),
            Decision::Fatal => return Err(CycleError::Fatal(Cause::kafka(what, e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_is_made_on_the_error_s_type() {
        let produce = |code| KafkaError::MessageProduction(code);
        assert_eq!(
            Cause::kafka("produce", produce(RDKafkaErrorCode::ProducerFenced)).decision(),
            Decision::Fatal
        );
        assert_eq!(
            Cause::kafka("produce", produce(RDKafkaErrorCode::MessageSizeTooLarge)).decision(),
            Decision::Abort
        );
        assert_eq!(Cause::found("a timeout").decision(), Decision::Abort);
        let io = std::io::Error::other("disk");
        assert_eq!(Cause::part("writing", io).decision(), Decision::Abort);
    }

    #[test]
    fn a_retry_keeps_its_error_and_retries_only_what_says_so() {
        let mut calls = 0;
        let got = with_retry("commit_transaction", || {
            calls += 1;
            Err(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageSizeTooLarge,
            ))
        });
        // Not retriable: one call, and the error with its source.
        assert_eq!(calls, 1);
        let Err(CycleError::Abortable(cause)) = got else {
            panic!("{got:?}")
        };
        let source = std::error::Error::source(&cause).expect("the Kafka error is kept");
        assert!(source.to_string().contains("too large"), "{source}");
        let mut calls = 0;
        assert!(with_retry("x", || {
            calls += 1;
            if calls < 3 {
                Err(KafkaError::Canceled)
            } else {
                Ok(())
            }
        })
        .is_err());
        assert_eq!(
            calls, 1,
            "only a transactional error that says so is retried"
        );
    }
}
