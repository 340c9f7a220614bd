#!/usr/bin/env python3
"""Side by side on a file: tidemark, Spark Structured Streaming and Flink, one job, one run.

Run it with scripts/bench-peers-files.sh (which builds tidemark). It:

1. makes a venv for the two JVM engines (PyPI, versions pinned below) under
   ~/.cache/tidemark/jvm-peers-venv on first use, and re-runs itself with that venv's Python;
2. writes one JSON-lines file of EVENTS clickstream events (KEYS users, event time advancing
   RATE events per second, 1% of the events up to 1.5 s out of order, so none is late), and one
   last event two minutes later that closes the last windows in Spark (left out of the checks);
3. runs the same job through each engine, each in its own process, one after the other: per
   `user_id`, tumbling 1-minute windows over the event time `ts` (epoch ms), a watermark 2 s
   behind the highest event time, count (`clicks`) and sum of `price` (`revenue`), one result
   per window when the watermark passes its end (the end of the file closes every window);
   tidemark with `tidemark simulate`, Spark with a file source and a file sink (`local[2]`,
   `availableNow`), Flink with its Table API in streaming mode (`parallelism 2`, the
   filesystem connector at both ends, a `TUMBLE` window); Spark and Flink once with their
   in-memory state and once with RocksDB state, as tidemark keeps it;
4. measures every engine the same way: wall time and CPU (user + system, summed over the
   process and its children, from /proc) of the job alone, from the moment the engine is up
   to the moment its output is complete, and of the whole process including its start; the
   peak RSS of the largest process;
5. checks the outputs: each engine's counts sum to EVENTS, no (key, window) twice, and every
   engine agrees with tidemark on every window's count and sum.

Prints a table and a JSON summary. Nothing here is a pass/fail test: the figures go into
docs/performance.md. Environment: BENCH_EVENTS (5,000,000), BENCH_KEYS (100,000), BENCH_RATE
(20,000), BENCH_ENGINES (all of: tidemark, spark, spark-rocksdb, flink, flink-rocksdb).
"""

import datetime
import glob
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TIDEMARK_BIN") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "tidemark")
EVENTS = int(os.environ.get("BENCH_EVENTS", "5000000"))
KEYS = int(os.environ.get("BENCH_KEYS", "100000"))
RATE = int(os.environ.get("BENCH_RATE", "20000"))  # events per second of event time
BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SENTINEL = "__end_of_input__"
ENGINES = os.environ.get("BENCH_ENGINES", "tidemark,spark,spark-rocksdb,flink,flink-rocksdb").split(",")

SPARK_VERSION = "4.3.0"
FLINK_VERSION = "2.3.0"
VENV = os.path.join(os.path.expanduser("~"), ".cache", "tidemark", "jvm-peers-venv")
VENV_PY = os.path.join(VENV, "bin", "python")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def install_venv():
    """Creates the venv of the JVM engines when missing."""
    stamp = os.path.join(VENV, f".spark-{SPARK_VERSION}-flink-{FLINK_VERSION}")
    if not os.path.exists(stamp):
        print(f"peers: installing pyspark=={SPARK_VERSION} apache-flink=={FLINK_VERSION} into {VENV}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([VENV_PY, "-m", "pip", "install", "-q", f"pyspark=={SPARK_VERSION}",
                        f"apache-flink=={FLINK_VERSION}"], check=True)
        open(stamp, "w").close()


