#!/usr/bin/env bash
# Runs every check CI runs: installs what the build needs, then formatting, lints and all tests.
# Everything is built with the release profile (one RocksDB C++ build serves tests, lints and
# benchmarks). Set CARGO_TARGET_DIR to keep builds between clean clones.
#
# The Kafka tests run against two Kafka-protocol brokers (scripts/install-broker.sh installs
# both): every test on Tansu, then the ones that judge exactly-once, progress and membership on
# noida-db. Arguments are passed to every `cargo test` run (a filter, say).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "== cargo fmt --check"
cargo fmt --check
echo "== cargo clippy (release, all targets, -D warnings)"
cargo clippy --release --all-targets -- -D warnings
echo "== cargo test (release; Kafka tests on Tansu)"
TIDEMARK_TEST_BROKER=tansu cargo test --release "$@"
# Every Kafka test binary but two: kafka_phantom_leader makes one broker's group fault on purpose
# (it names Tansu's in kafka::quirks), and kafka_faults runs on librdkafka's mock cluster. noida-db
# never evicts a member that was killed (kafka::quirks::DEAD_MEMBERS_NOT_EVICTED), so the tests
# that kill members run there with membership from the log, as a user of that broker would.
noida_tests=()
killing=(--test kafka_chaos --test kafka_chaos_hop --test kafka_crash --test kafka_postgres)
for f in tests/kafka_*.rs; do
  t=$(basename "$f" .rs)
  case "$t" in
    kafka_phantom_leader | kafka_faults | kafka_chaos | kafka_chaos_hop | kafka_crash | kafka_postgres) ;;
    *) noida_tests+=(--test "$t") ;;
  esac
done
echo "== cargo test (release; Kafka tests on noida-db)"
TIDEMARK_TEST_BROKER=noida cargo test --release "${noida_tests[@]}" "$@"
echo "== cargo test (release; Kafka tests that kill members, on noida-db, membership from the log)"
TIDEMARK_TEST_BROKER=noida TIDEMARK__KAFKA__MEMBERSHIP=log cargo test --release "${killing[@]}" "$@"
# The chaos tests once more with the default membership: the group stops assigning after the
# first kill there, and the members must move it to membership from the log by themselves.
echo "== cargo test (release; chaos on noida-db with the default membership, which moves itself)"
TIDEMARK_TEST_BROKER=noida cargo test --release --test kafka_chaos --test kafka_chaos_hop "$@"
