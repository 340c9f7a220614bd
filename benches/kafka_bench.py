#!/usr/bin/env python3
"""Kafka benchmark: tidemark against a transactional passthrough built from the same code.

Run it with scripts/bench-kafka.sh (which builds the binary and installs the broker). One run:

1. starts a dedicated Tansu broker on a free loopback port;
2. loads EVENTS JSON clickstream events (KEYS keys, PARTITIONS partitions) with `tidemark produce`
   twice: keyed by the grouping field into `bench-in`, and without keys (as round-robin producers
   write them) into `bench-null`;
3. (b) `tidemark run --passthrough` over `bench-in`: consume -> produce in transactions every
   100 ms, no state;
4. (a) `tidemark run` over `bench-in` with `repartition = false` (the input is keyed by the
   grouping field): tumbling 1 s count, exactly-once, commit interval 100 ms;
5. (c) `tidemark run` over `bench-null` through the repartition hop: the first stage folds the
   decoded records of one key and window within a cycle into a partial aggregate and writes the
   partials to the repartition topic, the second windows them, both in the member's one
   transaction per cycle;
   each over the same number of loaded records, throughput measured from the first committed
   record to the last the last stage committed (scraping /metrics every 100 ms), CPU of the
   member and of the broker over that interval from /proc (for (c): both stages, per input
   record), and the member's peak RSS (VmHWM);
6. live latency: while members (a) and then (c) keep running, produces LIVE_EVENTS at LIVE_RATE
   events/s and reads the pane latency histogram (append of the input record that fired a pane ->
   commit of the pane's transaction) over that phase only;
7. (d) the hop again, on a broker of its own, over WIDE_EVENTS (200,000) null-keyed events on
   WIDE_PARTITIONS (64) input partitions and as many repartition partitions: what the watermark
   records cost (every input partition reports to every repartition partition when its watermark
   moves; one record per repartition partition and cycle carries the reports).

Prints a table. Nothing here is a pass/fail test: the figures go into docs/performance.md. Its
`dead` column counts dead letters over the whole run of a member: the input is well-formed and in
order, so any there is a fault (a watermark that runs ahead of a backlog shows up there).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TIDEMARK_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "tidemark")
TANSU = os.path.join(ROOT, ".venv", "bin", "tansu")
EVENTS = int(os.environ.get("BENCH_EVENTS", "1000000"))
KEYS = int(os.environ.get("BENCH_KEYS", "10000"))
PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "3"))
LIVE_EVENTS = int(os.environ.get("BENCH_LIVE_EVENTS", "200000"))
LIVE_RATE = int(os.environ.get("BENCH_LIVE_RATE", "20000"))
WIDE_PARTITIONS = int(os.environ.get("BENCH_WIDE_PARTITIONS", "64"))
WIDE_EVENTS = int(os.environ.get("BENCH_WIDE_EVENTS", "200000"))
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Extra `[kafka.properties]` lines for experiments, e.g. '"fetch.wait.max.ms" = "20"'.
EXTRA_PROPS = os.environ.get("BENCH_PROPERTIES", "")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_broker():
    """Starts a Tansu broker (memory storage) on a free loopback port; returns the process and its
    address once the port accepts connections."""
    port = free_port()
    broker = f"127.0.0.1:{port}"
    url = f"tcp://{broker}"
    tansu = subprocess.Popen(
        [TANSU, "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return tansu, broker


def stat_seconds(path):
    """utime + stime from a /proc stat file, in seconds."""
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3); utime, stime are fields 14, 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# The member's thread that serves /metrics (its name as the kernel keeps it, 15 characters).
METRICS_THREAD = "tidemark-metric"


def cpu_seconds(pid):
    """utime + stime of a process, in seconds, without the thread that serves /metrics: the
    benchmark scrapes every 100 ms (150 times as often as Prometheus's default 15 s), and the cost
    of a scrape grows with the series, so with many partitions the measuring would count as the
    member's work (a profile of the 256-partition run: a fifth of the member's CPU)."""
    total = stat_seconds(f"/proc/{pid}/stat")
    return total - scrape_seconds(pid)


def scrape_seconds(pid):
    """CPU seconds the member's /metrics thread spent (serving the benchmark's scrapes)."""
    spent = 0.0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0.0
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                if f.read().strip() == METRICS_THREAD:
                    spent += stat_seconds(f"/proc/{pid}/task/{t}/stat")
        except FileNotFoundError:
            continue
    return spent


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def scrape(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def total(metrics, name, topic=None):
    """The sum of a metric over its series; with `topic`, only the series of that topic."""
    want = f'topic="{topic}"' if topic else ""
    return sum(v for k, v in metrics.items()
               if (k == name or k.startswith(name + "{")) and want in k)


def buckets(metrics, name):
    """Cumulative histogram buckets [(le, count)], sorted by le."""
    out = []
    for k, v in metrics.items():
        m = re.fullmatch(re.escape(name) + r'_bucket\{le="([^"]+)"\}', k)
        if m:
            out.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), v))
    return sorted(out)


def quantile(q, cumulative):
    """Prometheus' histogram_quantile: linear interpolation inside the bucket."""
    n = cumulative[-1][1]
    if n == 0:
        return float("nan")
    rank = q * n
    prev_le, prev_c = 0.0, 0.0
    for le, c in cumulative:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-9)
        prev_le, prev_c = le, c
    return cumulative[-1][0]


