#!/usr/bin/env bash
# The demo: installs what it needs, starts a local Kafka-protocol broker (Tansu), produces a live
# clickstream on two topics without Kafka keys (web and app trackers; a little disorder, some late
# and some malformed records), runs `tidemark run` on both (grouped by the user_id field through
# the repartition hop), and prints each window result as it commits (`tidemark tail`), while
# `tidemark sink postgres` carries the panes into a private PostgreSQL cluster. Then it shows the
# table (psql), the audit of the output topic and the dead letters. About a minute after the
# build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "== building tidemark (the first build compiles RocksDB: about 11 minutes on 2 cores)"
# Same targets as the tests, so the RocksDB build is shared with scripts/test.sh.
cargo build --release --quiet --all-targets
bin="${CARGO_TARGET_DIR:-target}/release/tidemark"

echo "== offline first: tidemark simulate on the bundled file"
"$bin" simulate --config examples/clicks/pipeline.toml --input examples/clicks/events.jsonl \
  --output /dev/null --dead-letter /dev/null

broker=$(./scripts/broker.sh start)
run_pid=""
tail_pid=""
sink_pid=""
# A private PostgreSQL cluster for the sink (the server refuses to run as root: as root it runs as
# the `postgres` user).
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pgdir="$PWD/target/demo-pg"
pgport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
  [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
  [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null && wait "$sink_pid" 2>/dev/null
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null && wait "$run_pid" 2>/dev/null
  as_pg "$pgbin/pg_ctl" -D "$pgdir/data" -m immediate stop >/dev/null 2>&1 || true
  ./scripts/broker.sh stop
}
trap cleanup EXIT
echo "== broker on $broker"
export TIDEMARK__KAFKA__BOOTSTRAP_SERVERS="$broker"
export TIDEMARK_BOOTSTRAP_SERVERS="$broker"
rm -rf target/demo-state
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export TIDEMARK__METRICS__ADDRESS="127.0.0.1:$metrics_port"

rm -rf "$pgdir"; mkdir -p "$pgdir/data"
if [ "$(id -u)" = 0 ]; then chmod 755 "$pgdir"; chown postgres:postgres "$pgdir/data"; fi
as_pg "$pgbin/initdb" -D "$pgdir/data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
as_pg "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/data/server.log" -w \
  -o "-p $pgport -k $pgdir/data -c listen_addresses=127.0.0.1" start >/dev/null
echo "== PostgreSQL on 127.0.0.1:$pgport (tidemark sink postgres writes the panes there)"
export TIDEMARK__SINK__POSTGRES__URL="host=127.0.0.1 port=$pgport user=postgres dbname=postgres"

"$bin" produce --topic web-clicks --partitions 3 --events 1 --rate 0 --no-key >/dev/null 2>&1
"$bin" produce --topic app-clicks --partitions 2 --events 1 --rate 0 --no-key >/dev/null 2>&1
TIDEMARK_LOG=warn "$bin" run --config examples/clicks/kafka-demo.toml &
run_pid=$!
TIDEMARK_LOG=warn "$bin" sink postgres --config examples/clicks/kafka-demo.toml &
sink_pid=$!
echo "== producing 120 + 80 clicks/s without keys on web-clicks and app-clicks for 20 s (2% late, 1% malformed) while tidemark runs"
"$bin" produce --topic web-clicks --events 2400 --rate 120 --keys 5 --disorder-ms 1500 \
  --late-share 0.02 --malformed-share 0.01 --no-key &
producer_pid=$!
"$bin" produce --topic app-clicks --events 1600 --rate 80 --keys 5 --disorder-ms 1500 \
  --late-share 0.02 --malformed-share 0.01 --no-key &
producer2_pid=$!

echo "== window results as they commit (tidemark tail: key, window in local time, timing, pane, values)"
"$bin" tail --topic clicks-per-5s &
tail_pid=$!
wait "$producer_pid" "$producer2_pid"
sleep 8
kill "$tail_pid"; wait "$tail_pid" 2>/dev/null || true; tail_pid=""
echo "== a few of tidemark's metrics (http://127.0.0.1:$metrics_port/metrics)"
python3 - "$metrics_port" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
for line in text.splitlines():
    if line.startswith(("tidemark_records_in_total", "tidemark_panes_total", "tidemark_dead_letters_total",
                        "tidemark_watermark_lag_seconds", "tidemark_transactions_total")):
        print("  " + line)
PY
kill "$run_pid"; wait "$run_pid" || true; run_pid=""
sleep 2
kill "$sink_pid"; wait "$sink_pid" || true; sink_pid=""
echo "== the same panes in PostgreSQL (one row per window and key: the last pane; psql)"
psql -h 127.0.0.1 -p "$pgport" -U postgres -d postgres -c \
  "SELECT key, window_start, window_end, epoch, pane_index, timing, clicks, revenue FROM clicks_per_5s ORDER BY window_start DESC, key LIMIT 10"
psql -h 127.0.0.1 -p "$pgport" -U postgres -d postgres -At -c \
  "SELECT count(*) || ' rows in clicks_per_5s, ' || (SELECT count(*) FROM clicks_dead_letters) || ' in clicks_dead_letters' FROM clicks_per_5s"
echo "== audit of the output topic (exit status 0 = no duplicates)"
"$bin" audit --topic clicks-per-5s
echo "== dead letters"
"$bin" audit --topic clicks-dead-letters 2>&1 | head -2
