"""GET ops/s of the `ringlet` package vs redis-py, on the same Ringlet cluster / node, same run.

    python crates/python/bench_vs_redispy.py --ringlet-bin target/release/ringlet \
        [--keys 1000] [--value-bytes 100] [--batch 100] [--seconds 2] [--rounds 3]

Starts, on free ports of 127.0.0.1 (stopped at the end):
  * `ringlet up --nodes 3 --spares 1 --default-memgest rep:3` (a cluster, RESP and native on
    every client port): ringlet.Cluster vs redis-py's RedisCluster on the same nodes;
  * `ringlet server --shm-socket PATH` (one node): ringlet.ShmReader (one-sided) vs
    redis-py's Redis on that node's port;
  * `redis-server` (Redis 7, if installed): redis-py's GET against it, as context (how fast
    redis-py is against Redis itself, so the ratios are not an artefact of Ringlet's RESP front).

Every figure is keys read per second by ONE Python thread, synchronous: single GETs (one
round trip each), pipelines of --batch GETs (`pipeline()` + `execute()` on both sides), and
batched GETs (ringlet `mget` vs redis-py `mget_nonatomic` on the cluster, `mget` on the
node). The --keys keys are written once, then every measurement reads them in the same order,
checks that nothing is missing, and runs --seconds; measurements alternate ringlet / redis-py
and are repeated --rounds times: the median of the rounds is printed, with every round's
figure beside it. Needs `pip install redis` and the ringlet package (build it with
RINGLET_PY_RELEASE=1 crates/python/build_and_test.sh for figures worth quoting).
"""

import argparse
import os
import platform
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import redis
import redis.cluster

import ringlet

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import benchlib  # noqa: E402  (free_base, wait_port)

READY_TIMEOUT_S = 60


