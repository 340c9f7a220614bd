#!/usr/bin/env bash
# Kafka benchmark (see benches/kafka_bench.py): tidemark vs a transactional passthrough from the
# same code, on one local broker and the same data; prints records/s, CPU, peak RSS and pane
# latency. Not a test: figures go into docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
cargo build --release --quiet --all-targets
exec python3 benches/kafka_bench.py
