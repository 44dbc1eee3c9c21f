#!/usr/bin/env python3
"""Cluster GET one-sided (issue 11, item 4) beside `redis-benchmark -t get` against Redis 7.

Ringlet: a fresh `ringlet up --nodes 3 --spares 0 --default-memgest rep:3 --shm-dir DIR`
per repetition (nodes pinned to CPU 0); `cluster_shm_bench --load` writes `--keys` keys of
`--value-size` B through the cluster, then GETs uniformly random keys for `--duration` s on
one client thread pinned to CPU 1 (the smart client, `BlockingClusterClient` with `shm_dir`:
routed by the map to the key's coordinator, read from its memory, every value compared with
what was written). The run fails on any wrong value, miss or network fallback, so the figure
is one-sided reads only.

Redis 7: `redis-server` pinned to CPU 0, the same keys and value size written with
`redis-benchmark -t set`, then `redis-benchmark -t get` (its defaults: 50 connections,
pipeline 1) pinned to CPU 1. Medians of `--reps` repetitions, interleaved.

Usage: bench/cluster_shm.py [--reps 3] [--duration 5] [--keys 100000] [--value-size 100]
Requires: cargo build --release -p ringlet-cli --bin ringlet -p ringlet-client
          --example cluster_shm_bench; redis-server and redis-benchmark 7 (scripts/setup.sh).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_base, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RINGLET = os.path.join(ROOT, "target/release/ringlet")
BENCH = os.path.join(ROOT, "target/release/examples/cluster_shm_bench")


def ringlet_rep(a, rep):
    base = free_base(4)
    shm_dir = tempfile.mkdtemp(prefix="ringlet-shm-bench-")
    up = subprocess.Popen(["taskset", "-c", "0", RINGLET, "up", "--nodes", "3", "--spares", "0",
                           "--port", str(base), "--default-memgest", "rep:3", "--no-admin",
                           "--shm-dir", shm_dir],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.time() + 120
        while True:
            line = up.stdout.readline()
            if not line or time.time() > deadline:
                raise SystemExit("ringlet up did not become ready")
            if line.startswith("ringlet cluster ready"):
                break
        seeds = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        cmd = ["taskset", "-c", "1", BENCH, "--seeds", seeds, "--shm-dir", shm_dir,
               "--keys", str(a.keys), "--value-size", str(a.value_size),
               "--duration", str(a.duration), "--threads", "1", "--load"]
        if rep == 0:
            print("$ " + " ".join(cmd), file=sys.stderr)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"cluster_shm_bench failed: {out.stderr}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert r["wrong"] == 0 and r["misses"] == 0 and r["fallbacks"] == 0, r
        return r
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(10)
        except subprocess.TimeoutExpired:
            up.kill()
        shutil.rmtree(shm_dir, ignore_errors=True)


def redis_rep(a, rep):
    port = free_base(1)
    rs = subprocess.Popen(["taskset", "-c", "0", "redis-server", "--port", str(port), "--save", "",
                           "--appendonly", "no", "--bind", "127.0.0.1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        common = ["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-r", str(a.keys),
                  "-d", str(a.value_size), "--csv", "-q"]
        subprocess.run(common + ["-t", "set", "-n", str(a.keys * 3)], check=True,
                       capture_output=True)
        cmd = common + ["-t", "get", "-n", str(a.requests)]
        if rep == 0:
            print("$ " + " ".join(cmd), file=sys.stderr)
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            cells = [c.strip('"') for c in line.split(",")]
            if cells and cells[0] == "GET":
                return float(cells[1])
        raise SystemExit(f"no GET line in redis-benchmark output: {out}")
    finally:
        rs.kill()
        rs.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--requests", type=int, default=1_000_000,
                    help="GETs per redis-benchmark run")
    a = ap.parse_args()
    for exe in (RINGLET, BENCH):
        if not os.path.exists(exe):
            raise SystemExit(f"missing {exe}: see Requires in {__file__}")
    if not shutil.which("redis-benchmark"):
        raise SystemExit("redis-benchmark not found (scripts/setup.sh installs Redis 7)")
    ringlet, redis = [], []
    load_start = open("/proc/loadavg").read().split()[:3]
    for rep in range(a.reps):
        r = ringlet_rep(a, rep)
        ringlet.append(r["ops_per_sec"])
        print(f"rep {rep + 1} ringlet one-sided: {r['ops_per_sec']:.0f} GET/s "
              f"({r['one_sided']} one-sided, {r['fallbacks']} fallbacks)", file=sys.stderr)
        rps = redis_rep(a, rep)
        redis.append(rps)
        print(f"rep {rep + 1} redis-benchmark GET: {rps:.0f} GET/s", file=sys.stderr)
    load_end = open("/proc/loadavg").read().split()[:3]
    rm, dm = statistics.median(ringlet), statistics.median(redis)
    print(f"\nGET throughput, {a.keys} keys of {a.value_size} B, medians of {a.reps} "
          f"(load average {' '.join(load_start)} at start, {' '.join(load_end)} at end):\n")
    print("| target | GET/s (median) | runs | ratio to Redis |")
    print("|---|---:|---|---:|")
    print(f"| Ringlet cluster, one-sided (1 client thread, smart client) | {rm:,.0f} | "
          f"{', '.join(f'{x:,.0f}' for x in ringlet)} | {rm / dm:.1f} |")
    print(f"| Redis 7, redis-benchmark -t get (50 connections) | {dm:,.0f} | "
          f"{', '.join(f'{x:,.0f}' for x in redis)} | 1.0 |")


if __name__ == "__main__":
    main()
