"""`ringlet.ShmReader` against a real `ringlet server --shm-socket PATH` on this host.

Each test starts its own node (`--port 0`, the port read from its readiness line) with a
shared-memory socket in a temporary directory, writes through the node's RESP port with
redis-py (a real client, as an application would), and reads one-sided through the package:
hits, misses, binary and large values, overwrites and deletes seen at once, MGET in order,
threads sharing one reader, the errors of each failure, and a node restart at the same socket
path that the reader follows (it re-handshakes and maps the new node's memory) or, with no
node there, reports as `ConnectionError`.
"""

import os
import signal
import subprocess
import tempfile
import threading

import pytest
import redis

import ringlet

RINGLET_BIN = os.environ.get(
    "RINGLET_BIN",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "target", "debug", "ringlet"),
)


class Node:
    """One `ringlet server --port 0 --shm-socket <sock>`; `.port` is its RESP/native port."""

    def __init__(self, sock):
        assert os.access(RINGLET_BIN, os.X_OK), f"RINGLET_BIN={RINGLET_BIN} is not an executable"
        self.proc = subprocess.Popen(
            [RINGLET_BIN, "server", "--port", "0", "--memory-mb", "64", "--threads", "1",
             "--shm-socket", sock],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**{k: v for k, v in os.environ.items() if k != "RINGLET_REQUIREPASS"},
                 "RUST_LOG": "warn"},
        )
        line = self.proc.stdout.readline()  # the readiness line ends with ":PORT"
        try:
            self.port = int(line.strip().rsplit(":", 1)[1])
        except (IndexError, ValueError):
            self.stop()
            raise RuntimeError(f"bad readiness line {line!r}")
        self.redis = redis.Redis(host="127.0.0.1", port=self.port)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def sock():
    with tempfile.TemporaryDirectory(prefix="ringlet-py-shm-") as d:
        yield os.path.join(d, "node.sock")


@pytest.fixture
def node(sock):
    n = Node(sock)
    yield n
    n.stop()


def test_get_hits_misses_and_binary_values(node, sock):
    values = {f"shm:{i}".encode(): os.urandom(1 + i % 300) for i in range(500)}
    values[b"shm:big"] = os.urandom(1 << 20)
    values[b"shm:empty"] = b""
    node.redis.mset(values)
    r = ringlet.ShmReader(sock)
    for k, v in values.items():
        assert r.get(k) == v, k
    assert r.get("shm:1") == values[b"shm:1"]  # str keys are UTF-8
    assert r.get(b"shm:absent") is None
    stats = r.stats()
    assert stats["shm_hits"] >= len(values)
    assert stats["shm_misses"] >= 1
    assert "ShmReader" in repr(r)


def test_overwrite_and_delete_seen_at_once(node, sock):
    r = ringlet.ShmReader(sock)
    for i in range(50):
        node.redis.set(b"shm:w", str(i))
        assert r.get(b"shm:w") == str(i).encode()
    node.redis.delete(b"shm:w")
    assert r.get(b"shm:w") is None


def test_mget_in_order(node, sock):
    keys = [f"shm:m:{i}".encode() for i in range(300)]
    node.redis.mset({k: k[::-1] for k in keys[::2]})  # every other key exists
    r = ringlet.ShmReader(sock)
    got = r.mget(keys + [b"shm:m:0"])
    assert len(got) == len(keys) + 1
    for i, (k, v) in enumerate(zip(keys, got)):
        assert v == (k[::-1] if i % 2 == 0 else None), k
    assert got[-1] == keys[0][::-1]
    assert r.mget([]) == []
    assert r.mget(k for k in keys[:3]) == [keys[0][::-1], None, keys[2][::-1]]


def test_threads_share_one_reader(node, sock):
    keys = [f"shm:t:{i}".encode() for i in range(200)]
    node.redis.mset({k: k * 3 for k in keys})
    r = ringlet.ShmReader(sock)
    errors = []

    def work(offset):
        try:
            for _ in range(20):
                for k in keys[offset::4]:
                    assert r.get(k) == k * 3
                assert r.mget(keys[offset::4]) == [k * 3 for k in keys[offset::4]]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_errors(node, sock, tmp_path):
    with pytest.raises(ringlet.ConnectionError):
        ringlet.ShmReader(str(tmp_path / "nobody.sock"))
    with pytest.raises(ringlet.ConfigError):
        ringlet.ShmReader(sock, timeout=0)
    r = ringlet.ShmReader(sock, timeout=2.5)
    with pytest.raises(ringlet.TooLargeError):
        r.get(b"k" * (64 * 1024 + 1))
    with pytest.raises(ringlet.TooLargeError):
        r.mget([b"ok", b"k" * (64 * 1024 + 1)])
    with pytest.raises(TypeError):
        r.get(17)
    with pytest.raises(TypeError):
        r.mget("one-key")
    # The reader is still usable after refusals.
    node.redis.set(b"shm:after", b"x")
    assert r.get(b"shm:after") == b"x"


def test_follows_a_restarted_node(sock):
    first = Node(sock)
    try:
        first.redis.set(b"shm:r", b"old")
        r = ringlet.ShmReader(sock)
        assert r.get(b"shm:r") == b"old"
    finally:
        first.stop()
    # No node at the path: the reader's reconnect attempts fail.
    with pytest.raises(ringlet.ConnectionError):
        r.get(b"shm:r")
    second = Node(sock)
    try:
        # A new node, empty: the old mapping must not answer.
        assert r.get(b"shm:r") is None
        second.redis.set(b"shm:r", b"new")
        assert r.get(b"shm:r") == b"new"
        assert r.mget([b"shm:r", b"shm:none"]) == [b"new", None]
        assert r.stats()["reconnects"] >= 1
    finally:
        second.stop()
