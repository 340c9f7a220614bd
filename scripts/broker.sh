#!/usr/bin/env bash
# Starts or stops a local Kafka-protocol broker (Tansu, memory storage) on loopback.
#   scripts/broker.sh start [PORT]   prints "127.0.0.1:PORT" once the port accepts connections
#   scripts/broker.sh stop           stops the broker started from this clone
# The PID and port are kept in .venv/broker.{pid,port}.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-start}
case "$cmd" in
  start)
    ./scripts/install-broker.sh
    port=${2:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
    if [ -f .venv/broker.pid ] && kill -0 "$(cat .venv/broker.pid)" 2>/dev/null; then
      echo "127.0.0.1:$(cat .venv/broker.port)"; exit 0
    fi
    nohup .venv/bin/tansu broker --listener-url "tcp://127.0.0.1:$port" \
      --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine memory://tansu/ \
      > .venv/broker.log 2>&1 &
    echo $! > .venv/broker.pid
    echo "$port" > .venv/broker.port
    for _ in $(seq 1 100); do
      if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null; then
        echo "127.0.0.1:$port"; exit 0
      fi
      sleep 0.1
    done
    echo "broker did not start; see .venv/broker.log" >&2; exit 1 ;;
  stop)
    if [ -f .venv/broker.pid ]; then kill "$(cat .venv/broker.pid)" 2>/dev/null || true; rm -f .venv/broker.pid .venv/broker.port; fi ;;
  *) echo "usage: $0 start [PORT] | stop" >&2; exit 2 ;;
esac
