#!/usr/bin/env bash
# Cost per partition (see benches/partition_bench.py): one member, the same records over 6, 64
# and 256 partitions; prints CPU per record and peak RSS. Not a test: figures go into docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
cargo build --release --quiet --bin tidemark
exec python3 benches/partition_bench.py
