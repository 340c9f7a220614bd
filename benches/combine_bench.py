#!/usr/bin/env python3
"""Partial aggregates across the repartition hop: what they save, measured in one run.

Run it with scripts/bench-combine.sh (which builds the binary and installs the broker). One run:

1. starts a Tansu broker on a free loopback port and loads EVENTS null-keyed JSON clickstream
   events over KEYS keys into PARTITIONS partitions (`tidemark produce`, as fast as it can: the
   events span a few seconds of event time, so a 1 s tumbling window holds many records of each
   key);
2. runs one member through the hop over that backlog four times, each with its own application
   id (its own repartition topic and state), alternating: keyed by `user_id` with partials
   (`combine = true`, the default) and without (`combine = false`), then without a key
   (`key = []`, one group per window) with and without partials;
3. for each run reports records/s, the member's CPU per input record (both stages), the bytes
   the first stage wrote to the repartition topic per input record
   (`tidemark_hop_bytes_total`), the broker's CPU per input record, and the partials written and records folded into them
   (`tidemark_hop_partials_total`, `tidemark_hop_records_folded_total`): records per partial,
   and partials per transaction.

Nothing here is a pass/fail test: the figures go into docs/performance.md.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kafka_bench as kb  # noqa: E402

EVENTS = int(os.environ.get("BENCH_EVENTS", "300000"))
KEYS = int(os.environ.get("BENCH_KEYS", "100"))
PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "3"))


def config(broker, app, state, port, key, combine):
    return kb.config(broker, app, f"{app}-out", state, port, "bench-null", True, key=key,
                     aggregations='[[aggregations]]\nname = "spend"\nop = "sum"\nfield = "price"',
                     kafka=f"combine = {'true' if combine else 'false'}")


def run(workdir, broker, broker_pid, app, key, combine, label):
    port = kb.free_port()
    cfg = os.path.join(workdir, f"{app}.toml")
    with open(cfg, "w") as f:
        f.write(config(broker, app, os.path.join(workdir, app), port, key, combine))
    proc = subprocess.Popen([kb.BIN, "run", "--config", cfg], env=dict(os.environ, TIDEMARK_LOG="warn"))
    try:
        return kb.measure(proc, port, broker_pid, EVENTS, label, "bench-null", f"{app}-repartition")
    finally:
        kb.stop(proc)


def main():
    for path in (kb.BIN, kb.TANSU):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run scripts/bench-combine.sh")
    workdir = tempfile.mkdtemp(prefix="tidemark-bench-combine-")
    tansu, broker = kb.start_broker()
    try:
        print(f"broker {broker}; loading {EVENTS} null-keyed events, {KEYS} keys, {PARTITIONS} partitions", flush=True)
        subprocess.run([kb.BIN, "produce", "--bootstrap-servers", broker, "--topic", "bench-null",
                        "--partitions", str(PARTITIONS), "--events", str(EVENTS), "--rate", "0",
                        "--keys", str(KEYS), "--disorder-ms", "0", "--no-key"],
                       check=True, stdout=subprocess.DEVNULL)
        results = []
        for i, (key, combine, label) in enumerate((
                ('"user_id"', True, "keyed, partials"),
                ('"user_id"', False, "keyed, records"),
                ("[]", True, "no key, partials"),
                ("[]", False, "no key, records"))):
            results.append(run(workdir, broker, tansu.pid, f"bench-combine-{i}", key, combine, label))
    finally:
        tansu.terminate()
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(f"{'run':18} {'records':>9} {'records/s':>10} {'cpu us/rec':>10} {'broker us/rec':>13} {'hop B/rec':>10} "
          f"{'partials':>9} {'rec/partial':>11} {'txns':>6} {'partials/txn':>12} {'dead':>5}")
    summary = {}
    for r in results:
        m = r["metrics"]
        txns = m.get('tidemark_transactions_total{outcome="committed"}', 0)
        hop_bytes = m.get("tidemark_hop_bytes_total", 0)
        partials = m.get("tidemark_hop_partials_total", 0)
        folded = m.get("tidemark_hop_records_folded_total", 0)
        per_partial = folded / partials if partials else float("nan")
        broker_us = r["cpu_broker"] / r["rate"] * 1e6 if r["rate"] else float("nan")
        print(f"{r['label']:18} {r['records']:>9.0f} {r['rate']:>10.0f} {kb.cpu_us(r):>10.2f} {broker_us:>13.2f} "
              f"{hop_bytes / EVENTS:>10.2f} {partials:>9.0f} {per_partial:>11.1f} {txns:>6.0f} "
              f"{partials / max(txns, 1):>12.1f} {kb.dead_letters(m):>5.0f}")
        summary[r["label"]] = {
            "rps": round(r["rate"]),
            "cpu_us_per_record": round(kb.cpu_us(r), 2),
            "broker_cpu_us_per_record": round(broker_us, 2),
            "hop_bytes_per_record": round(hop_bytes / EVENTS, 2),
            "partials": round(partials),
            "records_per_partial": round(per_partial, 1) if partials else None,
            "transactions": round(txns),
        }
    for kind in ("keyed", "no key"):
        on, off = summary[f"{kind}, partials"], summary[f"{kind}, records"]
        print(f"{kind}: partials write {on['hop_bytes_per_record'] / off['hop_bytes_per_record'] * 100:.1f}% "
              f"of the bytes and use {on['cpu_us_per_record'] / off['cpu_us_per_record'] * 100:.0f}% of the "
              f"CPU per input record of records one by one")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
