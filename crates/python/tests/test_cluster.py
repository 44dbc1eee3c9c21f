"""The `ringlet` Python package against a real local cluster.

One `ringlet up --nodes 3 --spares 1 --default-memgest rep:3` per test session (binary from
RINGLET_BIN, default target/debug/ringlet of this checkout) on free ports; the tests wait for its
"ringlet cluster ready" line, then check real values through `ringlet.Cluster`: SET/GET of
many keys over many slots, cross-slot MGET/MSET, DEL, memgests (create, SET in, MOVE, KEY,
LIST, INFO), quorum reads, concurrent threads, and which exception each failure raises. The
cluster is stopped with SIGTERM (SIGKILL would leave its nodes running).
"""

import contextlib
import os
import queue
import random
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

import ringlet

RINGLET_BIN = os.environ.get(
    "RINGLET_BIN",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "target", "debug", "ringlet"),
)
READY_TIMEOUT_S = 60
NODES, SPARES = 3, 1


def _free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_base():
    """A base port whose client ports (base..base+4: nodes, spare, control) and admin ports
    (+10000) are free."""
    n = NODES + SPARES + 1
    rng = random.Random(os.getpid())
    for _ in range(200):
        # Client ports 20000..22767, admin ports 30000..32767: below Linux's ephemeral range
        # (32768..), which the nodes' peer listeners and outgoing connections draw from.
        base = rng.randrange(20000, 22767 - n)
        if all(_free(base + i) and _free(base + 10000 + i) for i in range(n)):
            return base
    raise RuntimeError("no free port range found")


@contextlib.contextmanager
def running_cluster(extra_args=()):
    """`ringlet up` on free ports until the block ends; yields the nodes' client addresses."""
    assert os.access(RINGLET_BIN, os.X_OK), f"RINGLET_BIN={RINGLET_BIN} is not an executable"
    base = free_base()
    log = tempfile.NamedTemporaryFile(prefix="ringlet-py-up-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [RINGLET_BIN, "up", "--nodes", str(NODES), "--spares", str(SPARES),
         "--port", str(base), "--default-memgest", "rep:3", "--memory-mb", "64",
         *extra_args],
        stdout=subprocess.PIPE, stderr=log, text=True,
        env={k: v for k, v in os.environ.items()
             if k != "RINGLET_REQUIREPASS" and not k.startswith("RINGLET_TLS_")},
    )
    lines = queue.Queue()

    def drain():  # keeps reading so the pipe never fills
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                with open(log.name) as f:
                    tail = f.read()[-3000:]
                raise RuntimeError(f"ringlet up did not get ready; its stderr ends:\n{tail}")
            if line.startswith("ringlet cluster ready"):
                break
        yield [f"127.0.0.1:{base + i}" for i in range(NODES)]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.unlink(log.name)


@pytest.fixture(scope="session")
def cluster_seeds():
    with running_cluster() as seeds:
        yield seeds


@pytest.fixture(scope="session")
def c(cluster_seeds):
    return ringlet.Cluster(cluster_seeds)


def test_set_then_get_many_keys_across_slots(c):
    # 500 keys hash to ~500 distinct slots, spread over all three coordinators.
    keys = [f"py:many:{i}" for i in range(500)]
    for i, k in enumerate(keys):
        c.set(k, f"value-{i}")
    for i, k in enumerate(keys):
        assert c.get(k) == f"value-{i}".encode()


def test_get_of_a_missing_key_is_none(c):
    assert c.get("py:never-written") is None
    assert c.get(b"py:never-written-either") is None


def test_str_and_bytes_are_the_same_key_and_values_are_binary_safe(c):
    c.set("py:strkey", "héllo")
    assert c.get(b"py:strkey") == "héllo".encode("utf-8")
    blob = bytes(range(256)) * 40
    c.set(b"py:\x00\xffbin", blob)
    assert c.get(b"py:\x00\xffbin") == blob
    c.set("py:empty", b"")
    assert c.get("py:empty") == b""


