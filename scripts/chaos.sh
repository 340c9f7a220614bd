#!/usr/bin/env bash
# The chaos tests at full strength: three members of one group on a local broker, live
# input with late and malformed records, 24 SIGKILLs of random members 1-4 s apart, restarts
# alternating between kept and empty state directories; then a judge reads the output, the
# dead letters and every internal topic from the raw log. Two pipelines:
#   - chaos_direct: one topic keyed by the grouping field (repartition = false), 6 partitions;
#   - chaos_hop: null-keyed input on two topics, through the repartition hop, once with
#     tumbling windows (records crossing as partial aggregates) and once with sessions.
# Prints each run's summary line (`chaos:` or `chaos-hop:`).
#
#   scripts/chaos.sh [RUNS] [TEST...]    # default 1 run of both tests; exit 0 only if all passed
#   scripts/chaos.sh 10 chaos_hop        # ten runs of the hop only
#   TIDEMARK_CHAOS_KILLS=30 TIDEMARK_CHAOS_RECORDS=80000 TIDEMARK_CHAOS_SEED=123 scripts/chaos.sh
#   TIDEMARK_CHAOS_STATIC=1 scripts/chaos.sh     # members with static membership
#   TIDEMARK_TEST_BROKER=noida scripts/chaos.sh 10  # on noida-db (default: tansu)
#
# TEST names a module of the Kafka test binary (tests/kafka/). The binaries are built once and
# copied to a frozen directory before the first run, so a
# rebuild of the tree during a long series does not change what the later runs test.
#
# Each run's broker log is written to $CHAOS_LOGS (default $CARGO_TARGET_DIR/chaos-logs) and kept only
# when the run fails, beside the member logs and raw-log dumps the test itself keeps.
#
# CI runs the same tests with their short defaults (8 kills, 20,000 records) through
# scripts/test.sh.
set -euo pipefail
# The whole script is one function, read before it runs: editing this file during a long
# series cannot change what the running copy does.
main() {
  cd "$(dirname "$0")/.."
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
  ./scripts/install-deps.sh >/dev/null
  runs="${1:-1}"
  shift || true
  tests=("$@")
  [ "${#tests[@]}" -gt 0 ] || tests=(chaos_direct chaos_hop)
  export TIDEMARK_CHAOS_KILLS="${TIDEMARK_CHAOS_KILLS:-24}"
  export TIDEMARK_CHAOS_RECORDS="${TIDEMARK_CHAOS_RECORDS:-60000}"
  logs="${CHAOS_LOGS:-$CARGO_TARGET_DIR/chaos-logs}"
  mkdir -p "$logs"
  frozen=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-chaos-bin.XXXXXX")
  trap 'rm -rf "$frozen"' EXIT
  exe=$(cargo test --release --quiet --no-run --message-format=json --test kafka |
    jq -r 'select(.reason == "compiler-artifact" and .executable != null and .target.kind == ["test"]) | .executable')
  cp "$exe" "$frozen/kafka"
  cargo build --release --quiet --bin tidemark
  cp "$CARGO_TARGET_DIR/release/tidemark" "$frozen/tidemark"
  export TIDEMARK_BIN="$frozen/tidemark"
  echo "chaos.sh: broker ${TIDEMARK_TEST_BROKER:-tansu}, commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"
  passed=0
  total=0
  for i in $(seq 1 "$runs"); do
    for t in "${tests[@]}"; do
      total=$((total + 1))
      out=$(mktemp)
      blog="$logs/$(date +%s)-$t-$i-broker.log"
      if TIDEMARK_BROKER_LOG="$blog" "$frozen/kafka" --nocapture "$t::" >"$out" 2>&1; then
        passed=$((passed + 1))
        rm -f "$blog"
      else
        cp "$out" "${blog%-broker.log}-test.log"
        echo "chaos.sh: run $i of $t failed; broker and test logs kept in $logs"
      fi
      if ! grep -E '^chaos(-hop)?:' "$out"; then
        echo "chaos.sh: run $i of $t printed no summary; its last lines:"
        tail -n 30 "$out"
      fi
      grep -E 'panicked|kept in|^problem:' "$out" || true
      rm -f "$out"
    done
  done
  echo "chaos.sh: $passed of $total runs passed"
  [ "$passed" -eq "$total" ]
}
main "$@"
exit