def start_cluster(bin_path):
    """`ringlet up` on free ports; returns (process, seed 'host:port')."""
    base = benchlib.free_base(5)
    proc = subprocess.Popen(
        [bin_path, "up", "--nodes", "3", "--spares", "1", "--port", str(base),
         "--default-memgest", "rep:3", "--memory-mb", "256"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = queue.Queue()

    def drain():  # keeps reading so the pipe never fills
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None:
            stop(proc)
            raise SystemExit("ringlet up did not get ready")
        if line.startswith("ringlet cluster ready"):
            return proc, f"127.0.0.1:{base}"


def start_shm_node(bin_path, sock):
    """`ringlet server --port 0 --shm-socket sock`; returns (process, port)."""
    proc = subprocess.Popen(
        [bin_path, "server", "--port", "0", "--memory-mb", "256", "--shm-socket", sock],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    return proc, int(line.strip().rsplit(":", 1)[1])


def start_redis():
    """redis-server on a free port without persistence, or (None, None) if not installed."""
    exe = shutil.which("redis-server")
    if exe is None:
        return None, None
    port = benchlib.free_base(1)
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    benchlib.wait_port(port)
    return proc, port


def stop(proc):
    if proc is None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rate_single(get, keys, seconds):
    """Keys/s of `get(key)` over `keys`, cycling, for `seconds` (after a short warm-up)."""
    for k in keys[:100]:
        get(k)
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for k in keys:
            if get(k) is None:
                raise SystemExit(f"missing key {k!r}")
        n += len(keys)
        if time.perf_counter() >= deadline:
            break
    return n / (time.perf_counter() - start)


def rate_batch(read, chunks, seconds):
    """Keys/s of `read(chunk)` (a list of values back) over `chunks`, cycling."""
    read(chunks[0])
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for ch in chunks:
            vals = read(ch)
            if len(vals) != len(ch) or None in vals:
                raise SystemExit("a batched read lost a key")
            n += len(ch)
        if time.perf_counter() >= deadline:
            break
    return n / (time.perf_counter() - start)


def pipelined(make):
    """A chunk reader through a pipeline from `make()`: queue a GET per key, execute."""
    def read(chunk):
        p = make()
        for k in chunk:
            p.get(k)
        return p.execute()
    return read


def compare(name, ours, theirs, rounds):
    """Run `ours()` and `theirs()` alternately `rounds` times; print and return medians."""
    a, b = [], []
    for _ in range(rounds):
        a.append(ours())
        b.append(theirs())
    ma, mb = statistics.median(a), statistics.median(b)
    fmt = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)  # noqa: E731
    print(f"{name:<34} ringlet {ma:>11,.0f}  redis-py {mb:>9,.0f}  ratio {ma / mb:6.2f}x"
          f"   (rounds: ringlet {fmt(a)}; redis-py {fmt(b)})", flush=True)
    return ma, mb


def describe_machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    commit = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    rustc = subprocess.run(["rustc", "-V"], capture_output=True, text=True).stdout.strip()
    print(f"commit {commit}; {rustc}; python {platform.python_version()}; "
          f"redis-py {redis.__version__}; ringlet {ringlet.__version__}")
    print(f"cpu {cpu} x{os.cpu_count()}; kernel {platform.release()}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ringlet-bin", required=True, help="the ringlet binary (release build)")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--batch", type=int, default=100, help="GETs per pipeline / MGET")
    p.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    p.add_argument("--rounds", type=int, default=3, help="the median of this many is printed")
    a = p.parse_args()
    if a.keys < a.batch or a.batch < 1 or a.rounds < 1:
        raise SystemExit("need keys >= batch >= 1 and rounds >= 1")

    describe_machine()
    keys = [f"bench:py:{i}".encode() for i in range(a.keys)]
    value = b"v" * a.value_bytes
    chunks = [keys[i:i + a.batch] for i in range(0, len(keys) - a.batch + 1, a.batch)]
    print(f"{a.keys} keys of {a.value_bytes} B, batches of {a.batch}, {a.seconds} s per "
          f"measurement, median of {a.rounds}; keys/s per Python thread", flush=True)
    s = a.seconds
    tmp = tempfile.mkdtemp(prefix="ringlet-bench-py-")
    up = node = rsrv = None
    try:
        # 1. The cluster: ringlet.Cluster vs redis-py's RedisCluster on the same nodes.
        up, seed = start_cluster(a.ringlet_bin)
        c = ringlet.Cluster([seed])
        c.mset({k: value for k in keys})
        host, port = seed.rsplit(":", 1)
        rc = redis.cluster.RedisCluster(host=host, port=int(port))
        assert rc.get(keys[0]) == value
        print("-- cluster (ringlet up: 3 nodes, rep:3)", flush=True)
        compare("GET, one at a time", lambda: rate_single(c.get, keys, s),
                lambda: rate_single(rc.get, keys, s), a.rounds)
        compare(f"pipeline of {a.batch} GETs",
                lambda: rate_batch(pipelined(c.pipeline), chunks, s),
                lambda: rate_batch(pipelined(rc.pipeline), chunks, s), a.rounds)
        compare(f"MGET of {a.batch} (mget_nonatomic)", lambda: rate_batch(c.mget, chunks, s),
                lambda: rate_batch(rc.mget_nonatomic, chunks, s), a.rounds)
        rc.close()
        stop(up)
        up = None

        # 2. One node with shared memory: ringlet.ShmReader vs redis-py on its port.
        sock = os.path.join(tmp, "node.sock")
        node, nport = start_shm_node(a.ringlet_bin, sock)
        r = redis.Redis(host="127.0.0.1", port=nport)
        r.mset({k: value for k in keys})
        shm = ringlet.ShmReader(sock)
        assert shm.get(keys[0]) == value
        print("-- one node (ringlet server --shm-socket): one-sided reads", flush=True)
        compare("GET, one at a time (ShmReader)", lambda: rate_single(shm.get, keys, s),
                lambda: rate_single(r.get, keys, s), a.rounds)
        compare(f"MGET of {a.batch} (ShmReader)", lambda: rate_batch(shm.mget, chunks, s),
                lambda: rate_batch(r.mget, chunks, s), a.rounds)
        st = shm.stats()
        print(f"ShmReader stats: {st['shm_hits']} hits, {st['fallbacks']} fallbacks over the "
              "socket", flush=True)
        r.close()

        # 3. Context: redis-py against Redis itself.
        rsrv, rport = start_redis()
        if rsrv is not None:
            rr = redis.Redis(host="127.0.0.1", port=rport)
            rr.mset({k: value for k in keys})
            ver = rr.info("server")["redis_version"]
            got = [rate_single(rr.get, keys, s) for _ in range(a.rounds)]
            print(f"-- context: redis-py GET against redis-server {ver}: "
                  f"{statistics.median(got):,.0f} keys/s (median of {a.rounds})", flush=True)
            rr.close()
    finally:
        stop(up)
        stop(node)
        stop(rsrv)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