def test_overwrite_returns_the_latest_value(c):
    for i in range(5):
        c.set("py:over", str(i))
    assert c.get("py:over") == b"4"


def test_mset_then_mget_across_slots(c):
    pairs = {f"py:m:{i}": f"mv{i}".encode() for i in range(300)}
    c.mset(pairs)
    keys = []
    want = []
    for i in range(300):
        keys.append(f"py:m:{i}")
        want.append(f"mv{i}".encode())
        if i % 7 == 0:  # missing keys interleaved keep their place
            keys.append(f"py:m:missing:{i}")
            want.append(None)
    assert c.mget(keys) == want
    # mget sees what set wrote and the other way round.
    assert c.mget(["py:m:3", b"py:m:4"]) == [b"mv3", b"mv4"]
    assert c.get("py:m:299") == b"mv299"
    assert c.mget([]) == []


def test_set_with_ex_or_px_expires(c):
    c.set("ttl:ex", b"v", ex=1)
    c.set("ttl:px", b"v", px=3000)  # long enough to read once on a slow machine
    c.set("ttl:none", b"v")
    assert c.get("ttl:ex") == b"v"
    assert c.get("ttl:px") == b"v"
    # Bounded wait: both expire within 3 s of being set (the coordinator's clock decides).
    deadline = time.time() + 15
    while time.time() < deadline and (c.get("ttl:ex") is not None or c.get("ttl:px") is not None):
        time.sleep(0.1)
    assert c.get("ttl:ex") is None
    assert c.get("ttl:px") is None
    assert c.get("ttl:none") == b"v"
    # A plain SET after one with a TTL removes it, as in Redis.
    c.set("ttl:reset", b"a", ex=1)
    c.set("ttl:reset", b"b")
    time.sleep(1.3)
    assert c.get("ttl:reset") == b"b"
    for bad in ({"ex": 0}, {"ex": -1}, {"px": 0}, {"ex": float("nan")}, {"ex": 1, "px": 5}):
        with pytest.raises(ValueError):
            c.set("ttl:bad", b"v", **bad)


def test_incr_counts_and_refuses_non_integers(c):
    assert c.incr("ctr:a") == 1
    assert c.incr("ctr:a", 10) == 11
    assert c.incr("ctr:a", -20) == -9
    assert c.get("ctr:a") == b"-9"
    c.set("ctr:text", b"abc")
    with pytest.raises(ringlet.ServerError):
        c.incr("ctr:text")
    c.set("ctr:max", str(2**63 - 1))
    with pytest.raises(ringlet.ServerError):
        c.incr("ctr:max")
    # A TTL survives INCR, as in Redis.
    c.set("ctr:ttl", b"5", px=3000)
    assert c.incr("ctr:ttl") == 6
    deadline = time.time() + 15
    while time.time() < deadline and c.get("ctr:ttl") is not None:
        time.sleep(0.1)
    assert c.get("ctr:ttl") is None


def test_delete(c):
    c.mset({"py:del:a": "1", "py:del:b": "2"})
    assert c.delete("py:del:a") is True
    assert c.get("py:del:a") is None
    assert c.mget(["py:del:a", "py:del:b"]) == [None, b"2"]
    assert c.delete("py:del:a") is False
    assert c.delete("py:del:never-existed") is False
    c.set("py:del:a", "again")
    assert c.get("py:del:a") == b"again"


