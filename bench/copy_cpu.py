"""Node CPU per MB of an unlimited resharding copy (issue 12): the Ringlet half of
bench/reshard.py without the reader and without Redis.

`ringlet up --nodes 3 --spares 1` (rep:3), 200,000 x 1 KiB keys loaded through redis-py
(reshard.load), then `ringlet node add 4` and `ringlet node rebalance --rate unlimited`. The
node processes' utime + stime (/proc/PID/stat) around the rebalance, divided by the MB the new
coordinators pulled (INFO reshard_bytes_pulled), beside INFO's handoff MB/s per range. CPU per
MB moves far less with the machine's load than wall-clock MB/s does, which is why it exists
(BENCHMARKS.md "Copy CPU per MB (issue 12, session 18)").

  REPS=3 python3 bench/copy_cpu.py BIN [BIN ...]      # binaries alternated in each round
  PERF=/tmp/perf.data REPS=1 python3 bench/copy_cpu.py BIN   # also perf record the nodes
"""
import os, signal, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reshard
import redis

def procs_of(root):
    out = subprocess.run(["pgrep", "-P", str(root)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]

def cpu(pids):
    t = 0
    for p in pids:
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            t += int(f[11]) + int(f[12])
        except OSError:
            pass
    return t / os.sysconf("SC_CLK_TCK")

def run(binary, keys=200000, size=1024):
    up, base, control, secret = reshard.start_up(binary)
    try:
        reshard.load(base, keys, size)
        admin = ["--control", control, "--cluster-secret-file", secret]
        for _ in range(150):
            r = subprocess.run([binary, "node", "add", "4"] + admin, capture_output=True, text=True)
            if r.returncode == 0:
                break
            time.sleep(0.2)
        time.sleep(1)
        pids = procs_of(up.pid) + [up.pid]
        extra = ["--rate", "unlimited"] if reshard.unlimited_flag(binary) else []
        perf = None
        if os.environ.get("PERF"):
            perf = subprocess.Popen(["perf", "record", "-F", "499", "--call-graph", "dwarf,32768", "-o", os.environ["PERF"],
                                     "-p", ",".join(str(p) for p in procs_of(up.pid))], stderr=subprocess.DEVNULL)
            time.sleep(1)
        c0, t0 = cpu(pids), time.perf_counter()
        subprocess.run([binary, "node", "rebalance"] + admin + extra, check=True, stdout=subprocess.DEVNULL)
        c1, t1 = cpu(pids), time.perf_counter()
        if perf:
            perf.send_signal(signal.SIGINT); perf.wait()
        got = {"reshard_bytes_pulled": 0, "reshard_moves_ms": 0}
        for i in range(4):
            info = redis.Redis(port=base + i).info()
            for f in got:
                got[f] += int(info.get(f, 0))
        mb = got["reshard_bytes_pulled"] / 1e6
        print(f"{binary}: wall {t1-t0:.2f} s, node cpu {c1-c0:.2f} s, copy {mb:.1f} MB, "
              f"{mb/(max(got['reshard_moves_ms'],1)/1000):.1f} MB/s per range, "
              f"cpu per MB {1000*(c1-c0)/max(mb,1):.1f} ms, load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=30)

if __name__ == "__main__":
    reps = int(os.environ.get("REPS", "2"))
    for _ in range(reps):
        for b in sys.argv[1:]:
            run(b)
