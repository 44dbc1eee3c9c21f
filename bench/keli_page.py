#!/usr/bin/env python3
"""KELI's web page assembly (products -> reviews -> users, KELI section 4.2) and the cost of a
link hop over TCP, Ringlet with links beside Redis 7 with keys in hash fields, same machine,
same run.

Data (seeded): --products products `p:<i>` {title, price, reviews}, each with 3..--reviews-max
reviews `r:<j>` {stars, text, author}, each written by one of --users users `u:<k>` {name,
country}. On Ringlet `reviews` is a link list and `author` a link (LINK ADD / LINK SET, hints
filled by the node); on Redis they hold the keys (space-joined), as a Redis user stores them.

Page of product p: the product's fields, every review's fields, and each review's author's
name. Built three ways, and all three must give the same page for every product (checked):
  - redis:          HGETALL p, then one pipelined round trip of HGETALL for its reviews, then one
                    for their distinct authors (3 round trips, as fast as redis-py allows);
  - ringlet-client: the same code against Ringlet (HGETALL shows links as their targets);
  - ringlet-chase:  one `CHASE p reviews author DEPTH 2` (1 round trip).

Hop cost over TCP (--chain): a chain of records c:0 -> c:1 -> ... by a `next` link (a key
in a field on Redis). "lookup": the client reads each record and follows `next` itself (one
HGET round trip per hop, the way a client without links walks); "chase": one
`CHASE c:<i> next DEPTH 8 FIELDS next` per 8 hops. Reported as microseconds per hop.

Usage: bench/keli_page.py [--products 2000] [--users 5000] [--reviews-max 20] [--pages 500]
       [--chain 4000] [--repeat 3] [--json out.json]
Requires redis-server, redis-py (hiredis if present) and target/release/ringlet. Servers on
CPU 0, this client on CPU 1 where the machine has two.
"""
import argparse
import json
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


def make_data(a):
    rng = random.Random(a.seed)
    users = {f"u:{k}": {"name": f"user{k}", "country": rng.choice(["fr", "de", "us", "jp"])}
             for k in range(a.users)}
    reviews, products = {}, {}
    j = 0
    for i in range(a.products):
        rs = []
        for _ in range(rng.randint(3, a.reviews_max)):
            rk = f"r:{j}"
            j += 1
            reviews[rk] = {"stars": str(rng.randint(1, 5)), "text": "w" * rng.randint(20, 200),
                           "author": f"u:{rng.randrange(a.users)}"}
            rs.append(rk)
        products[f"p:{i}"] = {"title": f"product {i}", "price": str(rng.randint(1, 999)),
                              "reviews": rs}
    return users, reviews, products


def load(r, users, reviews, products, linked):
    pipe = r.pipeline(transaction=False)
    n = 0

    def flush():
        nonlocal n
        n += 1
        if n % 500 == 0:
            pipe.execute()

    # Targets first, so the links written next get their location hints.
    for k, u in users.items():
        pipe.hset(k, mapping=u)
        flush()
    for k, rv in reviews.items():
        pipe.hset(k, mapping={"stars": rv["stars"], "text": rv["text"]})
        if linked:
            pipe.execute_command("LINK", "SET", k, "author", rv["author"])
        else:
            pipe.hset(k, "author", rv["author"])
        flush()
    for k, p in products.items():
        pipe.hset(k, mapping={"title": p["title"], "price": p["price"]})
        if linked:
            pipe.execute_command("LINK", "ADD", k, "reviews", *p["reviews"])
        else:
            pipe.hset(k, "reviews", " ".join(p["reviews"]))
        flush()
    pipe.execute()


def dec(h):
    return {k.decode(): v.decode() for k, v in h.items()}


def page_client(r, p):
    prod = dec(r.hgetall(p))
    rkeys = prod["reviews"].split(" ")
    pipe = r.pipeline(transaction=False)
    for k in rkeys:
        pipe.hgetall(k)
    revs = [dec(h) for h in pipe.execute()]
    authors = sorted({rv["author"] for rv in revs})
    pipe = r.pipeline(transaction=False)
    for k in authors:
        pipe.hget(k, "name")
    names = dict(zip(authors, (n.decode() for n in pipe.execute())))
    return (prod["title"], prod["price"],
            [(rv["stars"], rv["text"], names[rv["author"]]) for rv in revs])


def page_chase(r, p):
    *entries, stop = r.execute_command("CHASE", p, "reviews", "author", "DEPTH", 2)
    if stop != b"complete":
        raise RuntimeError(f"CHASE stopped early: {stop!r}")
    items = {k.decode(): dict(zip((x.decode() for x in a[::2]), (x.decode() for x in a[1::2])))
             for k, _, a in entries}
    prod = items[p]
    revs = [items[k] for k in prod["reviews"].split(" ")]
    return (prod["title"], prod["price"],
            [(rv["stars"], rv["text"], items[rv["author"]]["name"]) for rv in revs])


