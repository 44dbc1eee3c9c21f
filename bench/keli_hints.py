#!/usr/bin/env python3
"""How fresh are the location hints a chunked KELI load leaves, and what each part of a hint
is worth (issue 13: data hints and index pre-sizing; docs/design/loader.md).

The graph of bench/keli_bfs.py (seeded R-MAT, follower lists chunked at --chunk links per
item) is loaded by `ringlet load` into a fresh `ringlet server`, once per variant:
  - `presized`: as `ringlet load` does by default (`CONFIG SET index-keys`: before pass 1
    for a bound of the records from the files' lines, since session 21, and before pass 2
    for its keys plus the load's records);
  - `unsized`:  `ringlet load --no-index-reserve` (the index grows during both passes).
After each load, `ringlet-keli-bfs` runs the one-sided CHASE BFS from the same roots twice:
with the hints as stored (data part first: one read straight at the target's data entry,
then the index entry) and with `--index-only-hints` (the hint as it was before data hints).
Printed per variant: the load's time and every reader counter (hops at a hint, straight at
the data entry, stale hints by cause, lookups) over --repeat rounds, and the one-sided BFS
time per root (median over roots of each root's median over rounds).

Usage: bench/keli_hints.py [--vertices 200000] [--edges 4400000] [--roots 20] [--depth 2]
       [--repeat 3] [--chunk 100] [--reach-max 20000]
Needs numpy and the release binaries `ringlet` and `ringlet-keli-bfs`. The server runs on
CPU 0, the loader and the reader on CPU 1 where the machine has two.
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keli_bfs as kb  # noqa: E402


def one_sided(sock, rfile, depth, repeat, index_only):
    cmd = [kb.KELI_BFS, "--socket", sock, "--roots", rfile, "--depth", str(depth),
           "--rounds", str(repeat)]
    if index_only:
        cmd.append("--index-only-hints")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"ringlet-keli-bfs failed: {p.stderr[-2000:]}")
    rounds, visits, stats = [], [], ""
    for line in p.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "round":
            rounds.append([float(x) for x in rest.split()])
        elif kind == "visit":
            visits.append(tuple(rest.split()))
        elif kind == "stats":
            stats = rest
    per_root = [statistics.median(x) for x in zip(*rounds)]
    return statistics.median(per_root), sum(per_root), visits, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vertices", type=int, default=200000)
    ap.add_argument("--edges", type=int, default=4400000)
    ap.add_argument("--roots", type=int, default=20)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--reach-max", type=int, default=20000)
    a = ap.parse_args()
    for b in (kb.RINGLET, kb.KELI_BFS):
        if not os.access(b, os.X_OK):
            raise SystemExit(f"build {b} first (cargo build --release)")
    kb.pin(os.getpid(), 1)
    memory_mb = max(1024, 256 + a.edges * 96 // (1 << 20))
    indptr, dst = kb.rmat(a.vertices, a.edges, a.seed)
    degree = kb.np.diff(indptr)
    rng = random.Random(a.seed + 1)
    candidates = kb.np.flatnonzero(degree).tolist()
    roots = []
    for _ in range(a.roots * 1000):
        if len(roots) == a.roots:
            break
        v = rng.choice(candidates)
        if kb.reach(indptr, dst, v, a.depth) <= a.reach_max:
            roots.append(f"v:{v}")
    tmp = tempfile.mkdtemp(prefix="keli-hints-")
    try:
        _, vcsv, ecsv, mapping = kb.write_data(tmp, indptr, dst, a.chunk)
        rfile = os.path.join(tmp, "roots.txt")
        with open(rfile, "w") as f:
            f.write("".join(r + "\n" for r in roots))
        print(f"{a.vertices} vertices, {len(dst)} edges, chunks of {a.chunk}, {len(roots)} "
              f"roots, depth {a.depth}, {a.repeat} rounds; load average "
              f"{os.getloadavg()[0]:.1f}")
        want = None
        for variant in ("presized", "unsized"):
            port = kb.free_port()
            sock = os.path.join(tmp, f"{variant}.sock")
            srv = subprocess.Popen([kb.RINGLET, "server", "--port", str(port), "--threads", "1",
                                    "--memory-mb", str(memory_mb), "--shm-socket", sock],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                kb.pin(srv.pid, 0)
                kb.wait_ping(port)
                cmd = [kb.RINGLET, "load", "--port", str(port), "--mapping", mapping,
                       "--csv", f"vertices={vcsv}", "--csv", f"edges={ecsv}"]
                if variant == "unsized":
                    cmd.append("--no-index-reserve")
                t0 = time.perf_counter()
                t_load, summary = kb.run_load(cmd)
                print(f"[{variant}] ringlet load {t_load:.2f} s ({' '.join(summary)}); "
                      f"load average {os.getloadavg()[0]:.1f}")
                for index_only in (False, True):
                    med, total, visits, stats = one_sided(sock, rfile, a.depth, a.repeat,
                                                          index_only)
                    if want is None:
                        want = visits
                    elif visits != want:
                        raise SystemExit("one-sided BFS answers differ between runs")
                    hint = "index entry only" if index_only else "data entry, then index"
                    print(f"[{variant}] hints read at the {hint}: BFS median {med / 1e3:.2f} ms "
                          f"per root, {total / 1e3:.1f} ms over the roots; {stats}")
            finally:
                srv.terminate()
                srv.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
