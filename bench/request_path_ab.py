#!/usr/bin/env python3
"""Server CPU per operation, interleaved A/B: Redis 7, a Ringlet binary "before" and one
"after", each in turn in every round (redis, before, after, redis, before, after, ...), so a
noisy shared machine perturbs all three alike. Throughput on a loaded 2-core machine swings
by 5x between runs; the server's CPU-seconds per million operations (utime + stime from
/proc/<pid>/stat over the measured phase) is the figure that survives it, and its ratio to
Redis in the same round is what this prints (medians over rounds).

Each server is pinned to CPU 0 (Ringlet `--threads 1`), redis-benchmark to CPU 1. Per round
and server: fill with 1M SETs at pipeline 16 over a 1M-key space, then SET and GET at
pipeline 16 and 1 (`-c 50 -d 100 -r 1000000`). Beside each figure: how busy the server and
the client were (CPU-seconds per wall second): a client near 1.0 is what bounds the
throughput, not the server.

Usage: bench/request_path_ab.py --before OLD_BIN --after NEW_BIN [--rounds 3]
       [--before-args "--io epoll" --after-args "--io uring"]   # one binary, two loops
       [--tests set:16]                    # only these tests (test:pipeline, comma-separated)
       [--client ringlet-bench]            # `ringlet bench` (3 s per test) as the client
"""
import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import cpu_seconds, free_port, wait_port  # noqa: E402

TESTS = [("set", 16, 1_000_000), ("get", 16, 1_000_000), ("set", 1, 100_000),
         ("get", 1, 100_000)]


def start(kind, binary, port, extra=()):
    if kind == "redis":
        cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
    else:
        cmd = [binary, "server", "--port", str(port), "--memory-mb", "4096", "--threads", "1"]
        cmd += list(extra)
    p = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_port(port)
    return p


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def rb(port, test, pipeline, n):
    """ops/s, and the client's CPU-seconds and the wall seconds of the run (its busy share
    says whether redis-benchmark, one thread on one CPU, is what limits the throughput)."""
    c0, t0 = children_cpu(), time.monotonic()
    out = subprocess.run(
        ["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-c", "50", "-n", str(n),
         "-P", str(pipeline), "-d", "100", "-r", "1000000", "-t", test, "-q"],
        check=True, capture_output=True, text=True).stdout
    client, wall = children_cpu() - c0, time.monotonic() - t0
    m = re.search(test.upper() + r": ([0-9.]+) requests per second", out.replace("\r", "\n"))
    return (float(m.group(1)) if m else float("nan")), client, wall


def ringlet_bench(binary, port, test, pipeline, seconds=3):
    """`ringlet bench` as the client instead of redis-benchmark (same key space, key and value
    sizes, connections and pipeline): ops/s, the ops run, the client's CPU-seconds and wall."""
    c0, t0 = children_cpu(), time.monotonic()
    out = subprocess.run(
        ["taskset", "-c", "1", binary, "bench", "--port", str(port), "--keys", "1000000",
         "--key-size", "16", "--value-size", "100", "--connections", "50",
         "--pipeline", str(pipeline), "--ratio", "1:0" if test == "set" else "0:1",
         "--duration", str(seconds), "--json"],
        check=True, capture_output=True, text=True).stdout
    client, wall = children_cpu() - c0, time.monotonic() - t0
    j = json.loads(out.strip().splitlines()[-1])
    return j["ops_per_sec"], j["sets"] + j["gets"], client, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before-args", default="", help="extra flags for the before server")
    ap.add_argument("--after-args", default="", help="extra flags for the after server")
    ap.add_argument("--tests", default="",
                    help="comma-separated test:pipeline (e.g. set:16,get:16); default all four")
    ap.add_argument("--client", choices=["redis-benchmark", "ringlet-bench"],
                    default="redis-benchmark",
                    help="load generator of the measured tests (the fill is always "
                         "redis-benchmark); ringlet-bench is the --after binary's `bench`")
    args = ap.parse_args()
    tests = TESTS
    if args.tests:
        want = {(t.split(":")[0], int(t.split(":")[1])) for t in args.tests.split(",")}
        tests = [t for t in TESTS if (t[0], t[1]) in want]
        if not tests:
            ap.error(f"--tests {args.tests!r} names none of {[(t, p) for t, p, _ in TESTS]}")
    servers = [("redis", None), ("before", args.before), ("after", args.after)]
    extra = {"before": shlex.split(args.before_args), "after": shlex.split(args.after_args)}
    res = {}  # (server, test, pipeline) -> list of (ops/s, cpu s/Mop)
    for rnd in range(args.rounds):
        for name, binary in servers:
            port = free_port()
            p = start("redis" if name == "redis" else "ringlet", binary, port,
                      extra.get(name, ()))
            try:
                rb(port, "set", 16, 1_000_000)
                for test, pl, n in tests:
                    c0 = cpu_seconds(p.pid)
                    if args.client == "ringlet-bench":
                        ops, n, client, wall = ringlet_bench(args.after, port, test, pl)
                    else:
                        ops, client, wall = rb(port, test, pl, n)
                    server = cpu_seconds(p.pid) - c0
                    cpu = server / (n / 1e6)
                    res.setdefault((name, test, pl), []).append(
                        (ops, cpu, server / wall, client / wall))
                    print(f"round {rnd} {name} {test} P{pl}: {ops:,.0f} ops/s, "
                          f"{cpu:.2f} CPU-s/Mop, server busy {server / wall:.2f}, "
                          f"client busy {client / wall:.2f}, load {os.getloadavg()[0]:.1f}",
                          file=sys.stderr)
            finally:
                p.terminate()
                p.wait()
            time.sleep(0.5)
    # busy: CPU-seconds per wall second over the run (server on CPU 0, redis-benchmark on
    # CPU 1; the client's includes its start-up and connection set-up).
    print("| test | server | ops/s | ×Redis | CPU-s/Mop | ×Redis CPU | server busy | client busy |")
    print("|---|---|---|---|---|---|---|---|")
    for test, pl, _ in tests:
        base = res[("redis", test, pl)]
        b_ops = statistics.median(x[0] for x in base)
        b_cpu = statistics.median(x[1] for x in base)
        for name, _ in servers:
            v = res[(name, test, pl)]
            ops = statistics.median(x[0] for x in v)
            cpu = statistics.median(x[1] for x in v)
            sbusy = statistics.median(x[2] for x in v)
            cbusy = statistics.median(x[3] for x in v)
            print(f"| {test.upper()} P{pl} | {name} | {ops:,.0f} | {ops / b_ops:.2f} | "
                  f"{cpu:.2f} | {cpu / b_cpu:.2f} | {sbusy:.2f} | {cbusy:.2f} |")


if __name__ == "__main__":
    main()
