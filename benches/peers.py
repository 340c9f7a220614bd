#!/usr/bin/env python3
"""Side by side: tidemark and Quix Streams on the same workload, one broker, one run.

Run it with scripts/bench-peers.sh (which builds tidemark and installs the broker). It:

1. makes a venv for Quix Streams (PyPI, version pinned below) under ~/.cache/tidemark/peers-venv
   on first use, and re-runs itself with that venv's Python (its confluent-kafka client is used
   for the sentinels and the group offsets);
2. starts a dedicated Tansu broker on a free loopback port and loads EVENTS JSON clickstream
   events (KEYS keys, PARTITIONS partitions) with `tidemark produce`, then one sentinel event per
   partition 5 s of event time after the last one, so that every window of the real events
   closes in both systems;
3. runs the same job through each system, one after the other, over the same records: per
   `user_id`, tumbling 1 s windows over the event time `ts`, count (`clicks`) and sum of `price` (`revenue`), emitted once
   when the window closes, exactly-once (Kafka transactions) with 100 ms commits;
4. measures both with the same yardstick: the consumer group's committed input offsets, polled
   every 100 ms, from the last poll with nothing committed to the first with every record
   committed; CPU (user + system) of the process over that interval, from /proc;
5. checks both outputs from the raw log (`tidemark audit --print`, which resolves transactions
   from the log's COMMIT/ABORT markers): the counts of the real events' windows sum to EVENTS, no
   (key, window) is emitted twice, and the two systems agree on every window's count and sum.

Prints a table and a JSON summary. Nothing here is a pass/fail test: the figures go into the
README. Environment: BENCH_EVENTS (1,000,000), BENCH_KEYS (10,000), BENCH_PARTITIONS (3).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# The broker, the binary, the workload's size and the process figures as in the Kafka benchmark.
from kafka_bench import (BIN, EVENTS, KEYS, PARTITIONS, ROOT, TANSU, cpu_seconds, peak_rss_mb,
                         start_broker, stop)

QUIX_VERSION = "3.28.1"
VENV = os.path.join(os.path.expanduser("~"), ".cache", "tidemark", "peers-venv")
VENV_PY = os.path.join(VENV, "bin", "python")
SENTINEL = "__end_of_input__"


def ensure_venv():
    """Creates the Quix Streams venv when missing and re-runs this script inside it."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    stamp = os.path.join(VENV, f".quixstreams-{QUIX_VERSION}")
    if not os.path.exists(stamp):
        print(f"peers: installing quixstreams=={QUIX_VERSION} into {VENV}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([VENV_PY, "-m", "pip", "install", "-q", f"quixstreams=={QUIX_VERSION}"], check=True)
        open(stamp, "w").close()
    os.execv(VENV_PY, [VENV_PY] + sys.argv)








def committed_total(consumer, topic):
    from confluent_kafka import TopicPartition

    parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=5)
    return sum(max(tp.offset, 0) for tp in parts)


def measure(proc, broker, group, target, label):
    """Polls the group's committed offsets until `target` records are committed."""
    from confluent_kafka import Consumer

    watcher = Consumer({"bootstrap.servers": broker, "group.id": group, "enable.auto.commit": False})
    samples = []  # (time, committed, cpu of the process)
    deadline = time.time() + 900
    try:
        while True:
            if proc.poll() is not None:
                sys.exit(f"{label}: the process exited with {proc.returncode}")
            if time.time() > deadline:
                sys.exit(f"{label}: did not commit {target} records within 900 s")
            try:
                n = committed_total(watcher, "bench-in")
            except Exception:  # the group may not exist yet
                n = 0
            samples.append((time.time(), n, cpu_seconds(proc.pid)))
            if n >= target:
                break
            time.sleep(0.1)
    finally:
        watcher.close()
    before = [s for s in samples if s[1] == 0]
    start = before[-1] if before else samples[0]
    end = samples[-1]
    secs = end[0] - start[0]
    rate = (end[1] - start[1]) / secs
    cpu = (end[2] - start[2]) / secs
    return {
        "label": label,
        "records": end[1] - start[1],
        "seconds": secs,
        "rate": rate,
        "cpu": cpu,
        "cpu_us": cpu / rate * 1e6,
        "rss_mb": peak_rss_mb(proc.pid),
    }


def tidemark_config(broker, state):
    return f"""
name = "peers"
[input]
key = "user_id"
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[[aggregations]]
name = "clicks"
op = "count"
[[aggregations]]
name = "revenue"
op = "sum"
field = "price"
[kafka]
bootstrap_servers = "{broker}"
application_id = "peers-tidemark"
repartition = false
input_topic = "bench-in"
output_topic = "peers-tidemark-out"
dead_letter_topic = "peers-tidemark-dead"
state_dir = "{state}"
commit_interval = "100ms"
[kafka.properties]
"auto.offset.reset" = "earliest"
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "30000"
"""


