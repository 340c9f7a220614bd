#!/usr/bin/env bash
# Engine benchmark (see benches/engine.rs). Prints a table of events/s, state size and peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
TIDEMARK_SKIP_BROKER=1 ./scripts/install-deps.sh
cargo bench --bench engine
