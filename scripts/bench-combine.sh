#!/usr/bin/env bash
# Partial aggregates across the repartition hop (see benches/combine_bench.py): bytes written to
# the repartition topic and CPU per input record, with and without partials, keyed and without a
# key, in one run on one local broker. Not a test: figures go into docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
cargo build --release --quiet --bin tidemark
exec python3 benches/combine_bench.py
