#!/usr/bin/env python3
"""Cluster GET latency on the coordinator beside Redis 7 (issue 11: p50 and p99 ≤ 1.3× Redis's).

For each `--ringlet` binary (e.g. builds before and after a change), on a fresh
`ringlet up --nodes 3 --spares 0 --default-memgest rep:3`: load `--keys` keys of
`--value-size` B, then `ringlet-cluster-bench` runs closed-loop GETs with coordinator reads
(`--concurrency` tasks, one GET each at a time, the smart Rust client over the native
protocol, uniform keys), and the tool's raw-RESP loop sends the same GETs to each key's
coordinator (`--target cluster-resp`). Redis 7 (`redis-server`, same machine, same run) gets the
raw loop from the same tool, and so does a 3-master Redis Cluster (the same process layout as
Ringlet's 3 nodes). Repetitions interleave the targets; medians are printed with the ratios
to Redis. INFO `fast_reads` / `fast_read_fallbacks` of the nodes are printed after each
Ringlet run when the binary has them.

With `--op set` the raw-RESP rows send SETs instead, and one more baseline runs: Redis 7 with
one replica (`--replicaof`), each SET followed by `WAIT 1 0` in the same write — a write
acknowledged by a second copy, what a rep:3 SET (acknowledged by a majority: two copies)
promises. Ratios are printed against plain Redis and against that baseline.

Usage: bench/cluster_get.py [--ringlet target/release/ringlet ...] [--reps 5]
                            [--duration 4] [--concurrency 1] [--keys 10000] [--value-size 100]
                            [--op get|set]
Requires: `cargo build --release -p ringlet-cli --bin ringlet -p ringlet-tools --bins`,
redis-server 7 (scripts/setup.sh).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_base, start_redis_cluster, wait_port  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def info_fields(port, names):
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.sendall(b"*1\r\n$4\r\nINFO\r\n")
    buf = b""
    while b"# Keyspace" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    out = {}
    for line in buf.decode(errors="replace").splitlines():
        k, _, v = line.partition(":")
        if k in names:
            out[k] = int(v)
    return out


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pids):
    """utime + stime (seconds) of `pids`, all their threads (/proc/PID/stat fields 14, 15)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def sleeps(pids):
    """Voluntary context switches (a thread went to sleep, so something must wake it) summed
    over every thread of `pids`."""
    n = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches"):
                            n += int(line.split()[1])
            except FileNotFoundError:
                pass  # a thread that ended meanwhile
    return n


