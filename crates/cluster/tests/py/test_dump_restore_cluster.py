"""DUMP and RESTORE in cluster mode (docs/design/dump-restore.md), through redis-py's
`RedisCluster` against `ringlet up --nodes 3`, with a standalone Redis 7 as the other side:
payloads cross both ways, and `redis-cli --cluster import` (MIGRATE sent to the Redis, one
RESTORE per key to the node that owns its slot) moves a Redis's data into the cluster.

Run by CI (scripts/ci.sh, pytest over crates/*/tests/py) with RINGLET_BIN set; locally:

    cargo build -p ringlet-cli --bin ringlet
    RINGLET_BIN=$PWD/target/debug/ringlet python3 -m pytest -q crates/cluster/tests/py

Without redis-server the tests are skipped loudly, unless RINGLET_REQUIRE_REDIS is set.
"""
import os
import shutil
import subprocess
import tempfile

import pytest
import redis
from redis.cluster import RedisCluster

from test_differential_cluster import _free_base, _start_up, _wait

EVERY = RedisCluster.PRIMARIES


@pytest.fixture(scope="module")
def env():
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        if os.environ.get("RINGLET_REQUIRE_REDIS"):
            pytest.fail("redis-server is not installed and RINGLET_REQUIRE_REDIS is set")
        print("\n*** SKIP: redis-server not installed; DUMP/RESTORE cluster test not run ***")
        pytest.skip("redis-server not installed")
    d = tempfile.mkdtemp(prefix="ringlet-dump-cluster-")
    sport = _free_base(1)
    procs = [subprocess.Popen(
        ["redis-server", "--port", str(sport), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", d],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        src = redis.Redis(port=sport)

        def pings():
            try:
                return src.ping()
            except redis.ConnectionError:
                return False
        _wait(pings, "redis-server start")
        up, gbase = _start_up(d)
        procs.append(up)
        yield src, RedisCluster(host="127.0.0.1", port=gbase), sport, gbase
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(d, ignore_errors=True)


def fill(c, n):
    """n strings, n/2 hashes (some wide), every tenth key with a TTL; keys over every slot."""
    for i in range(n):
        c.set(f"s:{i}", f"value-{i}" * (1 + i % 7))
        if i % 2 == 0:
            c.hset(f"h:{i}", mapping={f"f{j}": f"{i}-{j}" for j in range(1 + i % 150)})
        if i % 10 == 0:
            c.expire(f"s:{i}", 1000 + i)


def contents(c, **kw):
    out = {}
    for k in c.keys("*", **kw):
        out[k] = c.get(k) if c.type(k) == b"string" else c.hgetall(k)
    return out


def test_payloads_cross_both_ways(env):
    src, rc, _, _ = env
    src.flushall()
    rc.flushall(target_nodes=EVERY)
    fill(src, 200)
    for k in src.keys("*"):
        assert rc.restore(k, 0, src.dump(k)), k
    assert contents(rc, target_nodes=EVERY) == contents(src)
    src.flushall()
    for k in rc.keys("*", target_nodes=EVERY):
        assert src.restore(k, 0, rc.dump(k)), k
    assert contents(src) == contents(rc, target_nodes=EVERY)
    # Redis's errors, from the node that owns the key.
    with pytest.raises(redis.ResponseError, match="BUSYKEY Target key name already exists"):
        rc.restore("s:1", 0, src.dump("s:1"))
    with pytest.raises(redis.ResponseError, match="DUMP payload version or checksum are wrong"):
        rc.restore("new", 0, b"\x00\x03abc\x0a\x00" + b"\x00" * 8)


def test_redis_cli_cluster_import(env):
    src, rc, sport, gbase = env
    src.flushall()
    rc.flushall(target_nodes=EVERY)
    fill(src, 600)
    want = contents(src)
    ttls = {k: src.ttl(k) for k in want}
    out = subprocess.run(
        ["redis-cli", "--cluster", "import", f"127.0.0.1:{gbase}",
         "--cluster-from", f"127.0.0.1:{sport}", "--cluster-copy", "--cluster-replace"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "[ERR]" not in out.stdout, out.stdout[-3000:]
    assert contents(rc, target_nodes=EVERY) == want
    for k, t in ttls.items():
        if t > 0:
            assert t - 60 < rc.ttl(k) <= t, k
    assert rc.dbsize(target_nodes=EVERY) == len(want) == src.dbsize()
