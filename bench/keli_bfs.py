#!/usr/bin/env python3
"""KELI's BFS workload: Ringlet with links (server-side CHASE, client-side BFS, one-sided
CHASE) beside Redis 7 with the same graph as hashes whose fields hold neighbour keys, same
machine, same run.

Graph: a seeded Graph500-style R-MAT generator (a=0.57, b=0.19, c=0.19; numpy) over
--vertices vertices and --edges directed edges (duplicates and self-loops dropped). KELI's
scale is --vertices 1000000 --edges 22000000. Vertex v is key `v:<id>` with a `name` field
and its out-edges ("follows"):
  - Ringlet: loaded by `ringlet load` from CSV, the follower list chunked at --chunk (100)
    links per item as KELI does (docs/design/loader.md): `follows` in `v:<id>` holds the
    first 100, `follows.next` links the item `v:<id>#follows#1` with the next 100, and so on;
    every link carries a location hint (pass 2 writes links after every item exists).
  - Redis: loaded by `redis-cli --pipe` (Redis's own mass insertion), one hash per vertex
    whose `follows` field holds all the neighbour keys joined by spaces: Redis's best layout
    (one read per vertex, no chunks to chase).

BFS from --roots random roots (the same for every system) to --depth hops, returning every
visited vertex's `name`. Roots are drawn among vertices with out-edges whose BFS visits at
most --reach-max vertices (R-MAT's hubs put most 2-hop neighbourhoods of a 1M graph near
or above CHASE's LIMIT bound of 100,000; the bound keeps every system's walk complete):
  - redis:          client-side, one pipelined round trip of HMGETs per level;
  - ringlet-client: the same BFS against Ringlet, plus one pipelined round trip per chunk
                    of the longest chain at that level (HMGET shows a link list as its
                    space-joined targets, so the code is otherwise Redis's);
  - ringlet-chase:  one `CHASE v:<root> follows CHUNKED DEPTH d LIMIT 100000 FIELDS name`;
  - one-sided:      (--one-sided) the same CHASE by `ringlet-keli-bfs` (Rust,
                    `ShmReader::chase` over the node's shared memory; no round trip);
  - cluster CHASE:  (--cluster N) the same CHASE against a `ringlet up --nodes N` cluster
                    loaded by the same loader (hops to other nodes are batched RECORDS calls).
Every run checks that all systems visit exactly the same vertices with the same names (a
benchmark that cannot agree is not reported). The networked systems are interleaved root by
root, so load from elsewhere on the machine hits them alike; one-sided runs after them. Times:
each root's BFS time is its median over --repeat rounds, and a round is the sum of those over
the roots; ratios are Redis's time over Ringlet's (> 1: Ringlet faster).

Usage: bench/keli_bfs.py [--vertices 20000] [--edges 200000] [--roots 20] [--depth 2]
       [--repeat 3] [--chunk 100] [--reach-max 50000] [--one-sided] [--cluster 3] [--json F]
Requires redis-server and redis-cli (scripts/setup.sh), redis-py (hiredis recommended),
numpy, `target/release/ringlet` (and `ringlet-keli-bfs` for --one-sided; built here if
missing). Servers are pinned to CPU 0, this client to CPU 1 where the machine has two.
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import redis

try:  # the generator needs numpy; the BFS functions (imported by tests) do not
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RINGLET = os.path.join(ROOT, "target", "release", "ringlet")
KELI_BFS = os.path.join(ROOT, "target", "release", "ringlet-keli-bfs")
CHASE_LIMIT = 100000
MAPPING = """
[[records]]
source = "vertices"
key = "v:{id}"
attributes = ["name"]

