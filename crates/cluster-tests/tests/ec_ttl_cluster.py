"""TTLs on an ec:3+2 memgest through redis-py RedisCluster, before and after the
coordinator of a third of the keys is SIGKILLed (ec_ttl.rs drives the phases).

Usage: python3 ec_ttl_cluster.py before|after PORT STATE_FILE

before: SET EX/PX/EXAT/PXAT, SETEX, PSETEX, EXPIRE/PEXPIRE/EXPIREAT (with NX/XX/GT/LT),
        PERSIST, GETEX EX/PERSIST, SET KEEPTTL, a rep:3 key with a TTL moved into the ec
        memgest (MEMGEST MOVE); records each key's value and PEXPIRETIME; short-TTL keys
        must read nil once expired.
after:  every key reads back its value with exactly the same PEXPIRETIME (the expiry the
        parity holders kept), expired keys stay gone, and TTL commands work on the new
        coordinator (a new short TTL expires there).
"""
import json
import sys
import time

from redis.cluster import RedisCluster
from redis.exceptions import RedisError

phase, port, state_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def retry(f, what):
    """A command through a failover: redis-py refreshes its slot map on MOVED and retries a
    few times itself; past that, retry here (bounded: 60 s)."""
    deadline = time.time() + 60
    while True:
        try:
            return f()
        except RedisError as e:
            if time.time() > deadline:
                raise AssertionError(f"{what}: still failing after 60 s: {e}")
            time.sleep(0.2)


def connect():
    return retry(lambda: RedisCluster(host="127.0.0.1", port=port), "connect")


rc = connect()


def value(i):
    # Sizes across 64-byte chunks and stripes; printable.
    return ("v%d-" % i) + "".join(chr(33 + (i * 31 + j * 7) % 90) for j in range(1 + (i * 613) % 3000))


N = 150
now_ms = int(time.time() * 1000)
if phase == "before":
    keys = {}
    for i in range(N):
        k = f"ttl:{i}"
        v = value(i)
        kind = i % 10
        if kind == 0:
            assert rc.set(k, v, ex=1000 + i) is True
        elif kind == 1:
            assert rc.set(k, v, px=2_000_000 + i) is True
        elif kind == 2:
            assert rc.set(k, v, exat=now_ms // 1000 + 5000 + i) is True
        elif kind == 3:
            assert rc.set(k, v, pxat=now_ms + 6_000_000 + i) is True
        elif kind == 4:
            assert rc.execute_command("SETEX", k, 3000 + i, v) is True
        elif kind == 5:
            assert rc.psetex(k, 4_000_000 + i, v) is True
        elif kind == 6:
            # EXPIRE family on an ec key, with Redis 7's flags.
            assert rc.set(k, v) is True
            assert rc.ttl(k) == -1
            assert rc.expire(k, 100, xx=True) is False  # no TTL yet: XX refuses
            assert rc.expire(k, 7000 + i, nx=True) is True
            assert rc.expire(k, 8000 + i, gt=True) is True
            assert rc.expire(k, 9000 + i, lt=True) is False
            assert rc.pexpire(k, 8_500_000 + i * 1000) is True
        elif kind == 7:
            # PERSIST drops the TTL (metadata-only on ec), TTL -1 after it.
            assert rc.set(k, v, ex=50) is True
            assert rc.persist(k) is True
            assert rc.ttl(k) == -1
            assert rc.persist(k) is False
        elif kind == 8:
            # GETEX sets then removes a TTL, returning the value each time.
            assert rc.set(k, v) is True
            assert rc.getex(k, ex=1200 + i) == v.encode()
            assert 1190 <= rc.ttl(k) <= 1200 + i
            if i % 20 == 8:
                assert rc.getex(k, persist=True) == v.encode()
                assert rc.ttl(k) == -1
        else:
            # EXPIREAT, then SET KEEPTTL keeps it with a new value.
            assert rc.set(k, "old") is True
            assert rc.expireat(k, now_ms // 1000 + 9000 + i) is True
            assert rc.set(k, v, keepttl=True) is True
        keys[k] = v
    # A rep:3 key with a TTL moved into the ec memgest: the TTL moves with it.
    ec_name = rc.execute_command("MEMGEST", "KEY", "ttl:0")
    assert ec_name[1] == b"ec:3+2", ec_name
    assert rc.execute_command("MEMGEST", "CREATE", "ttlrep", "rep", "3") in (True, b"OK", "OK")
    assert rc.execute_command("MEMGEST", "MOVE", "ttl:0", "ttlrep") in (True, b"OK", "OK")
    assert rc.execute_command("MEMGEST", "KEY", "ttl:0")[1] == b"rep:3"
    x0 = rc.pexpiretime("ttl:0")
    assert rc.execute_command("MEMGEST", "MOVE", "ttl:0", ec_name[0]) in (True, b"OK", "OK")
    assert rc.execute_command("MEMGEST", "KEY", "ttl:0")[1] == b"ec:3+2"
    assert rc.pexpiretime("ttl:0") == x0, "MEMGEST MOVE kept the TTL"
    # Record what every key holds and when it expires (absolute ms).
    expect = {}
    for k, v in keys.items():
        assert rc.get(k) == v.encode(), k
        expect[k] = [v, rc.pexpiretime(k)]
    with_ttl = sum(1 for v in expect.values() if v[1] > 0)
    assert with_ttl > N // 2, with_ttl
    # Short TTLs: readable before, nil after (the coordinator decides expiry).
    for i in range(20):
        assert rc.set(f"short:{i}", value(i), px=1500) is True
    for i in range(20):
        assert rc.get(f"short:{i}") == value(i).encode()
    time.sleep(2.0)
    for i in range(20):
        assert rc.get(f"short:{i}") is None, i
        assert rc.ttl(f"short:{i}") == -2
    # A key whose EXPIRE is in the past is deleted at once.
    assert rc.set("ttl:past", "x") is True
    assert rc.expire("ttl:past", -1) is True
    assert rc.get("ttl:past") is None
    with open(state_file, "w") as f:
        json.dump(expect, f)
    print(f"before: {len(expect)} ec keys, {with_ttl} with a TTL; 20 short keys expired")
else:
    with open(state_file) as f:
        expect = json.load(f)
    ok = 0
    for k, (v, x) in expect.items():
        got = retry(lambda: rc.get(k), f"GET {k}")
        assert got == v.encode(), f"{k}: value changed after the takeover"
        px = retry(lambda: rc.pexpiretime(k), f"PEXPIRETIME {k}")
        assert px == x, f"{k}: PEXPIRETIME {px} after the takeover, {x} before"
        ok += 1
    for i in range(20):
        assert retry(lambda: rc.get(f"short:{i}"), "GET short") is None, i
    # TTL commands on the new coordinators.
    k = "ttl:6"
    assert retry(lambda: rc.expire(k, 77), "EXPIRE") is True
    assert 76 <= rc.ttl(k) <= 77
    assert rc.persist(k) is True
    assert rc.ttl(k) == -1
    assert rc.getex(k, px=1200) == expect[k][0].encode()
    for i in range(10):
        assert retry(lambda: rc.set(f"short2:{i}", value(i), px=1200), "SET PX") is True
    time.sleep(1.7)
    assert rc.get(k) is None, "GETEX PX expired on the new coordinator"
    for i in range(10):
        assert rc.get(f"short2:{i}") is None, i
    print(f"after: {ok} ec keys read back with the same PEXPIRETIME; short TTLs expired")
