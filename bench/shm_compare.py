#!/usr/bin/env python3
"""Issue 4's benchmark in one run: one-sided shared-memory GET (1 client thread) vs the same
node over TCP vs Redis 7 GET over TCP, plus an in-process hash map as the floor.

1M keys (16-byte `key:` + 12 digits), 100-byte values, uniform and Zipf 0.99. Servers are
pinned to CPU 0 and clients to CPU 1. TCP figures use 50 connections, pipeline 1, GET only
(`ringlet bench --ratio 0:1` after `--load`, and `redis-benchmark -t get` against Redis, as
the issue asks). The floor is `ringlet-shm`'s `shm_bench` example (std HashMap with foldhash
over the same keys, every value compared).

Usage: bench/shm_compare.py [--keys 1000000] [--duration 5]
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import RINGLET, ROOT, free_port, wait_port  # noqa: E402


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--duration", type=float, default=5)
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "ringlet-cli", "-p", "ringlet-shm",
                    "--examples", "--bins"], cwd=ROOT, check=True)
    rows = {}
    port = free_port()
    sock = f"/tmp/ringlet-shm-bench-{port}.sock"
    node = subprocess.Popen(["taskset", "-c", "0", RINGLET, "server", "--port", str(port),
                             "--threads", "1", "--memory-mb", "1024", "--shm-socket", sock],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        for dist in ("uniform", "zipf"):
            cmd = ["taskset", "-c", "1", RINGLET, "bench", "--mode", "shm-get", "--socket", sock,
                   "--keys", str(args.keys), "--value-size", "100", "--duration",
                   str(args.duration), "--threads", "1", "--distribution", dist, "--json"]
            if dist == "uniform":
                cmd.append("--load")
            r = last_json(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            # Only reads that returned the loaded value count: a miss or a socket fallback
            # would make the one-sided figure mean something else, so the run fails on any.
            assert r["wrong"] == 0 and r["misses"] == 0 and r["fallbacks"] == 0, r
            rows[f"ringlet shm GET ({dist})"] = (r["ops_per_sec"],
                                                 f'{r["ops"]:,} reads, 0 wrong, 0 misses, 0 fallbacks')
        for dist in ("uniform", "zipf"):
            r = last_json(subprocess.run(
                ["taskset", "-c", "1", RINGLET, "bench", "--protocol", "resp", "--port", str(port),
                 "--keys", str(args.keys), "--value-size", "100", "--ratio", "0:1",
                 "--connections", "50", "--pipeline", "1", "--duration", str(args.duration),
                 "--distribution", dist, "--json"], check=True, capture_output=True,
                text=True).stdout)
            assert r["misses"] == 0 and r["errors"] == 0, r
            rows[f"ringlet TCP GET, RESP ({dist})"] = (r["ops_per_sec"],
                                                       f'{r["gets"]:,} GETs, 0 misses, 0 errors')
    finally:
        node.terminate()
        node.wait()
    rport = free_port()
    redis = subprocess.Popen(["taskset", "-c", "0", "redis-server", "--port", str(rport),
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(rport)
        out = subprocess.run(
            ["taskset", "-c", "1", "redis-benchmark", "-p", str(rport), "-c", "50", "-P", "1",
             "-d", "100", "-r", str(args.keys), "-n", "300000", "-t", "set,get", "-q"],
            check=True, capture_output=True, text=True).stdout.replace("\r", "\n")
        m = re.search(r"GET: ([0-9.]+) requests per second", out)
        rows["redis GET, redis-benchmark -c 50 -P 1"] = (
            float(m.group(1)), "redis-benchmark does not check values")
    finally:
        redis.terminate()
        redis.wait()
    floor = subprocess.run(
        ["taskset", "-c", "1", "cargo", "run", "--release", "-q", "-p", "ringlet-shm", "--example",
         "shm_bench", "--", "--keys", str(args.keys), "--value-size", "100", "--duration", "2",
         "--runs", "3", "--batch", "32", "--zipf", "0.99"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    redis_get = rows["redis GET, redis-benchmark -c 50 -P 1"][0]
    print("| what | GETs/s | × Redis | checked |")
    print("|---|---|---|---|")
    for k, (v, checked) in rows.items():
        print(f"| {k} | {v:,.0f} | {v / redis_get:.1f} | {checked} |")
    print("\nin-process floor and shm (same process, medians), from the shm_bench example:")
    print(floor)


if __name__ == "__main__":
    main()
