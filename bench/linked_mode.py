#!/usr/bin/env python3
"""Linked mode (LInK) vs stateless servers with a remote cache (S+RInK): issue 14, item 8.

One example service (crates/linklet/examples/linked_service.rs: per-user objects of 2-7 KB as
JSON, 80% `view` = read + summarize, 20% `act` = read-modify-write) built three ways in the
same run, on the same machine, with the same load generator (linked_load.rs) and router:

  stateless+redis    router --rr--> N stateless apps --GET/SET--> redis-server (Redis 7)
  stateless+ringlet  router --rr--> N stateless apps --GET/SET--> ringlet server --threads 1
  linked             router --slot--> N apps with a Linklet each (objects in process)
  linked+router      the same apps as members of a linked service (crates/linked): a
                     coordinator assigns slot units (auto-sharder), an HTTP front routes with
                     ringlet_linked::Router over the member protocol (crates/linked/examples/
                     linked_bench.rs). The load starts once every member owns units and the
                     map has been stable for 1 s; the coordinator counts as router CPU. Its
                     bytes: load<->front HTTP + front<->member frames, counted by the front.
  linked+router+rep  linked+router with `--replicas 2`: every unit has a backup member, and a
                     request that writes is answered once its backup applied the change
                     (crates/linked/src/replicate.rs). The load starts once every backup is
                     seeded. Bytes add the members' replication traffic (frames to backups
                     and acks, counted by the owner: `--stats-port` of linked_bench member).

Measured over the window of each run (after a preload of every user and a warm-up):
  CPU per request   utime+stime (/proc/<pid>/stat) of router + apps + cache, / requests.
                    The load generator is the client and is not counted.
  bytes per request bytes on loopback: the router counts what it forwards (requests and
                    responses, forwarded verbatim, so the load->router hop and the router->app
                    hop carry the same bytes: counted x2); the app<->cache hop is the cache's
                    own total_net_input_bytes + total_net_output_bytes (INFO stats; Redis and
                    Ringlet keep both). Each hop's bytes are counted once (not once per end),
                    payload only (no TCP/IP headers).
  latency           from the load generator, end to end through the router, from the send of a
                    request to the end of its response (the headline p50/p99 and the --json
                    ratios). Paced runs also give latency from the *scheduled* send time (no
                    coordinated omission) and count requests sent > 1 ms late ("late %"): on a
                    busy machine the generator's own wake-ups come late and dominate that
                    figure for every variant, which is why it is not the headline.

Two load shapes, both with `--conns` connections: `paced` sends `--rate` requests/s in total
(each connection on a fixed schedule; latency from the scheduled send time), the same offered
load for every variant, as the paper compares at equal throughput; `saturated` (skipped with
--quick) sends back to back and reports the throughput each variant reaches. The ratios in
--json come from the paced runs, linked / stateless+redis.

Nothing is pinned: the machine has 2 cores and a run has 4-5 busy processes; all of them
share both cores. Reported figures are medians over --reps runs (variants interleaved).

  python3 bench/linked_mode.py                 # 3 reps, paced + saturated, ~5 minutes
  python3 bench/linked_mode.py --quick         # 1 rep, paced only, ~1 minute
  python3 bench/linked_mode.py --json out.json
"""

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "target", "release", "examples")
SERVICE = os.path.join(EXAMPLES, "linked_service")
LOAD = os.path.join(EXAMPLES, "linked_load")
RINGLET = os.path.join(ROOT, "target", "release", "ringlet")
LINKED = os.path.join(ROOT, "target", "release", "ringlet-linked")
LINKED_BENCH = os.path.join(EXAMPLES, "linked_bench")
CLK_TCK = os.sysconf("SC_CLK_TCK")
VARIANTS = ["stateless+redis", "stateless+ringlet", "linked", "linked+router",
            "linked+router+rep"]
# LInK Table 1 (HotOS '19): reductions of the stateful servers vs S+RInK. Goals: at least these.
GOALS = {"cpu": 0.57, "network": 0.50, "p50": 0.71}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout_s=15.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port} within {timeout_s} s")


class Group:
    """The processes of one run; stopped (only these, by handle) when the run ends."""

    def __init__(self):
        self.procs = []

    def start(self, argv, what):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append((p, what))
        return p

    def start_service(self, args, what):
        p = self.start([SERVICE] + args, what)
        line = p.stdout.readline().split()
        if len(line) != 2 or line[0] != "listening":
            sys.exit(f"{what}: expected 'listening ADDR', got {line}")
        return p, line[1]

    def stop(self):
        for p, _ in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p, _ in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def front_stats(addr):
    import http.client
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    c.request("GET", "/__stats")
    body = c.getresponse().read()
    c.close()
    return json.loads(body)