def test_memgest_create_set_move_key_list_info(c):
    names = {m["name"]: m for m in c.memgest_list()}
    default = [n for n, m in names.items() if m["default"]]
    assert len(default) == 1 and names[default[0]]["kind"] == "rep:3"
    assert "none" in names

    epoch0 = c.epoch()
    c.memgest_create("py-two", "rep:2")
    assert c.epoch() > epoch0
    names = {m["name"]: m for m in c.memgest_list()}
    assert names["py-two"]["kind"] == "rep:2"
    assert names["py-two"]["default"] is False
    assert names["py-two"]["closing"] is False

    c.set("py:mg:a", "in-two", memgest="py-two")
    name, kind, version = c.memgest_key("py:mg:a")
    assert (name, kind) == ("py-two", "rep:2") and version
    assert c.get("py:mg:a") == b"in-two"

    c.set("py:mg:b", "default")
    assert c.memgest_key("py:mg:b")[1] == "rep:3"
    c.memgest_move("py:mg:b", "py-two")
    assert c.memgest_key("py:mg:b")[:2] == ("py-two", "rep:2")
    assert c.get("py:mg:b") == b"default"

    c.set("py:mg:c", "cache", memgest="none")
    assert c.memgest_key("py:mg:c")[1] == "none"
    assert c.memgest_key("py:mg:missing") is None

    # Key counts come from the nodes' periodic reports: a type check, not a count.
    assert all(isinstance(m["keys"], int) for m in c.memgest_list())
    assert "py-two" in c.memgest_info("py-two")
    assert isinstance(c.memgest_command("LIST"), list)


def test_a_memgest_made_by_another_client_is_usable_at_once(cluster_seeds, c):
    other = ringlet.Cluster(cluster_seeds)
    other.memgest_create("py-other", "rep:1")
    c.set("py:other", "x", memgest="py-other")  # c's map is refreshed on the unknown name
    assert c.memgest_key("py:other")[:2] == ("py-other", "rep:1")


def test_quorum_reads_see_coordinator_writes(cluster_seeds, c):
    q = ringlet.Cluster(cluster_seeds, quorum_reads=True)
    assert "quorum_reads=True" in repr(q)
    for i in range(100):
        c.set(f"py:q:{i}", f"q{i}")
    for i in range(100):
        assert q.get(f"py:q:{i}") == f"q{i}".encode()
    assert q.get("py:q:missing") is None
    assert q.mget(["py:q:1", "py:q:missing", "py:q:2"]) == [b"q1", None, b"q2"]


def test_threads_share_one_cluster(c):
    errors = []

    def work(t):
        try:
            for i in range(100):
                k = f"py:t:{t}:{i}"
                c.set(k, k)
                assert c.get(k) == k.encode()
        except Exception as e:  # reported below: an assert in a thread would be lost
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_pipeline_sends_many_commands_and_returns_results_in_order(c):
    keys = [f"py:pipe:{i}".encode() for i in range(300)]
    p = c.pipeline()
    for k in keys:
        assert p.set(k, k[::-1]) is p  # chainable, as redis-py's
    assert len(p) == len(keys)
    assert p.execute() == [True] * len(keys)
    assert len(p) == 0  # emptied by execute
    for k in keys:
        p.get(k)
    p.get(b"py:pipe:absent").mget([keys[0], b"py:pipe:absent", keys[-1]])
    got = p.execute()
    assert got[: len(keys)] == [k[::-1] for k in keys]
    assert got[len(keys)] is None
    assert got[-1] == [keys[0][::-1], None, keys[-1][::-1]]
    assert c.pipeline().execute() == []


def test_pipeline_keeps_the_order_of_commands_on_one_key(c):
    c.delete("py:pipe:n")
    got = (
        c.pipeline()
        .set("py:pipe:o", "1").get("py:pipe:o")
        .incr("py:pipe:n").incr("py:pipe:n", 5).get("py:pipe:n")
        .mget(["py:pipe:o", "py:pipe:n"])
        .delete("py:pipe:o").get("py:pipe:o").delete("py:pipe:o")
        .execute()
    )
    assert got == [True, b"1", 1, 6, b"6", [b"1", b"6"], True, None, False]


def test_pipeline_set_options(c):
    c.memgest_create("py-pipe", "rep:2")
    p = c.pipeline().set("py:pipe:mg", "v", memgest="py-pipe").set("py:pipe:ttl", "v", px=60_000)
    assert p.execute() == [True, True]
    assert c.memgest_key("py:pipe:mg")[:2] == ("py-pipe", "rep:2")
    assert c.get("py:pipe:ttl") == b"v"
    with pytest.raises(ringlet.ConfigError):
        c.pipeline().set("k", "v", memgest="py-no-such-memgest")
    with pytest.raises(ValueError):
        c.pipeline().set("k", "v", ex=0)


