//! tidemark: a Kafka-native stream processor for event-time windows, whose results reach their sinks
//! exactly once.
//!
//! # Map of the modules
//!
//! * [`config`] — the pipeline file (TOML), environment overrides, and `validate()`, which lists
//!   every violation at once.
//! * [`produce`] — `tidemark produce`: a clickstream load generator.
//! * [`expr`] — SQL expressions over one input record (parsed with `sqlparser`, compiled once to
//!   field slots): the filter, the key parts, the event time and the aggregations' inputs.
//! * [`input`] — one home for reading input records: what a pipeline reads from each record
//!   ([`input::InputSpec`]: filter, key, time, inputs), the JSON decoder, the Avro decoder
//!   ([`input::avro`]: reader schemas and evolution, plain and Confluent framing, the Schema
//!   Registry client) and the one entry point the record step calls ([`input::decode`]), into
//!   the core's [`windowing::spec::Event`].
//! * [`windowing`] — the pure, deterministic core: time arithmetic, window assigners, watermarks,
//!   triggers, mergeable aggregates, the saved state format, the typed state cache and the
//!   [`windowing::engine::Engine`]
//!   that fires panes. It owns its types ([`windowing::spec`]) and knows nothing about Kafka or
//!   the config file, so it runs the same from a file, in tests and in `simulate`.
//! * [`pipeline`] — what happens to one record, in two halves: [`pipeline::Front`] (one per
//!   source: malformed, future timestamps, the source's watermark) and [`pipeline::Back`] (one per
//!   engine partition: late records, the watermark of its sources); [`pipeline::Step`] joins them
//!   for `simulate` and for `run` over input keyed by the grouping field; the repartition hop
//!   runs them in its two stages.
//! * [`state`] — state in RocksDB, below the core's typed cache: the order-preserving key
//!   encoding, the store (column families per operator and partition), and the changelog: offset
//!   markers, and the restore that reads the committed input offset from the log.
//! * [`format`] — every record tidemark writes for others to read, in one home: panes and dead
//!   letters (fields, headers, JSON and Avro encodings, reading them back) and the repartition
//!   hop's records.
//! * [`simulate`] — `tidemark simulate`: a pipeline over files of records (JSON, or base64 Avro)
//!   and control lines, through `run`'s decoder.
//! * [`kafka`] — Kafka client pieces: the raw-log reader, which resolves transactions from a
//!   topic's COMMIT/ABORT markers (by producer id and epoch) without trusting the broker to hide
//!   aborted records; restore, `audit`, `tail`, the connectors and the hop's second stage read
//!   through it.
//! * [`replay`] — `tidemark replay`: moves a stopped pipeline back to earlier offsets in one
//!   transaction (reset markers in the changelog, a new epoch).
//! * [`sink`] — sinks beside the pipeline, behind one seam ([`sink::Sink`]): what every
//!   sink needs is written once; a sink is a folder with its settings and its code, registered
//!   in one line; `tidemark sink postgres` carries the output topic into PostgreSQL exactly once
//!   (offsets in the same database transaction).
//! * [`audit`] — `tidemark audit`: checks a topic's committed panes for duplicates and gaps, and
//!   dead letters for repeats.
//! * [`tail`] — `tidemark tail`: committed panes of an output topic as an aligned live table.
//! * [`clients`] — the Kafka consumer's and transactional producer's settings;
//!   [`coordinator`] — `tidemark run`: the group member's loop, the repartition hop's two stages,
//!   restore and rebalance, and the commit cycle (the only place where offsets, output and state
//!   become durable), in rooms.
//! * [`clock`] — the wall clock, for the Kafka runtime and the load generator.
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
pub mod cli;
pub mod clients;
pub mod clock;
pub mod config;
pub mod coordinator;
pub mod expr;
pub mod format;
pub mod http;
pub mod input;
pub mod kafka;
pub mod metrics;
pub mod pipeline;
pub mod produce;
pub mod replay;
pub mod simulate;
pub mod sink;
pub mod state;
pub mod tail;
pub mod windowing;
