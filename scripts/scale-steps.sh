#!/usr/bin/env bash
# Scale steps under live load (tests/kafka/scale.rs at full strength): the two-stage pipeline on a
# local Tansu broker grows from 1 member to 2, 4 and 6 and shrinks to 2, one step every 20 s, over
# 60,000 null-keyed records on two topics of 6 partitions (CI runs it with 20,000 records and 30 s steps); every pane and dead letter is judged
# exactly once from the raw log. Prints one `scale-step:` line per step (the pause until every
# partition processes again, the changelog records restored) and the run's `scale:` summary.
#
#   scripts/scale-steps.sh [RUNS]
#   TIDEMARK_SCALE_RECORDS=100000 TIDEMARK_SCALE_STEP=30 scripts/scale-steps.sh
set -euo pipefail
# The whole script is one function, read before it runs: editing this file during a long
# series cannot change what the running copy does.
main() {
  cd "$(dirname "$0")/.."
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
  ./scripts/install-deps.sh >/dev/null
  export TIDEMARK_SCALE_RECORDS="${TIDEMARK_SCALE_RECORDS:-60000}"
  export TIDEMARK_SCALE_STEP="${TIDEMARK_SCALE_STEP:-20}"
  runs="${1:-1}"
  cargo build --release --quiet --tests
  passed=0
  for i in $(seq 1 "$runs"); do
    out=$(mktemp)
    if cargo test --release --quiet --test kafka -- --nocapture scale:: >"$out" 2>&1; then
      passed=$((passed + 1))
    fi
    grep -E '^(scale-step|scale|problem):|panicked|kept in' "$out" || tail -n 30 "$out"
    rm -f "$out"
  done
  echo "scale-steps.sh: $passed of $runs runs passed"
  [ "$passed" -eq "$runs" ]
}
main "$@"
exit