def test_pipeline_errors_per_command(c):
    c.set("py:pipe:text", "abc")
    p = c.pipeline().set("py:pipe:e1", "x").incr("py:pipe:text").get("py:pipe:e1")
    with pytest.raises(ringlet.ServerError) as e:
        p.execute()
    assert "Command # 2 (INCRBY) of pipeline caused error" in str(e.value)
    assert e.value.status
    assert len(p) == 0  # emptied even when it raised
    got = c.pipeline().incr("py:pipe:text").get("py:pipe:e1").execute(raise_on_error=False)
    assert isinstance(got[0], ringlet.ServerError)
    assert "Command # 1 (INCRBY)" in str(got[0])
    assert got[1] == b"x"
    assert c.get("py:pipe:text") == b"abc"


def test_pipeline_refuses_bad_arguments_when_queued(c):
    p = c.pipeline()
    with pytest.raises(ringlet.TooLargeError):
        p.get(b"k" * (64 * 1024 + 1))
    with pytest.raises(ringlet.TooLargeError):
        p.mget([b"ok", b"k" * (64 * 1024 + 1)])
    with pytest.raises(TypeError):
        p.set("k", 3)
    with pytest.raises(TypeError):
        p.mget("one-key")
    assert len(p) == 0
    with c.pipeline() as p:
        p.get("a").get("b")
        assert len(p) == 2
    assert len(p) == 0  # leaving the block drops what was not executed
    p.get("a")
    p.reset()
    assert len(p) == 0 and "Pipeline" in repr(p)


def test_async_cluster_methods_are_awaitables(cluster_seeds):
    import asyncio

    ac = ringlet.AsyncCluster(cluster_seeds)
    assert "AsyncCluster" in repr(ac) and ac.epoch() > 0
    keys = [f"py:aio:{i}".encode() for i in range(300)]

    async def main():
        # Hundreds in flight at once from one coroutine.
        assert await asyncio.gather(*(ac.set(k, k[::-1]) for k in keys)) == [True] * len(keys)
        got = await asyncio.gather(*(ac.get(k) for k in keys))
        assert got == [k[::-1] for k in keys]
        assert await ac.get("py:aio:absent") is None
        assert await ac.mget([keys[0], b"py:aio:absent"]) == [keys[0][::-1], None]
        await ac.mset({"py:aio:m1": "1", "py:aio:m2": "2"})
        assert await ac.mget(["py:aio:m1", "py:aio:m2"]) == [b"1", b"2"]
        await ac.delete("py:aio:n")
        assert await ac.incr("py:aio:n") == 1
        assert await ac.incr("py:aio:n", 9) == 10
        assert await ac.delete(keys[0]) is True
        assert await ac.get(keys[0]) is None
        assert await ac.delete(keys[0]) is False
        await ac.set("py:aio:ttl", "v", px=60_000)
        assert await ac.get("py:aio:ttl") == b"v"
        await ac.refresh_map()
        await ac.memgest_create("py-aio", "rep:2")
        await ac.set("py:aio:mg", "v", memgest="py-aio")
        assert (await ac.memgest_key("py:aio:mg"))[:2] == ("py-aio", "rep:2")
        assert await ac.memgest_key("py:aio:absent") is None
        rows = {r["name"]: r for r in await ac.memgest_list()}
        assert rows["py-aio"]["kind"] == "rep:2"
        assert "py-aio" in await ac.memgest_info("py-aio")
        assert isinstance(await ac.memgest_command("LIST"), list)

    asyncio.run(main())
    # The sync client sees what the async one wrote.
    assert ringlet.Cluster(cluster_seeds).get(keys[1]) == keys[1][::-1]


