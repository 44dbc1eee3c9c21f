#!/usr/bin/env python3
"""The load balancer under a skewed load (issue 12 item 3): how unevenly a 3-node cluster's
nodes are loaded before and after `ringlet up --auto-balance` moves hot spans, beside the same
cluster without the balancer (a static slot map, which is what a Redis Cluster has: it never
moves slots by itself) in the same run.

Each run starts `ringlet up --nodes 3` (rep:3), preloads --keys keys of 100 B, then --threads
redis-py RedisCluster clients GET/SET (9:1) for --seconds: a share --hot of the operations go
to --hot-keys keys that all live on node 1 at the start, the rest to uniform keys. Every second
the script asks each node for its served ops/s (`CLUSTER RINGLET-LOAD`, the last 1 s window)
and records max/mean over the three nodes (1.0 is even; 3.0 is everything on one node). It
reports, per run: max/mean over the first 5 s and over the last 10 s, the first second at
which max/mean stayed <= 1.5 for the rest of the run, the moves the balancer logged, the
client's ops/s and p99, and failed operations (must be 0).

  python3 bench/balance.py [--ringlet target/release/ringlet] [--seconds 40] [--reps 3]

Nothing here is a like-for-like with Redis's throughput: on one 2-core machine the three node
processes share the same cores, so evening the load does not add capacity; the figure of merit
is the spread, which on separate machines is the busiest node's headroom.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from benchlib import free_base  # noqa: E402

import redis  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402


def start(ringlet, base, balance, log):
    args = [ringlet, "up", "--nodes", "3", "--port", str(base), "--default-memgest", "rep:3",
            "--no-admin", "--memory-mb", "256"]
    if balance:
        args += ["--auto-balance", "--balance-window", "2", "--balance-min-ops", "200",
                 "--balance-moves-per-min", "10"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True,
                         start_new_session=True)
    for line in p.stdout:
        if line.startswith("ringlet cluster ready"):
            break
    else:
        raise SystemExit("ringlet up did not get ready")
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return p


def node_rates(ports):
    out = []
    for port in ports:
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        try:
            import json
            rep = json.loads(r.execute_command("CLUSTER", "RINGLET-LOAD"))
            w = rep.get("window") or {}
            out.append(w.get("reads_per_sec", 0.0) + w.get("writes_per_sec", 0.0))
        finally:
            r.close()
    return out


class Client(threading.Thread):
    def __init__(self, port, hot_keys, cold_keys, hot, stop):
        super().__init__(daemon=True)
        self.rc = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
        self.hot_keys, self.cold_keys, self.hot, self.stop = hot_keys, cold_keys, hot, stop
        self.lat, self.ops, self.failed = [], 0, 0
        self.rng = random.Random(threading.get_ident())

    def run(self):
        while not self.stop.is_set():
            keys = self.hot_keys if self.rng.random() < self.hot else self.cold_keys
            k = self.rng.choice(keys)
            t = time.perf_counter()
            try:
                if self.rng.random() < 0.1:
                    self.rc.set(k, b"y" * 100)
                else:
                    self.rc.get(k)
                self.ops += 1
                self.lat.append(time.perf_counter() - t)
            except Exception:  # noqa: BLE001 - every failure is counted and reported
                self.failed += 1


def run(ringlet, balance, a):
    base = free_base(4)
    ports = [base, base + 1, base + 2]
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        p = start(ringlet, base, balance, log)
        try:
            rc = RedisCluster(host="127.0.0.1", port=base, socket_timeout=30)
            hot_keys, cold_keys, i = [], [], 0
            while len(hot_keys) < a.hot_keys:
                k = "hot:%d" % i
                if rc.get_node_from_key(k).port == base:
                    hot_keys.append(k)
                i += 1
            cold_keys = ["key:%d" % j for j in range(a.keys)]
            pipe = rc.pipeline()
            for k in hot_keys + cold_keys:
                pipe.set(k, b"x" * 100)
            pipe.execute()
            rc.close()
            stop = threading.Event()
            clients = [Client(base, hot_keys, cold_keys, a.hot, stop) for _ in range(a.threads)]
            for c in clients:
                c.start()
            spread = []
            t0 = time.time()
            while time.time() - t0 < a.seconds:
                time.sleep(1)
                r = node_rates(ports)
                m = statistics.mean(r)
                spread.append(max(r) / m if m > 0 else 0.0)
            stop.set()
            for c in clients:
                c.join()
            log.seek(0)
            moves = [l.strip() for l in log if "balancer: moving" in l]
        finally:
            os.killpg(p.pid, 15)
            p.wait()
    lat = sorted(x for c in clients for x in c.lat)
    ops = sum(c.ops for c in clients)
    settled = None
    for s in range(len(spread)):
        if all(x <= 1.5 for x in spread[s:]):
            settled = s + 1
            break
    return {
        "spread_first5": statistics.mean(spread[:5]),
        "spread_last10": statistics.mean(spread[-10:]),
        "settled_s": settled,
        "moves": len(moves),
        "ops_s": ops / a.seconds,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1e3 if lat else float("nan"),
        "failed": sum(c.failed for c in clients),
        "move_lines": moves,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", default="target/release/ringlet")
    ap.add_argument("--seconds", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--keys", type=int, default=3000)
    ap.add_argument("--hot-keys", type=int, default=60)
    ap.add_argument("--hot", type=float, default=0.8)
    a = ap.parse_args()
    rows = {True: [], False: []}
    for rep in range(a.reps):
        for balance in (True, False):
            r = run(a.ringlet, balance, a)
            rows[balance].append(r)
            print("rep %d %-10s spread first 5 s %.2f last 10 s %.2f settled at %s s, %d moves, "
                  "%.0f ops/s, p99 %.2f ms, %d failed" % (
                      rep + 1, "balancer" if balance else "static", r["spread_first5"],
                      r["spread_last10"], r["settled_s"], r["moves"], r["ops_s"], r["p99_ms"],
                      r["failed"]), flush=True)
            for l in r["move_lines"]:
                print("    " + l)
    print("\nmedians over %d runs (max/mean of per-node ops/s; 1.0 even, 3.0 all on one node):"
          % a.reps)
    print("| cluster | spread, first 5 s | spread, last 10 s | settled (s) | moves | "
          "client ops/s | p99 ms | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for balance in (True, False):
        rs = rows[balance]
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        settled = [r["settled_s"] for r in rs if r["settled_s"] is not None]
        print("| %s | %.2f | %.2f | %s | %.0f | %.0f | %.2f | %d |" % (
            "ringlet up --auto-balance" if balance else "ringlet up (static map)",
            med("spread_first5"), med("spread_last10"),
            "%.0f" % statistics.median(settled) if len(settled) == len(rs) else
            "%d of %d runs" % (len(settled), len(rs)),
            med("moves"), med("ops_s"), med("p99_ms"), sum(r["failed"] for r in rs)))


if __name__ == "__main__":
    main()