def load(broker):
    """Loads the events, then one sentinel per partition after the last event time."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    # Created here with its retention settings: the test broker returns only the configs a topic
    # was created with, and Quix Streams derives its changelog topics' settings from them.
    admin = AdminClient({"bootstrap.servers": broker})
    topic = NewTopic("bench-in", PARTITIONS, 1, config={"retention.ms": "-1", "retention.bytes": "-1"})
    for f in admin.create_topics([topic]).values():
        f.result()
    subprocess.run([BIN, "produce", "--bootstrap-servers", broker, "--topic", "bench-in",
                    "--partitions", str(PARTITIONS), "--events", str(EVENTS), "--rate", "0",
                    "--keys", str(KEYS), "--disorder-ms", "0"], check=True, stdout=subprocess.DEVNULL)
    end_ts = int(time.time() * 1000) + 5_000
    producer = Producer({"bootstrap.servers": broker})
    for p in range(PARTITIONS):
        value = json.dumps({"user_id": SENTINEL, "ts": end_ts, "page": "/", "price": 0.0})
        producer.produce("bench-in", key=SENTINEL, value=value, partition=p)
    if producer.flush(30) != 0:
        sys.exit("the sentinels were not delivered")


def committed_windows(broker, topic, label):
    """The committed output records of `topic`, read from the raw log, as {(key, start): (count, sum)};
    exits when a (key, window) is committed twice."""
    out = subprocess.run([BIN, "audit", "--bootstrap-servers", broker, "--topic", topic, "--print"],
                         check=False, capture_output=True, text=True)
    windows, twice = {}, 0
    for line in out.stdout.splitlines():
        v = json.loads(line)
        if v["key"] == SENTINEL:
            continue
        k = (v["key"], int(v["window_start"]))
        if k in windows:
            twice += 1
        windows[k] = (int(v["clicks"]), round(float(v["revenue"]), 6))
    return windows, twice


def main():
    ensure_venv()
    for path in (BIN, TANSU):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run scripts/bench-peers.sh")
    workdir = tempfile.mkdtemp(prefix="tidemark-peers-")
    tansu, broker = start_broker()
    procs = []
    target = EVENTS + PARTITIONS
    try:
        print(f"broker {broker}; loading {EVENTS} events, {KEYS} keys, {PARTITIONS} partitions", flush=True)
        load(broker)
        results = []

        cfg = os.path.join(workdir, "tidemark.toml")
        with open(cfg, "w") as f:
            f.write(tidemark_config(broker, os.path.join(workdir, "tidemark-state")))
        proc = subprocess.Popen([BIN, "run", "--config", cfg], env=dict(os.environ, TIDEMARK_LOG="warn"))
        procs.append(proc)
        results.append(measure(proc, broker, "peers-tidemark", target, "tidemark run"))
        time.sleep(1)  # the last commit cycle's panes
        stop(proc)

        proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "benches", "peers_quix.py"), broker, "bench-in",
             "peers-quix-out", "peers-quix", os.path.join(workdir, "quix-state")])
        procs.append(proc)
        results.append(measure(proc, broker, "peers-quix", target,
                               f"Quix Streams {QUIX_VERSION} (exactly-once)"))
        time.sleep(1)
        stop(proc)

        tm, tm_twice = committed_windows(broker, "peers-tidemark-out", "tidemark")
        qx, qx_twice = committed_windows(broker, "peers-quix-out", "quix")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        tansu.terminate()
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(f"{'system':34} {'records':>9} {'seconds':>8} {'records/s':>10} {'cpu':>6} {'cpu us/rec':>10} {'peak RSS':>9} {'windows':>8} {'sum of counts':>14} {'twice':>6}")
    for r, (w, twice) in zip(results, [(tm, tm_twice), (qx, qx_twice)]):
        counted = sum(c for c, _ in w.values())
        print(f"{r['label']:34} {r['records']:>9.0f} {r['seconds']:>8.2f} {r['rate']:>10.0f} "
              f"{r['cpu'] * 100:>5.0f}% {r['cpu_us']:>10.2f} {r['rss_mb']:>6.0f} MB {len(w):>8} {counted:>14} {twice:>6}")
    differ = sorted(k for k in set(tm) | set(qx) if tm.get(k) != qx.get(k))
    checks = {
        "tidemark_sum_of_counts_ok": sum(c for c, _ in tm.values()) == EVENTS,
        "quix_sum_of_counts_ok": sum(c for c, _ in qx.values()) == EVENTS,
        "no_window_twice": tm_twice == 0 and qx_twice == 0,
        "windows_that_differ": len(differ),
    }
    print(f"\nthroughput tidemark / Quix Streams: {results[0]['rate'] / results[1]['rate']:.1f}x; "
          f"CPU per record Quix Streams / tidemark: {results[1]['cpu_us'] / results[0]['cpu_us']:.1f}x")
    print(f"checks: {json.dumps(checks)}")
    for k in differ[:5]:
        print(f"  differs: {k}: tidemark {tm.get(k)}, Quix Streams {qx.get(k)}")
    ok = checks["tidemark_sum_of_counts_ok"] and checks["quix_sum_of_counts_ok"] and checks["no_window_twice"] and not differ
    print(json.dumps({
        "tidemark_rps": round(results[0]["rate"]),
        "quix_rps": round(results[1]["rate"]),
        "tidemark_cpu_us_per_record": round(results[0]["cpu_us"], 2),
        "quix_cpu_us_per_record": round(results[1]["cpu_us"], 2),
        "outputs_agree": ok,
    }))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
