#!/usr/bin/env python3
"""What a TTL change costs on an ec:3+2 key (docs/design/cluster-ec.md "TTLs"), beside rep:3
and Redis 7 in the same run.

Starts `ringlet up --nodes 5 --spares 1 --pg-data 3 --pg-redundant 2` (bench/memgest.py's
Cluster: Ring's shape, so ec:3+2 and rep:3 fit) and a Redis 7 `redis-server`; for each value
size, loads --ops keys into each memgest with `SET k v EX n MEMGEST m`, then times, one
client, sequential, each request sent to the key's coordinator:

  expire ec:3+2   EXPIRE k n          (metadata-only: the key keeps its arena range, the 2
                                       parity holders get an update with no delta)
  expire rep:3    EXPIRE k n          (a new version of the value replicated to 2 replicas)
  set-ex ec:3+2   SET k v' EX n       (a new value of the same size: fresh range + a
                                       value-sized delta to each holder — what an EXPIRE
                                       would cost as a rewrite)
  redis expire / redis set-ex         the same on Redis 7

Every EXPIRE is checked afterwards (PEXPIRETIME moved, value unchanged). --repeat runs,
medians quoted.

Usage: bench/ec_ttl.py [--ringlet PATH] [--repeat 3] [--ops 1000] [--sizes 1024,16384]
Requires: `cargo build --release -p ringlet-cli`, redis-server, redis-py.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memgest  # noqa: E402
from benchlib import free_base  # noqa: E402
from memgest import Cluster, pct, timed, val  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def s(x):
    return x.decode() if isinstance(x, bytes) else x


def ringlet_run(exe, run_id, sizes, ops):
    c = Cluster(exe, 512)
    out = {}
    try:
        for name, desc in [("ec32", "ec:3+2"), ("rep3", "rep:3")]:
            c.any.execute_command("MEMGEST", "CREATE", name, desc)
        for size in sizes:
            for name in ["ec32", "rep3"]:
                keys = [f"r{run_id}:{name}:{size}:{i}" for i in range(ops)]
                memgest.load(c, keys, size, ["EX", "100000", "MEMGEST", name])
                time.sleep(0.5)
                before = [c.call(k, "PEXPIRETIME", k) for k in keys[:50]]
                lat = timed(lambda i: c.call(keys[i], "EXPIRE", keys[i], 200000 + i), ops)
                out[(f"expire {'ec:3+2' if name == 'ec32' else 'rep:3'}", size)] = lat
                # Checked after timing: the TTL moved, the value did not change.
                for k, b in zip(keys[:50], before):
                    a = c.call(k, "PEXPIRETIME", k)
                    if not a > b:
                        raise RuntimeError(f"{k}: PEXPIRETIME {b} -> {a}")
                    if c.call(k, "GET", k) != val(k, size):
                        raise RuntimeError(f"{k}: value changed by EXPIRE")
                if name == "ec32":
                    if s(c.call(keys[0], "MEMGEST", "KEY", keys[0])[1]) != "ec:3+2":
                        raise RuntimeError("not an ec:3+2 key")
                    new = [val(k + "'", size) for k in keys]
                    lat = timed(lambda i: c.call(keys[i], "SET", keys[i], new[i], "EX", "100000"),
                                ops)
                    out[("set-ex ec:3+2", size)] = lat
                    if c.call(keys[1], "GET", keys[1]) != new[1]:
                        raise RuntimeError("SET EX did not write")
    finally:
        c.stop()
    return out, c.cmd


def redis_run(sizes, ops):
    port = free_base(1)
    p = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = {}
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        for size in sizes:
            keys = [f"redis:{size}:{i}" for i in range(ops)]
            pl = r.pipeline(transaction=False)
            for k in keys:
                pl.set(k, val(k, size), ex=100000)
            pl.execute()
            out[("redis expire", size)] = timed(lambda i: r.expire(keys[i], 200000 + i), ops)
            new = [val(k + "'", size) for k in keys]
            out[("redis set-ex", size)] = timed(lambda i: r.set(keys[i], new[i], ex=100000), ops)
    finally:
        p.terminate()
        p.wait()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", default=os.path.join(ROOT, "target/release/ringlet"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--sizes", default="1024,16384")
    args = ap.parse_args()
    memgest.ARGS = argparse.Namespace(conns=2, batch=64)
    sizes = [int(x) for x in args.sizes.split(",")]
    runs = []
    for i in range(args.repeat):
        res, cmd = ringlet_run(args.ringlet, i, sizes, args.ops)
        res.update(redis_run(sizes, args.ops))
        runs.append(res)
        print(f"run {i + 1}/{args.repeat} (cluster: {' '.join(cmd)}; "
              f"load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    print(f"medians of {args.repeat} runs, {args.ops} sequential ops per figure, one client; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'op':<16}{'value':>8}{'p50 us':>10}{'p99 us':>10}{'p50 / redis expire':>20}")
    for size in sizes:
        base = statistics.median(pct(r[("redis expire", size)], 0.5) for r in runs)
        for op in ["expire ec:3+2", "expire rep:3", "set-ex ec:3+2", "redis expire",
                   "redis set-ex"]:
            p50 = statistics.median(pct(r[(op, size)], 0.5) for r in runs)
            p99 = statistics.median(pct(r[(op, size)], 0.99) for r in runs)
            print(f"{op:<16}{size:>8}{p50:>10.0f}{p99:>10.0f}{p50 / base:>20.2f}")


if __name__ == "__main__":
    main()