[[lists]]
source = "edges"
key = "v:{src}"
field = "follows"
target = "v:{dst}"
chunk = %d
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ping(port, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if redis.Redis(port=port).ping():
                return
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
        except redis.exceptions.ResponseError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing answers on {port}")


def rmat(n_vertices, n_edges, seed):
    """Graph500 R-MAT: each edge picks a quadrant per bit of the vertex id. Returns the
    deduplicated edges as CSR (indptr, dst), each vertex's targets in ascending order."""
    rng = np.random.default_rng(seed)
    bits = max(1, (n_vertices - 1).bit_length())
    a, b, c = 0.57, 0.19, 0.19
    keys = []
    step = 4_000_000
    for lo in range(0, n_edges, step):
        m = min(step, n_edges - lo)
        u = np.zeros(m, dtype=np.int64)
        v = np.zeros(m, dtype=np.int64)
        for _ in range(bits):
            r = rng.random(m)
            u = (u << 1) | (r >= a + b)
            v = (v << 1) | (((r >= a) & (r < a + b)) | (r >= a + b + c))
        u %= n_vertices
        v %= n_vertices
        keep = u != v
        keys.append(u[keep] * n_vertices + v[keep])
    keys = np.unique(np.concatenate(keys))
    src, dst = keys // n_vertices, keys % n_vertices
    indptr = np.zeros(n_vertices + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n_vertices), out=indptr[1:])
    return indptr, dst


def reach(indptr, dst, root, depth):
    """How many vertices a BFS of `depth` hops from `root` visits (numpy)."""
    seen = np.zeros(len(indptr) - 1, dtype=bool)
    seen[root] = True
    frontier = np.array([root])
    total = 1
    for _ in range(depth):
        if len(frontier) == 0:
            break
        parts = [dst[indptr[f]:indptr[f + 1]] for f in frontier]
        nxt = np.unique(np.concatenate(parts)) if parts else frontier[:0]
        nxt = nxt[~seen[nxt]]
        seen[nxt] = True
        total += len(nxt)
        frontier = nxt
    return total


def bulk(b):
    return b"$%d\r\n%s\r\n" % (len(b), b)


def write_data(tmp, indptr, dst, chunk):
    """The Redis mass-insertion file and Ringlet's CSV sources + mapping."""
    n = len(indptr) - 1
    keys = [b"v:%d" % i for i in range(n)]
    resp = os.path.join(tmp, "redis.resp")
    with open(resp, "wb") as f:
        out = []
        for i in range(n):
            lo, hi = indptr[i], indptr[i + 1]
            if hi > lo:
                joined = b" ".join([keys[t] for t in dst[lo:hi].tolist()])
                out.append(b"*6\r\n$4\r\nHSET\r\n" + bulk(keys[i]) + b"$4\r\nname\r\n"
                           + bulk(b"n%d" % i) + b"$7\r\nfollows\r\n" + bulk(joined))
            else:
                out.append(b"*4\r\n$4\r\nHSET\r\n" + bulk(keys[i]) + b"$4\r\nname\r\n"
                           + bulk(b"n%d" % i))
            if len(out) >= 10000:
                f.write(b"".join(out))
                out.clear()
        f.write(b"".join(out))
    vcsv = os.path.join(tmp, "vertices.csv")
    with open(vcsv, "w") as f:
        f.write("id,name\n")
        for lo in range(0, n, 100000):
            f.write("".join(f"{i},n{i}\n" for i in range(lo, min(n, lo + 100000))))
    ecsv = os.path.join(tmp, "edges.csv")
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    with open(ecsv, "w") as f:
        f.write("src,dst\n")
        step = 1_000_000
        for lo in range(0, len(dst), step):
            s, d = src[lo:lo + step].tolist(), dst[lo:lo + step].tolist()
            f.write("".join(f"{a},{b}\n" for a, b in zip(s, d)))
    mapping = os.path.join(tmp, "mapping.toml")
    with open(mapping, "w") as f:
        f.write(MAPPING % chunk)
    return resp, vcsv, ecsv, mapping


def bfs_redis(r, root, depth):
    """Client-side BFS on Redis: one pipelined round trip per level. Returns {key: name}."""
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
                for t in follows.decode().split(" "):
                    if t not in seen:
                        seen.add(t)
                        nxt.append(t)
        frontier = nxt
        if not frontier:
            break
    return names


