//! The tests that need a Kafka-protocol broker, in one binary. Each test starts its own broker
//! (`common::Broker`; `TIDEMARK_TEST_BROKER` picks Tansu or noida-db) or, for
//! `injected_faults`, librdkafka's mock cluster, and judges what was committed from the raw log.
//!
//! Grouped by what they prove:
//! * exactly-once under failures: `chaos_direct`, `chaos_hop` (random kill -9s of three
//!   members, live input), `crash_recovery` (one member killed and restored), `broker_stopped`
//!   (the broker itself stopped), `injected_faults` (errors on every transactional request);
//! * pipelines end to end: `run`, `repartition` (the hop), `hostile_input` (records that
//!   cannot be carried, dead-lettered), `replay`, `avro`, `audit`,
//!   `metrics`, `postgres_sink`;
//! * the group: `membership` (joins, deaths, fencing, a leader that assigns nothing),
//!   `claims` (fencing from the log), `scale` (members added and removed under load),
//!   `wedged_group` (a wedged group cleared by the watchdog);
//! * the brokers themselves: `broker_quirks` checks `kafka::quirks` against the broker under
//!   test.
//!
//! Run one group with a filter: `cargo test --release --test kafka -- chaos_hop::`.

#[path = "../common/mod.rs"]
mod common;

mod audit;
mod avro;
mod broker_quirks;
mod broker_stopped;
mod chaos_direct;
mod chaos_hop;
mod claims;
mod crash_recovery;
mod hostile_input;
mod injected_faults;
mod membership;
mod metrics;
mod postgres_sink;
mod repartition;
mod replay;
mod run;
mod scale;
mod secured;
mod sql;
mod wedged_group;
