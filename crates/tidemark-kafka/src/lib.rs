//! Kafka client pieces shared by the runtime, restore, `audit`, `tail` and the tests: the raw-log
//! reader, which resolves transactions from a topic's COMMIT/ABORT markers without trusting the
//! broker to hide aborted records; the group protocol pieces (assignor, roster, members); the
//! admin calls; and the catalogue of broker behaviours tidemark works around ([`quirks`]), the
//! one place that names a broker. Nothing here knows windows, pipelines or state.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod access;
pub mod admin;
pub mod assignor;
pub mod clock;
pub mod group;
pub mod members;
pub mod quirks;
pub mod raw_log;
pub mod roster;
pub mod secure;