def bfs_ringlet_client(r, root, depth):
    """The same BFS over Ringlet's chunked lists: per level, one round trip for the
    vertices and one more per chunk of the longest chain (HMGET follows follows.next)."""
    seen = {root}
    names = {}
    frontier = [root]
    for level in range(depth + 1):
        follow = level < depth
        pipe = r.pipeline(transaction=False)
        for k in frontier:
            if follow:
                pipe.hmget(k, "name", "follows", "follows.next")
            else:
                pipe.hmget(k, "name")
        nxt, chunks = [], []

        def take(follows):
            for t in follows.decode().split(" "):
                if t not in seen:
                    seen.add(t)
                    nxt.append(t)

        for k, got in zip(frontier, pipe.execute()):
            if got[0] is None:
                continue
            names[k] = got[0]
            if follow:
                if got[1]:
                    take(got[1])
                if got[2]:
                    chunks.append(got[2].decode())
        # Chains are at most (edges / chunk) long; each pass goes one chunk further.
        for _ in range(1_000_000):
            if not chunks:
                break
            pipe = r.pipeline(transaction=False)
            for c in chunks:
                pipe.hmget(c, "follows", "follows.next")
            nexts = []
            for follows, more in pipe.execute():
                if follows:
                    take(follows)
                if more:
                    nexts.append(more.decode())
            chunks = nexts
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
            "CHASE", root, "follows", "CHUNKED", "DEPTH", depth, "LIMIT", CHASE_LIMIT,
            "FIELDS", "name")
        if stop != b"time":
            break
        CHASE_RETRIES[0] += 1
    if stop != b"complete":
        raise RuntimeError(f"CHASE from {root} stopped early ({stop!r}); lower --reach-max")
    return {k.decode(): a[1] for k, _, a in entries}


class ClusterChase:
    """CHASE against a cluster: sent to the root's coordinator (one client round trip;
    the node forwards hops to other nodes in batches). MOVED is followed once and the
    slot's node remembered."""

    def __init__(self, ports):
        self.conns = {p: redis.Redis(port=p) for p in ports}
        self.slot_port = {}
        self.first = ports[0]

    def __call__(self, root, depth):
        port = self.slot_port.get(root, self.first)
        for _ in range(3):
            try:
                return bfs_chase(self.conns[port], root, depth)
            except redis.exceptions.ResponseError as e:
                # redis-py raises MovedError ("<slot> <host>:<port>") for MOVED.
                m = re.search(r"(?:MOVED )?\d+ [^:\s]+:(\d+)", str(e))
                if not m:
                    raise
                port = int(m.group(1))
                self.conns.setdefault(port, redis.Redis(port=port))
                self.slot_port[root] = port
        raise RuntimeError(f"CHASE from {root}: too many redirections")


def digest(names):
    """Order-free digest of {key: name} (as ringlet-keli-bfs computes it)."""
    total = 0
    for k, v in names.items():
        h = 0xcbf29ce484222325
        for byte in k.encode() + b"=" + v:
            h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        total = (total + h) & 0xFFFFFFFFFFFFFFFF
    return len(names), total


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def pin(pid, cpu):
    if os.cpu_count() and os.cpu_count() >= 2:
        subprocess.run(["taskset", "-pc", str(cpu), str(pid)], capture_output=True)


def run_load(cmd, stdin=None):
    t = time.perf_counter()
    p = subprocess.run(cmd, stdin=stdin, capture_output=True, text=True)
    el = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    return el, p.stdout.strip().splitlines()[-1:] if p.stdout.strip() else []