def test_async_cluster_errors_and_cancellation(cluster_seeds):
    import asyncio

    ac = ringlet.AsyncCluster(cluster_seeds)
    with pytest.raises(RuntimeError):
        ac.get("k")  # no running event loop

    async def main():
        await ac.set("py:aio:text", "abc")
        with pytest.raises(ringlet.ServerError):
            await ac.incr("py:aio:text")
        with pytest.raises(ringlet.TooLargeError):
            await ac.get(b"k" * (64 * 1024 + 1))
        with pytest.raises(TypeError):
            ac.set("k", 3)
        with pytest.raises(ringlet.ConfigError):
            ac.memgest_create("py-aio-bad", "raid5")
        # A cancelled awaitable: the loop goes on, later calls are answered.
        t = asyncio.ensure_future(ac.get("py:aio:text"))
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert await ac.get("py:aio:text") == b"abc"

    asyncio.run(main())


def test_async_pipeline(cluster_seeds):
    import asyncio

    ac = ringlet.AsyncCluster(cluster_seeds)

    async def main():
        p = ac.pipeline()
        assert isinstance(p, ringlet.AsyncPipeline) and isinstance(p, ringlet.Pipeline)
        keys = [f"py:apipe:{i}" for i in range(100)]
        for k in keys:
            p.set(k, k)
        assert await p.execute() == [True] * len(keys)
        assert len(p) == 0
        await ac.delete("py:apipe:text")
        got = await ac.pipeline().get(keys[0]).mget(keys[1:3]).incr("py:apipe:text").execute(
            raise_on_error=False)
        assert got == [keys[0].encode(), [keys[1].encode(), keys[2].encode()], 1]
        await ac.set("py:apipe:text", "abc")
        with pytest.raises(ringlet.ServerError, match="Command # 2 .INCRBY."):
            await ac.pipeline().get(keys[0]).incr("py:apipe:text").execute()

    asyncio.run(main())


def test_exception_classes_derive_from_ringlet_error():
    for e in [ringlet.ConfigError, ringlet.ConnectionError, ringlet.TimeoutError,
              ringlet.ServerError, ringlet.ClusterMapError, ringlet.ProtocolError,
              ringlet.TooLargeError]:
        assert issubclass(e, ringlet.RingletError)
        assert e.__module__ == "ringlet"
    assert issubclass(ringlet.RingletError, Exception)


def test_server_refusals_raise_server_error(c):
    with pytest.raises(ringlet.ServerError) as e:
        c.memgest_move("py:err:no-such-key", "rep:3")
    assert e.value.status == "BAD_REQUEST"
    c.set("py:err:k", "v")
    with pytest.raises(ringlet.ServerError):
        c.memgest_move("py:err:k", "py-no-such-memgest")
    c.memgest_create("py-dup", "rep:1")
    with pytest.raises(ringlet.ServerError):
        c.memgest_create("py-dup", "rep:1")
    c.set("py:err:live", "v", memgest="py-dup")
    with pytest.raises(ringlet.ServerError):
        c.memgest_drop("py-dup")  # keys live in it


def test_bad_arguments_raise_config_or_type_errors(c):
    with pytest.raises(ringlet.ConfigError):
        c.set("py:err:k", "v", memgest="py-no-such-memgest")
    with pytest.raises(ringlet.ConfigError):
        c.memgest_create("py-bad", "raid5")
    with pytest.raises(ringlet.ConfigError):
        c.memgest_create("py-bad", "none")
    with pytest.raises(TypeError):
        c.get(42)
    with pytest.raises(TypeError):
        c.set("k", 1.5)
    with pytest.raises(TypeError):
        c.mget("py:a-single-str")


def test_too_large_key_is_refused_before_sending(c):
    with pytest.raises(ringlet.TooLargeError):
        c.set(b"k" * (64 * 1024 + 1), "v")
    with pytest.raises(ringlet.TooLargeError):
        c.get(b"k" * (64 * 1024 + 1))