def config(broker, app, output, state, port, topic, repartition, key='"user_id"', aggregations="", kafka=""):
    """The benchmarks' pipeline: a tumbling 1 s count per `key` (TOML), with `aggregations` and
    `kafka` lines added to their sections."""
    return f"""
name = "{app}"
[input]
key = {key}
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[watermark]
idle_timeout = "1s"
[[aggregations]]
name = "clicks"
op = "count"
{aggregations}
[kafka]
bootstrap_servers = "{broker}"
application_id = "{app}"
input_topic = "{topic}"
repartition = {"true" if repartition else "false"}
{kafka}
output_topic = "{output}"
dead_letter_topic = "{output}-dead"
state_dir = "{state}"
commit_interval = "100ms"
max_batch_records = 1000000
[kafka.properties]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "30000"
{EXTRA_PROPS}
[metrics]
address = "127.0.0.1:{port}"
"""


def dead_letters(metrics):
    """Dead letters of any reason: in-order input with no malformed records must have none."""
    return sum(v for k, v in metrics.items() if k.startswith("tidemark_dead_letters_total"))


def start_member(workdir, broker, broker_pid, app, passthrough, topic="bench-in", repartition=False):
    port = free_port()
    cfg = os.path.join(workdir, f"{app}.toml")
    with open(cfg, "w") as f:
        f.write(config(broker, app, f"{app}-out", os.path.join(workdir, app), port, topic, repartition))
    args = [BIN, "run", "--config", cfg] + (["--passthrough"] if passthrough else [])
    env = dict(os.environ, TIDEMARK_LOG="warn")
    proc = subprocess.Popen(args, env=env)
    return proc, port


def measure(proc, port, broker_pid, target, label, topic="bench-in", last_stage=None):
    """Polls /metrics until `target` input records of `topic` are committed (and, with
    `last_stage`, as many records of that topic: the repartition topic the second stage reads);
    returns the figures."""
    samples = []  # (time, records_in, member cpu, broker cpu)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{label}: tidemark run exited with {proc.returncode}")
        m = scrape(port)
        if m is not None:
            n = total(m, "tidemark_records_in_total", topic)
            samples.append((time.time(), n, cpu_seconds(proc.pid), cpu_seconds(broker_pid)))
            # The second stage also reads the hop's watermark records: count events only.
            events = (total(m, "tidemark_records_in_total", last_stage)
                      - m.get("tidemark_hop_watermark_records_total", 0)) if last_stage else 0
            done = last_stage is None or events >= target
            if n >= target and done:
                break
        time.sleep(0.1)
    else:
        sys.exit(f"{label}: did not commit {target} records within 600 s")
    first = next(s for s in samples if s[1] > 0)
    # The interval starts at the last sample before any record was committed, when there is one.
    before = [s for s in samples if s[1] == 0]
    start = before[-1] if before else first
    end = samples[-1]
    secs = end[0] - start[0]
    return {
        "label": label,
        "records": end[1] - start[1],
        "seconds": secs,
        "rate": (end[1] - start[1]) / secs,
        "cpu_member": (end[2] - start[2]) / secs,
        "cpu_broker": (end[3] - start[3]) / secs,
        "rss_mb": peak_rss_mb(proc.pid),
        "metrics": scrape(port),
    }


