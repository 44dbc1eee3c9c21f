#!/usr/bin/env python3
"""Pipelined write load on a 3-node cluster: `ringlet up --nodes 3 --default-memgest M`
(rep:3 by default) vs a 3-master Redis 7 Cluster (no replicas), same machine, same run,
alternating.

redis-benchmark --cluster puts one hash tag per node in its keys, so each node's keys share
one slot: the load that made Ringlet's repair collapse (docs/design/cluster-replication.md,
"Repair under load"). Prints requests/s per round and the medians; for Ringlet also the nodes'
CPU seconds (utime + stime from /proc) and the key-list pages repair compared
(`ringlet_repair_key_lists` in INFO replication, summed over the nodes).

  python3 bench/cluster_load.py [--ringlet BIN [--ringlet BIN2 ...]] [--memgest rep:3] [--test set]
                                [--n 400000] [--r 200000] [--size 1024] [--reps 3] [--fill]

Several --ringlet binaries are run in turn each round (an A/B on the same load).
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from benchlib import free_base, start_redis_cluster  # noqa: E402


def fill(port, a):
    """SET every key the test will use first (untimed), so that a read test reads hits."""
    subprocess.run(["redis-benchmark", "-p", str(port), "--cluster", "-t", "set", "-n",
                    str(a.r * 3), "-r", str(a.r), "-d", str(a.size), "-P", "32", "-c", "16",
                    "-q"], capture_output=True, text=True, check=True)


def bench(port, a):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "--cluster", "-t", a.test, "-n",
                          str(a.n), "-r", str(a.r), "-d", str(a.size), "-P", "32", "-c", "16",
                          "-q"], capture_output=True, text=True, check=True).stdout
    m = re.findall(a.test.upper() + r": ([0-9.]+) requests per second, p50=([0-9.]+) msec", out)
    if not m:
        raise SystemExit("no result from redis-benchmark:\n" + out[-500:])
    rps, p50 = m[-1]
    return float(rps), float(p50)


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def node_pids(up_pid):
    kids = subprocess.run(["pgrep", "-P", str(up_pid)], capture_output=True, text=True).stdout
    return [int(p) for p in kids.split()]


def key_lists(base):
    total = 0
    for i in range(3):
        info = subprocess.run(["redis-cli", "-p", str(base + i), "info", "replication"],
                              capture_output=True, text=True).stdout
        m = re.search(r"ringlet_repair_key_lists:(\d+)", info)
        total += int(m.group(1)) if m else 0
    return total


def ringlet(binary, a):
    base = free_base(4)
    up = subprocess.Popen([binary, "up", "--nodes", "3", "--port", str(base),
                           "--default-memgest", a.memgest, "--memory-mb", "2048"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in up.stdout:
            if line.startswith("ringlet cluster ready"):
                break
        pids = node_pids(up.pid)
        if a.fill:
            fill(base, a)
        c0 = sum(cpu_s(p) for p in pids)
        rps, p50 = bench(base, a)
        cpu = sum(cpu_s(p) for p in pids) - c0
        return rps, p50, cpu, key_lists(base)
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=30)


def redis_cluster(a):
    base, procs = start_redis_cluster(3, 3)
    try:
        if a.fill:
            fill(base, a)
        c0 = sum(cpu_s(p.pid) for p in procs)
        rps, p50 = bench(base, a)
        return rps, p50, sum(cpu_s(p.pid) for p in procs) - c0
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", action="append")
    ap.add_argument("--memgest", default="rep:3")
    ap.add_argument("--test", default="set", help="redis-benchmark's test: set, hset, incr ...")
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--r", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fill", action="store_true",
                    help="SET the key range first (untimed; for read tests: hits, not misses)")
    a = ap.parse_args()
    bins = a.ringlet or ["target/release/ringlet"]
    names = [f"ringlet {a.memgest} ({b})" for b in bins]
    res = {n: [] for n in names}
    redis = "redis cluster (no replicas)"
    res[redis] = []
    for i in range(a.reps):
        for name, b in zip(names, bins):
            rps, p50, cpu, kl = ringlet(b, a)
            res[name].append((rps, p50, cpu, kl))
            print(f"round {i + 1} {name}: {rps:.0f} op/s, p50 {p50:.1f} ms, node CPU {cpu:.2f} s, "
                  f"key-list pages {kl}", flush=True)
        rps, p50, cpu = redis_cluster(a)
        res[redis].append((rps, p50, cpu))
        print(f"round {i + 1} {redis}: {rps:.0f} op/s, p50 {p50:.1f} ms, server CPU {cpu:.2f} s",
              flush=True)
    r = statistics.median(x[0] for x in res[redis])
    for name, rs in res.items():
        line = (f"median {name}: {statistics.median(x[0] for x in rs):.0f} op/s, "
                f"p50 {statistics.median(x[1] for x in rs):.1f} ms")
        cpu = statistics.median(x[2] for x in rs)
        if name != redis:
            line += (f", node CPU {cpu:.2f} s, key-list pages "
                     f"{statistics.median(x[3] for x in rs):.0f}, ratio to Redis "
                     f"{statistics.median(x[0] for x in rs) / r:.2f}, CPU ratio "
                     f"{cpu / statistics.median(x[2] for x in res[redis]):.2f}")
        else:
            line += f", server CPU {cpu:.2f} s"
        print(line)


if __name__ == "__main__":
    main()
