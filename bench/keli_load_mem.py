#!/usr/bin/env python3
"""Memory a node holds after `ringlet load` of KELI's chunked graph (bench/keli_bfs.py's
R-MAT graph and mapping), for one or more ringlet binaries: the load's summary, DBSIZE,
the node's RSS and `INFO memory`'s used_memory lines. One fresh `ringlet server --threads 1`
per binary.

Usage: bench/keli_load_mem.py --ringlet PATH [--ringlet PATH ...] [--vertices 200000]
       [--edges 4400000] [--chunk 100]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keli_bfs as kb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringlet", action="append", required=True)
    ap.add_argument("--vertices", type=int, default=200000)
    ap.add_argument("--edges", type=int, default=4400000)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    indptr, dst = kb.rmat(a.vertices, a.edges, a.seed)
    tmp = tempfile.mkdtemp(prefix="keli-mem-")
    try:
        _, vcsv, ecsv, mapping = kb.write_data(tmp, indptr, dst, a.chunk)
        memory_mb = max(1024, 256 + a.edges * 96 // (1 << 20))
        for b in a.ringlet:
            port = kb.free_port()
            srv = subprocess.Popen([b, "server", "--port", str(port), "--threads", "1",
                                    "--memory-mb", str(memory_mb)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                kb.wait_ping(port)
                p = subprocess.run([b, "load", "--port", str(port), "--mapping", mapping,
                                    "--csv", f"vertices={vcsv}", "--csv", f"edges={ecsv}"],
                                   capture_output=True, text=True, check=True)
                cli = ["redis-cli", "-p", str(port)]
                info = subprocess.run(cli + ["INFO", "memory"], capture_output=True,
                                      text=True).stdout
                dbsize = subprocess.run(cli + ["DBSIZE"], capture_output=True,
                                        text=True).stdout.strip()
                with open(f"/proc/{srv.pid}/status") as f:
                    rss = f.read().split("VmRSS:")[1].split("\n")[0].strip()
                print(f"{b}: {p.stdout.strip()}; dbsize {dbsize}, rss {rss}")
                for line in info.splitlines():
                    if line.startswith("used_memory") and "human" not in line:
                        print("  " + line.strip())
            finally:
                srv.terminate()
                srv.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
