#!/usr/bin/env bash
# The topology of docker-compose.yml without Docker: a broker (Tansu), three `tidemark run`
# members of one group with instance ids, the load generator, and Prometheus (the Debian
# package) with ops/prometheus.yml rendered for localhost and ops/alerts.yml.
#
#   scripts/stack.sh up [DIR]     start everything; prints the URLs; state, logs and PIDs in DIR
#   scripts/stack.sh down [DIR]   stop everything started in DIR
#
# DIR defaults to target/stack. Settings (environment):
#   STACK_PROMETHEUS_PORT   Prometheus' port (default 9090)
#   STACK_METRICS_PORTS     the members' metrics ports (default "9464 9465 9466")
#   STACK_SCRAPE_INTERVAL / STACK_EVALUATION_INTERVAL   override ops/prometheus.yml's intervals
#   TIDEMARK_BIN            the tidemark binary (default: built with cargo)
# Any TIDEMARK__* variable reaches the members, as it would in compose.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
dir=$(mkdir -p "${2:-target/stack}" && cd "${2:-target/stack}" && pwd)

stop_all() {
  local pids=()
  for f in "$dir"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$f"
  done
  # Members commit their open transaction on SIGTERM; give them the compose grace period.
  for _ in $(seq 1 300); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_http() { # URL NAME LOG
  for _ in $(seq 1 300); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$1" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "$2 did not come up at $1; see $3" >&2
  tail -20 "$3" >&2
  return 1
}

case "$cmd" in
  up)
    ./scripts/install-broker.sh
    command -v prometheus >/dev/null || { echo "prometheus is not installed: run scripts/install-deps.sh" >&2; exit 1; }
    bin=${TIDEMARK_BIN:-}
    if [ -z "$bin" ]; then
      cargo build --release --quiet --bin tidemark
      bin="${CARGO_TARGET_DIR:-target}/release/tidemark"
    fi
    stop_all
    rm -rf "$dir/state" "$dir/prometheus-data"

    # The broker (compose: kafka).
    bport=$(free_port)
    .venv/bin/tansu broker --listener-url "tcp://127.0.0.1:$bport" \
      --advertised-listener-url "tcp://127.0.0.1:$bport" --storage-engine memory://tansu/ \
      > "$dir/broker.log" 2>&1 &
    echo $! > "$dir/broker.pid"
    for _ in $(seq 1 100); do
      python3 -c "import socket; socket.create_connection(('127.0.0.1',$bport),0.2)" 2>/dev/null && break
      sleep 0.1
    done
    broker="127.0.0.1:$bport"
    echo "$broker" > "$dir/broker.address"

    # The input topic with six partitions (compose: kafka-init); the members create the rest.
    TIDEMARK_LOG=warn "$bin" produce --bootstrap-servers "$broker" --topic clicks --partitions 6 \
      --events 1 --rate 0 > "$dir/init.log" 2>&1

    # Three members (compose: tidemark, scaled to 3), each with its instance id and state dir.
    read -r -a ports <<< "${STACK_METRICS_PORTS:-9464 9465 9466}"
    n=0
    for port in "${ports[@]}"; do
      n=$((n + 1))
      TIDEMARK__KAFKA__BOOTSTRAP_SERVERS="$broker" \
      TIDEMARK__KAFKA__INSTANCE_ID="member-$n" \
      TIDEMARK__KAFKA__STATE_DIR="$dir/state/member-$n" \
      TIDEMARK__METRICS__ADDRESS="127.0.0.1:$port" \
      TIDEMARK_LOG="${TIDEMARK_LOG:-info}" \
        "$bin" run --config ops/tidemark/pipeline.toml > "$dir/member-$n.log" 2>&1 &
      echo $! > "$dir/member-$n.pid"
    done

    # The load generator (compose: produce), with the same arguments.
    "$bin" produce --bootstrap-servers "$broker" --topic clicks --partitions 6 \
      --events 1000000000 --rate 200 --keys 50 --disorder-ms 2000 --late-share 0.01 \
      --malformed-share 0.005 > "$dir/produce.log" 2>&1 &
    echo $! > "$dir/produce.pid"

    # Prometheus (compose: prometheus) with the same files, rendered for localhost: static
    # targets instead of compose's DNS discovery, and the alert rules' path in this clone.
    python3 - ops/prometheus.yml "$dir/prometheus.yml" "$PWD/ops/alerts.yml" "${ports[@]}" <<'PY'
import os, re, sys
src, dst, rules, ports = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
text = open(src).read()
discovery = re.search(r"    dns_sd_configs:\n(?:      .*\n)+", text)
assert discovery, "ops/prometheus.yml: the dns_sd_configs block moved; update scripts/stack.sh"
targets = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
text = text.replace(discovery.group(0), f"    static_configs:\n      - targets: [{targets}]\n")
assert "/etc/prometheus/alerts.yml" in text
text = text.replace("/etc/prometheus/alerts.yml", rules)
for key, env in (("scrape_interval", "STACK_SCRAPE_INTERVAL"), ("evaluation_interval", "STACK_EVALUATION_INTERVAL")):
    if os.environ.get(env):
        text = re.sub(rf"(\n  {key}: )\S+", rf"\g<1>{os.environ[env]}", text, count=1)
open(dst, "w").write(text)
PY
    promtool check config "$dir/prometheus.yml" > "$dir/promtool.log" 2>&1 \
      || { cat "$dir/promtool.log" >&2; stop_all; exit 1; }
    pport=${STACK_PROMETHEUS_PORT:-9090}
    prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/prometheus-data" \
      --web.listen-address="127.0.0.1:$pport" > "$dir/prometheus.log" 2>&1 &
    echo $! > "$dir/prometheus.pid"
    wait_http "http://127.0.0.1:$pport/-/ready" Prometheus "$dir/prometheus.log" || { stop_all; exit 1; }
    for i in $(seq 1 "$n"); do
      port=${ports[$((i - 1))]}
      wait_http "http://127.0.0.1:$port/metrics" "member-$i" "$dir/member-$i.log" || { stop_all; exit 1; }
    done
    echo "broker      $broker"
    for i in $(seq 1 "$n"); do echo "member-$i    http://127.0.0.1:${ports[$((i - 1))]}/metrics  (pid $(cat "$dir/member-$i.pid"), log $dir/member-$i.log)"; done
    echo "prometheus  http://127.0.0.1:$pport"
    echo "stop with: scripts/stack.sh down $dir" ;;
  down)
    stop_all
    echo "stopped everything started in $dir" ;;
  *)
    echo "usage: $0 up|down [DIR]" >&2; exit 2 ;;
esac
