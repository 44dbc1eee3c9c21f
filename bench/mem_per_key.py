#!/usr/bin/env python3
"""Bytes per key beyond the payload: Ringlet, Redis 7 and memcached 1.6, same keys, same run.

Each server starts empty; the script records its RSS (VmRSS of /proc/<pid>/status, which
includes Ringlet's memfd regions), loads --keys keys of 16 bytes (`key:` + 12 digits) with
--value-size byte values through the server's own text protocol (pipelined batches, every
reply checked), records RSS again, and reports (RSS growth / keys) - (key + value bytes).
Redis also reports its own `used_memory` growth the same way. memcached runs with -m large
enough that nothing is evicted (the script checks `curr_items`); Ringlet's `server` with
--memory-mb likewise (it checks DBSIZE).

Usage: bench/mem_per_key.py [--keys 1000000] [--value-size 100] [--runs 3]
                            [--ringlet target/release/ringlet]
Requires: redis-server, memcached (scripts/setup.sh) and a release build of `ringlet`.
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 5000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port):
    deadline = time.time() + 20
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=60)
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def key(i):
    return b"key:%012d" % i


def value(i, n):
    v = b"%d|" % i
    return (v * (n // len(v) + 1))[:n]


def expect(sock, reply, count):
    """Read exactly `count` copies of `reply`; anything else is an error."""
    want = reply * count
    got = b""
    while len(got) < len(want):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("connection closed during load")
        got += chunk
        if not want.startswith(got[:len(want)]):
            raise RuntimeError(f"unexpected reply: {got[:200]!r}")


def resp_cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def resp_call(sock, *args):
    sock.sendall(resp_cmd(*args))
    data = b""
    while True:
        data += sock.recv(1 << 20)
        if data.startswith((b"+", b"-", b":")) and data.endswith(b"\r\n"):
            return data
        m = re.match(rb"\$(\d+)\r\n", data)
        if m and len(data) >= m.end() + int(m.group(1)) + 2:
            return data[m.end():m.end() + int(m.group(1))]


def load_resp(sock, keys, vs):
    for b in range(0, keys, BATCH):
        n = min(BATCH, keys - b)
        sock.sendall(b"".join(resp_cmd(b"SET", key(i), value(i, vs)) for i in range(b, b + n)))
        expect(sock, b"+OK\r\n", n)


def load_memcache(sock, keys, vs):
    for b in range(0, keys, BATCH):
        n = min(BATCH, keys - b)
        sock.sendall(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (key(i), vs, value(i, vs))
                              for i in range(b, b + n)))
        expect(sock, b"STORED\r\n", n)


def settle(pid):
    """RSS once it stops moving (lazy page commits, background threads): bounded wait."""
    last = rss(pid)
    for _ in range(20):
        time.sleep(0.25)
        now = rss(pid)
        if now == last:
            return now
        last = now
    return last


def measure(name, cmd, port, keys, vs, proto):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sock = connect(port)
        extra = {}
        if proto == "resp":
            resp_call(sock, b"PING")
        r0 = settle(p.pid)
        if name == "redis":
            used0 = int(re.search(rb"used_memory:(\d+)", resp_call(sock, b"INFO", b"memory")).group(1))
        t = time.perf_counter()
        (load_resp if proto == "resp" else load_memcache)(sock, keys, vs)
        load_s = time.perf_counter() - t
        r1 = settle(p.pid)
        if proto == "resp":
            n = int(resp_call(sock, b"DBSIZE")[1:-2])
            # Spot-check values: a loader that stored garbage would make the figure meaningless.
            for i in (0, keys // 2, keys - 1):
                assert resp_call(sock, b"GET", key(i)) == value(i, vs), (name, i)
        else:
            sock.sendall(b"stats\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                data += sock.recv(1 << 16)
            n = int(re.search(rb"STAT curr_items (\d+)", data).group(1))
            sock.sendall(b"get %s\r\n" % key(keys - 1))
            data = b""
            while not data.endswith(b"END\r\n"):
                data += sock.recv(1 << 16)
            assert value(keys - 1, vs) in data, name
        if n != keys:
            raise SystemExit(f"{name}: {n} keys stored of {keys} (evicted or refused)")
        if name == "redis":
            used1 = int(re.search(rb"used_memory:(\d+)", resp_call(sock, b"INFO", b"memory")).group(1))
            extra["used_memory"] = (used1 - used0) / keys - (16 + vs)
        return (r1 - r0) / keys - (16 + vs), load_s, extra
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--ringlet", default=os.path.join(ROOT, "target", "release", "ringlet"))
    ap.add_argument("--runs", type=int, default=3,
                    help="rounds (each starts every server afresh); the table gives medians")
    a = ap.parse_args()
    if not os.path.exists(a.ringlet):
        sys.exit(f"no ringlet binary at {a.ringlet}: cargo build --release -p ringlet-cli")
    if not 1 <= a.runs <= 20:
        sys.exit("--runs must be 1..20")
    mb = max(256, a.keys * (a.value_size + 200) * 2 // (1 << 20))
    servers = ["ringlet server (RESP)", "redis-server 7", "memcached 1.6"]
    results = {name: [] for name in servers}
    # Rounds interleave the servers, so a burst of load from other work on the machine hits
    # all of them rather than one.
    for _ in range(a.runs):
        port = free_port()
        results[servers[0]].append(measure(
            "ringlet", [a.ringlet, "server", "--port", str(port), "--threads", "1",
                        "--memory-mb", str(mb)], port, a.keys, a.value_size, "resp"))
        port = free_port()
        results[servers[1]].append(measure(
            "redis", ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
            port, a.keys, a.value_size, "resp"))
        port = free_port()
        mc = ["memcached", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", str(mb),
              "-t", "1"]
        if os.getuid() == 0:
            mc += ["-u", "nobody"]
        results[servers[2]].append(measure("memcached", mc, port, a.keys, a.value_size,
                                           "memcache"))

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    print(f"{a.keys:,} keys of 16 B with {a.value_size} B values; bytes per key beyond the "
          f"{16 + a.value_size} payload bytes, median of {a.runs} "
          f"(load average {os.getloadavg()[0]:.1f}):\n")
    print("| server | RSS growth (median) | runs | server's own count | load s |")
    print("|---|---:|---|---:|---:|")
    for name in servers:
        rs = results[name]
        per_key = median([r[0] for r in rs])
        runs = ", ".join(f"{r[0]:.1f}" for r in rs)
        load_s = median([r[1] for r in rs])
        own = [r[2]["used_memory"] for r in rs if "used_memory" in r[2]]
        own = f"{median(own):.1f} (used_memory)" if own else "—"
        print(f"| {name} | {per_key:.1f} | {runs} | {own} | {load_s:.1f} |")


if __name__ == "__main__":
    main()
