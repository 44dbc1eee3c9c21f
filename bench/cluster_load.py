#!/usr/bin/env python3
"""Pipelined write load on a 3-node cluster: `ringlet up --nodes 3 --default-memgest rep:3`
vs a 3-master Redis 7 Cluster (no replicas), same machine, same run, alternating.

redis-benchmark --cluster puts one hash tag per node in its keys, so each node's keys share
one slot: the load that made Ringlet's repair collapse (docs/design/cluster-replication.md,
"Repair under load"). Prints requests/s per round and the medians.

  python3 bench/cluster_load.py [--ringlet target/release/ringlet] [--n 400000] [--r 200000]
                                [--size 1024] [--reps 3]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from benchlib import free_base, start_redis_cluster  # noqa: E402


def bench(port, a):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "--cluster", "-t", "set", "-n",
                          str(a.n), "-r", str(a.r), "-d", str(a.size), "-P", "32", "-c", "16",
                          "-q"], capture_output=True, text=True, check=True).stdout
    m = re.findall(r"SET: ([0-9.]+) requests per second, p50=([0-9.]+) msec", out)
    if not m:
        raise SystemExit("no result from redis-benchmark:\n" + out[-500:])
    rps, p50 = m[-1]
    return float(rps), float(p50)


def ringlet(a):
    base = free_base(4)
    up = subprocess.Popen([a.ringlet, "up", "--nodes", "3", "--port", str(base),
                           "--default-memgest", "rep:3", "--memory-mb", "2048"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in up.stdout:
            if line.startswith("ringlet cluster ready"):
                break
        return bench(base, a)
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=30)


def redis_cluster(a):
    base, procs = start_redis_cluster(3, 3)
    try:
        return bench(base, a)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", default="target/release/ringlet")
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--r", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    res = {"ringlet rep:3": [], "redis cluster (no replicas)": []}
    for i in range(a.reps):
        for name, f in (("ringlet rep:3", ringlet), ("redis cluster (no replicas)", redis_cluster)):
            rps, p50 = f(a)
            res[name].append((rps, p50))
            print(f"round {i + 1} {name}: {rps:.0f} SET/s, p50 {p50:.1f} ms", flush=True)
    for name, rs in res.items():
        print(f"median {name}: {statistics.median(r for r, _ in rs):.0f} SET/s, "
              f"p50 {statistics.median(p for _, p in rs):.1f} ms")
    g = statistics.median(r for r, _ in res["ringlet rep:3"])
    r = statistics.median(r for r, _ in res["redis cluster (no replicas)"])
    print(f"ratio ringlet/redis: {g / r:.2f}")


if __name__ == "__main__":
    main()