def wait_balanced(front, members, backups=0, timeout_s=60.0):
    """Until every member owns units, `backups` units have a ready backup, and the map did not
    change for 1 s."""
    deadline = time.time() + timeout_s
    last, since = None, time.time()
    while time.time() < deadline:
        st = front_stats(front)
        key = (st["epoch"], tuple(st["units"]))
        if key != last:
            last, since = key, time.time()
        elif (len(st["units"]) == members and st.get("backups_ready", 0) >= backups
              and time.time() - since >= 1.0):
            return st
        time.sleep(0.1)
    sys.exit(f"linked+router: map not balanced within {timeout_s} s: {last}")


def run_one(variant, shape, a):
    g = Group()
    try:
        roles = {}  # pid -> role
        cache_addr = None
        apps = []
        router = None
        extra_stats = []
        if variant.startswith("linked+router"):
            rep = variant.endswith("+rep")
            p = g.start([LINKED, "coordinator", "--listen", "127.0.0.1:0", "--units", "64",
                         "--moves-per-minute", "600", "--tick-ms", "50",
                         "--replicas", "2" if rep else "1"], "coordinator")
            line = p.stdout.readline().split()
            if len(line) != 2 or line[0] != "coordinator":
                sys.exit(f"coordinator: expected 'coordinator ADDR', got {line}")
            coord = line[1]
            roles[p.pid] = "router"
            for i in range(a.apps):
                p = g.start([LINKED_BENCH, "member", "--coordinator", coord]
                            + (["--stats-port", "0"] if rep else []), f"member {i}")
                line = p.stdout.readline().split()
                if len(line) != 3 or line[0] != "member":
                    sys.exit(f"member {i}: expected 'member ID ADDR', got {line}")
                if rep:
                    line = p.stdout.readline().split()
                    if len(line) != 2 or line[0] != "stats":
                        sys.exit(f"member {i}: expected 'stats ADDR', got {line}")
                    extra_stats.append(line[1])
                roles[p.pid] = "apps"
            p = g.start([LINKED_BENCH, "front", "--coordinator", coord, "--port", "0"], "front")
            line = p.stdout.readline().split()
            if len(line) != 2 or line[0] != "listening":
                sys.exit(f"front: expected 'listening ADDR', got {line}")
            router = line[1]
            roles[p.pid] = "router"
            st = wait_balanced(router, a.apps, 64 if rep else 0)
            print(f"    {variant}: units per member {st['units']}, map epoch {st['epoch']}, "
                  f"backups ready {st.get('backups_ready', 0)}", flush=True)
        elif variant.startswith("stateless"):
            kind = variant.split("+")[1]
            port = free_port()
            if kind == "redis":
                argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                        "--save", "", "--appendonly", "no"]
            else:
                argv = [RINGLET, "server", "--port", str(port), "--threads", "1"]
            p = g.start(argv, kind)
            wait_port(port, p, kind)
            roles[p.pid] = "cache"
            cache_addr = f"127.0.0.1:{port}"
            for i in range(a.apps):
                p, addr = g.start_service(["--mode", "stateless", "--port", "0", "--cache", kind,
                                           "--cache-addr", cache_addr], f"app {i}")
                roles[p.pid] = "apps"
                apps.append(addr)
            policy = "rr"
        else:
            for i in range(a.apps):
                p, addr = g.start_service(["--mode", "linked", "--port", "0", "--index", str(i),
                                           "--of", str(a.apps)], f"app {i}")
                roles[p.pid] = "apps"
                apps.append(addr)
            policy = "slot"
        if router is None:
            p, router = g.start_service(["--mode", "router", "--port", "0", "--backends",
                                         ",".join(apps), "--policy", policy], "router")
            roles[p.pid] = "router"
        argv = [LOAD, "--router", router, "--conns", str(a.conns), "--users", str(a.users),
                "--zipf", str(a.zipf), "--act-pct", str(a.act_pct), "--warmup-s", str(a.warmup),
                "--duration-s", str(a.duration), "--seed", str(a.seed),
                "--rate", str(a.rate if shape == "paced" else 0),
                "--pids", ",".join(str(pid) for pid in roles)]
        if cache_addr:
            argv += ["--cache-addr", cache_addr]
        if extra_stats:
            argv += ["--extra-stats", ",".join(extra_stats)]
        out = subprocess.run(argv, capture_output=True, text=True,
                             timeout=a.warmup + a.duration + 120)
        if out.returncode != 0:
            sys.exit(f"linked_load failed ({variant}): {out.stderr.strip()}")
        r = json.loads(out.stdout)
        if variant.startswith("linked+router"):
            r["epoch_after"] = front_stats(router)["epoch"]
            print(f"    {variant}: map epoch {r['epoch_after']} after the run "
                  f"(moves during the run change it)", flush=True)
    finally:
        g.stop()
    n = r["requests"]
    if n == 0:
        sys.exit(f"{variant}: no requests completed")
    cpu = {"cache": 0.0, "apps": 0.0, "router": 0.0}
    for pid, ticks in r["cpu_ticks"].items():
        cpu[roles[int(pid)]] += ticks / CLK_TCK
    return {
        "rps": r["rps"],
        "errors": r["errors"],
        "cpu_us": sum(cpu.values()) / n * 1e6,
        "cpu_cache_us": cpu["cache"] / n * 1e6,
        "cpu_apps_us": cpu["apps"] / n * 1e6,
        "cpu_router_us": cpu["router"] / n * 1e6,
        # The verbatim-forwarding router counts one hop of two identical ones; the linked
        # front counts both of its hops itself.
        "bytes": ((1 if variant.startswith("linked+router") else 2) * r["router_bytes"]
                  + (r["cache_bytes"] or 0)) / n,
        "cache_bytes": (r["cache_bytes"] or 0) / n,
        # Headline latency: from the send. From the scheduled send time (paced) as well.
        "p50_us": r["service_p50_us"],
        "p99_us": r["service_p99_us"],
        "sched_p50_us": r["p50_us"],
        "sched_p99_us": r["p99_us"],
        "sched_p999_us": r["p999_us"],
        "late_pct": 100.0 * r["late"] / n,
    }


