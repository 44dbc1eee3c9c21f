#!/usr/bin/env python3
"""Growing one big hash: redis-benchmark's `hset` test with `-r` (every HSET adds a random
field to the one key `myhash`), against a fresh `redis-server` and a fresh
`ringlet server --threads 1` (each pinned to CPU 0; redis-benchmark on CPU 1), for each
target size, in turn, --rounds times; medians of requests/s and the ratio to Redis.

Why: a Ringlet record is one engine entry, so every write to a hash rewrites it (O(size));
Redis keeps a hash of more than 128 fields in a hash table (O(1) a write). This measures
how far apart that leaves them (docs/design/records.md, "Big hashes").

Usage: bench/big_hash.py [--sizes 10000,20000,50000] [--rounds 3] [--ringlet PATH ...]
  --ringlet may be given more than once (e.g. an older build and the new one); each is
  run in the same rounds.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_base, wait_port  # noqa: E402


def start(cmd):
    return subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def hset_rate(port, n):
    """redis-benchmark's hset test growing `myhash` by n random fields: requests/s."""
    subprocess.run(["redis-cli", "-p", str(port), "DEL", "myhash"], check=True,
                   stdout=subprocess.DEVNULL)
    out = subprocess.run(
        ["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-t", "hset", "-n", str(n),
         "-r", "100000000", "-P", "16", "-c", "1", "--csv"],
        check=True, capture_output=True, text=True).stdout
    row = [l for l in out.splitlines() if l.startswith('"HSET"')][-1]
    hlen = int(subprocess.run(["redis-cli", "-p", str(port), "HLEN", "myhash"], check=True,
                              capture_output=True, text=True).stdout.strip())
    return float(row.split(",")[1].strip('"')), hlen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,20000,50000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ringlet", action="append",
                    help="ringlet binary (default target/release/ringlet); repeatable")
    a = ap.parse_args()
    bins = a.ringlet or ["target/release/ringlet"]
    sizes = [int(x) for x in a.sizes.split(",")]
    names = ["redis"] + bins
    rates = {(name, n): [] for name in names for n in sizes}
    for rnd in range(a.rounds):
        for name in names:
            port = free_base(1)
            if name == "redis":
                p = start(["redis-server", "--port", str(port), "--save", "", "--appendonly",
                           "no", "--bind", "127.0.0.1"])
            else:
                p = start([name, "server", "--port", str(port), "--threads", "1"])
            try:
                wait_port(port)
                time.sleep(0.2)
                for n in sizes:
                    rate, hlen = hset_rate(port, n)
                    rates[(name, n)].append(rate)
                    print(f"round {rnd + 1} {name} n={n}: {rate:,.0f} HSET/s, "
                          f"{hlen} fields", flush=True)
            finally:
                p.terminate()
                p.wait()
    print(f"\nmedians of {a.rounds} rounds (redis-benchmark -t hset -r 1e8 -P 16 -c 1):")
    for n in sizes:
        red = statistics.median(rates[("redis", n)])
        row = [f"n={n}: redis {red:,.0f}/s"]
        for b in bins:
            m = statistics.median(rates[(b, n)])
            row.append(f"{b} {m:,.0f}/s ({m / red:.4f}x redis)")
        print("  " + "; ".join(row))


if __name__ == "__main__":
    main()
