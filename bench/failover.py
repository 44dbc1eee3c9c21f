#!/usr/bin/env python3
"""Failover time after SIGKILL of a coordinator: Ringlet beside a Redis 7 Cluster, same run.

Ringlet: `ringlet up --nodes 3 --spares 1 --default-memgest rep:3` (1.5 s lease).
Redis:   6 `redis-server --cluster-enabled yes --cluster-node-timeout T` (3 masters, 3
         replicas, `redis-cli --cluster create --cluster-replicas 1`), T = --redis-timeout-ms.

For each repetition, on a fresh cluster: load --keys keys through redis-py `RedisCluster`
(every value names its key), make the copies durable against one failure (Ringlet: nothing
to wait for, an acknowledged rep:3 write is on a majority of its copies; Redis, whose
replication is asynchronous: `WAIT 1` on every master), SIGKILL the node serving
slot 0, then poll the keys of the killed node's slots, each round from a new client, until
every one reads back its own value. The figure is the time from the SIGKILL to that round.
Afterwards every key of the cluster is read once more and must be exact: a fast failover that
lost a write is a failure, not a figure (the script exits non-zero).

Prints each run and the medians, min and max; the goal for Ringlet (issue 5) is ≤ 3 s.

Usage: bench/failover.py [--reps 5] [--keys 2000] [--redis-timeout-ms 3000]
                         [--only ringlet|redis] [--ringlet target/release/ringlet]
Requires: a release build (`cargo build --release -p ringlet-cli --bin ringlet`),
redis-server and redis-cli 7 (scripts/setup.sh), redis-py.
"""
import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.crc import key_slot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_base  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Bound on every wait: a run that does not recover in this time fails the script.
RECOVERY_MAX_S = 120


def value_of(key):
    return f"value-of-{key}".encode()


def cluster_client(ports):
    nodes = [ClusterNode("127.0.0.1", p) for p in ports]
    # One retry, no backoff: a backoff sleep would be measured as failover time.
    return RedisCluster(startup_nodes=nodes, socket_timeout=2, socket_connect_timeout=1,
                        retry=Retry(NoBackoff(), 1))


def load(ports, keys):
    rc = cluster_client(ports)
    for i in range(0, len(keys), 200):
        pipe = rc.pipeline()
        for k in keys[i:i + 200]:
            pipe.set(k, value_of(k))
        assert all(pipe.execute())
    rc.close()


def unreadable(ports, keys):
    """Keys that do not read back their own value, from a new client (no stale slot cache)."""
    try:
        rc = cluster_client(ports)
    except Exception:  # noqa: BLE001 - no live seed answered yet: everything unreadable
        return list(keys)
    bad = []
    try:
        for k in keys:
            try:
                if rc.get(k) != value_of(k):
                    bad.append(k)
            except Exception:  # noqa: BLE001 - connection refused, TRYAGAIN, CLUSTERDOWN...
                bad.append(k)
    finally:
        rc.close()
    return bad


def slot0_owner(port):
    r = redis.Redis(port=port)
    for first, last, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
        if first <= 0 <= last:
            return int(master[1])
    raise RuntimeError("slot 0 unassigned")


def time_recovery(live_ports, keys, victim_port, port_of_slot, kill):
    affected = [k for k in keys if port_of_slot(key_slot(k.encode())) == victim_port]
    t0 = time.perf_counter()
    kill()
    left = affected
    while left:
        if time.perf_counter() - t0 > RECOVERY_MAX_S:
            raise SystemExit(f"{len(left)} keys unreadable {RECOVERY_MAX_S} s after the kill")
        left = unreadable(live_ports, left)
        if left:
            time.sleep(0.01)
    took = time.perf_counter() - t0
    wrong = unreadable(live_ports, keys)
    if wrong:
        raise SystemExit(f"{len(wrong)} of {len(keys)} keys lost or wrong after the failover, "
                         f"e.g. {wrong[0]}")
    return took, len(affected)


def slot_map(port):
    owner = [None] * 16384
    r = redis.Redis(port=port)
    for first, last, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
        for s in range(first, last + 1):
            owner[s] = int(master[1])
    return lambda s: owner[s]


