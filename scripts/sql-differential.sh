#!/usr/bin/env bash
# The differential test against Flink SQL: every query of examples/sql/ (over
# examples/sql/clicks.jsonl) and of examples/sql/nexmark/ (over the Nexmark sample) runs on
# Apache Flink 2.3 (PyFlink from PyPI, scripts/flink-sql-reference.py) and on `tidemark
# simulate --sql`, with the same query text over the same file, and their final rows are compared
# as multisets, numbers within 1e-9 relative. Prints one line per query and a summary; exits 1
# when any query differs.
#
# PyFlink needs a Java runtime (11 or 17) and about 400 MB of wheels; they go to
# $TIDEMARK_FLINK_VENV (default ~/.cache/tidemark/flink-venv), installed on first use. CI checks
# the committed Flink rows (tests/golden/sql/) instead, since this install does not fit its time
# budget; docs/sql.md says when this script last ran.
#
#   scripts/sql-differential.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
venv="${TIDEMARK_FLINK_VENV:-$HOME/.cache/tidemark/flink-venv}"
command -v java > /dev/null || { echo "sql-differential: PyFlink needs a Java runtime (apt-get install openjdk-17-jre-headless)" >&2; exit 2; }
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pyflink' 2> /dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet apache-flink==2.3.0
fi
cargo build --release --quiet --bin tidemark
bin="$CARGO_TARGET_DIR/release/tidemark"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "sql-differential: Flink $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("apache-flink"))') against tidemark $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
failed=0
total=0
for pair in "examples/sql:examples/sql/clicks.jsonl" "examples/sql/nexmark:examples/sql/nexmark/events.jsonl"; do
  dir="${pair%%:*}"
  events="${pair#*:}"
  for sql in "$dir"/*.sql; do
    name=$(basename "$sql" .sql)
    total=$((total + 1))
    "$venv/bin/python" scripts/flink-sql-reference.py "$sql" "$events" > "$work/flink" 2> "$work/flink.err" || {
      echo "$dir/$name: Flink failed: $(grep -m1 -i 'exception' "$work/flink.err" || tail -1 "$work/flink.err")"
      failed=$((failed + 1))
      continue
    }
    "$bin" simulate --sql "$sql" --input "$events" > "$work/tidemark" 2> /dev/null
    if python3 - "$work/flink" "$work/tidemark" "$dir/$name" <<'PY'; then :; else failed=$((failed + 1)); fi
import json, math, sys
from collections import Counter

def rows(path):
    out = []
    for line in open(path):
        if line.strip():
            out.append(json.loads(line))
    return out

def close(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b

def key(r):
    # Rows are matched on their non-numeric columns and rounded numbers, then compared closely.
    return tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in r.items()))

flink, tide, name = rows(sys.argv[1]), rows(sys.argv[2]), sys.argv[3]
left = Counter(key(r) for r in flink)
right = Counter(key(r) for r in tide)
missing = list((left - right).elements())
extra = list((right - left).elements())
# A key that differs only in the last digits of a number is a near miss: compare it closely.
unmatched = []
for m in missing:
    hit = next((e for e in extra if len(e) == len(m) and all(ka == kb and close(va, vb) for (ka, va), (kb, vb) in zip(m, e))), None)
    if hit is None:
        unmatched.append(m)
    else:
        extra.remove(hit)
if unmatched or extra or not flink:
    print(f"{name}: DIFFERS: Flink {len(flink)} rows, tidemark {len(tide)}; missing {unmatched[:2]}, extra {extra[:2]}")
    sys.exit(1)
print(f"{name}: equal, {len(flink)} rows")
PY
  done
done
echo "sql-differential: $((total - failed)) of $total queries give Flink's rows"
[ "$failed" -eq 0 ]
