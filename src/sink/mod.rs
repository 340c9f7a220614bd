//! Sinks: how panes and dead letters are encoded for their destination.
//!
//! [`json`] holds the JSON encodings shared by `simulate`'s files and (later) the Kafka output topic.

pub mod json;
