#!/usr/bin/env python3
"""Bulk loading: `ringlet load` into `ringlet server` beside Redis's own mass insertion
(`redis-cli --pipe`) into redis-server 7, same records, same machine, same run.

Data: --records users with 5 attributes (name, email, age, city, score), seeded, as a CSV file
for `ringlet load` (mapping: key `user:{id}`, the 5 attributes) and as the equivalent
`HSET user:<id> name .. email .. age .. city .. score ..` commands in RESP for
`redis-cli --pipe` (generated before the clock starts: Redis's time excludes producing its
input, Ringlet's includes parsing the CSV).

Each round starts both servers afresh (empty, no persistence), times the loader and
`redis-cli --pipe` as whole processes (wall clock, from start to exit), and checks that both
stores hold --records keys afterwards. Reported: records/s of each, medians over --runs
rounds, and the ratio Ringlet / Redis (> 1: the loader is faster).

Servers are pinned to CPU 0 (ringlet server --threads 1), the loading clients to CPU 1 where
the machine has two.

Usage: bench/load_vs_pipe.py [--records 200000] [--runs 3] [--connections 1] [--json out.json]
       [--ringlet PATH]
Requires redis-server and redis-cli (scripts/setup.sh) and target/release/ringlet (built here
if missing: cargo build --release -p ringlet-cli).
"""
import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RINGLET = os.path.join(ROOT, "target", "release", "ringlet")
CITIES = ["Oslo", "Lyon", "Porto", "Graz", "Turku", "Cork", "Gent", "Brno"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(pid, cpu):
    if os.cpu_count() and os.cpu_count() >= 2:
        # -a: every thread of the process (a server starts its threads before it is pinned).
        subprocess.run(["taskset", "-a", "-pc", str(cpu), str(pid)], capture_output=True)


def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def generate(n, seed, tmp):
    rng = random.Random(seed)
    csv_path = os.path.join(tmp, "users.csv")
    pipe_path = os.path.join(tmp, "users.resp")
    with open(csv_path, "wb") as c, open(pipe_path, "wb") as p:
        c.write(b"id,name,email,age,city,score\n")
        for i in range(n):
            name = "user%d" % rng.randrange(10**9)
            row = [str(i).encode(), name.encode(), (name + "@example.org").encode(),
                   str(rng.randrange(18, 90)).encode(), rng.choice(CITIES).encode(),
                   str(rng.randrange(10**6)).encode()]
            c.write(b",".join(row) + b"\n")
            p.write(resp([b"HSET", b"user:" + row[0], b"name", row[1], b"email", row[2],
                          b"age", row[3], b"city", row[4], b"score", row[5]]))
    mapping = os.path.join(tmp, "users.toml")
    with open(mapping, "w") as m:
        m.write('[[records]]\nkey = "user:{id}"\n'
                'attributes = ["name", "email", "age", "city", "score"]\n')
    return csv_path, pipe_path, mapping


def wait_port(port, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def dbsize(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "dbsize"], capture_output=True,
                         text=True, check=True)
    return int(out.stdout.strip())


def timed_process(cmd, stdin=None):
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pin(p.pid, 1)
    out, err = p.communicate()
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {out.decode()} {err.decode()}")
    return dt, out.decode()


def round_ringlet(a, csv_path, mapping, tmp):
    port = free_port()
    srv = subprocess.Popen([RINGLET, "server", "--port", str(port), "--threads", "1",
                            "--memory-mb", "2048"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        pin(srv.pid, 0)
        wait_port(port)
        dt, out = timed_process([RINGLET, "load", "--port", str(port), "--mapping", mapping,
                                 "--csv", csv_path, "--connections", str(a.connections)])
        n = dbsize(port)
        assert n == a.records, f"ringlet holds {n} keys, not {a.records}: {out}"
        return dt
    finally:
        srv.terminate()
        srv.wait()


def round_redis(a, pipe_path, tmp):
    port = free_port()
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly",
                            "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    try:
        pin(srv.pid, 0)
        wait_port(port)
        with open(pipe_path, "rb") as f:
            dt, out = timed_process(["redis-cli", "-p", str(port), "--pipe"], stdin=f)
        assert "errors: 0" in out, out
        n = dbsize(port)
        assert n == a.records, f"redis holds {n} keys, not {a.records}"
        return dt
    finally:
        srv.terminate()
        srv.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json")
    ap.add_argument("--ringlet", help="the ringlet binary (default target/release/ringlet)")
    a = ap.parse_args()
    if a.ringlet:
        global RINGLET
        RINGLET = a.ringlet
    if not os.access(RINGLET, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "ringlet-cli", "--bin", "ringlet"],
                       cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp(prefix="load-vs-pipe-")
    times = {"ringlet load": [], "redis-cli --pipe": []}
    try:
        csv_path, pipe_path, mapping = generate(a.records, a.seed, tmp)
        for r in range(a.runs):
            times["ringlet load"].append(round_ringlet(a, csv_path, mapping, tmp))
            times["redis-cli --pipe"].append(round_redis(a, pipe_path, tmp))
            print(f"round {r + 1}: ringlet {a.records / times['ringlet load'][-1]:,.0f} "
                  f"records/s, redis {a.records / times['redis-cli --pipe'][-1]:,.0f} records/s",
                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rate = {k: a.records / statistics.median(v) for k, v in times.items()}
    best = {k: a.records / min(v) for k, v in times.items()}
    ratio = rate["ringlet load"] / rate["redis-cli --pipe"]
    ratio_best = best["ringlet load"] / best["redis-cli --pipe"]
    # On a shared machine other processes slow some rounds: the best round of each is the
    # less noisy figure, the median the one asked for; both are printed.
    print(f"{a.records} records x 5 attributes, {a.runs} rounds (load average "
          f"{os.getloadavg()[0]:.1f}):")
    for k, v in rate.items():
        print(f"  {k:18} median {v:10,.0f} records/s ({statistics.median(times[k]):.3f} s), "
              f"best {best[k]:10,.0f} records/s")
    print(f"  ratio ringlet/redis: median {ratio:.2f}x, best {ratio_best:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"records": a.records, "runs": a.runs, "connections": a.connections,
                       "seconds": times, "records_per_s": rate, "ratio": ratio,
                       "best_records_per_s": best, "ratio_best": ratio_best}, f, indent=1)


if __name__ == "__main__":
    main()
