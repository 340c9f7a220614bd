//! tidemark: a Kafka-native stream processor for event-time windows, whose results reach their sinks
//! exactly once.
//!
//! This is the runtime crate. The layers below it are crates of their own, which it re-exports
//! under the module names used throughout:
//!
//! * [`expr`], [`windowing`], [`pipeline`] — `tidemark-core`: SQL expressions over one record,
//!   the pure event-time windowing engine, and the record step ([`pipeline::Step`]); no Kafka,
//!   no RocksDB, no async runtime;
//! * [`state`] — `tidemark-state`: window state in RocksDB behind the core's seam
//!   ([`windowing::backend::StateBackend`]);
//! * [`kafka`], [`clock`] — `tidemark-kafka`: the raw-log reader, which resolves transactions from
//!   a topic's COMMIT/ABORT markers, the group protocol pieces, the admin calls, the broker quirks
//!   and the wall clock.
//!
//! # Map of the modules
//!
//! * [`config`] — the pipeline file (TOML), environment overrides, and `validate()`, which lists
//!   every violation at once.
//! * [`input`] — one home for reading input records: what a pipeline reads from each record
//!   ([`input::InputSpec`]: filter, key, time, inputs), the JSON decoder, the Avro decoder
//!   ([`input::avro`]: reader schemas and evolution, plain and Confluent framing, the Schema
//!   Registry client) and the one entry point the record step calls ([`input::decode`]), into
//!   the core's [`windowing::spec::Event`].
//! * [`changelog`] — the changelog protocol: offset, reset and epoch markers, the committed
//!   input offset read from the log, and the restore of a partition's state from it.
//! * [`format`] — every record tidemark writes for others to read, in one home: panes and dead
//!   letters (fields, headers, JSON and Avro encodings, reading them back) and the repartition
//!   hop's records.
//! * [`simulate`] — `tidemark simulate`: a pipeline over files of records (JSON, or base64 Avro)
//!   and control lines, through `run`'s decoder.
//! * [`replay`] — `tidemark replay`: moves a stopped pipeline back to earlier offsets in one
//!   transaction (reset markers in the changelog, a new epoch).
//! * [`sink`] — sinks beside the pipeline, behind one seam ([`sink::Sink`]): what every
//!   sink needs is written once; a sink is a folder with its settings and its code, registered
//!   in one line; `tidemark sink postgres` carries the output topic into PostgreSQL exactly once
//!   (offsets in the same database transaction).
//! * [`audit`] — `tidemark audit`: checks a topic's committed panes for duplicates and gaps, and
//!   dead letters for repeats.
//! * [`tail`] — `tidemark tail`: committed panes of an output topic as an aligned live table.
//! * [`produce`] — `tidemark produce`: a clickstream load generator.
//! * [`clients`] — the Kafka consumer's and transactional producer's settings;
//!   [`coordinator`] — `tidemark run`: the group member's loop, the repartition hop's two stages,
//!   restore and rebalance, and the commit cycle (the only place where offsets, output and state
//!   become durable), in rooms.
//! * [`metrics`] — every exported metric, named and described, and the `/metrics`, `/healthz`,
//!   `/readyz` endpoint.
//! * [`http`] — a minimal http:// client (Schema Registry, `tidemark probe`).
//! * [`cli`] — the command line, one room per command: `validate`, `simulate`, `run`, `replay`,
//!   `sink postgres`, `produce`, `audit`, `tail`, `probe`.
//!
//! ARCHITECTURE.md describes how the pieces fit and the invariants they keep.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod audit;
pub mod changelog;
pub mod cli;
pub mod clients;
pub mod config;
pub mod coordinator;
pub mod format;
pub mod http;
pub mod input;
pub mod metrics;
pub mod produce;
pub mod replay;
pub mod simulate;
pub mod sink;
pub mod tail;

// The inner crates, under the module names the rest of the crate and its users know.
pub use tidemark_core::{expr, pipeline, windowing};
pub use tidemark_kafka as kafka;
pub use tidemark_kafka::clock;
pub use tidemark_state as state;
