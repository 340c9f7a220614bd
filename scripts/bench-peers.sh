#!/usr/bin/env bash
# Side-by-side benchmark on Kafka (see benches/peers.py): tidemark, Quix Streams and Flink (both
# installed from PyPI into venvs of their own on first use; Flink needs Java 17) on one local
# broker, the same data and the same exactly-once job; prints records/s, CPU per record and a
# check that all outputs agree. Not a test: figures go into docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v java >/dev/null || { echo "bench-peers: Flink needs Java 17 (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
./scripts/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
cargo build --release --quiet --bin tidemark
exec python3 benches/peers.py
