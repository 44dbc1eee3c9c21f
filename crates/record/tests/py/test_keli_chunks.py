"""CHASE ... CHUNKED through a real `ringlet` node over lists `ringlet load` chunked (KELI's
100-links-per-item follower lists, here 3 so short lists span many items): every BFS equals a
plain in-memory BFS of the graph, whether walked by one CHASE or client-side chunk by chunk
(bench/keli_bfs.py's two Ringlet walks), and the chunks are real items linked by
`follows.next`.

Run by CI (scripts/ci.sh, the pytest step) with RINGLET_BIN pointing at the built binary:

    cargo build -p ringlet-cli --bin ringlet
    RINGLET_BIN=$PWD/target/debug/ringlet python3 -m pytest -q crates/record/tests/py
"""
import os
import random
import subprocess
import sys

import pytest
import redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import keli_bfs  # noqa: E402


def _ringlet_bin():
    b = os.environ.get("RINGLET_BIN")
    if b:
        return b
    guess = os.path.join(ROOT, "target", "debug", "ringlet")
    if os.path.exists(guess):
        return guess
    pytest.skip("RINGLET_BIN not set and target/debug/ringlet not built")


@pytest.fixture(scope="module")
def node():
    proc = subprocess.Popen(
        [_ringlet_bin(), "server", "--port", "0", "--threads", "1", "--memory-mb", "64"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ringlet: listening on "), line
        yield int(line.strip().rsplit(":", 1)[1])
    finally:
        proc.terminate()
        proc.wait(10)


def graph(n, seed):
    """A skewed random graph: a few hubs with long lists, most vertices with a few links."""
    rng = random.Random(seed)
    g = {}
    for v in range(n):
        deg = rng.choice([0, 1, 2, 3, 5]) if v >= 5 else 40 + 10 * v
        g[v] = sorted({rng.randrange(n) for _ in range(deg)} - {v})
    return g


def reference(g, root, depth):
    seen = {root}
    frontier = [root]
    out = {f"v:{root}": f"n{root}".encode()}
    for _ in range(depth):
        nxt = []
        for v in frontier:
            for t in g[v]:
                if t not in seen:
                    seen.add(t)
                    nxt.append(t)
                    out[f"v:{t}"] = f"n{t}".encode()
        frontier = nxt
    return out


def test_chunked_chase_is_the_plain_bfs(node, tmp_path):
    g = graph(300, seed=11)
    (tmp_path / "vertices.csv").write_text(
        "id,name\n" + "".join(f"{v},n{v}\n" for v in g))
    (tmp_path / "edges.csv").write_text(
        "src,dst\n" + "".join(f"{v},{t}\n" for v in g for t in g[v]))
    (tmp_path / "mapping.toml").write_text(keli_bfs.MAPPING % 3)
    subprocess.run([_ringlet_bin(), "load", "--port", str(node), "--mapping",
                    str(tmp_path / "mapping.toml"), "--csv",
                    f"vertices={tmp_path / 'vertices.csv'}", "--csv",
                    f"edges={tmp_path / 'edges.csv'}"], check=True, capture_output=True)
    r = redis.Redis(port=node)
    # Vertex 4 has 80 targets: 3 in v:4, then v:4#follows#1 … linked by follows.next.
    assert len(r.execute_command("LINK", "GET", "v:4", "follows")) == 3
    assert r.execute_command("LINK", "GET", "v:4", "follows.next") == [b"v:4#follows#1"]
    for root in [0, 4, 17, 150, 299]:
        for depth in [0, 1, 2, 3]:
            want = reference(g, root, depth)
            assert keli_bfs.bfs_chase(r, f"v:{root}", depth) == want, (root, depth)
            assert keli_bfs.bfs_ringlet_client(r, f"v:{root}", depth) == want, (root, depth)
    # Without CHUNKED the chain is walked as items, one level each: v:4's first chunk item
    # is one hop away, with no name.
    *entries, stop = r.execute_command("CHASE", "v:4", "follows", "follows.next", "DEPTH", 1)
    assert stop == b"complete"
    assert [e[0] for e in entries if e[0] == b"v:4#follows#1"] == [b"v:4#follows#1"]
    # CHUNKED is an option word: in any order among the options, any case.
    *entries, stop = r.execute_command("CHASE", "v:4", "follows", "FIELDS", "name", "chunked",
                                       "DEPTH", 1)
    assert stop == b"complete"
    assert len(entries) == 1 + len(g[4])
    assert all(e[2][0] == b"name" for e in entries)
