"""GET ops/s through the `ringlet` package vs redis-py's RedisCluster on the same cluster.

    python bench_vs_redispy.py --seed 127.0.0.1:7379 [--keys 1000] [--seconds 5]

Both clients are single-threaded and synchronous, one GET at a time (latency-bound: what a
plain Python caller sees). The keys are written once through ringlet; both then read the same
keys in the same order for the same time. Prints each rate and the ratio ringlet/redis-py.
Needs a running cluster (`ringlet up`), `pip install redis` and the ringlet package.
"""

import argparse
import time

import redis.cluster

import ringlet


def rate(get, keys, seconds):
    """GETs per second of `get` over `keys`, cycling, for `seconds` (after a short warm-up)."""
    for k in keys[:100]:
        get(k)
    n = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while True:
        for k in keys:
            got = get(k)
            assert got is not None, k
        n += len(keys)
        if time.perf_counter() >= deadline:
            break
    return n / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", default="127.0.0.1:7379", help="host:port of any node")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()

    c = ringlet.Cluster([a.seed])
    keys = [f"bench:py:{i}".encode() for i in range(a.keys)]
    value = b"v" * a.value_bytes
    c.mset({k: value for k in keys})

    host, port = a.seed.rsplit(":", 1)
    r = redis.cluster.RedisCluster(host=host, port=int(port))
    assert r.get(keys[0]) == value

    ours = rate(c.get, keys, a.seconds)
    theirs = rate(r.get, keys, a.seconds)
    print(f"ringlet  GET {ours:10.0f} ops/s")
    print(f"redis-py GET {theirs:10.0f} ops/s")
    print(f"ratio ringlet/redis-py {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