def test_connect_errors():
    with pytest.raises(ringlet.ConfigError):
        ringlet.Cluster([])
    with pytest.raises(ringlet.ConfigError):
        ringlet.Cluster(["127.0.0.1:1"], timeout=0)
    with pytest.raises(ringlet.ConnectionError):
        ringlet.Cluster(["no-such-host.invalid:7379"], timeout=2)
    # A port nobody listens on: no map within the deadline.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises((ringlet.ConnectionError, ringlet.ClusterMapError)):
        ringlet.Cluster([f"127.0.0.1:{port}"], timeout=1)


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d):
    """A throwaway CA and a node certificate for 127.0.0.1 signed by it (openssl CLI);
    also a second CA that signed nothing here."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=ringlet test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=other CA", "-keyout", "other.key", "-out", "other-ca.pem", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=ringlet node",
             "-keyout", "node.key", "-out", "node.csr", cwd=d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "node.pem", cwd=d)
    return {n: os.path.join(d, n) for n in ("ca.pem", "node.pem", "node.key", "other-ca.pem")}


def test_tls_cluster_needs_the_ca(tmp_path):
    certs = make_certs(str(tmp_path))
    args = ["--tls-cert-file", certs["node.pem"], "--tls-key-file", certs["node.key"],
            "--tls-ca-cert-file", certs["ca.pem"]]
    with running_cluster(args) as seeds:
        c = ringlet.Cluster(seeds, tls_ca_file=certs["ca.pem"])
        for i in range(100):
            c.set(f"py:tls:{i}", f"v{i}")
        assert c.mget([f"py:tls:{i}" for i in range(100)]) == [
            f"v{i}".encode() for i in range(100)]
        # Another CA: the handshake fails at once, as a ConnectionError naming TLS.
        with pytest.raises(ringlet.ConnectionError, match="TLS"):
            ringlet.Cluster(seeds, tls_ca_file=certs["other-ca.pem"])
        # Plaintext to a TLS-only port gets no map.
        with pytest.raises(ringlet.RingletError):
            ringlet.Cluster(seeds, timeout=1.0)
        with pytest.raises(ringlet.ConfigError, match="nope.pem"):
            ringlet.Cluster(seeds, tls_ca_file=str(tmp_path / "nope.pem"))


def test_set_nx_xx_as_redis_py(cluster_seeds, c):
    """NX / XX through the cluster's native front (run under the key's lock on its
    coordinator): True when stored, None when the condition prevented it, nothing written."""
    keys = [f"py:nx:{i}" for i in range(50)]  # many slots, so every coordinator serves some
    for k in keys:
        c.delete(k)
        assert c.set(k, "first", nx=True) is True
        assert c.set(k, "second", nx=True) is None
        assert c.get(k) == b"first"
        assert c.set(k, "third", xx=True) is True
        assert c.get(k) == b"third"
    c.delete("py:xx:absent")
    assert c.set("py:xx:absent", "v", xx=True) is None
    assert c.get("py:xx:absent") is None
    # With a TTL and a memgest; a plain SET still answers True.
    c.delete("py:nx:ttl")
    assert c.set("py:nx:ttl", "v", nx=True, px=60_000, memgest="rep:3") is True
    assert c.memgest_key("py:nx:ttl")[:2] == ("rep:3", "rep:3")
    assert c.set("py:nx:plain", "v") is True
    with pytest.raises(ValueError):
        c.set("k", "v", nx=True, xx=True)
    # In a pipeline, and awaited.
    c.delete("py:nx:pipe")
    got = c.pipeline().set("py:nx:pipe", "a", nx=True).set("py:nx:pipe", "b", nx=True).get("py:nx:pipe").execute()
    assert got == [True, None, b"a"]
    import asyncio

    ac = ringlet.AsyncCluster(cluster_seeds)

    async def main():
        await ac.delete("py:nx:aio")
        assert await ac.set("py:nx:aio", "a", nx=True) is True
        assert await ac.set("py:nx:aio", "b", nx=True) is None
        assert await ac.set("py:nx:aio", "c", xx=True) is True
        assert await ac.get("py:nx:aio") == b"c"

    asyncio.run(main())


def test_set_nx_races_between_threads_store_once(c):
    """Eight threads race NX on the same fresh keys: exactly one wins each key, and the
    value read back is the winner's."""
    keys = [f"py:nxrace:{i}" for i in range(40)]
    for k in keys:
        c.delete(k)
    wins = {k: [] for k in keys}
    lock = threading.Lock()

    def racer(t):
        for k in keys:
            if c.set(k, f"t{t}", nx=True):
                with lock:
                    wins[k].append(t)

    threads = [threading.Thread(target=racer, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for k in keys:
        assert len(wins[k]) == 1, (k, wins[k])
        assert c.get(k) == f"t{wins[k][0]}".encode()


def test_cas_by_version_stores_once_then_names_the_current_version(c):
    assert c.get_versioned("cas-missing") is None
    # Version 0: only if absent.
    ok, v1 = c.cas("cas-k", "a", 0)
    assert ok and v1 > 0
    ok, cur = c.cas("cas-k", "b", 0)
    assert not ok and cur == v1
    value, v = c.get_versioned("cas-k")
    assert (value, v) == (b"a", v1)
    ok, v2 = c.cas("cas-k", "b", v1)
    assert ok and v2 > v1
    # The same version again is stale: nothing written, the current one named.
    ok, cur = c.cas("cas-k", "c", v1)
    assert (ok, cur) == (False, v2)
    assert c.get("cas-k") == b"b"


def test_cas_from_racing_threads_loses_no_increment(c):
    """Read-modify-write with CAS from 8 threads: every increment lands exactly once."""
    c.set("cas-counter", "0")

    def bump(n):
        for _ in range(n):
            for _attempt in range(1000):  # bounded retries
                value, v = c.get_versioned("cas-counter")
                ok, _ = c.cas("cas-counter", str(int(value) + 1), v)
                if ok:
                    break
            else:
                raise AssertionError("CAS never succeeded")

    threads = [threading.Thread(target=bump, args=(25,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.get("cas-counter") == b"200"


def test_chase_follows_links_written_over_resp(cluster_seeds, c):
    from redis.cluster import RedisCluster

    host, port = cluster_seeds[0].split(":")
    rc = RedisCluster(host=host, port=int(port))
    rc.hset("{g}alice", mapping={"name": "Alice", "age": "30"})
    rc.hset("{g}bob", mapping={"name": "Bob"})
    rc.hset("{g}carol", mapping={"name": "Carol"})
    rc.execute_command("LINK", "ADD", "{g}alice", "friends", "{g}bob", "{g}carol")
    rc.execute_command("LINK", "SET", "{g}bob", "friends", "{g}carol")
    entries, stop = c.chase("{g}alice", ["friends"], depth=2)
    assert stop == "complete"
    assert [(k, d) for k, d, _ in entries] == [(b"{g}alice", 0), (b"{g}bob", 1), (b"{g}carol", 1)]
    assert entries[0][2][b"name"] == b"Alice"
    entries, stop = c.chase("{g}alice", ["friends"], depth=1, limit=2, fields=["name"])
    assert stop == "limit"
    assert entries == [(b"{g}alice", 0, {b"name": b"Alice"}), (b"{g}bob", 1, {b"name": b"Bob"})]
    with pytest.raises(ringlet.ServerError):
        c.chase("{g}alice", ["friends"], depth=99)


def test_password_cluster_needs_auth_and_acl_limits_hold():
    """A cluster started with --requirepass: without the password (or with a wrong one) the
    client is refused; with it, it reads and writes across every node. An ACL user made with
    redis-py logs in with username= and is held to its key pattern and commands."""
    import redis
    pw = "py-s3cret"
    with running_cluster(["--requirepass", pw]) as seeds:
        with pytest.raises(ringlet.RingletError, match="NOAUTH"):
            ringlet.Cluster(seeds, timeout=2.0).get("k")
        with pytest.raises(ringlet.RingletError, match="WRONGPASS"):
            ringlet.Cluster(seeds, timeout=2.0, password="wrong").get("k")
        with pytest.raises(ringlet.ConfigError):
            ringlet.Cluster(seeds, username="app")
        c = ringlet.Cluster(seeds, password=pw)
        for i in range(100):
            c.set(f"py:auth:{i}", f"v{i}")
        assert c.mget([f"py:auth:{i}" for i in range(100)]) == [
            f"v{i}".encode() for i in range(100)]
        host, port = seeds[0].split(":")
        r = redis.Redis(host=host, port=int(port), password=pw)
        # The smart client reads the cluster map (as redis-py's RedisCluster runs CLUSTER
        # SLOTS): a user without that command is refused it, with the reason.
        assert r.execute_command("ACL", "SETUSER", "app", "on", ">apw", "~py:auth:*", "+get",
                                 "+mget") == b"OK"
        deadline = time.monotonic() + 10
        while True:
            try:
                ringlet.Cluster(seeds, password="apw", username="app", timeout=2.0)
                raise AssertionError("a user without cluster|slots got the map")
            except ringlet.ServerError as e:
                if "NOPERM" in str(e) and "cluster|slots" in str(e):
                    break
                assert "WRONGPASS" in str(e) and time.monotonic() < deadline, e
                time.sleep(0.1)
        assert r.execute_command("ACL", "SETUSER", "app", "+cluster|slots") == b"OK"
        # The user reaches every node through the control plane: a node that has not
        # applied it yet refuses the login (bounded wait).
        app = ringlet.Cluster(seeds, password="apw", username="app", timeout=2.0)
        deadline = time.monotonic() + 10
        while True:
            try:
                assert app.mget([f"py:auth:{i}" for i in range(100)])[3] == b"v3"
                break
            except ringlet.ServerError as e:
                assert "WRONGPASS" in str(e) and time.monotonic() < deadline, e
                time.sleep(0.1)
        with pytest.raises(ringlet.ServerError, match="NOPERM"):
            app.get("elsewhere")
        with pytest.raises(ringlet.ServerError, match="NOPERM"):
            app.set("py:auth:3", "x")
        assert c.get("py:auth:3") == b"v3"


def test_command_runs_ttls_hashes_and_links_on_every_node(c, cluster_seeds):
    """Cluster.command: any command over the native COMMAND opcode, routed by its keys."""
    keys = [f"py:cmd:{i}" for i in range(20)]
    for i, k in enumerate(keys):
        assert c.command("HSET", k, "name", f"n{i}", "n", "1") == 2
        assert c.command("HINCRBY", k, "n", i) == 1 + i
        assert c.command("LINK", "SET", k, "next", keys[(i + 1) % len(keys)]) == 1
        assert c.command("EXPIRE", k, 1000) == 1
    for i, k in enumerate(keys):
        assert c.command("HGETALL", k) == {
            b"name": f"n{i}".encode(),
            b"n": str(1 + i).encode(),
            b"next": keys[(i + 1) % len(keys)].encode(),
        }
        assert c.command("LINK", "GET", k, "next") == [keys[(i + 1) % len(keys)].encode()]
        assert 900 < c.command("TTL", k) <= 1000
    assert c.command("PERSIST", keys[0]) == 1
    assert c.command("TTL", keys[0]) == -1
    assert c.command("PING") == "PONG"
    # Keys in two slots: CROSSSLOT before sending; one hash tag is fine.
    with pytest.raises(ringlet.ServerError) as e:
        c.command("MGET", keys[0], keys[1])
    assert "CROSSSLOT" in str(e.value)
    assert c.command("MSET", "{py:cmd}a", "1", "{py:cmd}b", "2") == "OK"
    assert c.command("MGET", "{py:cmd}a", "{py:cmd}b") == [b"1", b"2"]
    # An error reply raises; so does a command a native connection cannot run.
    c.set("py:cmd:str", "v")
    with pytest.raises(ringlet.ServerError) as e:
        c.command("HGET", "py:cmd:str", "f")
    assert "WRONGTYPE" in str(e.value)
    with pytest.raises(ringlet.ServerError) as e:
        c.command("SUBSCRIBE", "ch")
    assert e.value.status == "UNSUPPORTED"

    import asyncio

    async def main():
        ac = ringlet.AsyncCluster(cluster_seeds)
        assert await ac.command("HGET", keys[3], "name") == b"n3"

    asyncio.run(main())
