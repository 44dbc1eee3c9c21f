#!/usr/bin/env python3
"""Ring's per-memgest figures on this machine (Ring's table, Fig. 7, 8, 9).

Starts `ringlet up --nodes 5 --spares 1 --pg-data 3 --pg-redundant 2` (Ring's evaluation shape:
5 nodes, memgests sharing s = 3 data nodes; d = 2 redundant nodes so rep:3 and ec:3+2 fit) and
a Redis 7 `redis-server` beside it, then for each memgest (none, rep:2, rep:3, ec:2+1, ec:3+1,
ec:3+2), with 1 KiB values (Ring Fig. 9's size):

  load     --keys keys with `SET k v MEMGEST m`, --conns pipelined connections per node (one
           client thread each, batches of --batch): put throughput (ops/s, relative to none);
           Redis gets the same number of connections in total;
  memory   cluster-wide bytes from `MEMGEST INFO m` — engine stored_bytes (every copy), plus
           for ec the arena data, parity and metadata bytes (all_ec_*) — and the sum of the
           node processes' RSS growth over the load, each divided by the payload (key + value
           bytes written): memory per payload byte;
  put      --ops sequential `SET ... MEMGEST m` from one client to the key's coordinator:
           p50 / p99 latency (relative to none);
  get      --ops sequential GETs of loaded keys: p50 / p99;
  move     --ops sequential `MEMGEST MOVE k m` of keys written beforehand under another
           memgest (none; rep:3 when m is none): p50 / p99, relative to put into m (Fig. 8).

Redis 7 gets the same sequential SET/GET latency loops and the same pipelined load, in the
same run. Each run starts a fresh cluster; --repeat runs, medians quoted. A memgest whose
writes the build refuses (ec before the replica core's ec path) is reported as unavailable.

Usage: bench/memgest.py [--ringlet PATH] [--repeat 3] [--keys 20000] [--ops 2000]
                        [--value-bytes 1024] [--memory-mb 512] [--memgests rep3,ec32]
                        [--json out.json]
Requires: a release build of `ringlet` (`cargo build --release -p ringlet-cli`), redis-server,
redis-py.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import redis
from redis.crc import key_slot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_base  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EC_FIELDS = ["all_ec_data_bytes", "all_ec_parity_bytes", "all_ec_meta_bytes"]
MEMGESTS = [("none", "none"), ("rep2", "rep:2"), ("rep3", "rep:3"),
            ("ec21", "ec:2+1"), ("ec31", "ec:3+1"), ("ec32", "ec:3+2")]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_kinds(pid):
    """(RssAnon, RssShmem) of a process in bytes: heap and stacks vs the engine's memfd
    regions (index and data), which are shared memory."""
    anon = shmem = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1]) * 1024
            elif line.startswith("RssShmem:"):
                shmem = int(line.split()[1]) * 1024
    return anon, shmem


def region_rss(pid):
    """Resident bytes of the engine's two shared-memory regions of a process, from
    /proc/PID/smaps: (data region, index region). The rest of RssShmem is small (none)."""
    data = index = 0
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            w = line.split()
            if w and "-" in w[0] and len(w) >= 5 and not w[0].endswith(":"):
                name = " ".join(w[5:])
                cur = ("data" if "ringlet-data" in name else
                       "index" if "ringlet-index" in name else None)
            elif cur and w[:1] == ["Rss:"]:
                if cur == "data":
                    data += int(w[1]) * 1024
                else:
                    index += int(w[1]) * 1024
    return data, index


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Cluster:
    def __init__(self, exe, memory_mb):
        self.base = free_base(8)  # 5 nodes + 2 spares + the control port
        cmd = [exe, "up", "--nodes", "5", "--spares", "1", "--port", str(self.base),
               "--pg-data", "3", "--pg-redundant", "2", "--default-memgest", "none",
               "--memory-mb", str(memory_mb)]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.pids = {}
        deadline = time.time() + 60
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("ringlet up exited before ready")
            w = line.split()
            if w[:1] == ["node"] and w[2:3] == ["pid"]:
                self.pids[int(w[1])] = int(w[3])
            if line.startswith("ringlet cluster ready"):
                break
            if time.time() > deadline:
                raise RuntimeError("cluster not ready in 60 s")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.conns = {}
        self.any = self.conn(("127.0.0.1", self.base))
        self.refresh()

    def conn(self, addr):
        if addr not in self.conns:
            self.conns[addr] = redis.Redis(host=addr[0], port=addr[1], socket_timeout=30)
        return self.conns[addr]

    def refresh(self):
        self.slots = [None] * 16384
        for r in self.any.execute_command("CLUSTER", "SLOTS"):
            first, last, master = r[0], r[1], r[2]
            addr = (master[0].decode(), int(master[1]))
            for s in range(first, last + 1):
                self.slots[s] = addr

    def node_for(self, key):
        return self.slots[key_slot(key.encode() if isinstance(key, str) else key)]

    def call(self, key, *args):
        for _ in range(5):
            try:
                return self.conn(self.node_for(key)).execute_command(*args)
            except redis.exceptions.ResponseError as e:
                if str(e).startswith("MOVED"):
                    self.refresh()
                    continue
                raise
        raise RuntimeError("MOVED loop")

    def rss(self):
        return sum(rss_bytes(p) for p in self.pids.values())

    def rss_kinds(self):
        parts = [rss_kinds(p) for p in self.pids.values()]
        return sum(a for a, _ in parts), sum(s for _, s in parts)

    def regions(self):
        parts = [region_rss(p) for p in self.pids.values()]
        return sum(d for d, _ in parts), sum(i for _, i in parts)

    def node_memory(self):
        """Sum over the nodes of INFO memory's used_memory (engine: committed slab pages +
        index) and allocator_allocated (glibc's live heap bytes)."""
        used = alloc = 0
        for port in range(self.base, self.base + len(self.pids)):
            # redis-py parses INFO into a dict
            kv = self.conn(("127.0.0.1", port)).info("memory")
            used += int(kv.get("used_memory", 0))
            alloc += int(kv.get("allocator_allocated", 0))
        return used, alloc

    def info(self, name):
        text = self.any.execute_command("MEMGEST", "INFO", name)
        text = text.decode() if isinstance(text, bytes) else text
        return dict(l.split(":", 1) for l in text.splitlines() if ":" in l and not l.startswith("#"))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for p in self.pids.values():
            # Only a node that is still ours: after `terminate` its pid may already have
            # been reused by another process (a compiler on a busy machine).
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    mine = f.read().split(b"\0")[:2] == [self.cmd[0].encode(), b"server"]
                if mine:
                    os.kill(p, 9)
            except OSError:
                pass


def val(key, n):
    """The value stored under `key`: the key itself, padded to n bytes, so a GET that returns
    another key's value (or a torn one) is caught, not just a missing one."""
    k = key.encode() + b"|"
    return (k * (n // len(k) + 1))[:n]


def check_gets(keys, got, n, what):
    """Every timed GET must have returned its key's value: a fast wrong answer is no figure."""
    bad = [(k, g) for k, g in zip(keys, got) if g != val(k, n)]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} of {len(got)} GETs returned a wrong value, "
                           f"first {bad[0][0]!r} -> {bad[0][1]!r:.80}")


def load(c, keys, value, extra):
    """Pipelined SETs, one thread per node; returns ops/s."""
    by_node = {}
    for k in keys:
        by_node.setdefault(c.node_for(k), []).append(k)
    errors = []

    def run(addr, ks, batch):
        r = redis.Redis(host=addr[0], port=addr[1], socket_timeout=60)
        for i in range(0, len(ks), batch):
            p = r.pipeline(transaction=False)
            for k in ks[i:i + batch]:
                p.execute_command("SET", k, val(k, value), *extra)
            for res in p.execute(raise_on_error=False):
                if isinstance(res, Exception):
                    errors.append(str(res))
    t0 = time.perf_counter()
    # --conns connections per node, each pipelining its share: the RESP front runs one
    # connection's writes one after another, so concurrency comes from connections.
    ts = [threading.Thread(target=run, args=(a, ks[j::ARGS.conns], ARGS.batch))
          for a, ks in by_node.items() for j in range(ARGS.conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} load errors, first: {errors[0]}")
    return len(keys) / dt


def timed(fn, n):
    out = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        fn(i)
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    return out


def bench_memgest(c, name, desc, run_id, value):
    row = {"memgest": desc}
    probe = f"probe-{name}"
    try:
        c.call(probe, "SET", probe, "x", "MEMGEST", name)
        c.call(probe, "DEL", probe)
    except redis.exceptions.ResponseError as e:
        row["unavailable"] = str(e)
        return row
    keys = [f"r{run_id}:{name}:load:{i}" for i in range(ARGS.keys)]
    payload = sum(len(k) + value for k in keys)
    i0 = c.info(name)
    info0 = int(i0["stored_bytes"])
    ec0 = sum(int(i0.get(f, 0)) for f in EC_FIELDS)
    rss0 = c.rss()
    anon0, shmem0 = c.rss_kinds()
    data0, index0 = c.regions()
    used0, alloc0 = c.node_memory()
    row["put_ops_s"] = load(c, keys, value, ["MEMGEST", name])
    time.sleep(1.5)  # replicas catch up, usage reports (every 100 ms) arrive
    row["rss_per_payload"] = (c.rss() - rss0) / payload
    anon1, shmem1 = c.rss_kinds()
    # The growth split by kind: heap (side indexes, ec arenas and parity, buffers) and the
    # engine's shared-memory regions (entries, index).
    row["rss_anon_per_payload"] = (anon1 - anon0) / payload
    row["rss_shmem_per_payload"] = (shmem1 - shmem0) / payload
    # The shared memory split by region (smaps), and the nodes' own figures: the engine's
    # committed pages + index (used_memory) and glibc's live heap (allocator_allocated).
    data1, index1 = c.regions()
    used1, alloc1 = c.node_memory()
    row["data_region_per_payload"] = (data1 - data0) / payload
    row["index_region_per_payload"] = (index1 - index0) / payload
    row["used_memory_per_payload"] = (used1 - used0) / payload
    row["allocated_per_payload"] = (alloc1 - alloc0) / payload
    i1 = c.info(name)
    # ec: values, arena, parity and metadata live outside the engine's per-memgest counters;
    # the cluster-wide ec accounting grows only with this memgest's load (one at a time).
    ec1 = sum(int(i1.get(f, 0)) for f in EC_FIELDS)
    row["info_per_payload"] = (int(i1["stored_bytes"]) - info0 + ec1 - ec0) / payload
    row["info_stored_keys"] = int(i1["stored_keys"])
    row["engine_per_payload"] = (int(i1["stored_bytes"]) - info0) / payload
    for f in EC_FIELDS:
        if f in i1:
            row[f.replace("all_ec_", "ec_").replace("_bytes", "_per_payload")] = (
                int(i1[f]) - int(i0.get(f, 0))) / payload
    put_keys = [f"r{run_id}:{name}:put:{i}" for i in range(ARGS.ops)]
    lat = timed(lambda i: c.call(put_keys[i], "SET", put_keys[i], val(put_keys[i], value),
                                 "MEMGEST", name), ARGS.ops)
    row["put_p50_us"], row["put_p99_us"] = pct(lat, 0.5), pct(lat, 0.99)
    got = [None] * ARGS.ops
    lat = timed(lambda i: got.__setitem__(i, c.call(keys[i], "GET", keys[i])), ARGS.ops)
    check_gets(keys, got, value, f"{desc} get")
    row["get_p50_us"], row["get_p99_us"] = pct(lat, 0.5), pct(lat, 0.99)
    # The timed SETs are read back too (after timing: the check is not in the figure).
    check_gets(put_keys, [c.call(k, "GET", k) for k in put_keys], value, f"{desc} put")
    row["checked_gets"] = 2 * ARGS.ops
    src = "rep3" if name == "none" else "none"
    mv_keys = [f"r{run_id}:{name}:mv:{i}" for i in range(ARGS.ops)]
    load(c, mv_keys, value, ["MEMGEST", src])
    time.sleep(0.5)
    lat = timed(lambda i: c.call(mv_keys[i], "MEMGEST", "MOVE", mv_keys[i], name), ARGS.ops)
    row["move_p50_us"], row["move_p99_us"] = pct(lat, 0.5), pct(lat, 0.99)
    row["move_from"] = src
    # A MOVE must keep the value and land in the memgest named.
    check_gets(mv_keys, [c.call(k, "GET", k) for k in mv_keys], value, f"{desc} move")
    wrong = [k for k in mv_keys[:100] if _s(c.call(k, "MEMGEST", "KEY", k)[0]) != name]
    if wrong:
        raise RuntimeError(f"{desc} move: MEMGEST KEY {wrong[0]} is not {name}")
    return row


def _s(x):
    return x.decode() if isinstance(x, bytes) else x


def bench_redis(value):
    port = free_base(1)
    p = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        keys = [f"redis:load:{i}" for i in range(ARGS.keys)]

        def run(ks):
            rr = redis.Redis(port=port)
            for i in range(0, len(ks), ARGS.batch):
                pl = rr.pipeline(transaction=False)
                for k in ks[i:i + ARGS.batch]:
                    pl.set(k, val(k, value))
                pl.execute()
        n = 5 * ARGS.conns
        ts = [threading.Thread(target=run, args=(keys[j::n],)) for j in range(n)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        row = {"memgest": "redis 7 (1 process)", "put_ops_s": len(keys) / (time.perf_counter() - t0)}
        pk = [f"redis:put:{i}" for i in range(ARGS.ops)]
        lat = timed(lambda i: r.set(pk[i], val(pk[i], value)), ARGS.ops)
        row["put_p50_us"], row["put_p99_us"] = pct(lat, 0.5), pct(lat, 0.99)
        got = [None] * ARGS.ops
        lat = timed(lambda i: got.__setitem__(i, r.get(keys[i])), ARGS.ops)
        check_gets(keys, got, value, "redis get")
        row["get_p50_us"], row["get_p99_us"] = pct(lat, 0.5), pct(lat, 0.99)
        return row
    finally:
        p.terminate()
        p.wait()


def one_run(run_id, exe):
    value = ARGS.value_bytes
    c = Cluster(exe, ARGS.memory_mb)
    try:
        chosen = [(n, d) for n, d in MEMGESTS if not ARGS.memgests or n in ARGS.memgests]
        for n, d in chosen:
            if n != "none":
                c.any.execute_command("MEMGEST", "CREATE", n, d)
        rows = [bench_memgest(c, n, d, run_id, value) for n, d in chosen]
    finally:
        c.stop()
    rows.append(bench_redis(value))
    return rows, c.cmd


def median_rows(runs):
    out = []
    for i, first in enumerate(runs[0]):
        row = {"memgest": first["memgest"]}
        if "unavailable" in first:
            row["unavailable"] = first["unavailable"]
            out.append(row)
            continue
        for k, v in first.items():
            if isinstance(v, (int, float)):
                vals = [r[i][k] for r in runs if k in r[i]]
                row[k] = statistics.median(vals)
            elif k != "memgest":
                row[k] = v
        out.append(row)
    return out


def table(rows):
    # Ratios against `none` when it ran (`--memgests` may leave it out).
    base = next((r for r in rows if r["memgest"] == "none"), None)
    lines = ["| memgest | memory / payload byte: engine (MEMGEST INFO) | RSS growth | put p50 / p99 µs | put p50 vs none | put throughput ops/s | vs none | get p50 / p99 µs | MOVE p50 / p99 µs | MOVE p50 vs put p50 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "unavailable" in r:
            lines.append(f"| {r['memgest']} | unavailable: {r['unavailable']} |||||||||")
            continue
        f = lambda k, fmt="{:.0f}": fmt.format(r[k]) if k in r else "—"
        rel = lambda k: f"{r[k] / base[k]:.2f}×" if base and k in r and k in base else "—"
        mv = f"{r['move_p50_us'] / r['put_p50_us']:.2f}×" if "move_p50_us" in r else "—"
        lines.append(
            f"| {r['memgest']} | {f('info_per_payload', '{:.2f}')} | {f('rss_per_payload', '{:.2f}')} "
            f"| {f('put_p50_us')} / {f('put_p99_us')} | {rel('put_p50_us')} | {f('put_ops_s')} | {rel('put_ops_s')} "
            f"| {f('get_p50_us')} / {f('get_p99_us')} | {f('move_p50_us')} / {f('move_p99_us')} | {mv} |")
    return "\n".join(lines)


def breakdown(rows):
    """Where each memgest's bytes per payload byte go (the BENCHMARKS.md breakdown)."""
    lines = ["| memgest | engine (index records, values of rep/none) | ec arena data | ec parity "
             "| ec key metadata | total (MEMGEST INFO) | RSS growth | of which heap (RssAnon) "
             "| of which engine regions (RssShmem) | data region | index region "
             "| engine used_memory | heap allocated (glibc) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "unavailable" in r or "engine_per_payload" not in r:
            continue
        f = lambda k: f"{r[k]:.2f}" if k in r else "—"
        lines.append(f"| {r['memgest']} | {f('engine_per_payload')} | {f('ec_data_per_payload')} "
                     f"| {f('ec_parity_per_payload')} | {f('ec_meta_per_payload')} "
                     f"| {f('info_per_payload')} | {f('rss_per_payload')} "
                     f"| {f('rss_anon_per_payload')} | {f('rss_shmem_per_payload')} "
                     f"| {f('data_region_per_payload')} | {f('index_region_per_payload')} "
                     f"| {f('used_memory_per_payload')} | {f('allocated_per_payload')} |")
    return "\n".join(lines)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", default=os.path.join(ROOT, "target", "release", "ringlet"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--conns", type=int, default=4, help="load connections per node")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--memory-mb", type=int, default=512)
    ap.add_argument("--json")
    ap.add_argument("--memgests", type=lambda v: v.split(","), default=None,
                    help="comma list of memgests to run, by name (none,rep2,rep3,ec21,ec31,ec32); "
                         "default all, in that order")
    ARGS = ap.parse_args()
    names = [n for n, _ in MEMGESTS]
    if ARGS.memgests and any(n not in names for n in ARGS.memgests):
        sys.exit(f"--memgests: names are {','.join(names)}")
    if not os.path.exists(ARGS.ringlet):
        sys.exit(f"no ringlet binary at {ARGS.ringlet}: cargo build --release -p ringlet-cli")
    runs = []
    for i in range(ARGS.repeat):
        rows, cmd = one_run(i, ARGS.ringlet)
        runs.append(rows)
        print(f"run {i + 1}/{ARGS.repeat} (cluster: {' '.join(cmd)}; load {os.getloadavg()[0]:.1f})",
              file=sys.stderr)
        print(table(rows), file=sys.stderr)
    med = median_rows(runs)
    print(f"medians of {ARGS.repeat} runs, {ARGS.keys} keys x {ARGS.value_bytes} B loaded per memgest, "
          f"{ARGS.ops} sequential ops per latency figure")
    print(table(med))
    print("\nmemory per payload byte, broken down (medians):")
    print(breakdown(med))
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump({"runs": runs, "medians": med, "args": vars(ARGS)}, f, indent=1)


ARGS = None
if __name__ == "__main__":
    main()
