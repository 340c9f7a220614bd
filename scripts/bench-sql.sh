#!/usr/bin/env bash
# What a pipeline written in SQL costs beside its TOML twin: `tidemark simulate` over the same
# generated clickstream, examples/clicks/pipeline.toml against examples/clicks/pipeline.sql (the
# same query, checked by tests/offline/sql.rs to have the same plan and panes), runs interleaved
# (TOML, SQL, TOML, SQL, ...) so that a noisy machine's drift falls on both. Prints each run's
# wall time and CPU seconds (user + system), the medians, and the SQL/TOML ratio of the medians.
#
#   scripts/bench-sql.sh [EVENTS] [RUNS]     # default 1,000,000 events, 5 runs of each
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
events="${1:-1000000}"
runs="${2:-5}"
cargo build --release --quiet --bin tidemark
bin="$CARGO_TARGET_DIR/release/tidemark"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A clickstream of the examples' shape: 1,000 users, 50 pages, a click every 10 ms of event time,
# one in twenty up to 3 s out of order.
python3 - "$events" > "$work/events.jsonl" <<'PY'
import json, random, sys
n = int(sys.argv[1])
rng = random.Random(7)
base = 1_767_225_600_000
for i in range(n):
    t = base + i * 10 - (rng.randrange(3000) if rng.random() < 0.05 else 0)
    print(json.dumps({"user_id": f"u{rng.randrange(1000)}", "page": f"/p{rng.randrange(50)}",
                      "price": rng.randrange(100) / 4, "ts": t}, separators=(",", ":")))
PY
measure() {
  /usr/bin/time -f "%e %U %S" "$bin" simulate "$@" --input "$work/events.jsonl" \
    --output "$work/panes.jsonl" --dead-letter "$work/dead.jsonl" 2> "$work/time" > /dev/null
  tail -1 "$work/time" | awk '{printf "%.2f %.2f\n", $1, $2 + $3}'
}
echo "bench-sql: $events events, $runs runs each, interleaved; $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
: > "$work/toml"; : > "$work/sql"
for i in $(seq "$runs"); do
  t=$(measure --config examples/clicks/pipeline.toml); echo "toml run $i: wall_s cpu_s = $t"; echo "$t" >> "$work/toml"
  s=$(measure --sql examples/clicks/pipeline.sql); echo "sql  run $i: wall_s cpu_s = $s"; echo "$s" >> "$work/sql"
done
median() { sort -n -k"$2" "$1" | awk -v c="$2" '{v[NR]=$c} END {print v[int((NR+1)/2)]}'; }
tw=$(median "$work/toml" 1); tc=$(median "$work/toml" 2)
sw=$(median "$work/sql" 1); sc=$(median "$work/sql" 2)
echo "median toml: wall ${tw}s cpu ${tc}s; sql: wall ${sw}s cpu ${sc}s"
awk -v tw="$tw" -v tc="$tc" -v sw="$sw" -v sc="$sc" 'BEGIN {printf "sql/toml: wall %.3f, cpu %.3f\n", sw / tw, sc / tc}'
