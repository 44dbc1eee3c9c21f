#!/usr/bin/env python3
"""Server CPU per operation, interleaved A/B: Redis 7, a Ringlet binary "before" and one
"after", each in turn in every round (redis, before, after, redis, before, after, ...), so a
noisy shared machine perturbs all three alike. Throughput on a loaded 2-core machine swings
by 5x between runs; the server's CPU-seconds per million operations (utime + stime from
/proc/<pid>/stat over the measured phase) is the figure that survives it, and its ratio to
Redis in the same round is what this prints (medians over rounds).

Each server is pinned to CPU 0 (Ringlet `--threads 1`), redis-benchmark to CPU 1. Per round
and server: "fill", 1M SETs at pipeline 16 into the empty server over a 1M-key space (~63 %
new keys), then every one of the 1M keys written (`redis-cli --pipe`, unmeasured), then SET
and GET at pipeline 16 and 1 on that full key space (`-c 50 -d 100 -r 1000000`: SETs
overwrite, GETs hit). Beside each figure: how busy the server and the client were
(CPU-seconds per wall second): a client near 1.0 is what bounds the throughput, not the
server; and redis-benchmark's p50 / p99 latency.

Usage: bench/request_path_ab.py --before OLD_BIN --after NEW_BIN [--rounds 3]
       [--before-args "--io epoll" --after-args "--io uring"]   # one binary, two loops
       [--tests set:16]                    # only these tests (test:pipeline, comma-separated;
                                           # fill:16, set:16, get:16, set:1, get:1)
       [--client ringlet-bench]            # `ringlet bench` (3 s per test) as the client
       [--client ringlet-bench-uring]      # the same on one io_uring: cheaper per request,
                                           # so at P1 the server saturates first
"""
import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import cpu_seconds, free_port, wait_port  # noqa: E402

# "fill": SETs at pipeline 16 into an empty server (~63 % of them new keys: 1M random draws
# over 1M keys); the other tests run on a full key space (every key:000000000000..999999
# written, see `full_keyspace`), so their SETs overwrite and their GETs hit.
TESTS = [("fill", 16, 1_000_000), ("set", 16, 1_000_000), ("get", 16, 1_000_000),
         ("set", 1, 100_000), ("get", 1, 100_000)]
KEYS = 1_000_000


def full_keyspace(path):
    """Every key redis-benchmark's `-r 1000000` can draw, with a 100-byte value, as RESP SETs
    for `redis-cli --pipe`. Why: redis-benchmark seeds its generator with time ^ pid, so two
    runs started a second apart can draw the same keys or not; after a random fill the
    measured SETs were then either all overwrites or ~23 % new keys (a bimodal cost per run).
    A full key space makes every measured SET an overwrite and every GET a hit."""
    val = b"x" * 100
    with open(path, "wb") as f:
        for i in range(KEYS):
            f.write(b"*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$100\r\n%s\r\n" % (i, val))


def fill_full(port, path):
    with open(path, "rb") as f:
        subprocess.run(["taskset", "-c", "1", "redis-cli", "-p", str(port), "--pipe"], stdin=f,
                       check=True, capture_output=True)


def start(kind, binary, port, extra=()):
    if kind == "redis":
        cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
    else:
        cmd = [binary, "server", "--port", str(port), "--memory-mb", "4096", "--threads", "1"]
        cmd += list(extra)
    p = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_port(port)
    return p


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def rb(port, test, pipeline, n):
    """ops/s, the client's CPU-seconds and the wall seconds of the run (its busy share says
    whether redis-benchmark, one thread on one CPU, is what limits the throughput), and
    redis-benchmark's p50 and p99 latency in ms (its CSV line)."""
    c0, t0 = children_cpu(), time.monotonic()
    test = "set" if test == "fill" else test
    out = subprocess.run(
        ["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-c", "50", "-n", str(n),
         "-P", str(pipeline), "-d", "100", "-r", str(KEYS), "-t", test, "--csv"],
        check=True, capture_output=True, text=True).stdout
    client, wall = children_cpu() - c0, time.monotonic() - t0
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
    # "p99_latency_ms","max_latency_ms"
    for line in out.splitlines():
        f = [x.strip('"') for x in line.strip().split(",")]
        if len(f) >= 7 and f[0] == test.upper():
            return float(f[1]), client, wall, float(f[4]), float(f[6])
    return float("nan"), client, wall, float("nan"), float("nan")


