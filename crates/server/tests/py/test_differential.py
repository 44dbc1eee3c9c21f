"""Differential test through redis-py: the same commands go to a real Redis 7 and to the
`ringlet` binary, and the decoded results (or exception type + message) must be equal.

Run by CI (scripts/ci.sh) with RINGLET_BIN pointing at the built binary; locally:

    cargo build -p ringlet-cli --bin ringlet
    RINGLET_BIN=$PWD/target/debug/ringlet python3 -m pytest -q crates/server/tests/py

Both servers start on free ports; readiness is the binary's `ringlet: listening on` line and
a PING loop for redis-server (no fixed sleeps). Without redis-server the tests are skipped
loudly, unless RINGLET_REQUIRE_REDIS is set, in which case they fail.
"""
import os
import shutil
import socket
import subprocess
import time

import pytest
import redis

FUTURE = "4102444800"  # 2100-01-01: absolute expiries that never pass during a test


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ringlet_bin():
    b = os.environ.get("RINGLET_BIN")
    if b:
        return b
    here = os.path.dirname(os.path.abspath(__file__))
    guess = os.path.join(here, "..", "..", "..", "..", "target", "debug", "ringlet")
    if os.path.exists(guess):
        return guess
    pytest.skip("RINGLET_BIN not set and target/debug/ringlet not built")


