#!/usr/bin/env python3
"""Server CPU per CHASE (and optionally a perf profile) for KELI's BFS: loads a seeded R-MAT
graph (bench/keli_bfs.py's generator and files, 100-link chunks) into one `ringlet server`
with `ringlet load`, then runs `CHASE v:<root> follows CHUNKED DEPTH 2 ... FIELDS name` from
20 roots (BFS <= 20,000 vertices) REPS times, printing wall time and the server's own CPU
time (utime + stime from /proc, which the machine's load does not inflate) per CHASE.

Usage: bench/keli_bfs_profile.py VERTICES EDGES REPS [chase|load]
  chase: `perf record -g` the server during the CHASEs (./perf.data);
  load:  `perf record -g` the server during the load (./perf-load.data).
"""
import os, sys, subprocess, time, random, tempfile, shutil
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keli_bfs as k
import numpy as np, redis
V, E, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ip, d = k.rmat(V, E, 7)
deg = np.diff(ip)
rng = random.Random(8)
c = np.flatnonzero(deg).tolist()
roots = []
for _ in range(20000):  # bounded draw
    if len(roots) == 20:
        break
    v = rng.choice(c)
    if k.reach(ip, d, v, 2) <= 20000:
        roots.append(f"v:{v}")
tmp = tempfile.mkdtemp(prefix="keli-prof-")
resp, vcsv, ecsv, mapping = k.write_data(tmp, ip, d, 100)
port = k.free_port()
p = subprocess.Popen([k.RINGLET, "server", "--port", str(port), "--threads", "1", "--memory-mb", "4096"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    k.pin(p.pid, 0)
    k.wait_ping(port)
    if len(sys.argv) > 4 and sys.argv[4] == "load":
        lperf = subprocess.Popen(["perf", "record", "-F", "1000", "-g", "-o", "perf-load.data", "-p", str(p.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
    tl = time.time()
    subprocess.run([k.RINGLET, "load", "--port", str(port), "--mapping", mapping, "--csv", f"vertices={vcsv}", "--csv", f"edges={ecsv}"], check=True, capture_output=True)
    print(f"load {time.time()-tl:.1f} s", flush=True)
    if len(sys.argv) > 4 and sys.argv[4] == "load":
        lperf.send_signal(2); lperf.wait()
    r = redis.Redis(port=port)
    def cpu():
        f = open(f"/proc/{p.pid}/stat").read().split(")")[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    print("server pid", p.pid, flush=True)
    if len(sys.argv) > 4 and sys.argv[4] == "chase":
        perf = subprocess.Popen(["perf", "record", "-F", "2000", "-g", "-o", "perf.data", "-p", str(p.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
    c0 = cpu(); t0 = time.time(); n = 0; visited = 0
    for _ in range(reps):
        for root in roots:
            visited += len(k.bfs_chase(r, root, 2)); n += 1
    c1 = cpu(); t1 = time.time()
    print(f"{n} CHASEs, {visited/n:.0f} visited each, wall {1e3*(t1-t0)/n:.2f} ms, server cpu {1e3*(c1-c0)/n:.2f} ms per CHASE, retries {k.CHASE_RETRIES[0]}")
    if len(sys.argv) > 4 and sys.argv[4] == "chase":
        perf.send_signal(2); perf.wait()
finally:
    p.terminate(); p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
