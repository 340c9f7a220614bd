#!/usr/bin/env python3
"""Cost per partition: one member, the same records spread over 6, 64 and 256 partitions.

Run it with scripts/bench-partitions.sh (which builds the binary and installs the broker). For
each partition count it starts a Tansu broker of its own (the test broker slows down as it holds
more partitions and records, which would bias the later runs), loads PARTITION_EVENTS (200,000)
JSON clickstream events keyed by the grouping field, runs one `tidemark run` member (tumbling 1 s
count, `repartition = false`, 100 ms commits) until every record is committed, and prints the
wall time, the member's CPU per record, its peak RSS and the committed transactions. The target
of the benchmark: with 256 partitions, CPU per record and peak RSS within 1.5x of 6 partitions.

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

EVENTS = int(os.environ.get("BENCH_PARTITION_EVENTS", "200000"))
COUNTS = [int(c) for c in os.environ.get("BENCH_PARTITION_COUNTS", "6,64,256").split(",")]


def run(partitions):
    workdir = tempfile.mkdtemp(prefix="tidemark-bench-parts-")
    tansu, broker = kb.start_broker()
    proc = None
    try:
        subprocess.run([kb.BIN, "produce", "--bootstrap-servers", broker, "--topic", "bench-parts",
                        "--partitions", str(partitions), "--events", str(EVENTS), "--rate", "0",
                        "--keys", str(kb.KEYS), "--disorder-ms", "0"],
                       check=True, stdout=subprocess.DEVNULL)
        proc, port = kb.start_member(workdir, broker, tansu.pid, f"parts-{partitions}", False,
                                     "bench-parts", False)
        r = kb.measure(proc, port, tansu.pid, EVENTS, f"{partitions} partitions", "bench-parts")
        kb.stop(proc)
        return r
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        tansu.terminate()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    for path in (kb.BIN, kb.TANSU):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run scripts/bench-partitions.sh")
    results = [run(p) for p in COUNTS]
    print()
    print(f"{'run':16} {'records':>8} {'seconds':>8} {'records/s':>10} {'cpu us/rec':>10} {'cpu broker':>11} {'peak RSS':>9} {'txns':>6} {'commit ms':>10}")
    for r in results:
        m = r["metrics"]
        txns = m.get('tidemark_transactions_total{outcome="committed"}', 0)
        commit_ms = 1000 * m.get("tidemark_commit_duration_seconds_sum", 0) / max(m.get("tidemark_commit_duration_seconds_count", 1), 1)
        print(f"{r['label']:16} {r['records']:>8.0f} {r['seconds']:>8.2f} {r['rate']:>10.0f} {kb.cpu_us(r):>10.2f} "
              f"{r['cpu_broker'] * 100:>10.0f}% {r['rss_mb']:>6.0f} MB {txns:>6.0f} {commit_ms:>10.1f}")
    base = results[0]
    summary = {}
    for r in results[1:]:
        cpu = kb.cpu_us(r) / max(kb.cpu_us(base), 1e-9)
        rss = r["rss_mb"] / max(base["rss_mb"], 1e-9)
        print(f"{r['label']} against {base['label']}: CPU per record {cpu:.2f}x, peak RSS {rss:.2f}x (target <= 1.5x)")
        summary[r["label"]] = {"cpu_ratio": round(cpu, 2), "rss_ratio": round(rss, 2)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
