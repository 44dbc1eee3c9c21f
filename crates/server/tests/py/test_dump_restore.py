"""DUMP and RESTORE against a real Redis 7 (docs/design/dump-restore.md): Redis's payloads
restore into `ringlet server`, Ringlet's restore into Redis, the errors are Redis's, and
MIGRATE run on a Redis moves keys into a Ringlet node.

Run by CI (scripts/ci.sh, pytest over crates/*/tests/py) with RINGLET_BIN set; locally:

    cargo build -p ringlet-cli --bin ringlet
    RINGLET_BIN=$PWD/target/debug/ringlet python3 -m pytest -q crates/server/tests/py

Without redis-server the tests are skipped loudly, unless RINGLET_REQUIRE_REDIS is set.
"""
import time

import pytest
import redis

from test_differential import outcome, servers  # noqa: F401  (the module's fixture)

INTS = [0, -1, 127, 32767, 2**31 - 1, -2**31, 2**63 - 1, -2**63, 12, 255, 65535]
STRINGS = [b"", b"x", b"hello world", b"abc" * 3400, bytes(range(256)) * 3,
           b"9223372036854775808", b"007", b" 1", b"1.5"]
HASHES = {
    "small": {b"a": b"1", b"b": b"two", b"": b"empty name"},
    "ints": {b"1": b"-5", b"2": b"9223372036854775807", b"n": b"32767"},
    "wide": {f"f{i}".encode(): f"v{i}".encode() for i in range(200)},
    "long-value": {b"a": b"x" * 100, b"b": b"y"},
    "binary": {bytes([0, 255, 10]): bytes(range(256))},
}


def clients(servers):  # noqa: F811
    rport, gport = servers
    return redis.Redis(port=rport), redis.Redis(port=gport)


def fill(c):
    """Every case of the module, written through ordinary commands."""
    c.flushall()
    for i, n in enumerate(INTS):
        c.set(f"int:{i}", n)
    for i, s in enumerate(STRINGS):
        c.set(f"str:{i}", s)
    for name, h in HASHES.items():
        c.hset(f"hash:{name}", mapping=h)


def contents(c):
    out = {}
    for k in sorted(c.keys("*")):
        out[k] = c.get(k) if c.type(k) == b"string" else c.hgetall(k)
    return out


def test_redis_payloads_restore_into_ringlet(servers):  # noqa: F811
    r, g = clients(servers)
    fill(r)
    g.flushall()
    for k in r.keys("*"):
        assert g.restore(k, 0, r.dump(k)), k
    assert contents(g) == contents(r)
    # Record commands see a restored hash as any record.
    assert g.hlen("hash:wide") == 200
    assert g.type("hash:small") == b"hash"


def test_ringlet_payloads_restore_into_redis(servers):  # noqa: F811
    r, g = clients(servers)
    fill(g)
    r.flushall()
    for k in g.keys("*"):
        assert r.restore(k, 0, g.dump(k), replace=True), k
    assert contents(r) == contents(g)


def test_ttl_replace_and_absttl(servers):  # noqa: F811
    r, g = clients(servers)
    r.set("t", "v")
    payload = r.dump("t")
    g.delete("t", "gone")
    assert g.restore("t", 5000, payload)
    assert 3000 < g.pttl("t") <= 5000
    assert g.restore("t", 0, payload, replace=True)
    assert g.pttl("t") == -1
    at = int(time.time() * 1000) + 60_000
    assert g.restore("t", at, payload, replace=True, absttl=True)
    assert 50_000 < g.pttl("t") <= 60_000
    # An absolute TTL already past: OK, and the key is gone (REPLACE deleted it).
    assert g.restore("t", 1, payload, replace=True, absttl=True)
    assert g.exists("t") == 0
    assert g.restore("gone", 1, payload, absttl=True)
    assert g.exists("gone") == 0


def test_errors_match_redis(servers):  # noqa: F811
    r, g = clients(servers)
    for c in (r, g):
        c.flushall()
        c.set("s", "value")
        c.hset("h", "f", "v")
    payload = r.dump("s")
    flipped = bytearray(payload)
    flipped[1] ^= 0x01
    script = [
        ("DUMP", "nokey"),
        ("RESTORE", "s", "0", payload),                       # BUSYKEY
        ("RESTORE", "n", "-1", payload),
        ("RESTORE", "n", "abc", payload),
        ("RESTORE", "n", "0", b"garbage"),
        ("RESTORE", "n", "0", bytes(flipped)),
        ("RESTORE", "n", "0", b""),
        ("RESTORE", "n", "0", payload, "BOGUS"),
        ("RESTORE", "n", "0"),
        ("RESTORE", "s", "-1", b"garbage"),                   # BUSYKEY comes first
        ("RESTORE", "n", "0", payload, "REPLACE", "REPLACE"),
        ("GET", "n"),
        ("RESTORE-ASKING", "m", "0", payload), ("GET", "m"),
        ("DUMP", "s", "extra"),
    ]
    for args in script:
        assert outcome(g, *args) == outcome(r, *args), args


def test_restore_refuses_what_ringlet_does_not_store(servers):  # noqa: F811
    r, g = clients(servers)
    r.flushall()
    r.rpush("list", "a", "b")
    r.sadd("set", "a")
    r.zadd("zset", {"a": 1})
    for k, name in (("list", "list"), ("set", "set"), ("zset", "sorted set")):
        with pytest.raises(redis.ResponseError, match=f"DUMP payload holds a {name}, which Ringlet does not store"):
            g.restore(k, 0, r.dump(k))
        assert g.exists(k) == 0
    r.set("s", "v")
    for opt in (["IDLETIME", "10"], ["FREQ", "5"]):
        with pytest.raises(redis.ResponseError, match="IDLETIME and FREQ are not supported"):
            g.execute_command("RESTORE", "s", "0", r.dump("s"), *opt)


def test_dump_of_a_record_with_links_is_refused(servers):  # noqa: F811
    _, g = clients(servers)
    g.flushall()
    g.hset("user:1", "name", "ann")
    g.hset("user:2", "name", "bob")
    g.execute_command("LINK", "SET", "user:1", "friend", "user:2")
    with pytest.raises(redis.ResponseError, match="record with links"):
        g.dump("user:1")
    assert g.dump("user:2")


def test_migrate_from_redis_into_ringlet(servers):  # noqa: F811
    r, g = clients(servers)
    rport, gport = servers
    fill(r)
    r.expire("str:1", 1000)
    want = contents(r)
    keys = list(want)
    g.flushall()
    assert r.execute_command("MIGRATE", "127.0.0.1", gport, "", 0, 5000, "KEYS", *keys) == b"OK"
    assert r.dbsize() == 0  # moved, not copied
    assert contents(g) == want
    assert 990 < g.ttl("str:1") <= 1000
    # REPLACE over keys that exist (and COPY keeps them at the source).
    fill(r)
    assert r.execute_command("MIGRATE", "127.0.0.1", gport, "", 0, 5000, "COPY", "REPLACE",
                             "KEYS", *keys) == b"OK"
    assert r.dbsize() == len(keys)
    # Without REPLACE, existing keys are Redis's BUSYKEY error, which MIGRATE reports.
    with pytest.raises(redis.ResponseError, match="BUSYKEY"):
        r.execute_command("MIGRATE", "127.0.0.1", gport, "", 0, 5000, "COPY", "KEYS", *keys)
