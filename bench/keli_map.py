#!/usr/bin/env python3
"""KELI's map matching (KELI §4.3 and §6.2, Fig. 7): a city road network as linked records,
GPS points matched to street segments, Ringlet with links beside Redis 7 with keys in hash
fields, same machine, same run.

The city (seeded, `city()`): a --grid x --grid lattice of intersections ~--block-m metres
apart (jittered), each row and each column one street whose polyline runs through its
intersections and 0..3 shape points between two of them, plus --avenues diagonal avenues
crossing the city. Items, as KELI Fig. 7 models OpenStreetMap:
  - node      `nd:<i>`        {lat, lon}                       (an OSM node: a point)
  - segment   `sg:<i>`        {e0 -> node, e1 -> node, street -> street, cell -> cell}
                              (two consecutive nodes of a street)
  - street    `st:<i>`        {name, segments -> [segment ...]}
  - cell      `cl:<cx>:<cy>`  {cx, cy, segments -> [segment ...]}  (a --cell-m square)
On Ringlet the arrows are links (LINK SET / LINK ADD, location hints filled by the node); on
Redis (and on Ringlet "plain") they are keys in fields, space-joined for lists.

A cell lists every segment that comes within --radius-m of it (the segment's bounding box
grown by the radius overlaps the cell), so the segment nearest to a point, if it is within
the radius, is always in the point's own cell: one cell read answers a point (KELI: "identify
the corresponding cell ... retrieve segments belonging to this cell").

Matching a GPS point (`match_*`): compute its cell, read the cell's segments, their endpoint
nodes, pick the nearest segment (ties: smallest key) within --radius-m, and return
(segment key, street name, distance in mm) or None. Done five ways, all of which must return
the same answer as an in-memory reference for every point (checked; the reference itself is
checked against a brute-force nearest segment over the whole city for --verify points):
  - redis:              HGET cell segments; one pipelined round trip of HMGET e0 e1 street
                        for the segments; one of HMGET lat lon for their nodes and HGET name
                        for their streets (3 round trips, as fast as redis-py allows);
  - ringlet plain:      the same code and data against Ringlet (keys in fields);
  - ringlet links:      the same code against the linked copy (client-side chase: HMGET shows
                        a link as its target key, so the code is identical);
  - ringlet CHASE:      one `CHASE cl:x:y segments e0 e1 street DEPTH 2 FIELDS e0 e1 street
                        lat lon name` (1 round trip; the node walks cell -> segments -> nodes
                        and streets);
  - ringlet one-sided:  `ringlet-keli-map` (Rust): `ShmReader::chase` of the same CHASE over
                        the node's shared memory, each hop a validated read at the link's
                        hint (no round trip). Only with --one-sided (needs
                        target/release/ringlet-keli-map).
Latency per point (median and p95 over the points; median of --repeat rounds of each). The
Python matchers are interleaved point by point (each point to every system in turn), so load
from elsewhere on the machine hits them alike; the one-sided matcher runs after them.

Usage: bench/keli_map.py [--grid 100] [--points 2000] [--repeat 3] [--one-sided] [--json F]
Requires redis-server, redis-py (hiredis if present) and target/release/ringlet. Servers on
CPU 0, this client on CPU 1 where the machine has two.
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keli_bfs import RINGLET, ROOT, free_port, pin, wait_ping  # noqa: E402

# Ho Chi Minh City's centre, KELI's city: the projection's origin.
LAT0, LON0 = 10.7769, 106.7009
M_PER_DEG_LAT = 110_540.0
M_PER_DEG_LON = 111_320.0 * math.cos(math.radians(LAT0))
LINKS_MAX = 4096  # Ringlet's link-list bound (LINK ADD)
KEYMARGIN_M = 1.0  # cells listing a segment: its box grown by the radius and this margin


def to_xy(lat, lon):
    """Metres east and north of the origin (equirectangular; exact enough for a city)."""
    return (lon - LON0) * M_PER_DEG_LON, (lat - LAT0) * M_PER_DEG_LAT


def fmt(v):
    return f"{v:.7f}"


def point_segment_m(px, py, ax, ay, bx, by):
    """Distance from P to segment AB, metres."""
    dx, dy = bx - ax, by - ay
    ll = dx * dx + dy * dy
    t = 0.0 if ll == 0 else max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / ll))
    qx, qy = ax + t * dx - px, ay + t * dy - py
    return math.sqrt(qx * qx + qy * qy)


class City:
    """The generated map, in memory (what the stores hold, plus the geometry as floats parsed
    from the stored strings, so every matcher computes on the same numbers)."""

    def __init__(self, cell_m, radius_m):
        self.cell_m = cell_m
        self.radius_m = radius_m
        self.nodes = {}      # key -> (lat str, lon str)
        self.xy = {}         # key -> (x, y) metres, from the stored strings
        self.streets = {}    # key -> (name, [segment keys])
        self.segments = {}   # key -> (e0, e1, street, cell)
        self.cells = {}      # key -> [segment keys]

    def cell_of(self, x, y):
        return int(math.floor(x / self.cell_m)), int(math.floor(y / self.cell_m))

    def add_node(self, x, y):
        k = f"nd:{len(self.nodes)}"
        lat, lon = fmt(LAT0 + y / M_PER_DEG_LAT), fmt(LON0 + x / M_PER_DEG_LON)
        self.nodes[k] = (lat, lon)
        self.xy[k] = to_xy(float(lat), float(lon))
        return k

    def add_street(self, name, node_keys):
        sk = f"st:{len(self.streets)}"
        segs = []
        for a, b in zip(node_keys, node_keys[1:]):
            g = f"sg:{len(self.segments)}"
            (ax, ay), (bx, by) = self.xy[a], self.xy[b]
            cx, cy = self.cell_of((ax + bx) / 2, (ay + by) / 2)
            self.segments[g] = (a, b, sk, f"cl:{cx}:{cy}")
            segs.append(g)
            grow = self.radius_m + KEYMARGIN_M
            x0, y0 = self.cell_of(min(ax, bx) - grow, min(ay, by) - grow)
            x1, y1 = self.cell_of(max(ax, bx) + grow, max(ay, by) + grow)
            for i in range(x0, x1 + 1):
                for j in range(y0, y1 + 1):
                    self.cells.setdefault(f"cl:{i}:{j}", []).append(g)
        self.streets[sk] = (name, segs)

    def finish(self):
        # A segment's own cell exists even if (never, with the growth above) no list had it.
        for (_, _, _, c) in self.segments.values():
            self.cells.setdefault(c, [])
        for c, segs in self.cells.items():
            if len(segs) > LINKS_MAX:
                raise SystemExit(f"{c} lists {len(segs)} segments (> {LINKS_MAX}): "
                                 "use a smaller --cell-m")

    def items(self):
        return len(self.nodes) + len(self.streets) + len(self.segments) + len(self.cells)


def city(grid, block_m=100.0, cell_m=250.0, radius_m=40.0, avenues=4, seed=3):
    """A seeded city: a jittered lattice of intersections, streets along its rows and columns
    with shape points between intersections, and diagonal avenues."""
    rng = random.Random(seed)
    c = City(cell_m, radius_m)
    jit = block_m * 0.15
    inter = {}
    for i in range(grid):
        for j in range(grid):
            inter[i, j] = c.add_node(i * block_m + rng.uniform(-jit, jit),
                                     j * block_m + rng.uniform(-jit, jit))

    def polyline(points):
        """Node keys through `points` (existing node keys or (x, y)), shape points between."""
        out = []
        for p, q in zip(points, points[1:]):
            out.append(p)
            (px, py), (qx, qy) = c.xy[p], c.xy[q]
            k = rng.randint(0, 3)
            for s in range(1, k + 1):
                t = s / (k + 1)
                bend = rng.uniform(-0.06, 0.06) * block_m
                # Offset perpendicular to PQ: streets are not straight.
                dx, dy = qx - px, qy - py
                ll = math.hypot(dx, dy) or 1.0
                out.append(c.add_node(px + t * dx - dy / ll * bend, py + t * dy + dx / ll * bend))
        out.append(points[-1])
        return out

    for j in range(grid):
        c.add_street(f"Duong {j + 1}", polyline([inter[i, j] for i in range(grid)]))
    for i in range(grid):
        c.add_street(f"Pho {i + 1}", polyline([inter[i, j] for j in range(grid)]))
    side = (grid - 1) * block_m
    for a in range(avenues):
        # A straight-ish avenue from one edge to the opposite, through free nodes.
        x0, x1 = rng.uniform(0, side), rng.uniform(0, side)
        n = max(2, int(math.hypot(x1 - x0, side) / (block_m * 0.8)))
        pts = [c.add_node(x0 + (x1 - x0) * t / n + rng.uniform(-jit, jit), side * t / n)
               for t in range(n + 1)]
        c.add_street(f"Dai lo {a + 1}", pts)
    c.finish()
    return c


def gps_points(c, n, seed, noise_m=8.0, stray=0.1):
    """n GPS fixes: most near a random segment (Gaussian noise), some anywhere (off-road or
    outside the city: no match)."""
    rng = random.Random(seed)
    segs = sorted(c.segments)
    xs = [x for x, _ in c.xy.values()]
    ys = [y for _, y in c.xy.values()]
    out = []
    for _ in range(n):
        if rng.random() < stray:
            x = rng.uniform(min(xs) - 300, max(xs) + 300)
            y = rng.uniform(min(ys) - 300, max(ys) + 300)
        else:
            a, b, _, _ = c.segments[rng.choice(segs)]
            (ax, ay), (bx, by) = c.xy[a], c.xy[b]
            t = rng.random()
            x = ax + t * (bx - ax) + rng.gauss(0, noise_m)
            y = ay + t * (by - ay) + rng.gauss(0, noise_m)
        lat, lon = fmt(LAT0 + y / M_PER_DEG_LAT), fmt(LON0 + x / M_PER_DEG_LON)
        out.append((lat, lon))
    return out


def best(px, py, cands, radius_m):
    """(segment key, street, distance mm) of the nearest candidate within the radius, or None.
    `cands`: (segment key, street name, (ax, ay), (bx, by))."""
    top = None
    for g, name, (ax, ay), (bx, by) in cands:
        d = point_segment_m(px, py, ax, ay, bx, by)
        if d <= radius_m and (top is None or (d, g) < (top[0], top[1])):
            top = (d, g, name)
    if top is None:
        return None
    return top[1], top[2], round(top[0] * 1000)


def match_reference(c, lat, lon):
    px, py = to_xy(float(lat), float(lon))
    cx, cy = c.cell_of(px, py)
    cands = []
    for g in c.cells.get(f"cl:{cx}:{cy}", []):
        a, b, s, _ = c.segments[g]
        cands.append((g, c.streets[s][0], c.xy[a], c.xy[b]))
    return best(px, py, cands, c.radius_m)


def match_brute(c, lat, lon):
    """Nearest segment of the whole city (no cells)."""
    px, py = to_xy(float(lat), float(lon))
    return best(px, py, ((g, c.streets[s][0], c.xy[a], c.xy[b])
                         for g, (a, b, s, _) in c.segments.items()), c.radius_m)


def load(r, c, linked, prefix="", batch=1000):
    """The city into one store. Targets first (nodes, streets' names, cells' coordinates), so
    the links written after them get their location hints."""
    p = prefix
    pipe = r.pipeline(transaction=False)
    n = 0

    def step():
        nonlocal n
        n += 1
        if n % batch == 0:
            pipe.execute()

    def link(key, field, target):
        if linked:
            pipe.execute_command("LINK", "SET", p + key, field, p + target)
        else:
            pipe.hset(p + key, field, p + target)
        step()

    def links(key, field, targets):
        if linked:
            pipe.execute_command("LINK", "ADD", p + key, field, *(p + t for t in targets))
        else:
            pipe.hset(p + key, field, " ".join(p + t for t in targets))
        step()

    for k, (lat, lon) in c.nodes.items():
        pipe.hset(p + k, mapping={"lat": lat, "lon": lon})
        step()
    for k, (name, _) in c.streets.items():
        pipe.hset(p + k, "name", name)
        step()
    for k in c.cells:
        cx, cy = k.split(":")[1:]
        pipe.hset(p + k, mapping={"cx": cx, "cy": cy})
        step()
    for k, (a, b, s, cl) in c.segments.items():
        link(k, "e0", a)
        link(k, "e1", b)
        link(k, "street", s)
        link(k, "cell", cl)
    for k, (_, segs) in c.streets.items():
        for i in range(0, len(segs), LINKS_MAX):
            links(k, "segments", segs[i:i + LINKS_MAX])
    for k, segs in c.cells.items():
        if segs:
            links(k, "segments", segs)
    pipe.execute()


def s(b):
    return b.decode() if isinstance(b, bytes) else b


def match_client(r, radius_m, cell_m, lat, lon, prefix=""):
    """Client-side: 3 pipelined round trips (cell; its segments; their nodes and streets)."""
    px, py = to_xy(float(lat), float(lon))
    cx, cy = int(math.floor(px / cell_m)), int(math.floor(py / cell_m))
    segs = r.hget(f"{prefix}cl:{cx}:{cy}", "segments")
    if not segs:
        return None
    segs = s(segs).split(" ")
    pipe = r.pipeline(transaction=False)
    for g in segs:
        pipe.hmget(g, "e0", "e1", "street")
    rows = [[s(x) for x in row] for row in pipe.execute()]
    nodes = sorted({n for e0, e1, _ in rows for n in (e0, e1)})
    streets = sorted({st for _, _, st in rows})
    pipe = r.pipeline(transaction=False)
    for n in nodes:
        pipe.hmget(n, "lat", "lon")
    for st in streets:
        pipe.hget(st, "name")
    got = pipe.execute()
    xy = {n: to_xy(float(la), float(lo)) for n, (la, lo) in zip(nodes, got)}
    names = {st: s(nm) for st, nm in zip(streets, got[len(nodes):])}
    strip = len(prefix)
    return best(px, py, ((g[strip:], names[st], xy[e0], xy[e1])
                         for g, (e0, e1, st) in zip(segs, rows)), radius_m)


CHASE_FIELDS = ["segments", "e0", "e1", "street", "DEPTH", 2, "LIMIT", 10000, "FIELDS",
                "e0", "e1", "street", "lat", "lon", "name"]


CHASE_TRIES = 3
CHASE_RETRIES = [0]


def match_chase(r, radius_m, cell_m, lat, lon):
    """Server-side: one CHASE from the cell, depth 2 (segments, then nodes and streets)."""
    px, py = to_xy(float(lat), float(lon))
    cx, cy = int(math.floor(px / cell_m)), int(math.floor(py / cell_m))
    # A node answers `time` after 100 ms (its CHASE bound): only when it was descheduled for
    # that long on a loaded machine. Asked again then, at most CHASE_TRIES times (counted).
    for _ in range(CHASE_TRIES):
        *entries, stop = r.execute_command("CHASE", f"cl:{cx}:{cy}", *CHASE_FIELDS)
        if stop != b"time":
            break
        CHASE_RETRIES[0] += 1
    if stop != b"complete":
        raise RuntimeError(f"CHASE stopped early: {stop!r}")
    if not entries:
        return None
    items = {}
    segs = []
    for k, depth, attrs in entries:
        k = k.decode()
        a = {x.decode(): y.decode() for x, y in zip(attrs[::2], attrs[1::2])}
        items[k] = a
        if depth == 1:
            segs.append(k)
    return best(px, py, ((g, items[items[g]["street"]]["name"],
                          to_xy(float(items[items[g]["e0"]]["lat"]), float(items[items[g]["e0"]]["lon"])),
                          to_xy(float(items[items[g]["e1"]]["lat"]), float(items[items[g]["e1"]]["lon"])))
                         for g in segs), radius_m)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def one_sided(binary, sock, c, points, repeat):
    """`ringlet-keli-map`: per-point latencies (µs, each round) and answers."""
    with tempfile.NamedTemporaryFile("w", suffix=".pts", delete=False) as f:
        for lat, lon in points:
            f.write(f"{lat} {lon}\n")
        path = f.name
    try:
        out = subprocess.run([binary, "--socket", sock, "--points", path, "--rounds", str(repeat),
                              "--cell-m", str(c.cell_m), "--radius-m", str(c.radius_m)],
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(path)
    rounds, answers, stats = [], [], ""
    for line in out.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "round":
            rounds.append([float(x) for x in rest.split()])
        elif kind == "match":
            g, name, mm = rest.split("\t")
            answers.append((g, name, int(mm)))
        elif kind == "none":
            answers.append(None)
        elif kind == "stats":
            stats = rest
    return rounds, answers, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", type=int, default=100)
    ap.add_argument("--block-m", type=float, default=100.0)
    ap.add_argument("--cell-m", type=float, default=250.0)
    ap.add_argument("--radius-m", type=float, default=40.0)
    ap.add_argument("--avenues", type=int, default=4)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--verify", type=int, default=100,
                    help="points whose reference answer is checked by brute force")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--one-sided", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.access(RINGLET, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "ringlet-cli", "--bin", "ringlet"],
                       cwd=ROOT, check=True)
    mapper = os.path.join(ROOT, "target", "release", "ringlet-keli-map")
    if a.one_sided and not os.access(mapper, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "ringlet-tools", "--bin",
                        "ringlet-keli-map"], cwd=ROOT, check=True)
    pin(os.getpid(), 1)
    t0 = time.perf_counter()
    c = city(a.grid, a.block_m, a.cell_m, a.radius_m, a.avenues, a.seed)
    points = gps_points(c, a.points, a.seed + 1)
    ref = [match_reference(c, la, lo) for la, lo in points]
    for (la, lo), want in list(zip(points, ref))[:a.verify]:
        if match_brute(c, la, lo) != want:
            raise SystemExit(f"the cell index misses the nearest segment of ({la}, {lo})")
    matched = sum(x is not None for x in ref)
    cand = statistics.mean(len(c.cells.get("cl:%d:%d" % c.cell_of(*to_xy(float(la), float(lo))), []))
                           for la, lo in points)
    print(f"city: {a.grid}x{a.grid} intersections, {len(c.streets)} streets, {len(c.segments)} "
          f"segments, {len(c.nodes)} nodes, {len(c.cells)} cells = {c.items()} items (seed {a.seed}); "
          f"built in {time.perf_counter() - t0:.1f} s")
    print(f"{a.points} GPS points, {matched} within {a.radius_m:g} m of a segment, "
          f"{cand:.1f} candidate segments a point; {min(a.verify, a.points)} checked by brute force")

    tmp = tempfile.mkdtemp(prefix="keli-map-")
    sock = os.path.join(tmp, "shm.sock")
    rport, gport = free_port(), free_port()
    procs = [
        subprocess.Popen(["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no",
                          "--dir", tmp], stdout=subprocess.DEVNULL),
        subprocess.Popen([RINGLET, "server", "--port", str(gport), "--threads", "1",
                          "--memory-mb", "4096", "--shm-socket", sock],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        for p in procs:
            pin(p.pid, 0)
        wait_ping(rport)
        wait_ping(gport)
        red, rin = redis.Redis(port=rport), redis.Redis(port=gport)
        loads = {}
        for name, r, linked, prefix in (("redis", red, False, ""), ("ringlet plain", rin, False, "p:"),
                                        ("ringlet links", rin, True, "")):
            t = time.perf_counter()
            load(r, c, linked, prefix)
            loads[name] = time.perf_counter() - t
        rad, cm = a.radius_m, a.cell_m
        systems = {
            "redis, 3 round trips": lambda la, lo: match_client(red, rad, cm, la, lo),
            "ringlet plain keys, 3 round trips": lambda la, lo: match_client(rin, rad, cm, la, lo, "p:"),
            "ringlet links, client-side": lambda la, lo: match_client(rin, rad, cm, la, lo),
            "ringlet links, CHASE (1 trip)": lambda la, lo: match_chase(rin, rad, cm, la, lo),
        }
        med = {k: [] for k in systems}
        p95 = {k: [] for k in systems}
        names = list(systems)
        for _ in range(a.repeat):
            # Interleaved: each point goes to every system in turn (the first one rotating),
            # so a burst of load from elsewhere on the machine hits all systems alike.
            lat_us = {k: [] for k in systems}
            for i, (la, lo) in enumerate(points):
                for j in range(len(names)):
                    name = names[(i + j) % len(names)]
                    t = time.perf_counter()
                    got = systems[name](la, lo)
                    lat_us[name].append((time.perf_counter() - t) * 1e6)
                    if got != ref[i]:
                        raise SystemExit(f"{name} matched point {i} {points[i]} to {got}, "
                                         f"not {ref[i]}")
            for name in systems:
                med[name].append(statistics.median(lat_us[name]))
                p95[name].append(pct(lat_us[name], 0.95))
        stats = ""
        if a.one_sided:
            name = "ringlet links, one-sided CHASE"
            rounds, answers, stats = one_sided(mapper, sock, c, points, a.repeat)
            if answers != ref:
                bad = next(i for i, (x, y) in enumerate(zip(answers, ref)) if x != y)
                raise SystemExit(f"{name} matched point {bad} to {answers[bad]}, not {ref[bad]}")
            med[name] = [statistics.median(r) for r in rounds]
            p95[name] = [pct(r, 0.95) for r in rounds]
        m = {k: statistics.median(v) for k, v in med.items()}
        q = {k: statistics.median(v) for k, v in p95.items()}
        base, qbase = m["redis, 3 round trips"], q["redis, 3 round trips"]
        print("load: " + ", ".join(f"{k} {v:.1f} s" for k, v in loads.items()))
        print(f"median of {a.repeat} rounds of every point (interleaved); every answer equal to "
              "the reference")
        print(f"{'matcher':36} {'median us':>10} {'redis/this':>11} {'p95 us':>9} {'redis/this':>11}")
        for k in m:
            print(f"{k:36} {m[k]:10.1f} {base / m[k]:11.2f} {q[k]:9.1f} {qbase / q[k]:11.2f}")
        if stats:
            print(f"one-sided reader: {stats}")
        if CHASE_RETRIES[0]:
            print(f"CHASE answered `time` (the node descheduled for 100 ms) and was asked "
                  f"again {CHASE_RETRIES[0]} times")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"args": vars(a), "items": c.items(), "median_us": med, "p95_us": p95,
                           "load_s": loads}, f, indent=1)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
