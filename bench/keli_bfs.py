#!/usr/bin/env python3
"""KELI's BFS workload: Ringlet with links (server-side CHASE, and client-side BFS) beside
Redis 7 with the same graph as hashes whose fields hold neighbour keys, same machine, same run.

Graph: a seeded Graph500-style R-MAT generator (a=0.57, b=0.19, c=0.19) over --vertices
vertices and --edges directed edges (duplicates and self-loops dropped; a vertex keeps at most
4,096 out-edges, Ringlet's link-list bound, and the same edges go to both stores). Vertex v is
key `v:<id>` with a `name` field and a `follows` field: a link list on Ringlet
(`LINK ADD v:<id> follows ...`), the neighbour keys joined by spaces on Redis (what a Redis
user stores; the client splits it).

BFS from --roots random roots (the same for every system) to --depth hops, returning every
visited vertex's `name`:
  - redis:   client-side, one pipelined round trip of HGETs per level (as fast as redis-py allows);
  - ringlet-client: the same client-side BFS against Ringlet (HGET shows a link list as the
             space-joined targets, so the code is identical);
  - ringlet-chase: one `CHASE v:<root> follows DEPTH d LIMIT 100000 FIELDS name`.
Every run checks that all three visit exactly the same set of vertices and names (a
benchmark that cannot agree is not reported). The systems are interleaved root by root (each
BFS on every system in turn), so load from elsewhere on the machine hits them alike. Times:
each root's BFS time is its median over --repeat rounds, and a round is the sum of those over
the roots; ratios are Redis's time over Ringlet's (> 1: Ringlet faster).

Usage: bench/keli_bfs.py [--vertices 20000] [--edges 200000] [--roots 20] [--depth 2]
       [--repeat 3] [--json out.json]
Requires redis-server (scripts/setup.sh), redis-py, and `target/release/ringlet` (built here
if missing). Servers are pinned to CPU 0, this client to CPU 1 where the machine has two.
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RINGLET = os.path.join(ROOT, "target", "release", "ringlet")
LINKS_MAX = 4096


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ping(port, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if redis.Redis(port=port).ping():
                return
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing answers on {port}")


def rmat_edges(n_vertices, n_edges, seed):
    """Graph500 R-MAT: each edge picks a quadrant per bit of the vertex id."""
    rng = random.Random(seed)
    bits = max(1, (n_vertices - 1).bit_length())
    a, b, c = 0.57, 0.19, 0.19
    out = {}
    for _ in range(n_edges):
        u = v = 0
        for _ in range(bits):
            r = rng.random()
            u <<= 1
            v <<= 1
            if r < a:
                pass
            elif r < a + b:
                v |= 1
            elif r < a + b + c:
                u |= 1
            else:
                u |= 1
                v |= 1
        u %= n_vertices
        v %= n_vertices
        if u == v:
            continue
        s = out.setdefault(u, [])
        if len(s) < LINKS_MAX and v not in s:
            s.append(v)
    return out


def load(r, graph, n_vertices, linked):
    """Two passes, as `ringlet load` does: every vertex first, then the links, so each link
    is written after its target exists and gets its location hint."""
    pipe = r.pipeline(transaction=False)
    for v in range(n_vertices):
        pipe.hset(f"v:{v}", "name", f"n{v}")
        if v % 500 == 499:
            pipe.execute()
    pipe.execute()
    for v in range(n_vertices):
        key = f"v:{v}"
        nbrs = [f"v:{t}" for t in graph.get(v, [])]
        if nbrs:
            if linked:
                pipe.execute_command("LINK", "ADD", key, "follows", *nbrs)
            else:
                pipe.hset(key, "follows", " ".join(nbrs))
        if v % 500 == 499:
            pipe.execute()
    pipe.execute()


def bfs_client(r, root, depth):
    """Client-side BFS: one pipelined round trip per level. Returns {key: name}."""
    seen = {root}
    names = {}
    frontier = [root]
    for level in range(depth + 1):
        pipe = r.pipeline(transaction=False)
        for k in frontier:
            pipe.hmget(k, "name", "follows")
        nxt = []
        for k, (name, follows) in zip(frontier, pipe.execute()):
            if name is None:
                continue
            names[k] = name
            if level < depth and follows:
                for t in follows.split(b" "):
                    t = t.decode()
                    if t not in seen:
                        seen.add(t)
                        nxt.append(t)
        frontier = nxt
        if not frontier:
            break
    return names


CHASE_RETRIES = [0]


def bfs_chase(r, root, depth):
    # `time`: the node was descheduled past its 100 ms CHASE bound (a loaded machine); asked
    # again, at most 3 times, counted.
    for _ in range(3):
        *entries, stop = r.execute_command(
            "CHASE", root, "follows", "DEPTH", depth, "LIMIT", 100000, "FIELDS", "name")
        if stop != b"time":
            break
        CHASE_RETRIES[0] += 1
    if stop != b"complete":
        raise RuntimeError(f"CHASE stopped early ({stop!r}); lower --depth")
    return {k.decode(): dict(zip(a[::2], a[1::2]))[b"name"] for k, _, a in entries}


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def pin(pid, cpu):
    if os.cpu_count() and os.cpu_count() >= 2:
        subprocess.run(["taskset", "-pc", str(cpu), str(pid)], capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vertices", type=int, default=20000)
    ap.add_argument("--edges", type=int, default=200000)
    ap.add_argument("--roots", type=int, default=20)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.access(RINGLET, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "ringlet-cli", "--bin", "ringlet"],
                       cwd=ROOT, check=True)
    pin(os.getpid(), 1)
    graph = rmat_edges(a.vertices, a.edges, a.seed)
    n_edges = sum(len(v) for v in graph.values())
    rng = random.Random(a.seed + 1)
    # Roots with at least one out-edge, so every BFS walks.
    candidates = sorted(graph)
    roots = [f"v:{rng.choice(candidates)}" for _ in range(a.roots)]

    tmp = tempfile.mkdtemp(prefix="keli-bfs-")
    rport, gport = free_port(), free_port()
    procs = [
        subprocess.Popen(["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no",
                          "--dir", tmp], stdout=subprocess.DEVNULL),
        subprocess.Popen([RINGLET, "server", "--port", str(gport), "--threads", "1",
                          "--memory-mb", "2048"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        for p in procs:
            pin(p.pid, 0)
        wait_ping(rport)
        wait_ping(gport)
        red, rin = redis.Redis(port=rport), redis.Redis(port=gport)
        t_load_r, _ = timed(load, red, graph, a.vertices, False)
        t_load_g, _ = timed(load, rin, graph, a.vertices, True)
        systems = {
            "redis (client-side BFS)": lambda root: bfs_client(red, root, a.depth),
            "ringlet (client-side BFS)": lambda root: bfs_client(rin, root, a.depth),
            "ringlet (server-side CHASE)": lambda root: bfs_chase(rin, root, a.depth),
        }
        times = {name: [] for name in systems}
        per_root = {name: [[] for _ in roots] for name in systems}
        names = list(systems)
        visited = 0
        for _ in range(a.repeat):
            # Interleaved: each root's BFS runs on every system in turn (the first one
            # rotating), so a burst of load from elsewhere on the machine hits all alike.
            total = {name: 0.0 for name in systems}
            visited = 0
            for i, root in enumerate(roots):
                results = {}
                for j in range(len(names)):
                    name = names[(i + j) % len(names)]
                    t, results[name] = timed(systems[name], root)
                    total[name] += t
                    per_root[name][i].append(t)
                want = results["redis (client-side BFS)"]
                visited += len(want)
                for name, got in results.items():
                    if got != want:
                        raise SystemExit(f"{name} disagrees with Redis on the BFS from {root}: "
                                         f"{len(got)} vs {len(want)} vertices")
            for name in systems:
                times[name].append(total[name])
        # Each root's BFS time is its median over the rounds (a burst of load in one round
        # does not move it); a "round" is the sum of those over the roots.
        med = {k: sum(statistics.median(x) for x in v) for k, v in per_root.items()}
        base = med["redis (client-side BFS)"]
        print(f"graph: {a.vertices} vertices, {n_edges} edges (R-MAT, seed {a.seed}); "
              f"{a.roots} BFS of depth {a.depth}, {visited} vertices visited per round; "
              f"each root's median of {a.repeat} rounds, summed")
        print(f"load: redis {t_load_r:.2f} s, ringlet {t_load_g:.2f} s (pipelined HSET / HSET + LINK ADD)")
        print(f"{'system':32} {'round (ms)':>11} {'per BFS (ms)':>13} {'redis/this':>11}")
        for k, v in med.items():
            print(f"{k:32} {v * 1e3:11.1f} {v * 1e3 / a.roots:13.2f} {base / v:11.2f}")
        if CHASE_RETRIES[0]:
            print(f"CHASE answered `time` and was asked again {CHASE_RETRIES[0]} times")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"args": vars(a), "edges": n_edges, "visited_per_round": visited,
                           "median_round_s": med, "times_s": times,
                           "load_s": {"redis": t_load_r, "ringlet": t_load_g}}, f, indent=1)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