def ringlet_run(exe, keys):
    base = free_base(5)
    cmd = [os.path.relpath(exe, ROOT), "up", "--nodes", "3", "--spares", "1", "--port", str(base),
           "--default-memgest", "rep:3"]
    up = subprocess.Popen([exe] + cmd[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pids = {}
    try:
        deadline = time.time() + 60
        while True:
            line = up.stdout.readline()
            if not line or time.time() > deadline:
                raise SystemExit("ringlet up did not become ready")
            w = line.split()
            if w[:1] == ["node"] and w[2:3] == ["pid"]:
                pids[base + int(w[1]) - 1] = int(w[3])
            if line.startswith("ringlet cluster ready"):
                break
        threading.Thread(target=up.stdout.read, daemon=True).start()
        ports = [base, base + 1, base + 2, base + 3]
        load(ports, keys)
        victim = slot0_owner(base)
        owner = slot_map(base)
        live = [p for p in ports if p != victim]
        return time_recovery(live, keys, victim, owner,
                             lambda: os.kill(pids[victim], signal.SIGKILL)), " ".join(cmd)
    finally:
        up.terminate()
        try:
            up.wait(10)
        except subprocess.TimeoutExpired:
            up.kill()
        for p in pids.values():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def redis_run(keys, timeout_ms):
    base = free_base(6)
    ports = list(range(base, base + 6))
    tmp = tempfile.mkdtemp(prefix="ringlet-failover-redis-")
    procs = {}
    try:
        for p in ports:
            d = os.path.join(tmp, str(p))
            os.makedirs(d)
            procs[p] = subprocess.Popen(
                ["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled",
                 "yes", "--cluster-node-timeout", str(timeout_ms), "--cluster-config-file",
                 "nodes.conf", "--dir", d, "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for p in ports:
            for _ in range(200):
                try:
                    redis.Redis(port=p).ping()
                    break
                except redis.exceptions.ConnectionError:
                    time.sleep(0.05)
        subprocess.run(["redis-cli", "--cluster", "create"] + [f"127.0.0.1:{p}" for p in ports]
                       + ["--cluster-replicas", "1", "--cluster-yes"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while any(b"cluster_state:ok" not in redis.Redis(port=p).execute_command("CLUSTER", "INFO")
                  for p in ports):
            if time.time() > deadline:
                raise SystemExit("redis cluster not ok in 60 s")
            time.sleep(0.1)
        load(ports, keys)
        owner = slot_map(base)
        masters = sorted({owner(s) for s in range(16384)})
        for m in masters:  # every write reached the master's replica before the kill
            if redis.Redis(port=m).execute_command("WAIT", 1, 5000) < 1:
                raise SystemExit(f"master {m} has no replica in sync")
        victim = slot0_owner(base)
        live = [p for p in ports if p != victim]
        cmd = (f"6 x redis-server --cluster-enabled yes --cluster-node-timeout {timeout_ms}; "
               "redis-cli --cluster create ... --cluster-replicas 1")
        return time_recovery(live, keys, victim, owner, lambda: procs[victim].kill()), cmd
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def summary(name, runs):
    xs = [t for t, _ in runs]
    print(f"{name}: median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, "
          f"{len(xs)} runs; {runs[0][1]} of the keys were on the killed node in run 1)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--redis-timeout-ms", type=int, default=3000)
    ap.add_argument("--only", choices=["ringlet", "redis"])
    ap.add_argument("--ringlet", default=os.path.join(ROOT, "target", "release", "ringlet"))
    a = ap.parse_args()
    if a.only != "redis" and not os.path.exists(a.ringlet):
        sys.exit(f"no ringlet binary at {a.ringlet}: cargo build --release -p ringlet-cli")
    keys = [f"fo:{i}" for i in range(a.keys)]
    results = {"ringlet": [], "redis": []}
    cmds = {}
    for rep in range(a.reps):
        # Interleaved, so both systems see the same machine load over the run.
        if a.only != "redis":
            r, cmds["ringlet"] = ringlet_run(a.ringlet, keys)
            results["ringlet"].append(r)
            print(f"run {rep + 1} ringlet: {r[0]:.2f} s ({r[1]} keys on the killed node)",
                  file=sys.stderr)
        if a.only != "ringlet":
            r, cmds["redis"] = redis_run(keys, a.redis_timeout_ms)
            results["redis"].append(r)
            print(f"run {rep + 1} redis cluster: {r[0]:.2f} s ({r[1]} keys on the killed node)",
                  file=sys.stderr)
    print(f"SIGKILL of the node serving slot 0 until every one of its keys reads back "
          f"({a.keys} keys, every key exact afterwards; load average "
          f"{os.getloadavg()[0]:.1f} at the end):")
    for name, runs in results.items():
        if runs:
            summary(f"{name} ({cmds[name]})", runs)
    if results["ringlet"] and results["redis"]:
        ratio = (statistics.median(t for t, _ in results["ringlet"])
                 / statistics.median(t for t, _ in results["redis"]))
        print(f"ringlet / redis cluster median: {ratio:.2f}")


if __name__ == "__main__":
    main()
