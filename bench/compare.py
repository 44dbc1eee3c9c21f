#!/usr/bin/env python3
"""Run Ringlet beside Redis 7 and memcached 1.6 on this machine, same workloads, one run.

Every server is pinned to CPU 0 and the load generator (`ringlet bench`, which speaks RESP,
the native protocol and the memcached text protocol, so one generator drives all three) to
CPU 1, so each server gets the same single core. For each workload this prints ops/s,
p50/p99/p99.9 latency and the server's CPU-seconds per million operations (utime+stime from
/proc/<pid>/stat), with ratios to Redis. Redis figures are cross-checked against
redis-benchmark in the same run.

Usage: bench/compare.py [--duration 10] [--keys 1000000] [--repeat 1] [--json out.json]
       [--quick]   (a 2-second, 10k-key smoke run of the same matrix)
       [--matrix mixed|setget]  mixed (default): SET:GET 1:10 and 1:1 at 100 B and 1 KiB;
                   setget: SET only and GET only at 100 B, P1 and P16 (issue 16's request-path
                   goals), with redis-benchmark's SET and GET against Redis and Ringlet in the
                   same run as a second generator
       [--servers redis,memcached,ringlet/resp,ringlet/native]
Requires: redis-server, memcached, redis-benchmark (scripts/setup.sh) and a release build of
`ringlet` (built here if missing).
"""
import argparse
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RINGLET = os.path.join(ROOT, "target", "release", "ringlet")
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[11], fields[12] are utime, stime (stat fields 14 and 15) in clock ticks
    return (int(fields[11]) + int(fields[12])) / TICKS


def start(name, port, threads):
    if name == "redis":
        cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
               "--protected-mode", "no"]
    elif name == "memcached":
        cmd = ["memcached", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "4096",
               "-t", str(threads)]
        if os.getuid() == 0:
            cmd += ["-u", "nobody"]  # memcached refuses to run as root without -u
    else:
        cmd = [RINGLET, "server", "--port", str(port), "--memory-mb", "4096",
               "--threads", str(threads)]
    p = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_port(port)
    return p