def load_chain(r, n, linked):
    pipe = r.pipeline(transaction=False)
    for i in reversed(range(n)):
        pipe.hset(f"c:{i}", "v", str(i))
        if i + 1 < n:
            if linked:
                pipe.execute_command("LINK", "SET", f"c:{i}", "next", f"c:{i + 1}")
            else:
                pipe.hset(f"c:{i}", "next", f"c:{i + 1}")
        if i % 500 == 0:
            pipe.execute()
    pipe.execute()


def walk_lookup(r, n):
    k = "c:0"
    hops = 0
    while True:
        nxt = r.hget(k, "next")
        if nxt is None:
            return hops
        k = nxt.decode()
        hops += 1


def walk_chase(r, n):
    k, hops = "c:0", 0
    while True:
        *entries, stop = r.execute_command("CHASE", k, "next", "DEPTH", 8, "FIELDS", "next")
        hops += len(entries) - 1
        last = entries[-1]
        if len(entries) < 9:
            return hops
        k = last[0].decode()


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--products", type=int, default=2000)
    ap.add_argument("--users", type=int, default=5000)
    ap.add_argument("--reviews-max", type=int, default=20)
    ap.add_argument("--pages", type=int, default=500)
    ap.add_argument("--chain", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.access(RINGLET, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "ringlet-cli", "--bin", "ringlet"],
                       cwd=ROOT, check=True)
    pin(os.getpid(), 1)
    users, reviews, products = make_data(a)
    rng = random.Random(a.seed + 1)
    pages = [f"p:{rng.randrange(a.products)}" for _ in range(a.pages)]

    tmp = tempfile.mkdtemp(prefix="keli-page-")
    rport, gport = free_port(), free_port()
    procs = [
        subprocess.Popen(["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no",
                          "--dir", tmp], stdout=subprocess.DEVNULL),
        subprocess.Popen([RINGLET, "server", "--port", str(gport), "--threads", "1",
                          "--memory-mb", "2048"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        for p in procs:
            pin(p.pid, 0)
        wait_ping(rport)
        wait_ping(gport)
        red, rin = redis.Redis(port=rport), redis.Redis(port=gport)
        load(red, users, reviews, products, False)
        load(rin, users, reviews, products, True)
        load_chain(red, a.chain, False)
        load_chain(rin, a.chain, True)
        systems = {
            "redis (3 round trips)": lambda p: page_client(red, p),
            "ringlet client-side (3 round trips)": lambda p: page_client(rin, p),
            "ringlet CHASE DEPTH 2 (1 round trip)": lambda p: page_chase(rin, p),
        }
        hops = {
            "redis lookup (HGET per hop)": lambda: walk_lookup(red, a.chain),
            "ringlet lookup (HGET per hop)": lambda: walk_lookup(rin, a.chain),
            "ringlet chase (CHASE DEPTH 8)": lambda: walk_chase(rin, a.chain),
        }
        times = {k: [] for k in systems}
        hop_times = {k: [] for k in hops}
        for _ in range(a.repeat):
            ref = None
            for name, fn in systems.items():
                total, out = 0.0, []
                for p in pages:
                    t, page = timed(fn, p)
                    total += t
                    out.append(page)
                times[name].append(total / len(pages))
                if ref is None:
                    ref = out
                elif out != ref:
                    raise SystemExit(f"{name} built different pages than Redis")
            for name, fn in hops.items():
                t, n = timed(fn)
                if n != a.chain - 1:
                    raise SystemExit(f"{name} walked {n} hops, not {a.chain - 1}")
                hop_times[name].append(t / n)
        med = {k: statistics.median(v) for k, v in times.items()}
        hmed = {k: statistics.median(v) for k, v in hop_times.items()}
        n_reviews = sum(len(products[p]["reviews"]) for p in pages)
        print(f"{a.products} products, {len(reviews)} reviews, {a.users} users (seed {a.seed}); "
              f"{a.pages} pages ({n_reviews / a.pages:.1f} reviews a page); median of {a.repeat}")
        base = med["redis (3 round trips)"]
        print(f"{'page assembly':40} {'us/page':>9} {'redis/this':>11}")
        for k, v in med.items():
            print(f"{k:40} {v * 1e6:9.1f} {base / v:11.2f}")
        hbase = hmed["ringlet lookup (HGET per hop)"]
        print(f"{'hop over TCP (' + str(a.chain - 1) + ' hops)':40} {'us/hop':>9} {'this/ringlet lookup':>20}")
        for k, v in hmed.items():
            print(f"{k:40} {v * 1e6:9.2f} {v / hbase:20.2f}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"args": vars(a), "page_s": times, "hop_s": hop_times}, f, indent=1)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
