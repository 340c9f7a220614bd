#!/usr/bin/env bash
# Runs every check CI runs: installs what the build needs, then formatting, lints and all tests.
# Everything is built with the release profile (one RocksDB C++ build serves tests, lints and
# benchmarks). Set CARGO_TARGET_DIR to keep builds between clean clones.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "== cargo fmt --check"
cargo fmt --check
echo "== cargo clippy (release, all targets, -D warnings)"
cargo clippy --release --all-targets -- -D warnings
echo "== cargo test (release)"
cargo test --release "$@"
