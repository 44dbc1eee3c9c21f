#!/usr/bin/env python3
"""Loading KELI's chunked graph: `ringlet load` against Redis's own mass insertion
(`redis-cli --pipe`), same graph, same machine, fresh servers every round, interleaved.

The graph and both encodings are bench/keli_bfs.py's: a seeded R-MAT graph; Ringlet gets
CSV sources and a mapping with the follower lists chunked at --chunk links per item (every
link with a location hint), Redis one HSET per vertex with every neighbour key in one
field. Each round starts a fresh `redis-server` and a fresh `ringlet server --threads 1`
(both on CPU 0; the loaders on CPU 1) and times each load's whole process. With --perf, the
node is recorded by `perf record -g` during its load of the last round (perf.data in the
current directory) and the node's and loader's CPU seconds are printed for every round.

With --cluster N, Ringlet's side is `ringlet up --nodes N --default-memgest M` (--memgest,
default none) instead of one `ringlet server`, its N nodes pinned to CPU 0 together and
their CPU summed; Redis's side stays one server (`redis-cli --pipe` has no cluster mode), so
that ratio is the cluster's load against the single Redis's mass insertion.

Usage: bench/keli_load.py [--vertices 200000] [--edges 4400000] [--chunk 100] [--rounds 3]
       [--perf [--perf-out PATH]] [--extra-load-arg ARG ...] [--ringlet PATH]
       [--cluster N [--memgest none]]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keli_bfs as kb  # noqa: E402
from benchlib import free_base  # noqa: E402


def cpu_split(pid):
    """(utime, stime) of a live process in seconds, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(parts[11]) / tck, int(parts[12]) / tck


def cpu_seconds(pid):
    """utime + stime of a live process, from /proc."""
    return sum(cpu_split(pid))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vertices", type=int, default=200000)
    ap.add_argument("--edges", type=int, default=4400000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--perf-out", default="perf.data", help="where --perf writes the node's profile")
    ap.add_argument("--extra-load-arg", action="append", default=[])
    ap.add_argument("--ringlet", help="the ringlet binary (default target/release/ringlet)")
    ap.add_argument("--cluster", type=int, default=0,
                    help="load a `ringlet up --nodes N` cluster instead of one server")
    ap.add_argument("--memgest", default="none", help="with --cluster: the default memgest")
    a = ap.parse_args()
    if a.ringlet:
        kb.RINGLET = a.ringlet
    kb.pin(os.getpid(), 1)
    memory_mb = max(1024, 256 + a.edges * 96 // (1 << 20))
    indptr, dst = kb.rmat(a.vertices, a.edges, a.seed)
    tmp = tempfile.mkdtemp(prefix="keli-load-")
    try:
        resp, vcsv, ecsv, mapping = kb.write_data(tmp, indptr, dst, a.chunk)
        print(f"{a.vertices} vertices, {len(dst)} edges, chunks of {a.chunk}; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        times = {"redis-cli --pipe": [], "ringlet load": []}
        server_cpus = {k: [] for k in times}
        loader_cpus = {k: [] for k in times}
        for rnd in range(a.rounds):
            order = list(times) if rnd % 2 == 0 else list(reversed(times))
            for name in order:
                port = kb.free_port()
                nodes = []
                if name == "redis-cli --pipe":
                    srv = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                                            "--appendonly", "no", "--dir", tmp],
                                           stdout=subprocess.DEVNULL)
                elif a.cluster:
                    port = free_base(a.cluster + 1)
                    srv = subprocess.Popen([kb.RINGLET, "up", "--nodes", str(a.cluster),
                                            "--spares", "0", "--port", str(port),
                                            "--default-memgest", a.memgest,
                                            "--memory-mb", str(memory_mb)],
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                           text=True)
                    for line in srv.stdout:
                        if line.startswith("ringlet cluster ready"):
                            break
                    kids = subprocess.run(["pgrep", "-P", str(srv.pid)], capture_output=True,
                                          text=True).stdout
                    nodes = [int(x) for x in kids.split()]
                    for n in nodes:
                        subprocess.run(["taskset", "-a", "-pc", "0", str(n)],
                                       capture_output=True)
                else:
                    srv = subprocess.Popen([kb.RINGLET, "server", "--port", str(port),
                                            "--threads", "1", "--memory-mb", str(memory_mb)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                perf = None
                try:
                    kb.pin(srv.pid, 0)
                    kb.wait_ping(port)
                    pids = nodes or [srv.pid]
                    if a.perf and name == "ringlet load" and rnd == a.rounds - 1:
                        perf = subprocess.Popen(["perf", "record", "-F", os.environ.get("PERF_FREQ", "999"), "-g", "-o",
                                                 a.perf_out, "-p", str(srv.pid)],
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)
                        time.sleep(1.0)
                    c0 = sum(cpu_seconds(x) for x in pids)
                    s0 = [sum(v) for v in zip(*(cpu_split(x) for x in pids))]
                    u0 = os.times()
                    t0 = time.perf_counter()
                    if name == "redis-cli --pipe":
                        with open(resp, "rb") as f:
                            p = subprocess.run(["redis-cli", "-p", str(port), "--pipe"],
                                               stdin=f, capture_output=True, text=True)
                        summary = p.stdout.strip().splitlines()[-1:]
                    else:
                        p = subprocess.run([kb.RINGLET, "load", "--port", str(port),
                                            "--mapping", mapping, "--csv", f"vertices={vcsv}",
                                            "--csv", f"edges={ecsv}", *a.extra_load_arg],
                                           capture_output=True, text=True)
                        summary = p.stdout.strip().splitlines()[-1:]
                    el = time.perf_counter() - t0
                    usage = os.times()
                    if p.returncode != 0:
                        raise SystemExit(f"{name} failed: {p.stdout[-1000:]} {p.stderr[-1000:]}")
                    server_cpu = sum(cpu_seconds(x) for x in pids) - c0
                    # User and kernel apart: the kernel's share is mostly the zeroing of the
                    # data region's fresh pages, which varies with the host's memory, not
                    # with the node's code.
                    s1 = [sum(v) for v in zip(*(cpu_split(x) for x in pids))]
                    server_user, server_sys = s1[0] - s0[0], s1[1] - s0[1]
                    loader_cpu = (usage.children_user + usage.children_system
                                  - u0.children_user - u0.children_system)
                    times[name].append(el)
                    server_cpus[name].append(server_cpu)
                    loader_cpus[name].append(loader_cpu)
                    print(f"round {rnd + 1} {name}: {el:.2f} s, server CPU {server_cpu:.2f} s, "
                          f"loader CPU {loader_cpu:.2f} s; load average "
                          f"{os.getloadavg()[0]:.1f}; server user {server_user:.2f} s, sys "
                          f"{server_sys:.2f} s; {' '.join(summary)}", flush=True)
                finally:
                    if perf:
                        perf.send_signal(2)
                        perf.wait()
                    srv.terminate()
                    srv.wait(timeout=30)
        med = {k: statistics.median(v) for k, v in times.items()}
        n = a.vertices
        for k, v in med.items():
            print(f"median {k}: {v:.2f} s ({n / v:,.0f} vertices/s), server CPU "
                  f"{statistics.median(server_cpus[k]):.2f} s, loader CPU "
                  f"{statistics.median(loader_cpus[k]):.2f} s")
        print(f"ringlet load / redis-cli --pipe: {med['ringlet load'] / med['redis-cli --pipe']:.2f}"
              f"x the time, "
              f"{statistics.median(server_cpus['ringlet load']) / statistics.median(server_cpus['redis-cli --pipe']):.2f}"
              f"x the server CPU")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
