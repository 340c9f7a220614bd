#!/usr/bin/env bash
# Side-by-side benchmark (see benches/peers.py): tidemark and Quix Streams (installed from PyPI
# into its own venv on first use) on one local broker, the same data and the same job; prints
# records/s, CPU per record and a check that both outputs agree. Not a test: figures go into
# docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
cargo build --release --quiet --bin tidemark
exec python3 benches/peers.py