def ringlet_bench(binary, port, test, pipeline, seconds=3, client_io="tokio"):
    """`ringlet bench` as the client instead of redis-benchmark (same key space, key and value
    sizes, connections and pipeline): ops/s, the ops run, the client's CPU-seconds and wall,
    and its p50 and p99 in ms. `client_io="uring"`: its one-thread io_uring phase, cheap
    enough per request that at pipeline 1 the server saturates before it does."""
    c0, t0 = children_cpu(), time.monotonic()
    out = subprocess.run(
        ["taskset", "-c", "1", binary, "bench", "--port", str(port), "--keys", "1000000",
         "--key-size", "16", "--value-size", "100", "--connections", "50",
         "--pipeline", str(pipeline), "--ratio", "0:1" if test == "get" else "1:0",
         "--duration", str(seconds), "--client-io", client_io, "--json"],
        check=True, capture_output=True, text=True).stdout
    client, wall = children_cpu() - c0, time.monotonic() - t0
    j = json.loads(out.strip().splitlines()[-1])
    return (j["ops_per_sec"], j["sets"] + j["gets"], client, wall, j["p50_us"] / 1000,
            j["p99_us"] / 1000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before-args", default="", help="extra flags for the before server")
    ap.add_argument("--after-args", default="", help="extra flags for the after server")
    ap.add_argument("--tests", default="",
                    help="comma-separated test:pipeline (e.g. set:16,get:16); default all four")
    ap.add_argument("--client", choices=["redis-benchmark", "ringlet-bench", "ringlet-bench-uring"],
                    default="redis-benchmark",
                    help="load generator of the measured tests (the fill is always "
                         "redis-benchmark); ringlet-bench is `bench` of --bench-bin (default "
                         "the --after binary), ringlet-bench-uring the same with "
                         "--client-io uring")
    ap.add_argument("--bench-bin", default="",
                    help="the ringlet binary whose `bench` is the client (default --after)")
    args = ap.parse_args()
    tests = TESTS
    if args.tests:
        want = {(t.split(":")[0], int(t.split(":")[1])) for t in args.tests.split(",")}
        tests = [t for t in TESTS if (t[0], t[1]) in want]
        if not tests:
            ap.error(f"--tests {args.tests!r} names none of {[(t, p) for t, p, _ in TESTS]}")
    servers = [("redis", None), ("before", args.before), ("after", args.after)]
    extra = {"before": shlex.split(args.before_args), "after": shlex.split(args.after_args)}
    keyfile = os.path.join(tempfile.mkdtemp(prefix="request-path-ab-"), "keys.resp")
    full_keyspace(keyfile)
    res = {}  # (server, test, pipeline) -> list of (ops/s, cpu s/Mop)
    for rnd in range(args.rounds):
        for name, binary in servers:
            port = free_port()
            p = start("redis" if name == "redis" else "ringlet", binary, port,
                      extra.get(name, ()))
            filled = False
            try:
                if ("fill", 16, 1_000_000) not in tests:
                    rb(port, "fill", 16, 1_000_000)
                for test, pl, n in tests:
                    if test != "fill" and not filled:
                        fill_full(port, keyfile)
                        filled = True
                    c0 = cpu_seconds(p.pid)
                    p50 = p99 = float("nan")
                    if args.client.startswith("ringlet-bench"):
                        io = "uring" if args.client == "ringlet-bench-uring" else "tokio"
                        ops, n, client, wall, p50, p99 = ringlet_bench(
                            args.bench_bin or args.after, port, test, pl, client_io=io)
                    else:
                        ops, client, wall, p50, p99 = rb(port, test, pl, n)
                    server = cpu_seconds(p.pid) - c0
                    cpu = server / (n / 1e6)
                    res.setdefault((name, test, pl), []).append(
                        (ops, cpu, server / wall, client / wall, p50, p99))
                    print(f"round {rnd} {name} {test} P{pl}: {ops:,.0f} ops/s, "
                          f"{cpu:.2f} CPU-s/Mop, server busy {server / wall:.2f}, "
                          f"client busy {client / wall:.2f}, p50 {p50:.3f} ms, "
                          f"p99 {p99:.3f} ms, load {os.getloadavg()[0]:.1f}",
                          file=sys.stderr)
            finally:
                p.terminate()
                p.wait()
            time.sleep(0.5)
    # busy: CPU-seconds per wall second over the run (server on CPU 0, redis-benchmark on
    # CPU 1; the client's includes its start-up and connection set-up).
    # p50 / p99: the client's latency percentiles in ms (medians over rounds).
    print("| test | server | ops/s | ×Redis | CPU-s/Mop | ×Redis CPU | server busy | client busy "
          "| p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for test, pl, _ in tests:
        base = res[("redis", test, pl)]
        b_ops = statistics.median(x[0] for x in base)
        b_cpu = statistics.median(x[1] for x in base)
        for name, _ in servers:
            v = res[(name, test, pl)]
            ops = statistics.median(x[0] for x in v)
            cpu = statistics.median(x[1] for x in v)
            sbusy = statistics.median(x[2] for x in v)
            cbusy = statistics.median(x[3] for x in v)
            p50 = statistics.median(x[4] for x in v)
            p99 = statistics.median(x[5] for x in v)
            print(f"| {test.upper()} P{pl} | {name} | {ops:,.0f} | {ops / b_ops:.2f} | "
                  f"{cpu:.2f} | {cpu / b_cpu:.2f} | {sbusy:.2f} | {cbusy:.2f} | {p50:.3f} | "
                  f"{p99:.3f} |")


if __name__ == "__main__":
    main()
