#!/usr/bin/env python3
"""Growing a cluster by one node under a read load: Ringlet vs Redis Cluster, same machine,
same run (issue 12's goals: migration throughput, client p99 during a move vs steady state).

Ringlet: `ringlet up --nodes 3 --spares 1` (rep:3), loaded through redis-py cluster pipelines
(KEYS random keys of SIZE bytes), then `ringlet node add 4` + `ringlet node rebalance`.
Redis 7: a 3-master Redis Cluster (no replicas) loaded the same way, then `redis-cli --cluster
add-node` + `redis-cli --cluster rebalance --cluster-use-empty-masters`.

During each rebalance one closed-loop redis-py RedisCluster client GETs random loaded keys;
its p50/p99 over the rebalance window are compared with the same client's 3 s before it.
Migration throughput = bytes moved / rebalance wall time, bytes moved = the values of the
loaded keys whose slot changed owner (counted once: Ringlet also copies every moved key to
its new replicas). The keys are loaded through redis-py cluster pipelines, spread over the
slots by name; the reader GETs those same keys (hits).

  python3 bench/reshard.py [--ringlet target/release/ringlet] [--keys 200000] [--size 1024]
                           [--reps 3] [--json] [--tail N] [--memgest rep:3|ec:2+1]

--memgest sets Ringlet's default memgest (every loaded key); with ec:2+1 each move re-encodes
the span's values in the new coordinator's group (docs/design/cluster-resharding.md).

--tail N prints, for each Ringlet round, the N slowest GETs of the rebalance window with
their start (ms after the rebalance started) beside the CLI's per-move lines, stamped the
same way: where the tail comes from (a switch, a copy, a purge). Each GET that followed a
MOVED says so (and the time redis-py spent reloading its slot map, which it does every 5th
MOVED); every round also reports the p99 of the GETs that followed no MOVED.

--rates R1,R2,... runs Ringlet once per rate in each round (0: no limit, `--rate unlimited`;
else `node rebalance --rate R` MB/s), beside one Redis Cluster run per round.

Node-side attribution (session 17): INFO of every Ringlet node is read before the steady
window, at the start and at the end of the rebalance window, and the difference of the
request-wait counters (`core_steps_over_*`, `core_gets*`, `front_retries_*`) is reported per
window: how many GETs went through the node's replica core and waited there (behind a copy
page, a re-encode, ...), and how often the fronts retried a refusal (NotReady, Busy, ...).
Each `--tail` GET also names the node port it went to first.
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from benchlib import free_base, start_redis_cluster  # noqa: E402

import redis  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402


def load(port, keys, size):
    """KEYS keys `key:%012d` (the names the reader GETs) of SIZE bytes, spread over the slots
    by their own names. Not redis-benchmark --cluster: it puts one hash tag per node in its
    keys, so a node's keys share one slot and a rebalance moves almost none of them (the
    figures before session 9 were computed as if the keys were spread: they were not)."""
    rc = RedisCluster(host="127.0.0.1", port=port, socket_timeout=30)
    value = b"x" * size
    batch = 2000
    for lo in range(0, keys, batch):
        p = rc.pipeline()
        for i in range(lo, min(keys, lo + batch)):
            p.set("key:%012d" % i, value)
        p.execute()
    rc.close()


class Reader(threading.Thread):
    """Closed-loop GETs of random loaded keys; latencies stamped with their start time."""

    def __init__(self, port, keys):
        super().__init__(daemon=True)
        self.rc = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
        self.keys, self.samples, self.errors, self.stop = keys, [], 0, False
        # Where a slow GET's time went on the client side: redis-py follows a MOVED by
        # patching its slot table (`move_slot`) and, every `reinitialize_steps` (5) MOVEDs,
        # by reloading the whole map (`initialize`: CLUSTER SLOTS plus a Python loop over
        # every slot). Counted per GET, and the reload's own time.
        self.redirects = self.reloads = 0
        self.reload_s = 0.0
        nm = self.rc.nodes_manager
        move_slot, initialize = nm.move_slot, nm.initialize

        def counted_move_slot(e):
            self.redirects += 1
            return move_slot(e)

        def counted_initialize(*a, **k):
            self.reloads += 1
            t = time.perf_counter()
            try:
                return initialize(*a, **k)
            finally:
                self.reload_s += time.perf_counter() - t
        nm.move_slot, nm.initialize = counted_move_slot, counted_initialize
        self.ports = []  # per sample: the node port the GET went to first

    def run(self):
        while not self.stop:
            k = "key:%012d" % random.randrange(self.keys)
            m0, r0, s0 = self.redirects, self.reloads, self.reload_s
            try:
                port = self.rc.get_node_from_key(k).port
            except Exception:  # noqa: BLE001 - attribution only
                port = 0
            t = time.perf_counter()
            try:
                self.rc.get(k)
            except Exception:  # noqa: BLE001 - counted and reported, never hidden
                self.errors += 1
            # (start, duration, MOVEDs followed, map reloads, seconds in reloads)
            self.samples.append((t, time.perf_counter() - t, self.redirects - m0,
                                 self.reloads - r0, self.reload_s - s0))
            self.ports.append(port)

    def window(self, a, b):
        w = [x for x in self.samples if a <= x[0] < b]
        lat = sorted(x[1] for x in w)
        if not lat:
            return None
        # The same percentile over the GETs that followed no MOVED: what is left when the
        # client's redirect handling is taken out (attribution, not a figure to quote alone).
        direct = sorted(x[1] for x in w if x[2] == 0 and x[3] == 0)
        return {"n": len(lat), "p50_us": lat[len(lat) // 2] * 1e6,
                "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6,
                "redirected": sum(1 for x in w if x[2] or x[3]),
                "reload_ms": sum(x[4] for x in w) * 1e3,
                "p99_direct_us": (direct[min(len(direct) - 1, int(len(direct) * 0.99))] * 1e6
                                  if direct else 0.0)}


def slot_owners(port):
    r = redis.Redis(port=port)
    owners = {}
    for first, last, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
        for s in range(first, last + 1):
            owners[s] = master[1]
    return owners


# INFO fields of a Ringlet node that say where requests wait (counters; session 17).
WAIT_FIELDS = (["core_steps_over_1ms", "core_steps_over_5ms", "core_steps_over_20ms",
                "core_slow_step_us", "core_gets", "core_gets_queued", "core_get_us",
                "core_gets_over_1ms", "core_gets_over_5ms", "core_gets_over_20ms",
                "front_retry_sleep_us", "fast_reads", "fast_read_fallbacks"]
               + ["core_steps_over_5ms_" + k for k in
                  ("pull_serve", "pull_apply", "ec", "tick", "client", "other")]
               + ["front_retries_" + k for k in
                  ("not_ready", "busy", "not_coordinator", "stale_epoch", "overloaded")])


def wait_counters(ports):
    """Per node port, the WAIT_FIELDS of its INFO (None: not a Ringlet node or down)."""
    out = {}
    for p in ports:
        try:
            info = redis.Redis(port=p, socket_timeout=5).info()
        except Exception:  # noqa: BLE001 - a node not up yet has nothing to attribute
            continue
        if "core_gets" in info:
            out[p] = {f: int(info.get(f, 0)) for f in WAIT_FIELDS}
    return out


def wait_diff(a, b):
    """Sum over nodes of b - a, per field."""
    return {f: sum(b[p][f] - a.get(p, {}).get(f, 0) for p in b) for f in WAIT_FIELDS}


def wait_line(d):
    kinds = ", ".join("%s %d" % (k[len("core_steps_over_5ms_"):], v) for k, v in d.items()
                      if k.startswith("core_steps_over_5ms_") and v)
    retries = ", ".join("%s %d" % (k[len("front_retries_"):], v) for k, v in d.items()
                        if k.startswith("front_retries_") and v)
    return ("fast reads %d, through the core %d (queued %d, >=1/5/20 ms: %d/%d/%d, mean "
            "%.0f us); core steps >=1/5/20 ms: %d/%d/%d (%.1f ms in all; >=5 ms by kind: %s); "
            "front retries: %s (slept %.1f ms)" % (
                d["fast_reads"], d["core_gets"], d["core_gets_queued"],
                d["core_gets_over_1ms"], d["core_gets_over_5ms"], d["core_gets_over_20ms"],
                d["core_get_us"] / max(d["core_gets"], 1),
                d["core_steps_over_1ms"], d["core_steps_over_5ms"], d["core_steps_over_20ms"],
                d["core_slow_step_us"] / 1e3, kinds or "none", retries or "none",
                d["front_retry_sleep_us"] / 1e3))


def measure(port, keys, size, grow, tail=0, nodes=()):
    """Start a reader, 3 s steady, then `grow()`; returns the figures. `grow` may return
    [(perf_counter, line)] to print beside the `tail` slowest GETs. `nodes`: Ringlet node
    ports whose request-wait counters attribute the windows."""
    reader = Reader(port, keys)
    reader.start()
    w0 = wait_counters(nodes)
    time.sleep(3.0)
    before = slot_owners(port)
    w1 = wait_counters(nodes)
    t0 = time.perf_counter()
    marks = grow() or []
    t1 = time.perf_counter()
    w2 = wait_counters(nodes)
    time.sleep(0.5)
    reader.stop = True
    reader.join()
    after = slot_owners(port)
    moved = sum(1 for s in range(16384) if before.get(s) != after.get(s))
    steady = reader.window(t0 - 3.0, t0)
    during = reader.window(t0, t1)
    if tail:
        slow = sorted(((d, t - t0, m, r, rs, pt)
                       for (t, d, m, r, rs), pt in zip(reader.samples, reader.ports)
                       if t0 <= t < t1), reverse=True)
        events = [(at - t0, "  " + line) for at, line in marks]
        events += [(at, "  GET %7.0f us at :%d%s" % (
            d * 1e6, pt,
            (" (MOVED x%d%s)" % (m, ", map reload %.1f ms" % (rs * 1e3) if r else ""))
            if m or r else "")) for d, at, m, r, rs, pt in slow[:tail]]
        for at, text in sorted(events):
            print("%9.1f ms%s" % (at * 1e3, text), file=sys.stderr)
    # Exactly the loaded keys whose slot changed owner (values only, each counted once).
    rc = RedisCluster(host="127.0.0.1", port=port)
    moved_keys = sum(1 for i in range(keys)
                     if before.get(rc.keyslot("key:%012d" % i))
                     != after.get(rc.keyslot("key:%012d" % i)))
    rc.close()
    mb = moved_keys * size / 1e6
    r = {"seconds": t1 - t0, "slots_moved": moved, "mb_moved": mb,
         "mb_per_s": mb / (t1 - t0), "steady": steady, "during": during,
         "reader_errors": reader.errors}
    if w2:
        r["wait_steady"], r["wait_during"] = wait_diff(w0, w1), wait_diff(w1, w2)
    return r


def unlimited_flag(binary):
    """Whether `binary` knows `--rate unlimited` (session 17 on)."""
    r = subprocess.run([binary, "node", "rebalance", "--help"], capture_output=True, text=True)
    return "unlimited" in r.stdout


def start_up(binary, memgest="rep:3"):
    """`ringlet up --nodes 3 --spares 1` on free ports: (process, base port, control address,
    secret file), once the cluster reports ready."""
    base = free_base(4)
    up = subprocess.Popen([binary, "up", "--nodes", "3", "--spares", "1", "--port", str(base),
                           "--default-memgest", memgest, "--memory-mb", "4096"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    control = secret = None
    for line in up.stdout:
        if line.startswith("cluster secret file "):
            secret = line.split()[-1]
        if line.startswith("ringlet cluster ready"):
            control = re.search(r"control (\S+?),", line).group(1)
            break
    threading.Thread(target=lambda: [None for _ in up.stdout], daemon=True).start()
    return up, base, control, secret


def ringlet_run(binary, keys, size, tail=0, memgest="rep:3", rate=0.0):
    up, base, control, secret = start_up(binary, memgest)
    try:
        load(base, keys, size)
        admin = ["--control", control, "--cluster-secret-file", secret]

        def grow():
            # The spare may not have joined yet on a loaded machine (`ringlet up` reports
            # ready once the data nodes serve): retry "not a spare" for up to 30 s.
            for _ in range(150):
                r = subprocess.run([binary, "node", "add", "4"] + admin,
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    break
                if "not a spare" not in r.stderr:
                    raise SystemExit("ringlet node add failed:\n" + r.stderr)
                time.sleep(0.2)
            else:
                raise SystemExit("node 4 never joined as a spare: " + r.stderr)
            # 0: no limit (`ringlet node rebalance` paces at 5 MB/s unless told otherwise
            # since session 17; an older binary without that default takes no --rate).
            extra = ["--rate", "%g" % rate] if rate else (
                ["--rate", "unlimited"] if unlimited_flag(binary) else [])
            p = subprocess.Popen([binary, "node", "rebalance"] + admin + extra,
                                 stdout=subprocess.PIPE, text=True)
            marks = [(time.perf_counter(), line.rstrip()) for line in p.stdout]
            if p.wait() != 0:
                raise SystemExit("ringlet node rebalance failed")
            return marks
        r = measure(base, keys, size, grow, tail, nodes=[base + i for i in range(4)])
        r["rate"] = rate
        # Copy throughput of one moving range: what the new coordinators received over the
        # time their handoff rebuilds took (moves run one after another), from INFO.
        got = {"reshard_bytes_pulled": 0, "reshard_moves_ms": 0}
        for i in range(4):
            info = redis.Redis(port=base + i).info()
            for f in got:
                got[f] += int(info.get(f, 0))
        ms = max(got["reshard_moves_ms"], 1)
        r["copy_mb"] = got["reshard_bytes_pulled"] / 1e6
        r["copy_mb_per_s"] = got["reshard_bytes_pulled"] / 1e6 / (ms / 1000.0)
        return r
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=30)


def redis_run(keys, size):
    base, procs = start_redis_cluster(4, 3)
    nodes = [f"127.0.0.1:{base + i}" for i in range(3)]
    try:
        load(base, keys, size)

        def grow():
            subprocess.run(["redis-cli", "--cluster", "add-node", f"127.0.0.1:{base + 3}",
                            nodes[0]], check=True, stdout=subprocess.DEVNULL)
            # The new node must be known everywhere before a rebalance (gossip): wait until
            # `--cluster check` agrees (bounded).
            for _ in range(300):
                infos = [subprocess.run(["redis-cli", "-p", str(base + i), "cluster", "info"],
                                        capture_output=True, text=True).stdout
                         for i in range(4)]
                if all("cluster_state:ok" in x and "cluster_known_nodes:4" in x
                       for x in infos):
                    break
                time.sleep(0.1)
            time.sleep(1.0)  # every node has seen the others as masters (not only known)
            r = subprocess.run(["redis-cli", "--cluster", "rebalance", nodes[0],
                                "--cluster-use-empty-masters", "--cluster-yes"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit("redis-cli --cluster rebalance failed:\n" + r.stdout[-2000:])
        return measure(base, keys, size, grow)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", default="target/release/ringlet")
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tail", type=int, default=0)
    # Ringlet's default memgest (every loaded key): rep:3 as before, or e.g. ec:2+1 to
    # measure moves that re-encode erasure-coded values in the target group.
    ap.add_argument("--memgest", default="rep:3")
    # Copy rate limits to compare (MB/s, 0 = none): one Ringlet run per rate in each round.
    ap.add_argument("--rates", default="0")
    a = ap.parse_args()
    rates = [float(x) for x in a.rates.split(",")]
    label = lambda rt: "ringlet" if rt == 0 else "ringlet@%gMB/s" % rt  # noqa: E731
    runs = {label(rt): [] for rt in rates}
    runs["redis"] = []
    for i in range(a.reps):
        plan = [(label(rt), lambda rt=rt: ringlet_run(a.ringlet, a.keys, a.size, a.tail,
                                                      a.memgest, rt)) for rt in rates]
        plan.append(("redis", lambda: redis_run(a.keys, a.size)))
        for name, run in plan:
            r = run()
            runs[name].append(r)
            print(f"round {i + 1} {name}: {r['seconds']:.2f} s, {r['slots_moved']} slots, "
                  f"{r['mb_per_s']:.1f} MB/s, GET p99 steady {r['steady']['p99_us']:.0f} us "
                  f"during {r['during']['p99_us']:.0f} us ({r['during']['n']} GETs, "
                  f"{r['during']['redirected']} followed a MOVED, map reloads "
                  f"{r['during']['reload_ms']:.1f} ms, p99 of the others "
                  f"{r['during']['p99_direct_us']:.0f} us), "
                  f"errors {r['reader_errors']}"
                  + (f", copy {r['copy_mb']:.1f} MB at {r['copy_mb_per_s']:.1f} MB/s per range"
                     if "copy_mb" in r else ""), file=sys.stderr, flush=True)
            if "wait_during" in r:
                print("  steady: " + wait_line(r["wait_steady"]), file=sys.stderr)
                print("  during: " + wait_line(r["wait_during"]), file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(runs, indent=1))
    for name, rs in runs.items():
        med = lambda f: statistics.median(f(r) for r in rs)  # noqa: E731
        print(f"{name:16} rebalance {med(lambda r: r['seconds']):6.2f} s, "
              f"{med(lambda r: r['slots_moved']):5.0f} slots, "
              f"{med(lambda r: r['mb_moved']):6.1f} MB moved, "
              f"{med(lambda r: r['mb_per_s']):6.1f} MB/s; GET p50/p99 steady "
              f"{med(lambda r: r['steady']['p50_us']):5.0f}/{med(lambda r: r['steady']['p99_us']):6.0f} us, "
              f"during {med(lambda r: r['during']['p50_us']):5.0f}/{med(lambda r: r['during']['p99_us']):6.0f} us "
              f"(p99 of GETs that followed no MOVED {med(lambda r: r['during']['p99_direct_us']):6.0f} us), "
              f"p99 ratio {med(lambda r: r['during']['p99_us'] / max(r['steady']['p99_us'], 1)):5.1f}x, "
              f"reader errors {sum(r['reader_errors'] for r in rs)}"
              + (f"; handoff copy {med(lambda r: r['copy_mb_per_s']):6.1f} MB/s per range"
                 if all("copy_mb" in r for r in rs) else ""))


if __name__ == "__main__":
    main()
