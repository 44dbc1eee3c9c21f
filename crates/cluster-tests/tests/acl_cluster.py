"""redis-py RedisCluster with ACL users on a ringlet cluster (crates/cluster-tests/tests/acl.rs).

Usage: python3 acl_cluster.py PORT

The default user (no password here) creates `app`, allowed everything but the dangerous
category on keys `app:*`; `app` then connects with username/password, routes by slot
(CLUSTER SLOTS and COMMAND are allowed), writes and reads on every node, and is refused keys
outside its pattern and dangerous commands with Redis's NOPERM texts.
"""
import sys

from redis.cluster import RedisCluster
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

port = int(sys.argv[1])
admin = RedisCluster(host="127.0.0.1", port=port)
assert admin.execute_command(
    "ACL", "SETUSER", "app", "on", ">app-pw", "~app:*", "+@all", "-@dangerous",
    target_nodes=RedisCluster.RANDOM) in (True, b"OK", "OK")

rc = None
for _ in range(200):  # bounded: the user reaches every node within a few map rounds
    try:
        rc = RedisCluster(host="127.0.0.1", port=port, username="app", password="app-pw")
        for i in range(200):
            assert rc.set(f"app:{i}", f"v{i}") is True
        break
    except (AuthenticationError, ResponseError) as e:  # not on every node yet
        last = e
        import time
        time.sleep(0.05)  # poll interval
else:
    raise AssertionError(f"app never worked: {last}")
slots = {rc.keyslot(f"app:{i}") for i in range(200)}
owners = {rc.nodes_manager.get_node_from_slot(s).name for s in slots}
assert len(owners) >= 3, owners  # the writes went to every master
for i in range(200):
    assert rc.get(f"app:{i}") == f"v{i}".encode(), i
try:
    rc.get("other")
    raise AssertionError("a key outside ~app:* was served")
except NoPermissionError as e:
    assert str(e) == "this user has no permissions to access one of the keys used as arguments", e
try:
    rc.execute_command("FLUSHALL", target_nodes=RedisCluster.RANDOM)
    raise AssertionError("FLUSHALL (@dangerous) was served")
except NoPermissionError as e:
    assert str(e) == "this user has no permissions to run the 'flushall' command", e
assert rc.execute_command("ACL", "WHOAMI", target_nodes=RedisCluster.RANDOM) in (b"app", "app")
try:
    RedisCluster(host="127.0.0.1", port=port, username="app", password="wrong")
    raise AssertionError("a wrong password was accepted")
except (AuthenticationError, Exception) as e:  # redis-py wraps startup failures
    assert "invalid username-password pair" in str(e) or "WRONGPASS" in str(e) or "Authentication" in type(e).__name__ or "RedisClusterException" in type(e).__name__, repr(e)
print("redis-py RedisCluster with ACL user app: ok")