def median_of(runs):
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 rep of ~12 s per variant, paced only")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rate", type=float, default=1000.0,
                    help="paced shape: requests/s in total (same for every variant)")
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--apps", type=int, default=2, help="app processes behind the router")
    ap.add_argument("--users", type=int, default=10000)
    ap.add_argument("--zipf", type=float, default=0.99, help="0: uniform")
    ap.add_argument("--act-pct", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated subset to run (stateless+redis is always run: the "
                         "ratios are against it)")
    a = ap.parse_args()
    variants = [v for v in VARIANTS if v in a.variants.split(",") or v == "stateless+redis"]
    if a.quick:
        a.reps, a.duration = 1, 12.0
    if a.apps < 2:
        sys.exit("--apps must be at least 2 (the router needs a choice)")
    if not os.path.exists(RINGLET):
        sys.exit(f"{RINGLET} is missing: build it with `cargo build --release -p ringlet-cli`")
    if not a.no_build:
        subprocess.run(["cargo", "build", "-q", "-p", "ringlet-linklet", "--release", "--examples"],
                       cwd=ROOT, check=True)
        subprocess.run(["cargo", "build", "-q", "-p", "ringlet-tools", "-p", "ringlet-linked", "--release", "--bin",
                        "ringlet-linked", "--example", "linked_bench"], cwd=ROOT, check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    redis_v = subprocess.run(["redis-server", "--version"], capture_output=True,
                             text=True).stdout.split()[2]
    print(f"commit {commit}, {platform.node()}, kernel {platform.release()}, {os.cpu_count()} cores, "
          f"redis {redis_v}, load average {loadavg()} at start")
    print(f"nothing pinned: router, {a.apps} apps and the cache share {os.cpu_count()} cores with "
          f"the load generator")
    print(f"users {a.users}, zipf {a.zipf}, view:act {100 - a.act_pct}:{a.act_pct}, "
          f"{a.conns} connections, {a.apps} apps, warm-up {a.warmup} s, measured {a.duration} s, "
          f"medians of {a.reps}")
    shapes = ["paced"] if a.quick else ["paced", "saturated"]
    results = {}
    for shape in shapes:
        runs = {v: [] for v in variants}
        for rep in range(a.reps):
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            for v in order:
                r = run_one(v, shape, a)
                runs[v].append(r)
                print(f"  {shape} rep {rep + 1} {v}: {r['rps']:.0f} req/s, {r['cpu_us']:.1f} "
                      f"CPU-us/req, {r['bytes']:.0f} B/req, p50 {r['p50_us']:.0f} us, "
                      f"p99 {r['p99_us']:.0f} us, {r['late_pct']:.1f}% late, {r['errors']} errors, "
                      f"load average {loadavg()}", flush=True)
        results[shape] = {v: median_of(rs) for v, rs in runs.items()}
    print(f"load average {loadavg()} at end\n")

    for shape in shapes:
        m = results[shape]
        load = f"{a.rate:.0f} req/s offered" if shape == "paced" else "back to back"
        print(f"### {shape} ({load}, {a.conns} connections), medians of {a.reps}\n")
        print("| variant | req/s | CPU µs/req (cache + apps + router) | bytes/req (app↔cache) "
              "| p50 µs | p99 µs | from schedule p50 / p99 / p99.9 µs | late % | errors |")
        print("|---|---|---|---|---|---|---|---|---|")
        for v in variants:
            r = m[v]
            print(f"| {v} | {r['rps']:,.0f} | {r['cpu_us']:.1f} ({r['cpu_cache_us']:.1f} + "
                  f"{r['cpu_apps_us']:.1f} + {r['cpu_router_us']:.1f}) | {r['bytes']:,.0f} "
                  f"({r['cache_bytes']:,.0f}) | {r['p50_us']:.0f} | {r['p99_us']:.0f} | "
                  f"{r['sched_p50_us']:.0f} / {r['sched_p99_us']:.0f} / "
                  f"{r['sched_p999_us']:.0f} | {r['late_pct']:.1f} | {r['errors']:.0f} |")
        if shape == "paced" and any(m[v]["late_pct"] > 1.0 for v in variants):
            print("\nWARNING: over 1% of paced requests went out > 1 ms after their scheduled "
                  "time. If linked is late too (it needs a small fraction of a core at this rate), "
                  "the load generator's wake-ups were delayed by other work on the machine and the "
                  "from-schedule latencies measure that; if only the stateless variants are late, "
                  "they did not keep up. Lower --rate or re-run on a quieter machine.")
        print()
        print("| ÷ | CPU/req | bytes/req | p50 | p99 | req/s |")
        print("|---|---|---|---|---|---|")
        for lv in [v for v in variants if v.startswith("linked")]:
            for base in [v for v in ["stateless+redis", "stateless+ringlet"] if v in m]:
                b, l = m[base], m[lv]
                print(f"| {lv} ÷ {base} | {l['cpu_us'] / b['cpu_us']:.2f} | "
                      f"{l['bytes'] / b['bytes']:.3f} | {l['p50_us'] / b['p50_us']:.2f} | "
                      f"{l['p99_us'] / b['p99_us']:.2f} | {l['rps'] / b['rps']:.2f} |")
        print()

    m = results["paced"]
    b = m["stateless+redis"]
    ratios = {}
    fields = [("cpu", "cpu_us"), ("network", "bytes"), ("p50", "p50_us"), ("p99", "p99_us")]
    for prefix, v in [("", "linked"), ("router_", "linked+router"),
                      ("rep_", "linked+router+rep")]:
        if v in m:
            for key, field in fields:
                ratios[f"{prefix}{key}_ratio"] = round(m[v][field] / b[field], 4)
    if "linked+router" in m and "linked+router+rep" in m:
        lr, rr = m["linked+router"], m["linked+router+rep"]
        print(f"replication cost (paced, linked+router+rep vs linked+router): CPU "
              f"{rr['cpu_us'] - lr['cpu_us']:+.1f} us/req ({rr['cpu_us'] / lr['cpu_us']:.2f}x), "
              f"bytes {rr['bytes'] - lr['bytes']:+.0f} B/req, p50 "
              f"{rr['p50_us'] - lr['p50_us']:+.0f} us, p99 {rr['p99_us'] - lr['p99_us']:+.0f} us")
    for key in [k for k in ratios if not k.endswith("p99_ratio")]:
        goal = GOALS[key.split("_")[-2]]
        verdict = "met" if ratios[key] <= goal else "NOT met"
        print(f"goal {key} <= {goal} (LInK Table 1 / §3.1, vs stateless+redis, paced): "
              f"{ratios[key]:.3f} {verdict}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(ratios, f, indent=2)
            f.write("\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