def children_cpu():
    """utime + stime of every finished child so far: the generators' own CPU."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loadgen(proto, port, args, ratio, value_size, pipeline, load, duration):
    cmd = ["taskset", "-c", "1", RINGLET, "bench", "--protocol", proto, "--host", "127.0.0.1",
           "--port", str(port), "--keys", str(args.keys), "--key-size", "16",
           "--value-size", str(value_size), "--ratio", ratio, "--connections", "50",
           "--pipeline", str(pipeline), "--duration", str(duration), "--threads", "1",
           "--seed", "42", "--json"]
    if load:
        cmd.append("--load")
    g0 = children_cpu()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    ops = r["ops_per_sec"] * r.get("duration_s", duration)
    r["gen_us_per_op"] = (children_cpu() - g0) / ops * 1e6 if ops else None
    return r


REDIS_BENCHMARK_N = 400_000


def redis_benchmark(port, value_size, pipeline, keys, test="get", server_pid=None):
    """ops/s of redis-benchmark's `test` (get or set), its own CPU µs per request (the
    generator comparison) and, given the server's pid, the server's CPU-s per Mop."""
    g0 = children_cpu()
    c0 = cpu_seconds(server_pid) if server_pid else None
    out = subprocess.run(
        ["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-c", "50", "-n",
         str(REDIS_BENCHMARK_N),
         "-P", str(pipeline), "-d", str(value_size), "-r", str(keys), "-t", test, "-q"],
        check=True, capture_output=True, text=True).stdout
    gen = (children_cpu() - g0) / REDIS_BENCHMARK_N * 1e6
    cpu = ((cpu_seconds(server_pid) - c0) / (REDIS_BENCHMARK_N / 1e6)) if server_pid else None
    m = re.search(test.upper() + r": ([0-9.]+) requests per second", out.replace("\r", "\n"))
    return (float(m.group(1)) if m else None), gen, cpu


def main():
    global RINGLET
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="server threads (Ringlet, memcached)")
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--matrix", choices=("mixed", "setget"), default="mixed")
    ap.add_argument("--ringlet-bin", default=RINGLET,
                    help="the ringlet binary to serve and generate load with (a before/after "
                         "comparison runs the script once per binary)")
    ap.add_argument("--servers", default="redis,memcached,ringlet/resp,ringlet/native",
                    help="comma-separated subset; redis is always run (ratios are to it)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.keys = 2, 10_000
    RINGLET = args.ringlet_bin
    if not os.path.exists(RINGLET):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "ringlet-cli"], cwd=ROOT,
                       check=True)

    every = {"redis": ("redis", "resp"), "memcached": ("memcached", "memcache"),
             "ringlet/resp": ("ringlet", "resp"), "ringlet/native": ("ringlet", "native")}
    wanted = ["redis"] + [s for s in args.servers.split(",") if s and s != "redis"]
    servers = [every[s] for s in wanted]
    if args.matrix == "setget":
        sizes = (100,)
        workloads = [(ratio, 100, pl) for ratio in ("1:0", "0:1") for pl in (1, 16)]
    else:
        sizes = (100, 1024)
        workloads = [(ratio, vs, pl) for vs in sizes for ratio in ("1:10", "1:1")
                     for pl in (1, 16)]
    rbench = []  # redis-benchmark rows (setget matrix): server, test, pipeline, medians
    rows = []
    for vs in sizes:
        for name, proto in servers:
            port = free_port()
            proc = start(name, port, args.threads)
            try:
                loadgen(proto, port, args, "1:0", vs, 16, True, 1)  # fill the keyspace
                for ratio, wvs, pl in workloads:
                    if wvs != vs:
                        continue
                    runs = []
                    for _ in range(args.repeat):
                        c0 = cpu_seconds(proc.pid)
                        r = loadgen(proto, port, args, ratio, vs, pl, False, args.duration)
                        c1 = cpu_seconds(proc.pid)
                        ops = r["ops_per_sec"] * r.get("duration_s", args.duration)
                        r["cpu_s_per_mop"] = (c1 - c0) / (ops / 1e6) if ops else None
                        runs.append(r)
                    med = lambda k: statistics.median(x[k] for x in runs if x.get(k) is not None)
                    row = {"server": name, "protocol": proto, "ratio": ratio, "value": vs,
                           "pipeline": pl, "ops_per_sec": med("ops_per_sec"),
                           "p50_us": med("p50_us"), "p99_us": med("p99_us"),
                           "p999_us": med("p999_us"), "cpu_s_per_mop": med("cpu_s_per_mop"),
                           "gen_us_per_op": med("gen_us_per_op")}
                    if name == "redis" and ratio == "1:10":
                        ops, gen, _ = redis_benchmark(port, vs, pl, args.keys)
                        row["redis_benchmark_get_ops"] = ops
                        row["redis_benchmark_us_per_op"] = gen
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
                if args.matrix == "setget" and proto == "resp":
                    # The second generator, same keyspace, value size and connections.
                    for test in ("set", "get"):
                        for pl in (1, 16):
                            got = [redis_benchmark(port, vs, pl, args.keys, test, proc.pid)
                                   for _ in range(args.repeat)]
                            rb = {"server": name, "test": test, "pipeline": pl,
                                  "ops_per_sec": statistics.median(g[0] for g in got if g[0]),
                                  "cpu_s_per_mop": statistics.median(g[2] for g in got)}
                            rbench.append(rb)
                            print(json.dumps(rb), file=sys.stderr)
            finally:
                proc.terminate()
                proc.wait()

    base = {(r["ratio"], r["value"], r["pipeline"]): r for r in rows if r["server"] == "redis"}
    print("| workload | server | ops/s | ×Redis | p50 µs | p99 µs | p99.9 µs | CPU-s/Mop | ×Redis CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = base[(r["ratio"], r["value"], r["pipeline"])]
        wl = {"1:0": "SET only", "0:1": "GET only"}.get(r["ratio"], f"SET:GET {r['ratio']}")
        wl = f"{wl} {r['value']}B P{r['pipeline']}"
        cpu_ratio = (r["cpu_s_per_mop"] / b["cpu_s_per_mop"]) if b["cpu_s_per_mop"] else float("nan")
        print(f"| {wl} | {r['server']}/{r['protocol']} | {r['ops_per_sec']:,.0f} | "
              f"{r['ops_per_sec'] / b['ops_per_sec']:.2f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | "
              f"{r['p999_us']:.0f} | {r['cpu_s_per_mop']:.2f} | {cpu_ratio:.2f} |")
    for r in rows:
        if "redis_benchmark_get_ops" in r:
            print(f"cross-check redis-benchmark GET {r['value']}B P{r['pipeline']}: "
                  f"{r['redis_benchmark_get_ops']:,.0f} ops/s (ringlet bench 1:10: "
                  f"{r['ops_per_sec']:,.0f}); generator CPU per request: redis-benchmark "
                  f"{r['redis_benchmark_us_per_op']:.1f} µs, ringlet bench "
                  f"{r['gen_us_per_op']:.1f} µs")
    if rbench:
        print()
        print("redis-benchmark -c 50 -d 100 -r KEYS -n 400000 (medians):")
        print("| test | server | ops/s | ×Redis | CPU-s/Mop | ×Redis CPU |")
        print("|---|---|---|---|---|---|")
        rb_base = {(r["test"], r["pipeline"]): r for r in rbench if r["server"] == "redis"}
        for r in rbench:
            b = rb_base[(r["test"], r["pipeline"])]
            print(f"| {r['test'].upper()} P{r['pipeline']} | {r['server']} | "
                  f"{r['ops_per_sec']:,.0f} | {r['ops_per_sec'] / b['ops_per_sec']:.2f} | "
                  f"{r['cpu_s_per_mop']:.2f} | {r['cpu_s_per_mop'] / b['cpu_s_per_mop']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "redis_benchmark": rbench} if rbench else rows, f,
                      indent=1)


if __name__ == "__main__":
    main()
