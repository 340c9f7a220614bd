//! Sinks: how panes and dead letters are encoded for their destination.
//!
//! [`kafka`] builds the headers of pane and dead-letter records.
//! [`json`] holds the JSON encodings shared by `simulate`'s files and (later) the Kafka output topic.

pub mod json;
pub mod kafka;
