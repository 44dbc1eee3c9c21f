#!/usr/bin/env python3
"""CliqueMap Fig. 11 on Ringlet: GET latency with one of three replicas slowed.

Starts a 3-node rep:3 cluster (`ringlet-cluster up`), puts `ringlet-delay-proxy` in front of
node 1's client port (the client dials the proxy for node 1 through an address override;
peer traffic between nodes is not slowed, see docs/design/client-cluster.md), starts a
redis-server 7 as the baseline, and runs `ringlet-cluster-bench` for each scenario:

  unslowed   coordinator reads            (the reference p99)
  unslowed   quorum reads
  0-delay proxy in front of node 1 (coordinator / quorum reads): the proxy's own cost
  slowed     coordinator reads, all keys
  slowed     coordinator reads, keys node 1 coordinates   (coordinator slowed)
  slowed     coordinator reads, keys node 1 replicates    (non-coordinator replica slowed)
  slowed     quorum reads, all keys
  slowed     quorum reads, keys node 1 coordinates
  redis      GET, same closed loop

Each scenario runs --reps times (interleaved); the table shows medians of p50/p99/p99.9 and
the ratio of each p99 to the unslowed coordinator-read p99 and to the unslowed quorum-read p99
(both computed here), with the runs' errors, misses (every GET is of a loaded key, so a miss is
a lost value) and quorum fallbacks summed.

Usage (after `cargo build --release -p ringlet-cluster-tests -p ringlet-tools --bins`):
  python3 bench/fig11.py [--bin-dir target/release] [--reps 3] [--duration 5] [--delay fixed:1]
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


def free_base(n):
    for base in range(31000, 60000, 50):
        ok = True
        for p in list(range(base, base + n)) + [base + 40, base + 41, base + 42]:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return base
    raise SystemExit("no free ports")


def wait_port(port, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"port {port} did not open")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", "target"), "release"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--delay", default="fixed:1", help="proxy delay per direction")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()

    cluster_bin = os.path.join(a.bin_dir, "ringlet-cluster")
    proxy_bin = os.path.join(a.bin_dir, "ringlet-delay-proxy")
    bench_bin = os.path.join(a.bin_dir, "ringlet-cluster-bench")
    for b in (cluster_bin, proxy_bin, bench_bin):
        if not os.path.exists(b):
            raise SystemExit(f"missing {b}: cargo build --release -p ringlet-cluster-tests -p ringlet-tools --bins")
    redis = shutil.which("redis-server")

    base = free_base(4)
    slow = f"127.0.0.1:{base}"          # node 1's client address in the map
    proxy_port = base + 40
    redis_port = base + 41
    proxy0_port = base + 42   # a 0-delay proxy: what the proxy alone costs (its CPU, one hop)
    procs = []

    def stop_all():
        for p in reversed(procs):
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=5)
            except Exception:
                p.kill()

    load_start = open("/proc/loadavg").read().split()[:3]
    try:
        up = subprocess.Popen(
            [cluster_bin, "up", "--nodes", "3", "--spares", "0", "--port", str(base),
             "--default-memgest", "rep:3"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(up)
        deadline = time.time() + 60
        while True:
            line = up.stdout.readline()
            if not line:
                raise SystemExit("cluster exited before ready")
            if line.startswith("ringlet cluster ready"):
                print(line.strip(), file=sys.stderr)
                break
            if time.time() > deadline:
                raise SystemExit("cluster not ready in 60 s")
        proxy = subprocess.Popen(
            [proxy_bin, "--listen", f"127.0.0.1:{proxy_port}", "--target", slow,
             "--delay", a.delay],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proxy)
        wait_port(proxy_port)
        proxy0 = subprocess.Popen(
            [proxy_bin, "--listen", f"127.0.0.1:{proxy0_port}", "--target", slow,
             "--delay", "fixed:0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proxy0)
        wait_port(proxy0_port)
        if redis:
            rs = subprocess.Popen(
                [redis, "--port", str(redis_port), "--save", "", "--appendonly", "no",
                 "--bind", "127.0.0.1"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(rs)
            wait_port(redis_port)

        seeds = ",".join(f"127.0.0.1:{base + i}" for i in (1, 2))
        common = ["--keys", str(a.keys), "--value-size", str(a.value_size),
                  "--concurrency", str(a.concurrency), "--json"]

        def run(extra, duration=a.duration, warmup=a.warmup):
            cmd = [bench_bin] + common + ["--duration", str(duration),
                                          "--warmup", str(warmup)] + extra
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr}")
            return json.loads(out.stdout.strip().splitlines()[-1])

        # Load through the unslowed cluster, and Redis.
        run(["--target", "cluster", "--addr", seeds, "--load"], duration=0.2, warmup=0)
        if redis:
            run(["--target", "redis", "--addr", f"127.0.0.1:{redis_port}", "--load"],
                duration=0.2, warmup=0)

        ov = ["--override", f"{slow}=127.0.0.1:{proxy_port}", "--slow-node", slow]
        ov0 = ["--override", f"{slow}=127.0.0.1:{proxy0_port}", "--slow-node", slow]
        scenarios = [
            ("unslowed, coordinator reads", ["--read-mode", "coordinator"]),
            ("unslowed, quorum reads", ["--read-mode", "quorum"]),
            ("0-delay proxy in front of 1 of 3, coordinator reads",
             ["--read-mode", "coordinator"] + ov0),
            ("0-delay proxy in front of 1 of 3, quorum reads", ["--read-mode", "quorum"] + ov0),
            ("1 of 3 slowed, coordinator reads, all keys",
             ["--read-mode", "coordinator"] + ov),
            ("1 of 3 slowed, coordinator reads, keys it coordinates",
             ["--read-mode", "coordinator", "--keyset", "slow-coord"] + ov),
            ("1 of 3 slowed, coordinator reads, keys it replicates",
             ["--read-mode", "coordinator", "--keyset", "slow-replica"] + ov),
            ("1 of 3 slowed, quorum reads, all keys", ["--read-mode", "quorum"] + ov),
            ("1 of 3 slowed, quorum reads, keys it coordinates",
             ["--read-mode", "quorum", "--keyset", "slow-coord"] + ov),
        ]
        results = {name: [] for name, _ in scenarios}
        if redis:
            results["redis-server 7 GET (baseline)"] = []
        for rep in range(a.reps):
            for name, extra in scenarios:
                r = run(["--target", "cluster", "--addr", seeds, "--seed", str(rep + 1)] + extra)
                results[name].append(r)
                print(f"rep {rep + 1} {name}: p50 {r['p50_us']} p99 {r['p99_us']} "
                      f"p99.9 {r['p999_us']} us, {r['ops_per_s']:.0f}/s, errors {r['errors']}, "
                      f"fallbacks {r.get('quorum_fallbacks', 0)}", file=sys.stderr)
            if redis:
                r = run(["--target", "redis", "--addr", f"127.0.0.1:{redis_port}",
                         "--seed", str(rep + 1)])
                results["redis-server 7 GET (baseline)"].append(r)
                print(f"rep {rep + 1} redis: p50 {r['p50_us']} p99 {r['p99_us']} us",
                      file=sys.stderr)

        load_end = open("/proc/loadavg").read().split()[:3]
        med = lambda rs, k: statistics.median(x[k] for x in rs)
        ref = med(results["unslowed, coordinator reads"], "p99_us")
        # Both ratios the tables quote come from here: p99 over the unslowed coordinator-read
        # p99, and over the unslowed quorum-read p99 (what quorum reads cost without a fault).
        qref = med(results["unslowed, quorum reads"], "p99_us")
        print(f"\nGET latency, medians of {a.reps} runs of {a.duration:g} s "
              f"({a.concurrency} closed-loop clients, {a.keys} keys of {a.value_size} B, "
              f"proxy delay {a.delay} ms per direction; load average {' '.join(load_start)} "
              f"at start, {' '.join(load_end)} at end):\n")
        print("| scenario | p50 µs | p99 µs | p99.9 µs | GET/s | p99 / unslowed coordinator p99 "
              "/ unslowed quorum p99 | errors | misses | quorum fallbacks |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, rs in results.items():
            p99 = med(rs, "p99_us")
            print(f"| {name} | {med(rs, 'p50_us'):.0f} | {p99:.0f} | {med(rs, 'p999_us'):.0f} | "
                  f"{med(rs, 'ops_per_s'):.0f} | {p99 / ref:.2f} / {p99 / qref:.2f} | "
                  f"{sum(x['errors'] for x in rs)} | {sum(x.get('misses', 0) for x in rs)} | "
                  f"{sum(x.get('quorum_fallbacks', 0) for x in rs)} |")
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        stop_all()


if __name__ == "__main__":
    main()
