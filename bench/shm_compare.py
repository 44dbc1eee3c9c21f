#!/usr/bin/env python3
"""Issue 4/16's benchmark in one run: one-sided shared-memory GET and batched GET (MGET, the
prefetching pipeline) by 1 client thread, with the node's regions on 4 KiB pages and on
transparent huge pages, beside the same node over TCP and Redis 7 GET over TCP.

1M keys (16-byte `key:` + 12 digits), 100-byte values, uniform and Zipf 0.99. Servers are
pinned to CPU 0 and clients to CPU 1. TCP figures use 50 connections, pipeline 1, GET only
(`ringlet bench --ratio 0:1` after `--load`, and `redis-benchmark -t get` against Redis, as
the issue asks). Every row is the median of --repeat runs.

Pages: the node runs once with RINGLET_HUGE_PAGES=off (4 KiB pages) and once with the
default (shmem THP by madvise). THP only takes effect if
/sys/kernel/mm/transparent_hugepage/shmem_enabled is advise (or within_size/always/force):
the script prints the setting and the node's ShmemPmdMapped, so a "thp" row that ran on
4 KiB pages is visible. Setup (root): echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled

Usage: bench/shm_compare.py [--keys 1000000] [--duration 5] [--repeat 3] [--floor]
                            [--pages off,thp] [--ringlet PATH] [--no-build]

--ringlet runs another build of the binary (an A/B against a saved copy of the previous
commit's); --no-build skips `cargo build` (with --ringlet, or when the binary is fresh);
--pages thp skips the 4 KiB-page rows (they only show the huge-page gain again).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import RINGLET, ROOT, free_port, wait_port  # noqa: E402

THP_SETTING = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
# Page mode -> the bench client's ShmemPmdMapped (KiB), as `ringlet bench` reports it.
client_pmd = {}


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def pmd_mapped_kib(pid):
    """ShmemPmdMapped of a process: shared memory it maps with huge page entries."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("ShmemPmdMapped:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def shm_rows(args, pages, rows, tcp):
    ringlet = args.ringlet
    port = free_port()
    sock = f"/tmp/ringlet-shm-bench-{port}.sock"
    env = dict(os.environ, RINGLET_HUGE_PAGES=pages)
    node = subprocess.Popen(["taskset", "-c", "0", ringlet, "server", "--port", str(port),
                             "--threads", "1", "--memory-mb", "1024", "--shm-socket", sock],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_port(port)
        loaded = False
        for batch in (1, 32):
            for dist in ("uniform", "zipf"):
                what = "GET" if batch == 1 else f"MGET({batch})"
                runs = []
                for _ in range(args.repeat):
                    cmd = ["taskset", "-c", "1", ringlet, "bench", "--mode", "shm-get", "--socket",
                           sock, "--keys", str(args.keys), "--value-size", "100", "--duration",
                           str(args.duration), "--threads", "1", "--distribution", dist,
                           "--batch", str(batch), "--json"]
                    if not loaded:
                        cmd.append("--load")
                        loaded = True
                    r = last_json(subprocess.run(cmd, check=True, capture_output=True,
                                                 text=True).stdout)
                    # Only reads that returned the loaded value count: a miss or a socket
                    # fallback would make the one-sided figure mean something else.
                    assert r["wrong"] == 0 and r["misses"] == 0 and r["fallbacks"] == 0, r
                    runs.append(r)
                    client_pmd[pages] = max(client_pmd.get(pages, 0), r.get("client_pmd_kib", 0))
                rows.append((f"ringlet shm {what}, {pages} pages ({dist})",
                             [x["ops_per_sec"] for x in runs],
                             [x["ops_per_cpu_sec"] for x in runs],
                             f'{sum(x["ops"] for x in runs):,} reads, 0 wrong, 0 misses, '
                             f'0 fallbacks'))
        pmd = pmd_mapped_kib(node.pid)
        if tcp:
            for dist in ("uniform", "zipf"):
                runs = []
                for _ in range(args.repeat):
                    r = last_json(subprocess.run(
                        ["taskset", "-c", "1", ringlet, "bench", "--protocol", "resp", "--port",
                         str(port), "--keys", str(args.keys), "--value-size", "100", "--ratio",
                         "0:1", "--connections", "50", "--pipeline", "1", "--duration",
                         str(args.duration), "--distribution", dist, "--json"], check=True,
                        capture_output=True, text=True).stdout)
                    assert r["misses"] == 0 and r["errors"] == 0, r
                    runs.append(r)
                rows.append((f"ringlet TCP GET, RESP ({dist})",
                             [x["ops_per_sec"] for x in runs], None,
                             f'{sum(x["gets"] for x in runs):,} GETs, 0 misses, 0 errors'))
    finally:
        node.terminate()
        node.wait()
    return pmd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--floor", action="store_true",
                    help="also run the in-process hash-map floor (shm_bench example)")
    ap.add_argument("--pages", default="off,thp",
                    help="page modes of the node, comma-separated: off (4 KiB), thp")
    ap.add_argument("--ringlet", default=RINGLET, help="the ringlet binary to run")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build first")
    args = ap.parse_args()
    pages = [p for p in args.pages.split(",") if p]
    assert pages and all(p in ("off", "thp") for p in pages), args.pages
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "ringlet-cli", "-p",
                        "ringlet-shm-exporter", "--examples", "--bins"], cwd=ROOT, check=True)
    with open(THP_SETTING) as f:
        thp = f.read().strip()
    load0 = loadavg()
    rows = []
    pmd = {}
    for p in pages:
        pmd[p] = shm_rows(args, p, rows, tcp=(p == pages[-1]))
    rport = free_port()
    redis = subprocess.Popen(["taskset", "-c", "0", "redis-server", "--port", str(rport),
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(rport)
        rr = []
        for i in range(args.repeat):
            out = subprocess.run(
                ["taskset", "-c", "1", "redis-benchmark", "-p", str(rport), "-c", "50", "-P",
                 "1", "-d", "100", "-r", str(args.keys), "-n", "300000", "-t",
                 "set,get" if i == 0 else "get", "-q"],
                check=True, capture_output=True, text=True).stdout.replace("\r", "\n")
            m = re.search(r"GET: ([0-9.]+) requests per second", out)
            rr.append(float(m.group(1)))
        rows.append(("redis GET, redis-benchmark -c 50 -P 1", rr, None,
                     "redis-benchmark does not check values"))
    finally:
        redis.terminate()
        redis.wait()
    load1 = loadavg()
    redis_get = statistics.median(rows[-1][1])
    mapped = ", ".join(f"{p} {kib} KiB" for p, kib in pmd.items())
    mapped += "; client: " + ", ".join(f"{p} {kib} KiB" for p, kib in client_pmd.items())
    print(f"shmem_enabled: {thp}; node ShmemPmdMapped after the runs: {mapped}; "
          f"load average {load0} -> {load1}; medians of {args.repeat}; binary {args.ringlet}")
    print()
    print("| what | GETs/s (median) | runs | per client CPU-s | × Redis | checked |")
    print("|---|---|---|---|---|---|")
    for name, wall, cpu, checked in rows:
        w = statistics.median(wall)
        c = f"{statistics.median(cpu):,.0f}" if cpu else "—"
        runs = ", ".join(f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k" for x in wall)
        print(f"| {name} | {w:,.0f} | {runs} | {c} | {w / redis_get:.1f} | {checked} |")
    if args.floor:
        floor = subprocess.run(
            ["taskset", "-c", "1", "cargo", "run", "--release", "-q", "-p", "ringlet-shm-exporter",
             "--example", "shm_bench", "--", "--keys", str(args.keys), "--value-size", "100",
             "--duration", "2", "--runs", "3", "--batch", "32", "--zipf", "0.99"],
            cwd=ROOT, check=True, capture_output=True, text=True).stdout
        print("\nin-process floor and shm (same process, medians), from the shm_bench example:")
        print(floor)


if __name__ == "__main__":
    main()