def start_cluster(nodes, memory_mb, log_path):
    """`ringlet up --nodes N --spares 0` (default memgest); returns (process, ports). A base
    port whose neighbours turn out taken is retried (at most 3 tries)."""
    err = ""
    for _ in range(3):
        base = free_port()
        # stderr to a file: an unread pipe would stall the nodes once it filled.
        with open(log_path, "w") as log:
            proc = subprocess.Popen([RINGLET, "up", "--nodes", str(nodes), "--spares", "0",
                                     "--port", str(base), "--memory-mb", str(memory_mb)],
                                    stdout=subprocess.PIPE, stderr=log, text=True)
        # Bounded by the process's output: it prints this line once every node is up.
        for line in proc.stdout:
            if line.startswith("ringlet cluster ready"):
                ports = [base + i for i in range(nodes)]
                for p in ports:
                    wait_ping(p)
                return proc, ports
        proc.wait(timeout=30)
        with open(log_path) as log:
            err = log.read()[-1000:]
    raise RuntimeError(f"ringlet up did not become ready: {err}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vertices", type=int, default=20000)
    ap.add_argument("--edges", type=int, default=200000)
    ap.add_argument("--roots", type=int, default=20)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--reach-max", type=int, default=50000)
    ap.add_argument("--memory-mb", type=int, default=0,
                    help="Ringlet's memory (default: sized from --edges)")
    ap.add_argument("--one-sided", action="store_true")
    ap.add_argument("--cluster", type=int, default=0, metavar="N")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.access(RINGLET, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "ringlet-cli", "--bin", "ringlet"],
                       cwd=ROOT, check=True)
    if a.one_sided and not os.access(KELI_BFS, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "ringlet-tools", "--bin",
                        "ringlet-keli-bfs"], cwd=ROOT, check=True)
    pin(os.getpid(), 1)
    memory_mb = a.memory_mb or max(1024, 256 + a.edges * 96 // (1 << 20))

    t0 = time.perf_counter()
    indptr, dst = rmat(a.vertices, a.edges, a.seed)
    n_edges = len(dst)
    degree = np.diff(indptr)
    t_gen = time.perf_counter() - t0
    rng = random.Random(a.seed + 1)
    candidates = np.flatnonzero(degree).tolist()
    roots, reaches = [], []
    # Bounded draw: at most 1,000 tries per root.
    for _ in range(a.roots * 1000):
        if len(roots) == a.roots:
            break
        v = rng.choice(candidates)
        n = reach(indptr, dst, v, a.depth)
        if n <= a.reach_max:
            roots.append(f"v:{v}")
            reaches.append(n)
    if len(roots) < a.roots:
        raise SystemExit(f"only {len(roots)} roots reach <= {a.reach_max} vertices")

    tmp = tempfile.mkdtemp(prefix="keli-bfs-")
    procs = []
    try:
        t0 = time.perf_counter()
        resp, vcsv, ecsv, mapping = write_data(tmp, indptr, dst, a.chunk)
        t_write = time.perf_counter() - t0
        rport, gport = free_port(), free_port()
        sock = os.path.join(tmp, "shm.sock")
        gcmd = [RINGLET, "server", "--port", str(gport), "--threads", "1",
                "--memory-mb", str(memory_mb)]
        if a.one_sided:
            gcmd += ["--shm-socket", sock]
        procs = [
            subprocess.Popen(["redis-server", "--port", str(rport), "--save", "",
                              "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL),
            subprocess.Popen(gcmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        ]
        for p in procs:
            pin(p.pid, 0)
        wait_ping(rport)
        wait_ping(gport)
        with open(resp, "rb") as f:
            t_load_r, _ = run_load(["redis-cli", "-p", str(rport), "--pipe"], stdin=f)
        t_load_g, load_summary = run_load([RINGLET, "load", "--port", str(gport), "--mapping",
                                           mapping, "--csv", f"vertices={vcsv}",
                                           "--csv", f"edges={ecsv}"])
        red, rin = redis.Redis(port=rport), redis.Redis(port=gport)
        mem_r = red.info("memory")["used_memory"]
        mem_g = rin.info("memory").get("used_memory", 0)
        cluster = None
        t_load_c = None
        if a.cluster:
            cproc, cports = start_cluster(a.cluster, memory_mb, os.path.join(tmp, "cluster.log"))
            procs.append(cproc)
            t_load_c, _ = run_load([RINGLET, "load", "--port", str(cports[0]), "--mapping",
                                    mapping, "--csv", f"vertices={vcsv}",
                                    "--csv", f"edges={ecsv}"])
            cluster = ClusterChase(cports)
        os.unlink(resp)
        os.unlink(ecsv)

        systems = {
            "redis (client-side BFS)": lambda root: bfs_redis(red, root, a.depth),
            "ringlet (client-side BFS)": lambda root: bfs_ringlet_client(rin, root, a.depth),
            "ringlet (server-side CHASE)": lambda root: bfs_chase(rin, root, a.depth),
        }
        if cluster:
            systems[f"ringlet {a.cluster}-node cluster CHASE"] = lambda root: cluster(root, a.depth)
        base_name = "redis (client-side BFS)"
        per_root = {name: [[] for _ in roots] for name in systems}
        names = list(systems)
        want_digest = [None] * len(roots)
        dropped = {}
        visited = 0
        for _ in range(a.repeat):
            # Interleaved: each root's BFS runs on every system in turn (the first one
            # rotating), so a burst of load from elsewhere on the machine hits all alike.
            visited = 0
            for i, root in enumerate(roots):
                results = {}
                for j in range(len(names)):
                    name = names[(i + j) % len(names)]
                    if name in dropped:
                        continue
                    try:
                        t, results[name] = timed(systems[name], root)
                    except RuntimeError as e:
                        if name == base_name or "cluster" not in name:
                            raise
                        # The cluster's CHASE hit its bounds (a chain of chunks on other
                        # nodes is one RECORDS round per chunk): reported, not timed.
                        dropped[name] = str(e)
                        continue
                    per_root[name][i].append(t)
                want = results[base_name]
                visited += len(want)
                want_digest[i] = digest(want)
                for name, got in results.items():
                    if got != want:
                        raise SystemExit(f"{name} disagrees with Redis on the BFS from {root}: "
                                         f"{len(got)} vs {len(want)} vertices")

        def report():
            # Each root's BFS time is its median over the rounds (a burst of load in one
            # round does not move it); a "round" is the sum of those over the roots.
            med.update({k: sum(statistics.median(x) for x in v) for k, v in per_root.items()
                        if k not in dropped})
            for k, why in dropped.items():
                print(f"{k}: not timed: {why}")
            base = med[base_name]
            print(f"{'system':34} {'round (ms)':>11} {'per BFS (ms)':>13} {'redis/this':>11}")
            for k, v in med.items():
                print(f"{k:34} {v * 1e3:11.1f} {v * 1e3 / a.roots:13.2f} {base / v:11.2f}")
            print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)

        med = {}
        print(f"graph: {a.vertices} vertices, {n_edges} edges (R-MAT, seed {a.seed}; "
              f"generated in {t_gen:.1f} s, files written in {t_write:.1f} s); {a.roots} BFS "
              f"of depth {a.depth} (reach <= {a.reach_max}: {min(reaches)}..{max(reaches)}), "
              f"{visited} vertices visited per round; each root's median of {a.repeat} "
              f"rounds, summed")
        print(f"load: redis-cli --pipe {t_load_r:.1f} s; ringlet load {t_load_g:.1f} s "
              f"({' '.join(load_summary)})"
              + (f"; cluster ringlet load {t_load_c:.1f} s" if t_load_c else ""))
        print(f"memory: redis used_memory {mem_r / 2**20:.0f} MiB, ringlet {mem_g / 2**20:.0f} MiB")
        if CHASE_RETRIES[0]:
            print(f"CHASE answered `time` and was asked again {CHASE_RETRIES[0]} times")
        report()
        one_sided_stats = ""
        if a.one_sided:
            rfile = os.path.join(tmp, "roots.txt")
            with open(rfile, "w") as f:
                f.write("".join(r + "\n" for r in roots))
            p = subprocess.run([KELI_BFS, "--socket", sock, "--roots", rfile, "--depth",
                                str(a.depth), "--rounds", str(a.repeat)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"ringlet-keli-bfs failed: {p.stderr[-2000:]}")
            out = p.stdout
            rounds, visits = [], []
            for line in out.splitlines():
                kind, _, rest = line.partition(" ")
                if kind == "round":
                    rounds.append([float(x) / 1e6 for x in rest.split()])
                elif kind == "visit":
                    n, d = rest.split()
                    visits.append((int(n), int(d)))
                elif kind == "stats":
                    one_sided_stats = rest
            if visits != want_digest:
                raise SystemExit("one-sided CHASE disagrees with Redis")
            per_root["ringlet one-sided CHASE (Rust)"] = [list(x) for x in zip(*rounds)]
            report()
        if one_sided_stats:
            print(f"one-sided reader: {one_sided_stats}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"args": vars(a), "edges": n_edges, "visited_per_round": visited,
                           "median_round_s": med, "per_root_s": per_root,
                           "load_s": {"redis": t_load_r, "ringlet": t_load_g,
                                      "cluster": t_load_c}}, f, indent=1)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
