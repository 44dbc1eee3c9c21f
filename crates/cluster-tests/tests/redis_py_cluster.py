"""redis-py RedisCluster against a ringlet cluster, unchanged client code.

Usage: python3 redis_py_cluster.py PORT
"""
import sys

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

port = int(sys.argv[1])
rc = RedisCluster(host="127.0.0.1", port=port)
nodes = rc.get_nodes()
assert len(nodes) >= 3, nodes
for i in range(300):
    assert rc.set(f"py:{i}", f"v{i}") is True
for i in range(300):
    assert rc.get(f"py:{i}") == f"v{i}".encode(), i
assert rc.incr("py:counter") == 1
assert rc.incr("py:counter") == 2
assert rc.delete("py:1") == 1
assert rc.get("py:1") is None
assert rc.exists("py:2") == 1
assert rc.keyslot("foo") == 12182
assert rc.set("py:nx", "a", nx=True) is True
assert rc.set("py:nx", "b", nx=True) is None
assert rc.get("py:nx") == b"a"
# Same-slot multi-key commands with a hash tag; cross-slot ones are refused as by Redis.
assert rc.mset_nonatomic({"{t}a": "1", "{t}b": "2"}) is not None
assert rc.mget_nonatomic(["{t}a", "{t}b"]) == [b"1", b"2"]
p = rc.pipeline()
for i in range(100):
    p.set(f"pp:{i}", i)
assert all(p.execute())
info = rc.cluster_info(target_nodes=RedisCluster.RANDOM)
assert info["cluster_state"] == "ok", info
# TTLs through RedisCluster (cluster mode keeps them with each replicated entry).
assert rc.set("py:ttl", "x", ex=100) is True
assert 99 <= rc.ttl("py:ttl") <= 100
assert rc.expire("py:ttl", 50) is True
assert 49 <= rc.ttl("py:ttl") <= 50
assert rc.persist("py:ttl") is True
assert rc.ttl("py:ttl") == -1
try:
    rc.execute_command("SET", "py:ttl", "x", "EX", "0")
    raise AssertionError("EX 0 accepted")
except ResponseError as e:
    assert "invalid expire time" in str(e), e
# MEMGEST through RedisCluster without target_nodes: COMMAND INFO declares its subcommands'
# key positions, so redis-py routes MOVE/KEY by the key (CREATE by the memgest's name).
assert rc.execute_command("MEMGEST", "CREATE", "pym", "rep", "3") in (True, b"OK", "OK")
assert rc.execute_command("MEMGEST", "MOVE", "py:2", "pym") in (True, b"OK", "OK")
k = rc.execute_command("MEMGEST", "KEY", "py:2")
assert k[0] == b"pym" and k[1] == b"rep:3", k
assert rc.get("py:2") == b"v2"
# Keyspace commands: each node answers KEYS/DBSIZE/SCAN/FLUSHALL for the slots it coordinates,
# as a Redis Cluster primary does; asked of every primary (FLUSHALL and scan_iter are by
# default, KEYS/DBSIZE with target_nodes) redis-py merges them into the whole cluster's.
ALL = RedisCluster.PRIMARIES
r = rc.flushall()  # one reply per primary
assert r is True or (isinstance(r, dict) and len(r) == 3 and all(r.values())), r
assert rc.dbsize(target_nodes=ALL) == 0
for i in range(120):
    rc.set(f"ks:{i}", i)
assert rc.dbsize(target_nodes=ALL) == 120, rc.dbsize(target_nodes=ALL)
assert 0 < rc.dbsize() < 120  # the default node alone
assert sorted(rc.keys("ks:*", target_nodes=ALL)) == sorted(f"ks:{i}".encode() for i in range(120))
assert len(list(rc.scan_iter(match="ks:1*", count=20))) == 31  # ks:1, ks:10..19, ks:100..119
assert rc.getrange("ks:42", 0, 0) == b"4"
assert rc.setrange("ks:42", 2, "x") == 3 and rc.get("ks:42") == b"42x"
assert rc.type("ks:42") == b"string" and rc.type("nope") == b"none"
assert rc.rename("{r}a", "{r}b") if rc.set("{r}a", "1") else False
assert rc.get("{r}b") == b"1" and rc.exists("{r}a") == 0
assert rc.copy("{r}b", "{r}c") is True and rc.get("{r}c") == b"1"
assert rc.msetnx({"{r}m": "1", "{r}n": "2"}) is True
assert rc.randomkey() is not None
# RECORD SET's DEL (session 24), routed by its key across the slots: a field removed in the
# write that sets another, a record emptied by DELs deleted.
for i in range(20):
    k = f"rec:{i}"
    assert rc.execute_command("RECORD", "SET", k, "ATTR", "a", "1", "LINK", "l", "rec:0") == 2
    assert rc.execute_command("RECORD", "SET", k, "DEL", "l", "ATTR", "b", "2") == 1
    assert rc.hgetall(k) == {b"a": b"1", b"b": b"2"}, rc.hgetall(k)
    assert rc.execute_command("RECORD", "SET", k, "DEL", "a", "DEL", "b") == 0
    assert rc.exists(k) == 0
