#!/usr/bin/env bash
# kill -9 -> the same partitions committing again, with and without static membership
# (benches/restart.rs: its own Tansu broker, one member, live input). Prints one line per mode.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tidemark/target}"
./scripts/install-deps.sh >/dev/null
exec cargo bench --bench restart "$@"
