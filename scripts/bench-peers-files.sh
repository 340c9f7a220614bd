#!/usr/bin/env bash
# Side-by-side benchmark on a file (see benches/peers_files.py): tidemark simulate, Spark
# Structured Streaming and Flink (both installed from PyPI into their own venv on first use; they
# need Java 17) run one event-time window job over the same JSON-lines file; prints time and CPU
# per event of each, and checks that all outputs agree. Not a test: figures go into
# docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v java >/dev/null || { echo "bench-peers-files: Spark and Flink need Java 17 (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
cargo build --release --quiet --bin tidemark
exec python3 benches/peers_files.py