# Big hashes (session 25: hash writes on the record's encoding), in three slots: each grown
# to 1,500 fields one HSET at a time (pipelined), then read and shrunk by every hash command,
# and compared whole with the same dict kept here.
for h in ("big:a", "big:b", "big:c"):
    want = {}
    p = rc.pipeline()
    for i in range(1500):
        p.hset(h, f"f{i}", f"v{i}")
        want[f"f{i}".encode()] = f"v{i}".encode()
    assert p.execute() == [1] * 1500
    assert rc.hlen(h) == 1500
    assert rc.hget(h, "f777") == b"v777" and rc.hget(h, "none") is None
    assert rc.hmget(h, "f0", "none", "f1499", "f0") == [b"v0", None, b"v1499", b"v0"]
    assert rc.hexists(h, "f3") and not rc.hexists(h, "none")
    assert rc.hstrlen(h, "f1000") == 5
    assert rc.hsetnx(h, "f5", "x") == 0 and rc.hsetnx(h, "new", "x") == 1
    assert rc.hincrby(h, "n", 7) == 7 and rc.hincrby(h, "n", -2) == 5
    assert rc.hset(h, mapping={"f1": "w", "g": "1"}) == 1
    assert rc.hdel(h, "f2", "f2", "f4", "none") == 2
    want.update({b"new": b"x", b"n": b"5", b"f1": b"w", b"g": b"1"})
    del want[b"f2"], want[b"f4"]
    assert rc.hgetall(h) == want
    assert rc.hlen(h) == len(want)
# Node-local introspection (docs/design/commands.md). MEMORY USAGE routes by its key (the
# table's key spec for memory|usage) and answers the coordinator's accounting of the entry;
# SLOWLOG, LATENCY and CONFIG are per node, asked of one node at a time here.
assert rc.set("mem:k", "x" * 1000) is True
u = rc.memory_usage("mem:k")
assert isinstance(u, int) and 1000 < u <= 2048, u
assert rc.memory_usage("mem:none") is None
owner = rc.get_node_from_key("mem:k")
for n in rc.get_primaries():
    assert rc.execute_command("SLOWLOG", "RESET", target_nodes=n) in (True, b"OK", "OK")
    assert rc.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "0", target_nodes=n) in (True, b"OK", "OK")
assert rc.get("mem:k") == b"x" * 1000
log = rc.execute_command("SLOWLOG", "GET", "-1", target_nodes=owner)
cmds = [e["command"] if isinstance(e, dict) else b" ".join(e[3]) for e in log]
assert b"GET mem:k" in cmds, cmds
assert rc.execute_command("SLOWLOG", "LEN", target_nodes=owner) >= 1
stats = rc.execute_command("MEMORY", "STATS", target_nodes=owner)
stats = stats if isinstance(stats, dict) else dict(zip(stats[::2], stats[1::2]))
keys = {k.decode() if isinstance(k, bytes) else k for k in stats}
assert {"total.allocated", "keys.count", "dataset.bytes"} <= keys, stats
# LATENCY: off by default (as Redis); at 1 ms a command of 1 ms or more is an event.
assert rc.execute_command("LATENCY", "LATEST", target_nodes=owner) in ([], None), "latency on by default"
assert rc.execute_command("LATENCY", "RESET", target_nodes=owner) == 0
try:
    rc.execute_command("MEMORY", "DOCTOR", target_nodes=owner)
    raise AssertionError("MEMORY DOCTOR answered")
except ResponseError as e:
    assert "not supported" in str(e), e
for n in rc.get_primaries():
    rc.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "10000", target_nodes=n)
print("redis-py RedisCluster OK against", len(nodes), "nodes")
