#!/usr/bin/env python3
"""Side by side on Kafka: tidemark, Quix Streams and Flink on the same workload, one broker, one run.

Run it with scripts/bench-peers.sh (which builds tidemark and installs the broker). It:

1. makes a venv for Quix Streams (PyPI, version pinned below) under ~/.cache/tidemark/peers-venv
   on first use, and re-runs itself with that venv's Python (its confluent-kafka client is used
   for the sentinels and the group offsets); makes the JVM engines' venv of the benchmark on
   files (benches/peers_files.py) and unpacks Flink's Kafka connector jars from PyPI;
2. starts a dedicated Tansu broker on a free loopback port and loads EVENTS JSON clickstream
   events (KEYS keys, PARTITIONS partitions) with `tidemark produce`, then one sentinel event per
   partition 5 s of event time after the last one, so that every window of the real events
   closes in every system;
3. runs the same job through each system, one after the other, over the same records: per
   `user_id`, tumbling 1 s windows over the event time `ts`, count (`clicks`) and sum of `price`
   (`revenue`), emitted once when the window closes, exactly-once (Kafka transactions) with
   100 ms commits (Flink: a checkpoint every 100 ms, see benches/peers_flink.py);
4. measures every system with the same yardstick: the consumer group's committed input offsets,
   polled every 100 ms, from the last poll with nothing committed to the first with every record
   committed; CPU (user + system) of the process (for Flink, the process and its JVM) over that
   interval, from /proc; and the same from the process's start, which counts a JVM's start, the
   job's submission and the records read before the first checkpoint commits;
5. checks every output from the raw log (`tidemark audit --print`, which resolves transactions
   from the log's COMMIT/ABORT markers): the counts of the real events' windows sum to EVENTS, no
   (key, window) is emitted twice, and every system agrees with tidemark on every window's count
   and sum.

Prints a table and a JSON summary. Nothing here is a pass/fail test: the figures go into
docs/performance.md. Environment: BENCH_EVENTS (1,000,000), BENCH_KEYS (10,000),
BENCH_PARTITIONS (3).
"""

import datetime
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

# The broker, the binary, the workload's size and the process figures as in the Kafka benchmark.
from kafka_bench import (BIN, EVENTS, KEYS, PARTITIONS, ROOT, TANSU, cpu_seconds, peak_rss_mb,
                         start_broker)
# The venv of the JVM engines and the measuring of a process tree, as in the benchmark on files.
from peers_files import FLINK_VERSION, VENV_PY as JVM_PY, install_venv, tree_cpu, tree_peak_rss_mb

QUIX_VERSION = "3.28.1"
VENV = os.path.join(os.path.expanduser("~"), ".cache", "tidemark", "peers-venv")
VENV_PY = os.path.join(VENV, "bin", "python")
SENTINEL = "__end_of_input__"
# apache-flink's wheels carry no Kafka connector; this wheel carries its jars (connector 4.0.1-2.0,
# kafka-clients 3.9.1). Only those two files are taken from it.
FLINK_KAFKA_WHEEL = "shigawire-apache-flink-libraries==2.0.0.post1"
FLINK_KAFKA_JARS = ("flink-connector-kafka.jar", "kafka-clients.jar")
JARS_DIR = os.path.join(os.path.expanduser("~"), ".cache", "tidemark", "flink-kafka-jars")


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