def cpu_us(r):
    """CPU microseconds the member spent per input record (user + system time over the measured
    interval, divided by the records it committed in that interval)."""
    return r["cpu_member"] / r["rate"] * 1e6 if r["rate"] else float("nan")


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def run_wide():
    """(d) The hop with 64 input and 64 repartition partitions, on a broker of its own (the test
    broker slows down as it holds more partitions and records: after (a)-(c), the same run was
    many times slower). Every input partition is a watermark source of every repartition
    partition; each cycle writes one watermark record per repartition partition holding the
    reports that changed."""
    workdir = tempfile.mkdtemp(prefix="tidemark-bench-wide-")
    tansu, broker = start_broker()
    proc = None
    try:
        subprocess.run([BIN, "produce", "--bootstrap-servers", broker, "--topic", "bench-wide",
                        "--partitions", str(WIDE_PARTITIONS), "--events", str(WIDE_EVENTS), "--rate", "0",
                        "--keys", str(KEYS), "--disorder-ms", "0", "--no-key"],
                       check=True, stdout=subprocess.DEVNULL)
        proc, mport = start_member(workdir, broker, tansu.pid, "bench-wide", False, "bench-wide", True)
        result = measure(proc, mport, tansu.pid, WIDE_EVENTS,
                         f"(d) hop, {WIDE_PARTITIONS} x {WIDE_PARTITIONS} partitions",
                         "bench-wide", "bench-wide-repartition")
        stop(proc)
        return result
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        tansu.terminate()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    for path in (BIN, TANSU):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run scripts/bench-kafka.sh")
    workdir = tempfile.mkdtemp(prefix="tidemark-bench-")
    tansu, broker = start_broker()
    members = []
    try:
        print(f"broker {broker}; loading {EVENTS} events, {KEYS} keys, {PARTITIONS} partitions, keyed and not", flush=True)
        t0 = time.time()
        for topic, extra in (("bench-in", []), ("bench-null", ["--no-key"])):
            subprocess.run([BIN, "produce", "--bootstrap-servers", broker, "--topic", topic,
                            "--partitions", str(PARTITIONS), "--events", str(EVENTS), "--rate", "0",
                            "--keys", str(KEYS), "--disorder-ms", "0"] + extra,
                           check=True, stdout=subprocess.DEVNULL)
        print(f"loaded in {time.time() - t0:.1f} s", flush=True)

        results = []
        proc, mport = start_member(workdir, broker, tansu.pid, "bench-passthrough", True)
        members.append(proc)
        results.append(measure(proc, mport, tansu.pid, EVENTS, "(b) transactional passthrough"))
        stop(proc)

        live = {}
        for key, app, label, topic, hop in (
                ("a", "bench-windows", "(a) tumbling 1 s count, keyed", "bench-in", False),
                ("c", "bench-hop", "(c) the same through the hop", "bench-null", True)):
            proc, mport = start_member(workdir, broker, tansu.pid, app, False, topic, hop)
            members.append(proc)
            last = f"{app}-repartition" if hop else None
            results.append(measure(proc, mport, tansu.pid, EVENTS, label, topic, last))
            # Live phase: the same member, records arriving at LIVE_RATE while it keeps up.
            time.sleep(2)
            before = scrape(mport)
            subprocess.run([BIN, "produce", "--bootstrap-servers", broker, "--topic", topic,
                            "--events", str(LIVE_EVENTS), "--rate", str(LIVE_RATE),
                            "--keys", str(KEYS), "--disorder-ms", "0"] + (["--no-key"] if hop else []),
                           check=True, stdout=subprocess.DEVNULL)
            deadline = time.time() + 60
            while total(scrape(mport), "tidemark_records_in_total", topic) < EVENTS + LIVE_EVENTS:
                if time.time() > deadline:
                    sys.exit(f"live phase {key}: member did not catch up within 60 s")
                time.sleep(0.1)
            time.sleep(2.5)  # the idle watermark fires the last windows
            live[key] = (before, scrape(mport))
            stop(proc)

    finally:
        for p in members:
            if p.poll() is None:
                p.kill()
        tansu.terminate()
        shutil.rmtree(workdir, ignore_errors=True)
    results.append(run_wide())

    name = "tidemark_pane_commit_latency_seconds"
    latency = {}
    for key, (before, after) in live.items():
        b0 = dict(buckets(before, name))
        latency[key] = [(le, c - b0.get(le, 0.0)) for le, c in buckets(after, name)]

    print()
    print(f"{'run':34} {'records':>9} {'seconds':>8} {'records/s':>10} {'cpu member':>11} {'cpu us/rec':>10} {'cpu broker':>11} {'peak RSS':>9} {'txns':>6} {'commit ms':>10} {'dead':>5}")
    for r in results:
        m = r["metrics"]
        txns = m.get('tidemark_transactions_total{outcome="committed"}', 0)
        commit_ms = 1000 * m.get("tidemark_commit_duration_seconds_sum", 0) / max(m.get("tidemark_commit_duration_seconds_count", 1), 1)
        print(f"{r['label']:34} {r['records']:>9.0f} {r['seconds']:>8.2f} {r['rate']:>10.0f} "
              f"{r['cpu_member'] * 100:>10.0f}% {cpu_us(r):>10.2f} {r['cpu_broker'] * 100:>10.0f}% {r['rss_mb']:>6.0f} MB {txns:>6.0f} {commit_ms:>10.1f} "
              f"{dead_letters(m):>5.0f}")
    b, a, c, d = results
    print(f"\n(a)/(b) throughput: {a['rate'] / b['rate'] * 100:.0f}% (target >= 60%)")
    print(f"(c)/(b) throughput: {c['rate'] / b['rate'] * 100:.0f}%; (c) CPU per input record, both stages: "
          f"{cpu_us(c):.2f} us (target <= 3.0)")
    dm = d["metrics"]
    d_txns = dm.get('tidemark_transactions_total{outcome="committed"}', 0)
    d_marks = dm.get("tidemark_hop_watermark_records_total", 0)
    print(f"(d)/(c) throughput: {d['rate'] / c['rate'] * 100:.0f}%; (d) CPU per input record: {cpu_us(d):.2f} us; "
          f"{d_marks:.0f} watermark records read by the second stage in {d_txns:.0f} transactions "
          f"({d_marks / max(d_txns, 1):.0f} per transaction, {d_marks / max(d['records'], 1) * 100:.1f}% of the events)")
    targets = {"a": 350, "c": 350}
    for key, lat in latency.items():
        panes = lat[-1][1]
        within = dict(lat).get(0.35, float("nan"))
        print(f"live phase ({key}): {LIVE_EVENTS} events at {LIVE_RATE}/s, {panes:.0f} panes committed; "
              f"pane latency (append of the firing input record -> commit): p50 {quantile(0.5, lat) * 1000:.0f} ms, "
              f"p99 {quantile(0.99, lat) * 1000:.0f} ms (target <= {targets[key]} ms); "
              f"{within / panes * 100 if panes else float('nan'):.1f}% within 350 ms")
    summary = {
        "passthrough_rps": round(b["rate"]),
        "tidemark_rps": round(a["rate"]),
        "hop_rps": round(c["rate"]),
        "ratio": round(a["rate"] / b["rate"], 3),
        "hop_ratio": round(c["rate"] / b["rate"], 3),
        "p99_ms": round(quantile(0.99, latency["a"]) * 1000),
        "hop_p99_ms": round(quantile(0.99, latency["c"]) * 1000),
        "passthrough_cpu_us_per_record": round(cpu_us(b), 2),
        "tidemark_cpu_us_per_record": round(cpu_us(a), 2),
        "hop_cpu_us_per_record": round(cpu_us(c), 2),
        "wide_rps": round(d["rate"]),
        "wide_cpu_us_per_record": round(cpu_us(d), 2),
        "wide_watermark_records": round(d_marks),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
