"""Map matching (KELI Fig. 7) through a real `ringlet` node: a small seeded city loaded with
links by bench/keli_map.py's loader, GPS points matched by the client-side walk and by one
server-side CHASE, each answer equal to the brute-force nearest segment over the whole city.

Run by CI (scripts/ci.sh, the pytest step) with RINGLET_BIN pointing at the built binary:

    cargo build -p ringlet-cli --bin ringlet
    RINGLET_BIN=$PWD/target/debug/ringlet python3 -m pytest -q crates/record/tests/py
"""
import os
import subprocess
import sys

import pytest
import redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import keli_map  # noqa: E402


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
        yield redis.Redis(port=int(line.strip().rsplit(":", 1)[1]))
    finally:
        proc.terminate()
        proc.wait(10)


def test_matched_segment_is_the_nearest(node):
    c = keli_map.city(12, seed=5)
    keli_map.load(node, c, linked=True)
    keli_map.load(node, c, linked=False, prefix="p:")
    # The links are real links, not strings: LINK GET answers the targets.
    seg = next(iter(c.segments))
    assert node.execute_command("LINK", "GET", seg, "e0") == [c.segments[seg][0].encode()]
    points = keli_map.gps_points(c, 300, seed=6)
    matched = 0
    for lat, lon in points:
        want = keli_map.match_brute(c, lat, lon)
        matched += want is not None
        assert keli_map.match_reference(c, lat, lon) == want, (lat, lon)
        assert keli_map.match_chase(node, c.radius_m, c.cell_m, lat, lon) == want, (lat, lon)
        assert keli_map.match_client(node, c.radius_m, c.cell_m, lat, lon) == want, (lat, lon)
        assert keli_map.match_client(node, c.radius_m, c.cell_m, lat, lon, "p:") == want, (lat, lon)
    # Both kinds of point occur: matched ones and ones too far from every street.
    assert 0 < matched < len(points)
