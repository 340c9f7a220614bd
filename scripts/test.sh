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
echo "== cargo fmt --all --check"
cargo fmt --all --check
echo "== cargo clippy (release, every crate, all targets, -D warnings)"
cargo clippy --workspace --release --all-targets -- -D warnings
# Tests that apply to one broker only. Each asserts that it runs on a broker it applies to, so
# that a run elsewhere fails instead of passing having judged nothing; here each runs where it
# applies and is skipped, by name, elsewhere: the broker-restart tests and the move to the eager
# protocol need noida-db (Tansu's storage here is memory, and its groups keep their protocol);
# the blind watchdog needs Tansu (noida-db's group descriptions carry assignments); the secured
# tests start their own Tansu behind TLS and SASL fronts whatever broker is picked, so they run
# once.
tansu_only=(
  membership::a_member_holding_partitions_rejoins_when_another_sits_on_a_partition_for_twice_the_bound
  secured::
  chaos_hop::over_sasl_ssl
)
noida_only=(
  claims::under_the_cooperative_protocol_a_superseded_member_moves_the_group_to_the_eager_one
  broker_stopped::the_broker_keeps_what_it_acknowledged_across_a_sigterm
  broker_stopped::whether_the_broker_keeps_what_it_acknowledged_across_a_sigkill
  broker_stopped::a_pipeline_whose_broker_is_bounced_commits_everything_exactly_once
  broker_stopped::a_pipeline_whose_broker_is_killed_commits_no_pane_twice_and_goes_on
)
skipping() {
  local t
  for t in "$@"; do printf '%s\n' --skip "$t"; done
}
# The Kafka tests wait on brokers, sessions and members far more than they compute: on Tansu,
# two at a time kept the machine's two cores 21% busy for 13 minutes; four at a time (31%) took
# 8. The tests that kill members on noida-db took 181 s four at a time against 269 s two at a
# time.
parallel=(--test-threads="${TIDEMARK_TEST_THREADS:-4}")
echo "== cargo test (release; Kafka tests on Tansu)"
mapfile -t skip < <(skipping "${noida_only[@]}")
TIDEMARK_TEST_BROKER=tansu cargo test --workspace --release "$@" -- "${parallel[@]}" "${skip[@]}"
# The Kafka tests live in one binary (tests/kafka/, one module per group of tests); `only M...`
# gives the libtest arguments that keep the modules M and skip the others. On noida-db all run
# but two: wedged_group makes one broker's group fault on purpose (it names Tansu's in
# kafka::quirks), and injected_faults runs on librdkafka's mock cluster. noida-db never evicts a
# member that was killed (kafka::quirks::DEAD_MEMBERS_NOT_EVICTED), so the tests that kill
# members run there with membership from the log, as a user of that broker would.
modules=()
for f in tests/kafka/*.rs; do
  m=$(basename "$f" .rs)
  [ "$m" = main ] || modules+=("$m")
done
only() {
  local m
  for m in "${modules[@]}"; do
    case " $* " in
      *" $m "*) ;;
      *) printf '%s\n' --skip "$m::" ;;
    esac
  done
}
killing=(chaos_direct chaos_hop crash_recovery postgres_sink sql)
others=()
for m in "${modules[@]}"; do
  case " wedged_group injected_faults ${killing[*]} " in
    *" $m "*) ;;
    *) others+=("$m") ;;
  esac
done
echo "== cargo test (release; Kafka tests on noida-db)"
mapfile -t args < <(only "${others[@]}"; skipping "${tansu_only[@]}")
TIDEMARK_TEST_BROKER=noida cargo test --release --test kafka "$@" -- "${parallel[@]}" "${args[@]}"
echo "== cargo test (release; Kafka tests that kill members, on noida-db, membership from the log)"
mapfile -t args < <(only "${killing[@]}"; skipping "${tansu_only[@]}")
TIDEMARK_TEST_BROKER=noida TIDEMARK__KAFKA__MEMBERSHIP=log cargo test --release --test kafka "$@" -- "${parallel[@]}" "${args[@]}"
# The chaos tests once more with the default membership: the group stops assigning after the
# first kill there, and the members must move it to membership from the log by themselves.
echo "== cargo test (release; chaos on noida-db with the default membership, which moves itself)"
# The SQL runs' pipelines are the TOML runs': they run in the two phases above.
mapfile -t args < <(only chaos_direct chaos_hop; skipping chaos_hop::a_sql_pipeline_under_repeated_kill_9_commits_everything_exactly_once chaos_direct::a_sql_pipeline_on_keyed_input_under_repeated_kill_9_commits_everything_exactly_once "${tansu_only[@]}")
TIDEMARK_TEST_BROKER=noida cargo test --release --test kafka "$@" -- "${parallel[@]}" "${args[@]}"
