#!/usr/bin/env python3
"""Single-node cost of key commands before/after a change, beside Redis 7 in the same run.

Starts each server in turn pinned to CPU 0 (Redis 7, then every `--ringlet` binary given,
one `ringlet server --threads 1` each), drives it with redis-benchmark pinned to CPU 1
(`-c 50 -P <pipeline> -r <keys> -n <requests>`), one command at a time (INCR and APPEND by
default, each on random keys, the database flushed before each command), and repeats the
whole round `--repeat` times, servers interleaved, so machine noise hits every binary alike.
Prints, per server and command, the median ops/s and the server's CPU-seconds per million
requests (utime + stime from /proc/<pid>/stat), and their ratios to Redis.

Usage: bench/keyspace_ab.py --ringlet before=/tmp/ringlet-before --ringlet after=target/release/ringlet
       [--pipeline 16] [--requests 1000000] [--keys 100000] [--repeat 3]
       [--command 'INCR key:__rand_int__'] ... [--no-flush]
"""
import argparse
import os
import re
import statistics
import subprocess

from compare import cpu_seconds, free_port, wait_port

DEFAULT_COMMANDS = ["INCR key:__rand_int__", "APPEND key:__rand_int__ abc"]


def start(binary, port):
    if binary is None:
        cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
               "--protected-mode", "no"]
    else:
        cmd = [binary, "server", "--port", str(port), "--memory-mb", "2048", "--threads", "1"]
    p = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_port(port)
    return p


def run_one(port, pid, command, args, flush=True):
    if flush:
        subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], check=True,
                       capture_output=True)
    c0 = cpu_seconds(pid)
    out = subprocess.run(
        ["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-c", "50",
         "-n", str(args.requests), "-P", str(args.pipeline), "-r", str(args.keys), "-q"]
        + command.split(),
        check=True, capture_output=True, text=True).stdout
    cpu = (cpu_seconds(pid) - c0) / (args.requests / 1e6)
    m = re.findall(r"([0-9.]+) requests per second", out.replace("\r", "\n"))
    return float(m[-1]), cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", action="append", required=True,
                    help="name=path of a ringlet binary (repeatable)")
    ap.add_argument("--command", action="append")
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-flush", action="store_true",
                    help="flush only before a server's first command, so a read command can "
                         "follow the write that fills its keys (HSET then HGET)")
    args = ap.parse_args()
    commands = args.command or DEFAULT_COMMANDS
    servers = [("redis", None)] + [tuple(r.split("=", 1)) for r in args.ringlet]
    res = {}  # (server, command) -> [(ops, cpu)]
    for rep in range(args.repeat):
        for name, binary in servers:
            port = free_port()
            p = start(binary, port)
            try:
                for i, c in enumerate(commands):
                    ops, cpu = run_one(port, p.pid, c, args, flush=i == 0 or not args.no_flush)
                    res.setdefault((name, c), []).append((ops, cpu))
                    print(f"round {rep + 1} {name:8} {c.split()[0]:7} {ops:12,.0f} ops/s "
                          f"{cpu:6.2f} CPU-s/Mop", flush=True)
            finally:
                p.terminate()
                p.wait()
    print(f"\nmedians of {args.repeat}, redis-benchmark -c 50 -P {args.pipeline} "
          f"-r {args.keys} -n {args.requests}, load average {os.getloadavg()[0]:.1f}:")
    for c in commands:
        r_ops = statistics.median(o for o, _ in res[("redis", c)])
        r_cpu = statistics.median(x for _, x in res[("redis", c)])
        for name, _ in servers:
            ops = statistics.median(o for o, _ in res[(name, c)])
            cpu = statistics.median(x for _, x in res[(name, c)])
            print(f"  {c.split()[0]:7} {name:8} {ops:12,.0f} ops/s ({ops / r_ops:4.2f}x Redis)"
                  f"  {cpu:6.2f} CPU-s/Mop ({cpu / r_cpu:4.2f}x Redis)")


if __name__ == "__main__":
    main()