def cpu_per_op(run, pids, extra, duration):
    """Server CPU (µs) per operation over a separate closed-loop run without warm-up: the
    processes' utime + stime delta, minus what they burn idle (ticks, heartbeats: measured
    over one second before), divided by the operations done; and the server threads'
    sleeps (voluntary context switches) per operation, idle ones not subtracted. CPU is stable where latency on
    a noisy machine is not (issue 11, session 18)."""
    c0 = cpu_s(pids)
    time.sleep(1.0)
    c1 = cpu_s(pids)
    s1 = sleeps(pids)
    idle_per_s = c1 - c0
    t0 = time.time()
    r = run(extra, duration, 0)
    elapsed = time.time() - t0
    c2 = cpu_s(pids)
    s2 = sleeps(pids)
    ops = max(r["gets"], 1)
    return {"cpu_us": (c2 - c1 - idle_per_s * elapsed) * 1e6 / ops,
            "cpu_us_raw": (c2 - c1) * 1e6 / ops, "idle_ms_per_s": idle_per_s * 1e3,
            "sleeps": (s2 - s1) / ops}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", nargs="+", default=[os.path.join(ROOT, "target/release/ringlet")])
    ap.add_argument("--bench", default=os.path.join(ROOT, "target/release/ringlet-cluster-bench"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--op", choices=["get", "set"], default="get",
                    help="the raw-RESP rows' requests: GETs, or SETs (acknowledged after the "
                         "memgest's commit rule: rep:3 = a majority of 3 copies)")
    ap.add_argument("--cpu-duration", type=float, default=0.0,
                    help="after each raw-RESP run, one more run of this many seconds (no "
                         "warm-up) measuring the server processes' CPU per operation "
                         "(utime+stime from /proc, idle burn subtracted); 0 = off")
    a = ap.parse_args()
    if not os.path.exists(a.bench):
        raise SystemExit(f"missing {a.bench}: cargo build --release -p ringlet-tools --bins")
    redis = shutil.which("redis-server")
    if not redis:
        raise SystemExit("redis-server not found (scripts/setup.sh installs it)")
    common = ["--keys", str(a.keys), "--value-size", str(a.value_size),
              "--concurrency", str(a.concurrency), "--json"]
    op = ["--op", a.op]

    def run(extra, duration, warmup):
        cmd = [a.bench] + common + ["--duration", str(duration), "--warmup", str(warmup)] + extra
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    # Two rows per binary: the smart client (native protocol), and the raw-RESP loop that also
    # measures Redis, sent to each key's coordinator: the same client code on both sides.
    results = {}
    for exe in a.ringlet:
        results[exe] = []
        results[exe + " (raw RESP, coordinator)"] = []
    results["redis"] = []
    # A 3-master Redis Cluster measured by the same raw-RESP loop, GETs to each key's master:
    # the same process layout as Ringlet's 3 nodes (each process idle 2/3 of the time).
    results["redis cluster, 3 masters (raw RESP, coordinator)"] = []
    WAITED = "redis + 1 replica, SET + WAIT 1 0"
    if a.op == "set":
        results[WAITED] = []
    cpu = {}  # row name -> [CPU µs per op of each rep] (--cpu-duration)
    load_start = open("/proc/loadavg").read().split()[:3]
    for rep in range(a.reps):
        for exe in a.ringlet:
            base = free_base(4)  # 3 nodes + the control port
            up = subprocess.Popen([exe, "up", "--nodes", "3", "--spares", "0", "--port", str(base),
                                   "--default-memgest", "rep:3"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            try:
                deadline = time.time() + 120
                node_pids = []
                while True:
                    line = up.stdout.readline()
                    if not line or time.time() > deadline:
                        raise SystemExit(f"{exe} up did not become ready")
                    if line.startswith("node ") and " pid " in line:
                        node_pids.append(int(line.split()[3]))
                    if line.startswith("ringlet cluster ready"):
                        break
                seeds = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
                run(["--target", "cluster", "--addr", seeds, "--load"], 0.2, 0)
                if a.op == "get":  # the smart client's row measures GETs only
                    r = run(["--target", "cluster", "--addr", seeds, "--read-mode",
                             "coordinator", "--seed", str(rep + 1)], a.duration, a.warmup)
                    if r["errors"]:
                        raise SystemExit(f"{exe}: {r['errors']} errors")
                    fast = [info_fields(base + i, {"fast_reads", "fast_read_fallbacks"})
                            for i in range(3)]
                    r["fast_reads"] = sum(f.get("fast_reads", 0) for f in fast)
                    r["fast_read_fallbacks"] = sum(f.get("fast_read_fallbacks", 0)
                                                   for f in fast)
                    results[exe].append(r)
                    print(f"rep {rep + 1} {exe}: p50 {r['p50_us']} p99 {r['p99_us']} us, "
                          f"{r['ops_per_s']:.0f}/s, fast reads {r['fast_reads']} "
                          f"fallbacks {r['fast_read_fallbacks']}", file=sys.stderr)
                r = run(["--target", "cluster-resp", "--addr", seeds[:seeds.index(",")],
                         "--seed", str(rep + 1)] + op, a.duration, a.warmup)
                if r["errors"] or r["misses"]:
                    raise SystemExit(f"{exe} raw RESP: {r['errors']} errors {r['misses']} misses")
                results[exe + " (raw RESP, coordinator)"].append(r)
                print(f"rep {rep + 1} {exe} raw RESP: p50 {r['p50_us']} p99 {r['p99_us']} us",
                      file=sys.stderr)
                if a.cpu_duration > 0:
                    c = cpu_per_op(run, node_pids, ["--target", "cluster-resp", "--addr",
                                                    seeds[:seeds.index(",")], "--seed",
                                                    str(rep + 11)] + op, a.cpu_duration)
                    cpu.setdefault(exe + " (raw RESP, coordinator)", []).append(c)
                    print(f"rep {rep + 1} {exe} CPU per op (3 nodes): {c['cpu_us']:.1f} us "
                          f"(raw {c['cpu_us_raw']:.1f}, idle {c['idle_ms_per_s']:.1f} ms/s)",
                          file=sys.stderr)
            finally:
                up.send_signal(signal.SIGTERM)
                try:
                    up.wait(10)
                except subprocess.TimeoutExpired:
                    up.kill()
        port = free_base(1)
        rs = subprocess.Popen([redis, "--port", str(port), "--save", "", "--appendonly", "no",
                               "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port)
            addr = f"127.0.0.1:{port}"
            run(["--target", "redis", "--addr", addr, "--load"], 0.2, 0)
            r = run(["--target", "redis", "--addr", addr, "--seed", str(rep + 1)] + op,
                    a.duration, a.warmup)
            results["redis"].append(r)
            print(f"rep {rep + 1} redis: p50 {r['p50_us']} p99 {r['p99_us']} us", file=sys.stderr)
            if a.cpu_duration > 0:
                c = cpu_per_op(run, [rs.pid], ["--target", "redis", "--addr", addr, "--seed",
                                               str(rep + 11)] + op, a.cpu_duration)
                cpu.setdefault("redis", []).append(c)
                print(f"rep {rep + 1} redis CPU per op: {c['cpu_us']:.1f} us", file=sys.stderr)
        finally:
            rs.kill()
        if a.op == "set":
            r = run_redis_with_replica(redis, run, rep, a.duration, a.warmup, a.cpu_duration)
            if "cpu" in r:
                cpu.setdefault(WAITED, []).append(r.pop("cpu"))
                print(f"rep {rep + 1} redis + replica CPU per op (2 processes): "
                      f"{cpu[WAITED][-1]['cpu_us']:.1f} us", file=sys.stderr)
            results[WAITED].append(r)
            print(f"rep {rep + 1} redis + replica, SET + WAIT: p50 {r['p50_us']} "
                  f"p99 {r['p99_us']} us", file=sys.stderr)
        rbase, rprocs = start_redis_cluster(3, 3)
        try:
            addr = f"127.0.0.1:{rbase}"
            run(["--target", "cluster-resp", "--addr", addr, "--load"], 0.2, 0)
            r = run(["--target", "cluster-resp", "--addr", addr, "--seed", str(rep + 1)] + op,
                    a.duration, a.warmup)
            results["redis cluster, 3 masters (raw RESP, coordinator)"].append(r)
            print(f"rep {rep + 1} redis cluster: p50 {r['p50_us']} p99 {r['p99_us']} us",
                  file=sys.stderr)
        finally:
            for p in rprocs:
                p.kill()
    load_end = open("/proc/loadavg").read().split()[:3]
    med = lambda rs, k: statistics.median(x[k] for x in rs)
    rp50, rp99 = med(results["redis"], "p50_us"), med(results["redis"], "p99_us")
    print(f"\nClosed-loop {a.op.upper()}, {a.concurrency} client(s), {a.keys} keys of {a.value_size} B, "
          f"medians of {a.reps} runs of {a.duration:g} s (load average {' '.join(load_start)} "
          f"at start, {' '.join(load_end)} at end):\n")
    # The second baseline: Redis Cluster for GETs (same process layout), Redis with a replica
    # and WAIT for SETs (same durability: a second copy before the answer).
    other = WAITED if a.op == "set" else "redis cluster, 3 masters (raw RESP, coordinator)"
    other_name = "Redis+replica WAIT" if a.op == "set" else "Redis Cluster"
    rc = results[other]
    cp50, cp99 = med(rc, "p50_us"), med(rc, "p99_us")
    print(f"| target | p50 µs | p99 µs | ops/s | p50 / Redis | p99 / Redis | p50 / {other_name} "
          f"| p99 / {other_name} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, rs in results.items():
        if not rs:
            continue
        p50, p99 = med(rs, "p50_us"), med(rs, "p99_us")
        print(f"| {name} | {p50:.0f} | {p99:.0f} | {med(rs, 'ops_per_s'):.0f} | "
              f"{p50 / rp50:.2f} | {p99 / rp99:.2f} | {p50 / cp50:.2f} | {p99 / cp99:.2f} |")
    print("\nper run (p50 µs): " + "; ".join(
        f"{name}: {' '.join(str(x['p50_us']) for x in rs)}" for name, rs in results.items() if rs))
    if cpu:
        rc = statistics.median(x["cpu_us"] for x in cpu["redis"]) if "redis" in cpu else None
        print(f"\nServer CPU per operation (µs, utime+stime of the server processes over a "
              f"{a.cpu_duration:g} s run, idle burn subtracted), medians of {a.reps}:\n")
        print("| target | CPU µs / op | / Redis | sleeps / op | CPU per run |")
        print("|---|---:|---:|---:|---|")
        for name, cs in cpu.items():
            per = [x["cpu_us"] for x in cs]
            m = statistics.median(per)
            sl = statistics.median(x["sleeps"] for x in cs)
            ratio = f"{m / rc:.2f}" if rc else "-"
            print(f"| {name} | {m:.1f} | {ratio} | {sl:.2f} | "
                  f"{' '.join(f'{v:.1f}' for v in per)} |")


def redis_replication_ok(port):
    """Whether the primary on `port` has one replica online (INFO replication)."""
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.sendall(b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n")
    buf = b""
    while b"repl_backlog_histlen" not in buf:  # the section's last field
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return b"connected_slaves:1" in buf and b"state=online" in buf


def run_redis_with_replica(redis, run, rep, duration, warmup, cpu_duration=0.0):
    """Redis 7 primary + one replica on this host; the loop sends SET + WAIT 1 0."""
    import tempfile
    base = free_base(2)
    # The replica writes the initial sync's RDB to its directory: a temporary one, not ours.
    d = tempfile.mkdtemp(prefix="bench-redis-replica-")
    common = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1", "--dir", d]
    primary = subprocess.Popen([redis, "--port", str(base)] + common,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    replica = None
    try:
        wait_port(base)
        replica = subprocess.Popen([redis, "--port", str(base + 1), "--replicaof", "127.0.0.1",
                                    str(base)] + common,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(base + 1)
        deadline = time.time() + 30
        while not redis_replication_ok(base):
            if time.time() > deadline:
                raise SystemExit("redis replica did not come online")
            time.sleep(0.1)
        addr = f"127.0.0.1:{base}"
        run(["--target", "redis", "--addr", addr, "--load"], 0.2, 0)
        r = run(["--target", "redis", "--addr", addr, "--seed", str(rep + 1),
                 "--op", "set-wait"], duration, warmup)
        if r["errors"]:
            raise SystemExit(f"redis SET + WAIT: {r['errors']} errors (WAIT answered 0?)")
        if cpu_duration > 0:
            r["cpu"] = cpu_per_op(run, [primary.pid, replica.pid],
                                  ["--target", "redis", "--addr", addr, "--seed", str(rep + 11),
                                   "--op", "set-wait"], cpu_duration)
        return r
    finally:
        primary.kill()
        if replica:
            replica.kill()
            replica.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
