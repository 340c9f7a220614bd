#!/usr/bin/env bash
# The demo: builds tidemark and runs the bundled sample pipeline (per-minute clicks per user, with
# early firings and allowed lateness) over a bundled clickstream file with `tidemark simulate`,
# then prints the panes and dead letters.
set -euo pipefail
cd "$(dirname "$0")/.."
TIDEMARK_SKIP_BROKER=1 ./scripts/install-deps.sh
# Same targets as the tests, so the RocksDB build is shared with `scripts/test.sh`.
cargo build --release --quiet --all-targets
bin="${CARGO_TARGET_DIR:-target}/release/tidemark"
out=$(mktemp -d)
"$bin" validate --config examples/clicks/pipeline.toml
"$bin" simulate --config examples/clicks/pipeline.toml --input examples/clicks/events.jsonl \
  --output "$out/panes.jsonl" --dead-letter "$out/dead.jsonl"
echo
echo "== panes ($out/panes.jsonl)"
cat "$out/panes.jsonl"
echo
echo "== dead letters ($out/dead.jsonl)"
cat "$out/dead.jsonl"
