//! The tests that need no broker, in one binary:
//! * the engine: `golden` (hand-worked scenarios through `simulate`), `engine_props`
//!   (properties of windows, sessions and merges), `simulate_bytes` (bad bytes become dead
//!   letters), `hostile` (no decoder panics on arbitrary bytes or hostile JSON), `reference`
//!   (the independent fold the Kafka tests judge with);
//! * formats and the command line: `avro`, `cli`;
//! * the documents: `documents` (a short README, no narrated history anywhere);
//! * the code's shape: `architecture` (imports without circles, parts that own their state,
//!   broker quirks in one room);
//! * deployment files: `ops` (Docker Compose, Dockerfile, Prometheus), `k8s` (the Kubernetes
//!   manifests), `stack` (the ops stack started for real without Docker).

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod avro;
mod cli;
mod documents;
mod engine_props;
mod golden;
mod hostile;
mod k8s;
mod ops;
mod reference;
mod simulate_bytes;
mod sql;
mod stack;