def ensure_venv():
    """Re-runs this script inside the venv of the JVM engines, made on first use."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    install_venv()
    os.execv(VENV_PY, [VENV_PY] + sys.argv)


# --- measuring a process tree -------------------------------------------------------------------

def _stat(pid):
    """(ppid, utime + stime in seconds) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree(root):
    """The pids of `root` and all its descendants."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = _stat(int(name))
            if s:
                parents.setdefault(s[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def tree_cpu(root):
    """CPU seconds (user + system) spent so far by `root` and its living descendants."""
    return sum(s[1] for s in (_stat(p) for p in tree(root)) if s)


def tree_peak_rss_mb(root):
    """The largest peak RSS (VmHWM) among `root` and its descendants, in MB."""
    peak = 0
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) / 1024)
        except FileNotFoundError:
            pass
    return peak


def cpu_so_far():
    """CPU seconds of this process, its living descendants and its children that have exited."""
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    return tree_cpu(os.getpid()) + done.ru_utime + done.ru_stime


class Job:
    """Marks the job's start and end inside an engine's process: figures for the job alone."""

    def __init__(self):
        self.t0, self.c0 = time.time(), cpu_so_far()

    def start(self):
        self.t1, self.c1 = time.time(), cpu_so_far()

    def end(self):
        t2, c2 = time.time(), cpu_so_far()
        exited_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print("@result " + json.dumps({
            "job_s": t2 - self.t1, "job_cpu_s": c2 - self.c1,
            "total_s": t2 - self.t0, "total_cpu_s": c2 - self.c0,
            "rss_mb": max(tree_peak_rss_mb(os.getpid()), exited_peak),
        }), flush=True)


# --- the data -----------------------------------------------------------------------------------

def write_events(path):
    rng = random.Random(42)
    with open(path, "w") as f:
        for i in range(EVENTS):
            ts = BASE_TS + i * 1000 // RATE
            if rng.random() < 0.01:
                ts -= rng.randrange(1, 1500)
            user = f"u{rng.randrange(KEYS)}"
            price = rng.randrange(0, 10_000) / 100
            f.write(f'{{"user_id":"{user}","ts":{ts},"page":"/p{i % 50}","price":{price}}}\n')
        # Spark has no end of input for a streaming query: its watermark moves only with data, so
        # one last event two minutes later closes the real events' windows there too.
        end_ts = BASE_TS + EVENTS * 1000 // RATE + 120_000
        f.write(f'{{"user_id":"{SENTINEL}","ts":{end_ts},"page":"/","price":0}}\n')


# --- the engines --------------------------------------------------------------------------------

TIDEMARK_PIPELINE = """
name = "peers-files"
[input]
key = "user_id"
timestamp = "ts"
[window]
type = "tumbling"
size = "1m"
[watermark]
max_out_of_orderness = "2s"
[[aggregations]]
name = "clicks"
op = "count"
[[aggregations]]
name = "revenue"
op = "sum"
field = "price"
"""


def run_tidemark(events, out):
    """`tidemark simulate` over the file; the process is the job (it starts in milliseconds)."""
    workdir = os.path.dirname(out)
    cfg = os.path.join(workdir, "tidemark.toml")
    with open(cfg, "w") as f:
        f.write(TIDEMARK_PIPELINE)
    job = Job()
    job.start()
    subprocess.run([BIN, "simulate", "--config", cfg, "--input", events, "--output", out,
                    "--dead-letter", out + ".dead", "--state-dir", os.path.join(workdir, "tidemark-state")],
                   check=True, env=dict(os.environ, TIDEMARK_LOG="warn"))
    job.end()


def run_spark(events, out, rocksdb):
    from pyspark.sql import SparkSession, functions as F

    job = Job()
    builder = (SparkSession.builder.master("local[2]").appName("peers-files")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "2g"))
    if rocksdb:
        builder = builder.config("spark.sql.streaming.stateStore.providerClass",
                                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    job.start()
    src = spark.readStream.schema("user_id STRING, ts LONG, page STRING, price DOUBLE").json(os.path.dirname(events))
    agg = (src.withColumn("rt", F.timestamp_millis("ts"))
           .withWatermark("rt", "2 seconds")
           .groupBy(F.window("rt", "1 minute"), "user_id")
           .agg(F.count(F.lit(1)).alias("clicks"), F.sum("price").alias("revenue"))
           .select("user_id", F.unix_millis(F.col("window.start")).alias("window_start"), "clicks", "revenue"))
    query = (agg.writeStream.format("json").outputMode("append")
             .option("path", out).option("checkpointLocation", out + ".checkpoint")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    job.end()
    spark.stop()


def run_flink(events, out, rocksdb):
    from pyflink.table import EnvironmentSettings, TableEnvironment

    job = Job()
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", "2")
    conf.set("table.local-time-zone", "UTC")
    if rocksdb:
        conf.set("state.backend.type", "rocksdb")
    env.execute_sql(f"""
        CREATE TABLE events (user_id STRING, ts BIGINT, page STRING, price DOUBLE,
          rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '2' SECOND)
        WITH ('connector' = 'filesystem', 'path' = 'file://{events}', 'format' = 'json')""")
    env.execute_sql(f"""
        CREATE TABLE panes (user_id STRING, window_start BIGINT, clicks BIGINT, revenue DOUBLE)
        WITH ('connector' = 'filesystem', 'path' = 'file://{out}', 'format' = 'json')""")
    job.start()
    env.execute_sql("""
        INSERT INTO panes
        SELECT user_id, UNIX_TIMESTAMP(DATE_FORMAT(window_start, 'yyyy-MM-dd HH:mm:ss')) * 1000,
               COUNT(*), SUM(price)
        FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '1' MINUTE))
        GROUP BY window_start, window_end, user_id""").wait()
    job.end()


# --- the driver ---------------------------------------------------------------------------------

def read_windows(paths, key="key"):
    """{(user, window start ms): (count, sum)} from JSON lines, and how many windows came twice."""
    windows, twice = {}, 0
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                v = json.loads(line)
                if v[key] == SENTINEL:
                    continue
                k = (v[key], int(v["window_start"]))
                twice += k in windows
                windows[k] = (int(v["clicks"]), round(float(v["revenue"]), 6))
    return windows, twice


def outputs(engine, out):
    if engine == "tidemark":
        return read_windows([out])
    return read_windows([p for p in glob.glob(os.path.join(out, "**", "*"), recursive=True)
                         if os.path.isfile(p) and not any(part.startswith((".", "_"))
                                                      for part in os.path.relpath(p, out).split(os.sep))],
                        key="user_id")


def main():
    if len(sys.argv) == 4:  # one engine, in its own process
        engine, events, out = sys.argv[1:]
        if engine == "tidemark":
            run_tidemark(events, out)
        elif engine.startswith("spark"):
            run_spark(events, out, engine.endswith("rocksdb"))
        else:
            run_flink(events, out, engine.endswith("rocksdb"))
        return
    ensure_venv()
    if not os.path.exists(BIN):
        sys.exit(f"{BIN} is missing: run scripts/bench-peers-files.sh")
    workdir = tempfile.mkdtemp(prefix="tidemark-peers-files-")
    try:
        events = os.path.join(workdir, "input", "events.jsonl")
        os.makedirs(os.path.dirname(events))
        print(f"writing {EVENTS} events, {KEYS} keys", flush=True)
        write_events(events)
        results, windows = {}, {}
        for engine in ENGINES:
            out = os.path.join(workdir, f"out-{engine}")
            print(f"running {engine}", flush=True)
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), engine, events, out],
                                  capture_output=True, text=True)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("@result ")]
            if proc.returncode != 0 or not lines:
                sys.exit(f"{engine} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            results[engine] = json.loads(lines[-1][len("@result "):])
            windows[engine] = outputs(engine, out)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    names = {"tidemark": "tidemark simulate", "spark": f"Spark {SPARK_VERSION} (memory state)",
             "spark-rocksdb": f"Spark {SPARK_VERSION} (RocksDB state)",
             "flink": f"Flink {FLINK_VERSION} (heap state)", "flink-rocksdb": f"Flink {FLINK_VERSION} (RocksDB state)"}
    print()
    print(f"{'engine':32} {'job s':>7} {'events/s':>10} {'cpu us/ev':>10} {'with start s':>13} "
          f"{'cpu us/ev':>10} {'peak RSS':>9} {'windows':>8} {'sum of counts':>14} {'twice':>6}")
    ref = windows.get("tidemark", (None,))[0]
    checks = {}
    for engine, r in results.items():
        w, twice = windows[engine]
        counted = sum(c for c, _ in w.values())
        print(f"{names[engine]:32} {r['job_s']:>7.2f} {EVENTS / r['job_s']:>10.0f} "
              f"{r['job_cpu_s'] / EVENTS * 1e6:>10.2f} {r['total_s']:>13.2f} "
              f"{r['total_cpu_s'] / EVENTS * 1e6:>10.2f} {r['rss_mb']:>6.0f} MB {len(w):>8} {counted:>14} {twice:>6}")
        differ = len([k for k in set(ref) | set(w) if ref.get(k) != w.get(k)]) if ref is not None else None
        checks[engine] = {"sum_of_counts_ok": counted == EVENTS, "no_window_twice": twice == 0,
                          "windows_that_differ_from_tidemark": differ}
    if "tidemark" in results:
        base = results["tidemark"]["job_cpu_s"]
        print("\nCPU per event of the job against tidemark: " + ", ".join(
            f"{names[e]} {r['job_cpu_s'] / base:.1f}x" for e, r in results.items() if e != "tidemark"))
    print(f"checks: {json.dumps(checks)}")
    print(f"measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    ok = all(c["sum_of_counts_ok"] and c["no_window_twice"] and not c["windows_that_differ_from_tidemark"]
             for c in checks.values())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
