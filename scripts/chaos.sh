#!/usr/bin/env bash
# The chaos test at full strength (tests/kafka_chaos.rs): three members of one group on a local
# Tansu broker, live input with late and malformed records, 24 SIGKILLs of random members 1-4 s
# apart, restarts alternating between kept and empty state directories; then a judge reads the
# output and dead-letter topics from the raw log. Prints each run's `chaos:` summary line.
#
#   scripts/chaos.sh [RUNS]          # default 1 run; exit status 0 only if every run passed
#   TIDEMARK_CHAOS_KILLS=30 TIDEMARK_CHAOS_RECORDS=80000 TIDEMARK_CHAOS_SEED=123 scripts/chaos.sh
#
# CI runs the same test with its short defaults (8 kills, 20,000 records) through scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
./scripts/install-deps.sh >/dev/null
runs="${1:-1}"
export TIDEMARK_CHAOS_KILLS="${TIDEMARK_CHAOS_KILLS:-24}"
export TIDEMARK_CHAOS_RECORDS="${TIDEMARK_CHAOS_RECORDS:-60000}"
cargo build --release --quiet --tests
passed=0
for i in $(seq 1 "$runs"); do
  out=$(mktemp)
  if cargo test --release --quiet --test kafka_chaos -- --nocapture >"$out" 2>&1; then
    passed=$((passed + 1))
  fi
  if ! grep '^chaos:' "$out"; then
    echo "chaos.sh: run $i printed no summary; its last lines:"
    tail -n 30 "$out"
  fi
  grep -E 'panicked|kept in' "$out" || true
  rm -f "$out"
done
echo "chaos.sh: $passed of $runs runs passed"
[ "$passed" -eq "$runs" ]
