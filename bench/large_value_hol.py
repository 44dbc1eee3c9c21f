#!/usr/bin/env python3
"""Small writes beside large ones: how long a 100 B SET waits while 64 MiB values replicate.

Issue 10 (case 5) asks that large values replicate in bounded chunks, so that a write to the
same peers does not queue behind a whole 64 MiB transfer. This measures it: on a fresh
`ringlet up --nodes 3 --spares 1 --default-memgest rep:3`, one client SETs a 64 MiB value
again and again while another SETs 100 B values in the same slot (same coordinator, same
replicas, so the same peer links) and times each. The figure is the small SETs' latency
(p50, p99, max) while the large ones run, beside the same client alone (no large writes).
Redis 7 (one `redis-server`, same machine, same run) is measured the same way for reference:
it is single-threaded, so its small SETs wait for each large one's copy.

Several `--ringlet` binaries may be given (e.g. a build before and after a change); each is
measured in the same run, `--reps` times, medians printed.

Usage: bench/large_value_hol.py [--ringlet target/release/ringlet ...] [--reps 3]
                                [--large-mib 64] [--large-count 6]
Requires: a release build (`cargo build --release -p ringlet-cli --bin ringlet`),
redis-server 7 (scripts/setup.sh), redis-py.
"""
import argparse
import os
import sys
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import redis
from redis.cluster import ClusterNode, RedisCluster

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_base  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_MAX_S = 120
# A 64 MiB SET on a loaded 2-core host can take seconds; redis-py's default read timeout
# is not meant for that.
SOCKET_TIMEOUT_S = 120


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(small, large, large_mib, large_count):
    """Small SET latencies (ms) alone, then while `large` SETs large values."""
    big = os.urandom(1 << 20) * large_mib
    alone = []
    for i in range(300):
        t = time.perf_counter()
        small(i)
        alone.append((time.perf_counter() - t) * 1e3)
    done = threading.Event()
    large_s = []

    errors = []

    def writer():
        try:
            for _ in range(large_count):
                t = time.perf_counter()
                large(big)
                large_s.append(time.perf_counter() - t)
        except Exception as e:  # reported below: a run with a failed large SET is no figure
            errors.append(e)
        finally:
            done.set()

    th = threading.Thread(target=writer)
    th.start()
    busy = []
    i = 0
    while not done.is_set():
        t = time.perf_counter()
        small(i)
        busy.append((time.perf_counter() - t) * 1e3)
        i += 1
    th.join()
    if errors:
        raise SystemExit(f"large SET failed: {errors[0]!r}")
    return {
        "alone_p50": pct(alone, 0.5), "alone_p99": pct(alone, 0.99),
        "busy_p50": pct(busy, 0.5), "busy_p99": pct(busy, 0.99), "busy_max": max(busy),
        "small_n": len(busy), "large_s": statistics.median(large_s),
    }


def ringlet_run(exe, args):
    base = free_base(5)  # 3 nodes + 1 spare + the control port
    cmd = [exe, "up", "--nodes", "3", "--spares", "1", "--port", str(base),
           "--default-memgest", "rep:3"]
    up = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.time() + READY_MAX_S
        while True:
            line = up.stdout.readline()
            if not line or time.time() > deadline:
                raise SystemExit("ringlet up did not become ready")
            if line.startswith("ringlet cluster ready"):
                break
        threading.Thread(target=up.stdout.read, daemon=True).start()
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", base)])
        node = rc.get_node_from_key("{hol}big")
        rc.close()
        # Plain connections to the coordinator of the tag: no client-side routing in the timing.
        a = redis.Redis(host=node.host, port=node.port, socket_timeout=SOCKET_TIMEOUT_S)
        b = redis.Redis(host=node.host, port=node.port, socket_timeout=SOCKET_TIMEOUT_S)
        small_v = b"x" * 100
        r = measure(lambda i: a.set(f"{{hol}}s:{i % 1000}", small_v),
                    lambda v: b.set("{hol}big", v), args.large_mib, args.large_count)
        epochs = b.execute_command("CLUSTER", "INFO").decode()
        r["epoch"] = [l for l in epochs.splitlines() if l.startswith("cluster_current_epoch")]
        return r
    finally:
        up.terminate()
        try:
            up.wait(10)
        except subprocess.TimeoutExpired:
            up.kill()


def redis_run(args):
    port = free_base(1)
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                          "--dir", d, "--proto-max-bulk-len", "1gb"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        a = redis.Redis(port=port, socket_timeout=SOCKET_TIMEOUT_S)
        for _ in range(100):
            try:
                a.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        b = redis.Redis(port=port, socket_timeout=SOCKET_TIMEOUT_S)
        small_v = b"x" * 100
        return measure(lambda i: a.set(f"s:{i % 1000}", small_v), lambda v: b.set("big", v),
                       args.large_mib, args.large_count)
    finally:
        p.kill()


def show(name, runs):
    keys = ["alone_p50", "alone_p99", "busy_p50", "busy_p99", "busy_max", "large_s"]
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    print(f"{name}: small SET alone p50 {med['alone_p50']:.2f} ms p99 {med['alone_p99']:.2f} ms"
          f" | beside {args.large_mib} MiB SETs p50 {med['busy_p50']:.2f} ms"
          f" p99 {med['busy_p99']:.2f} ms max {med['busy_max']:.1f} ms"
          f" | large SET {med['large_s']:.2f} s  (medians of {len(runs)})", flush=True)
    return med


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", nargs="+", default=[os.path.join(ROOT, "target/release/ringlet")])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--large-mib", type=int, default=64)
    ap.add_argument("--large-count", type=int, default=6)
    args = ap.parse_args()
    results = {exe: [] for exe in args.ringlet}
    results["redis"] = []
    for rep in range(args.reps):
        for exe in args.ringlet:
            r = ringlet_run(exe, args)
            print(f"  rep {rep} {exe}: {r}", flush=True)
            results[exe].append(r)
        r = redis_run(args)
        print(f"  rep {rep} redis: {r}", flush=True)
        results["redis"].append(r)
    meds = {name: show(name, runs) for name, runs in results.items()}
    for exe in args.ringlet:
        print(f"{exe}: busy p99 / Redis busy p99 = "
              f"{meds[exe]['busy_p99'] / meds['redis']['busy_p99']:.2f}")