def flink_kafka_jars():
    """Unpacks Flink's Kafka connector jars into JARS_DIR on first use; returns the directory."""
    if all(os.path.exists(os.path.join(JARS_DIR, j)) for j in FLINK_KAFKA_JARS):
        return JARS_DIR
    print(f"peers: fetching Flink's Kafka connector jars from {FLINK_KAFKA_WHEEL}", flush=True)
    os.makedirs(JARS_DIR, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", FLINK_KAFKA_WHEEL,
                        "-d", tmp], check=True)
        [wheel] = glob.glob(os.path.join(tmp, "*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for jar in FLINK_KAFKA_JARS:
                with z.open(f"pyflink/lib/{jar}") as src, open(os.path.join(JARS_DIR, jar), "wb") as dst:
                    shutil.copyfileobj(src, dst)
    return JARS_DIR


def committed_total(consumer, topic):
    from confluent_kafka import TopicPartition

    parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=5)
    return sum(max(tp.offset, 0) for tp in parts)


def measure(proc, broker, group, target, label, started, cpu=cpu_seconds, rss=peak_rss_mb):
    """Polls the group's committed offsets until `target` records are committed. `started` is when
    the process started; `cpu` and `rss` read a process's CPU seconds and peak RSS."""
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
            samples.append((time.time(), n, cpu(proc.pid)))
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
        "rss_mb": rss(proc.pid),
        # From the process's start (a JVM's start, job submission and first checkpoint included).
        "whole_seconds": end[0] - started,
        "whole_cpu_us": end[2] / (end[1] - start[1]) * 1e6,
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


def run_system(results, procs, label, cmd, group, target, **kw):
    """Starts one system's process, measures it to the last committed record, and stops it."""
    started = time.time()
    proc = subprocess.Popen(cmd, start_new_session=True, **kw.pop("popen", {}))
    procs.append(proc)
    results.append(measure(proc, target=target, group=group, label=label, started=started, **kw))
    time.sleep(1)  # the last commit cycle's output
    stop_tree(proc)


def stop_tree(proc):
    """Stops a process and everything it started (a JVM under PyFlink's driver)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


def main():
    ensure_venv()
    for path in (BIN, TANSU):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run scripts/bench-peers.sh")
    install_venv()
    jars = flink_kafka_jars()
    workdir = tempfile.mkdtemp(prefix="tidemark-peers-")
    tansu, broker = start_broker()
    procs, results = [], []
    target = EVENTS + PARTITIONS
    systems = [("tidemark", "peers-tidemark-out"), ("Quix Streams", "peers-quix-out"), ("Flink", "peers-flink-out")]
    try:
        print(f"broker {broker}; loading {EVENTS} events, {KEYS} keys, {PARTITIONS} partitions", flush=True)
        load(broker)

        cfg = os.path.join(workdir, "tidemark.toml")
        with open(cfg, "w") as f:
            f.write(tidemark_config(broker, os.path.join(workdir, "tidemark-state")))
        run_system(results, procs, "tidemark run", [BIN, "run", "--config", cfg], "peers-tidemark", target,
                   broker=broker, popen={"env": dict(os.environ, TIDEMARK_LOG="warn")})
        run_system(results, procs, f"Quix Streams {QUIX_VERSION} (exactly-once)",
                   [sys.executable, os.path.join(ROOT, "benches", "peers_quix.py"), broker, "bench-in",
                    "peers-quix-out", "peers-quix", os.path.join(workdir, "quix-state")],
                   "peers-quix", target, broker=broker)
        run_system(results, procs, f"Flink {FLINK_VERSION} SQL (exactly-once)",
                   [JVM_PY, os.path.join(ROOT, "benches", "peers_flink.py"), broker, "bench-in",
                    "peers-flink-out", "peers-flink", jars],
                   "peers-flink", target, broker=broker, cpu=tree_cpu, rss=tree_peak_rss_mb,
                   popen={"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL})
        outputs = [committed_windows(broker, topic, name) for name, topic in systems]
    finally:
        for p in procs:
            if p.poll() is None:
                stop_tree(p)
        tansu.terminate()
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(f"{'system':34} {'records':>9} {'seconds':>8} {'records/s':>10} {'cpu':>6} {'cpu us/rec':>10} "
          f"{'from start s':>12} {'cpu us/rec':>10} {'peak RSS':>9} {'windows':>8} {'sum of counts':>14} {'twice':>6}")
    for r, (w, twice) in zip(results, outputs):
        counted = sum(c for c, _ in w.values())
        print(f"{r['label']:34} {r['records']:>9.0f} {r['seconds']:>8.2f} {r['rate']:>10.0f} "
              f"{r['cpu'] * 100:>5.0f}% {r['cpu_us']:>10.2f} {r['whole_seconds']:>12.2f} {r['whole_cpu_us']:>10.2f} "
              f"{r['rss_mb']:>6.0f} MB {len(w):>8} {counted:>14} {twice:>6}")
    tm = outputs[0][0]
    checks = {}
    for (name, _), (w, twice) in zip(systems, outputs):
        checks[name] = {
            "sum_of_counts_ok": sum(c for c, _ in w.values()) == EVENTS,
            "no_window_twice": twice == 0,
            "windows_that_differ_from_tidemark": len([k for k in set(tm) | set(w) if tm.get(k) != w.get(k)]),
        }
    print("\n" + "; ".join(
        f"{name}: throughput tidemark / {name} {results[0]['rate'] / r['rate']:.1f}x, "
        f"CPU per record {name} / tidemark {r['cpu_us'] / results[0]['cpu_us']:.1f}x"
        for (name, _), r in list(zip(systems, results))[1:]))
    print(f"checks: {json.dumps(checks)}")
    ok = all(c["sum_of_counts_ok"] and c["no_window_twice"] and not c["windows_that_differ_from_tidemark"]
             for c in checks.values())
    print(json.dumps({
        "records_per_s": {name: round(r["rate"]) for (name, _), r in zip(systems, results)},
        "cpu_us_per_record": {name: round(r["cpu_us"], 2) for (name, _), r in zip(systems, results)},
        "outputs_agree": ok,
        "measured": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
    }))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
