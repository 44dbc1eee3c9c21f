#!/usr/bin/env python3
"""Pipeline-1 capacity with both servers saturated: Redis 7 and `ringlet server` on io_uring
and on epoll, each started once and filled once with every key of the run's key space, then
measured in turn (redis, io_uring, epoll, redis, ...) by `ringlet bench --client-io uring`,
the generator that costs less per request than the servers do (docs/design/bench-methodology.md).

Why beside bench/request_path_ab.py: that script starts fresh servers every round and its P1
rounds of the io_uring server fell in two groups (113-131k or 158-174k requests/s); here the
servers live through all runs, so a run's figure does not depend on what the server did
just before. Servers on CPU 0, the generator on CPU 1; 50 connections, pipeline 1, 16-byte
keys over 1M keys, 100-byte values, SET or GET only.

Usage: bench/p1_saturated.py [--runs 10] [--seconds 1.5] [--test set|get] [--ringlet PATH]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import RINGLET, cpu_seconds, free_port, wait_port  # noqa: E402
from request_path_ab import KEYS, full_keyspace  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--test", choices=["set", "get"], default="set")
    ap.add_argument("--ringlet", default=RINGLET)
    a = ap.parse_args()
    keyfile = os.path.join(tempfile.mkdtemp(prefix="p1-saturated-"), "keys.resp")
    full_keyspace(keyfile)
    servers = {}
    cmds = {
        "redis": ["redis-server", "--save", "", "--appendonly", "no", "--port"],
        "io_uring": [a.ringlet, "server", "--memory-mb", "4096", "--threads", "1", "--io",
                     "uring", "--port"],
        "epoll": [a.ringlet, "server", "--memory-mb", "4096", "--threads", "1", "--io", "epoll",
                  "--port"],
    }
    res = {k: [] for k in cmds}
    try:
        for name, cmd in cmds.items():
            port = free_port()
            p = subprocess.Popen(["taskset", "-c", "0"] + cmd + [str(port)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            servers[name] = (p, port)
            wait_port(port)
            with open(keyfile, "rb") as f:
                subprocess.run(["taskset", "-c", "1", "redis-cli", "-p", str(port), "--pipe"],
                               stdin=f, check=True, capture_output=True)
        print(f"P1 {a.test.upper()}, load average {os.getloadavg()[0]:.1f}", flush=True)
        for r in range(a.runs):
            line = []
            for name, (p, port) in servers.items():
                c0 = cpu_seconds(p.pid)
                out = subprocess.run(
                    ["taskset", "-c", "1", a.ringlet, "bench", "--port", str(port), "--keys",
                     str(KEYS), "--key-size", "16", "--value-size", "100", "--connections",
                     "50", "--pipeline", "1", "--ratio", "1:0" if a.test == "set" else "0:1",
                     "--duration", str(a.seconds), "--client-io", "uring", "--json"],
                    check=True, capture_output=True, text=True).stdout
                j = json.loads(out.strip().splitlines()[-1])
                n = j["sets"] + j["gets"]
                cpu = (cpu_seconds(p.pid) - c0) / (n / 1e6)
                res[name].append((j["ops_per_sec"], cpu))
                line.append(f"{name} {j['ops_per_sec']:,.0f}/s {cpu:.2f} CPU-s/Mop")
            print(f"run {r}: " + " | ".join(line), flush=True)
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait()
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    print("| server | ops/s (median) | ×Redis (median of per-run ratios, min-max) | CPU-s/Mop | ×Redis CPU |")
    print("|---|---|---|---|---|")
    for name, v in res.items():
        ratios = [x[0] / r[0] for x, r in zip(v, res["redis"])]
        cpus = [x[1] / r[1] for x, r in zip(v, res["redis"])]
        print(f"| {name} | {statistics.median(x[0] for x in v):,.0f} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{statistics.median(x[1] for x in v):.2f} | {statistics.median(cpus):.2f} |")


if __name__ == "__main__":
    main()
