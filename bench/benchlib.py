"""Helpers shared by the benchmark scripts in bench/ (imported, not run)."""
import socket
import time

# Ports handed out: client ports below 22768, so that their admin / cluster-bus ports
# (+10000: `ringlet up`'s admin pages, Redis Cluster's bus) stay below Linux's ephemeral range
# (32768..), where an outgoing connection could take one between the probe and the bind.
PORT_FIRST = 20000
PORT_LAST = 22767
BUS_OFFSET = 10000


def free_base(n, step=37):
    """A base port with n free consecutive ports whose +10000 ports are free as well."""
    for base in range(PORT_FIRST, PORT_LAST - n, step):
        ok = True
        for p in list(range(base, base + n)) + list(range(base + BUS_OFFSET,
                                                          base + BUS_OFFSET + n)):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free ports")


def wait_port(port, timeout=30):
    """Until something accepts on 127.0.0.1:port; SystemExit after `timeout` seconds."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"port {port} not up")


def start_redis_cluster(nodes, masters):
    """`nodes` cluster-enabled redis-servers on free ports, the first `masters` of them made
    a cluster without replicas (the others wait to be added). Returns (base port, processes);
    kill the processes when done."""
    import subprocess
    import tempfile
    base = free_base(nodes)
    d = tempfile.mkdtemp(prefix="bench-redis-cluster-")
    procs = [subprocess.Popen(["redis-server", "--port", str(base + i), "--cluster-enabled",
                               "yes", "--cluster-config-file", f"{d}/n{base + i}.conf",
                               "--save", "", "--appendonly", "no", "--dir", d],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i in range(nodes)]
    try:
        for i in range(nodes):
            wait_port(base + i)
        subprocess.run(["redis-cli", "--cluster", "create"]
                       + [f"127.0.0.1:{base + i}" for i in range(masters)]
                       + ["--cluster-replicas", "0", "--cluster-yes"], check=True,
                       stdout=subprocess.DEVNULL)
        time.sleep(1.0)  # every master has seen the others (cluster_state:ok on each)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return base, procs