@pytest.fixture(scope="module")
def servers():
    if shutil.which("redis-server") is None:
        if os.environ.get("RINGLET_REQUIRE_REDIS"):
            pytest.fail("redis-server is not installed and RINGLET_REQUIRE_REDIS is set")
        print("\n*** SKIP: redis-server not installed; differential test not run ***")
        pytest.skip("redis-server not installed")
    rport = _free_port()
    rproc = subprocess.Popen(
        ["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gproc = subprocess.Popen(
        [_ringlet_bin(), "server", "--port", "0", "--threads", "2", "--memory-mb", "64"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = gproc.stdout.readline()
        assert line.startswith("ringlet: listening on "), line
        gport = int(line.strip().rsplit(":", 1)[1])
        r = redis.Redis(port=rport)
        deadline = time.time() + 10
        while True:  # bounded by the deadline
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if time.time() > deadline:
                    raise
                time.sleep(0.02)  # poll interval, not a readiness guess
        yield rport, gport
    finally:
        gproc.terminate()
        rproc.terminate()
        gproc.wait(10)
        rproc.wait(10)


def outcome(client, *args):
    try:
        return ("ok", client.execute_command(*args))
    except (redis.ResponseError, redis.AuthenticationError) as e:
        return ("err", type(e).__name__, str(e))


SCRIPT = [
    ("FLUSHALL",),
    ("PING",), ("PING", "hi"), ("ECHO", b"\x00\xff"),
    ("SET", "k", "v"), ("GET", "k"), ("SET", "k", "v2", "NX"), ("SET", "k", "v3", "XX", "GET"),
    ("SET", "k", "v", "EX", "0"), ("SET", "k", "v", "NX", "XX"), ("SET", "k", "v", "EXAT", FUTURE),
    ("TTL", "k"), ("PERSIST", "k"), ("TTL", "k"), ("SET", "k", "v", "PX", "abc"),
    ("SETNX", "k", "x"), ("SETEX", "k", "0", "v"), ("PSETEX", "k", "-1", "v"),
    ("GETSET", "k", "new"), ("GETDEL", "k"), ("GETDEL", "k"), ("GETEX", "nokey", "EX", "0"),
    ("MSET", "a", "1", "b", "2"), ("MGET", "a", "b", "c"), ("MSET", "a"), ("MSETNX", "a", "1", "z", "2"),
    ("INCR", "a"), ("DECRBY", "a", "10"), ("INCRBY", "a", "x"), ("INCR", "k-missing"),
    ("SET", "big", "9223372036854775807"), ("INCR", "big"),
    ("INCRBYFLOAT", "f", "0.1"), ("INCRBYFLOAT", "f", "0.2"), ("INCRBYFLOAT", "f", "1e400"),
    ("INCRBYFLOAT", "f", "abc"),
    ("APPEND", "s", "hello"), ("APPEND", "s", " world"), ("STRLEN", "s"),
    ("GETRANGE", "s", "0", "4"), ("GETRANGE", "s", "-5", "-1"), ("SETRANGE", "s", "6", "WORLD"),
    ("GET", "s"), ("SETRANGE", "s", "-1", "x"),
    ("DEL", "a", "b", "nokey"), ("UNLINK", "s"), ("EXISTS", "k", "f", "f"), ("TYPE", "f"), ("TYPE", "nokey"),
    ("EXPIRE", "f", "100", "NX"), ("EXPIRE", "f", "100", "NX"), ("EXPIRE", "f", "50", "GT"),
    ("EXPIRE", "f", "10", "NX", "XX"), ("EXPIRE", "f", "10", "bogus"), ("EXPIREAT", "f", FUTURE),
    ("PEXPIREAT", "f", "abc"), ("PTTL", "nokey"), ("TTL", "nokey"),
    ("SELECT", "0"), ("SELECT", "16"), ("HELLO", "4"), ("AUTH", "x"),
    ("CLIENT", "SETNAME", "py"), ("CLIENT", "GETNAME"), ("CLIENT", "bogus"),
    ("CONFIG", "GET", "timeout"), ("CONFIG", "SET", "nosuch", "1"),
    ("FOO", "a", "b"), ("GET",), ("DBSIZE",),
    ("KEYS", "nomatch*"),
]


def test_redis_py_results_match(servers):
    rport, gport = servers
    want_c = redis.Redis(port=rport)
    got_c = redis.Redis(port=gport)
    for args in SCRIPT:
        want = outcome(want_c, *args)
        got = outcome(got_c, *args)
        if args[0] == "TTL" and want[0] == "ok" and isinstance(want[1], int) and want[1] > 0:
            assert abs(want[1] - got[1]) <= 2, (args, want, got)
            continue
        assert want == got, (args, want, got)


def test_redis_py_keys_and_scan(servers):
    rport, gport = servers
    out = []
    for port in (rport, gport):
        c = redis.Redis(port=port)
        c.flushall()
        for i in range(300):
            c.set(f"user:{i}", i)
            c.set(f"item:{i}", i)
        for i in range(40):
            c.hset(f"rec:{i}", mapping={"a": i, "b": "x"})
        keys = sorted(c.keys("user:1*"))
        scanned = sorted(set(c.scan_iter(match="item:2?", count=50)))
        # SCAN's TYPE filter: records are hashes, the rest strings, an unknown name nothing.
        hashes = sorted(set(c.scan_iter(count=50, _type="hash")))
        strings = len(set(c.scan_iter(count=50, _type="string")))
        lists = sorted(set(c.scan_iter(count=50, _type="list")))
        out.append((keys, scanned, hashes, strings, lists, c.dbsize(), c.randomkey() is not None))
    assert out[0] == out[1]


def test_redis_py_pipeline_and_resp3(servers):
    rport, gport = servers
    results = []
    for port in (rport, gport):
        c = redis.Redis(port=port)
        c.flushall()
        p = c.pipeline(transaction=False)
        for i in range(100):
            p.set(f"p{i}", i)
            p.incr(f"p{i}")
            p.get(f"p{i}")
        p.mget([f"p{i}" for i in range(0, 100, 7)])
        results.append(p.execute(raise_on_error=False))
        try:
            c3 = redis.Redis(port=port, protocol=3)
            results.append((c3.get("p1"), c3.get("nokey"), c3.incrbyfloat("fl", 1.5), c3.ttl("p1")))
        except TypeError:
            pass  # a redis-py without RESP3 support: the RESP2 part still ran
    assert results[: len(results) // 2] == results[len(results) // 2:]


def test_redis_py_parses_info_like_redis(servers):
    """redis-py's INFO parser (and dashboards built on it) must find Redis's field names."""
    rport, gport = servers
    infos = []
    for port in (rport, gport):
        c = redis.Redis(port=port)
        c.flushall()
        c.set("a", 1)
        c.get("a")
        c.get("missing")
        infos.append(c.info())
    want, got = infos
    for field in ("redis_version", "connected_clients", "used_memory", "used_memory_human",
                  "maxmemory", "total_connections_received", "total_commands_processed",
                  "keyspace_hits", "keyspace_misses", "expired_keys", "evicted_keys",
                  "uptime_in_seconds", "tcp_port", "process_id"):
        assert field in want, field  # the oracle has it...
        assert field in got, field   # ...and so must we
        assert type(want[field]) is type(got[field]), field
    assert got["db0"]["keys"] == want["db0"]["keys"] == 1
    assert got["keyspace_hits"] >= 1 and got["keyspace_misses"] >= 1
    assert "ringlet_version" in got
    for section in ("server", "clients", "memory", "stats", "keyspace"):
        assert redis.Redis(port=gport).info(section), section


def test_info_keyspace_counts_keys_with_ttl_like_redis(servers):
    """INFO keyspace `expires=` counts keys that carry a TTL, and follows PERSIST, SET
    (which drops the TTL unless KEEPTTL), EXPIRE and DEL exactly as Redis does."""
    rport, gport = servers
    steps = [
        ("set", "t1", "v", "EX", "1000"),
        ("set", "t2", "v", "PX", "900000"),
        ("set", "plain", "v"),
        ("expire", "plain", "500"),      # gains a TTL
        ("persist", "t2"),               # loses it
        ("set", "t1", "w", "KEEPTTL"),   # keeps it
        ("set", "t3", "v", "EX", "100"),
        ("set", "t3", "w"),              # plain SET drops it
        ("del", "plain"),
        ("set", "t4", "v", "EXAT", "4102444800"),
    ]
    seen = []
    for port in (rport, gport):
        c = redis.Redis(port=port)
        c.flushall()
        counts = []
        for step in steps:
            c.execute_command(*step)
            counts.append(c.info("keyspace")["db0"]["expires"])
        seen.append(counts)
    assert seen[1] == seen[0], f"ringlet {seen[1]} vs redis {seen[0]}"
    assert seen[0][-1] == 2  # t1 and t4: the test exercises something


def test_redis_py_introspection_like_redis(servers):
    """MEMORY USAGE, SLOWLOG and LATENCY through redis-py's own methods and reply parsers
    (docs/design/commands.md): equal to Redis 7 where the reply is deterministic, the same
    shape where it holds times and byte counts."""
    rport, gport = servers
    out = []
    for port in (rport, gport):
        c = redis.Redis(port=port)
        c.set("mu", "x" * 100)
        usage = c.memory_usage("mu")
        missing = c.memory_usage("no-such-key")
        c.config_set("slowlog-log-slower-than", 0)
        c.slowlog_reset()
        c.get("mu")
        entry = c.slowlog_get(1)[0]
        logged = c.slowlog_len()
        c.config_set("slowlog-log-slower-than", 10000)
        out.append((
            isinstance(usage, int) and usage > 100,
            missing,
            sorted(entry.keys()),
            entry["command"],
            logged >= 2,
            c.latency_latest(),
            c.latency_history("command"),
            c.latency_reset(),
            c.config_get("slowlog-max-len"),
        ))
    assert out[0] == out[1], out
