#!/usr/bin/env python3
"""Generate `src/cmd/table_data.rs` from a real Redis 7 server.

Why generated: `COMMAND INFO` / `COMMAND DOCS` replies are large nested structures (flags,
ACL categories, key specs, argument docs) that redis-cli and cluster-aware clients read. Copying
them by hand would drift; asking the reference server keeps them exact for the commands we
implement. Run it against `redis-server` 7.x:

    redis-server --port 16399 --save '' --appendonly no --daemonize yes
    python3 crates/command/tools/gen_command_table.py 16399 > crates/command/src/table_data.rs

The reply is read raw over RESP3 (HELLO 3) so simple strings, bulk strings, sets and maps keep
their exact types; the output is Rust code building `Reply` values.
"""
import socket
import sys

# Commands Ringlet implements, with the subcommands it implements (container commands).
COMMANDS = {
    "ping": None, "echo": None, "hello": None, "auth": None, "quit": None, "select": None,
    "client": ["setname", "getname", "id", "info", "list", "help"],
    "command": ["count", "docs", "info", "getkeys", "list", "help"],
    "config": ["get", "set", "resetstat", "help"],
    "info": None, "dbsize": None, "flushall": None, "flushdb": None,
    "get": None, "set": None, "setnx": None, "setex": None, "psetex": None, "getset": None,
    "getdel": None, "getex": None, "mget": None, "mset": None, "msetnx": None,
    "del": None, "unlink": None, "exists": None, "type": None,
    "expire": None, "pexpire": None, "expireat": None, "pexpireat": None,
    "ttl": None, "pttl": None, "persist": None,
    "incr": None, "decr": None, "incrby": None, "decrby": None, "incrbyfloat": None,
    "append": None, "strlen": None, "getrange": None, "setrange": None,
    "keys": None, "scan": None, "randomkey": None,
    "touch": None, "rename": None, "renamenx": None, "copy": None, "time": None,
    # WAIT: the copies that hold the connection's last write (cluster mode); 0 on a single node.
    "wait": None,
    # ROLE: every Ringlet node is the master of what it coordinates (cluster: its peers as replicas).
    "role": None,
    "substr": None, "object": ["encoding", "refcount", "help"],
    "setbit": None, "getbit": None, "bitcount": None, "bitpos": None,
    "expiretime": None, "pexpiretime": None, "lcs": None,
    # No scripting: FUNCTION FLUSH and LIST answer for an always-empty library set (Redis's
    # test harness flushes functions before every file); the rest is unknown here.
    "function": ["flush", "list", "help"],
    # Transactions without WATCH (docs/design/redis-test-suite.md).
    "multi": None, "exec": None, "discard": None,
    # Records (KELI) are hashes to Redis clients (crates/record).
    "hset": None, "hsetnx": None, "hmset": None, "hget": None, "hmget": None,
    "hgetall": None, "hdel": None, "hlen": None, "hexists": None, "hkeys": None,
    "hvals": None, "hincrby": None, "hincrbyfloat": None, "hstrlen": None,
    "hscan": None, "hrandfield": None,
    # Redis Cluster's commands, served in cluster mode (the single node refuses them as a
    # Redis without cluster support does).
    "cluster": ["slots", "shards", "nodes", "keyslot", "info", "myid", "help",
                "setslot", "getkeysinslot", "countkeysinslot"],
    # Redis Cluster resharding (redis-cli --cluster reshard): a whole-slot move inside the
    # cluster (docs/design/cluster-resharding.md); cluster mode only.
    "migrate": None,
    "readonly": None, "readwrite": None,
    "reset": None,
    # ACL users (docs/design/acl.md). LOAD, LOG and SAVE are in the table so that they are
    # refused with Ringlet's reason instead of "unknown subcommand".
    "acl": ["cat", "deluser", "dryrun", "genpass", "getuser", "list", "load", "log", "save",
            "setuser", "users", "whoami", "help"],
    # Introspection clients expect (docs/design/commands.md): MEMORY USAGE from the engine's
    # accounting, MEMORY STATS a subset, DOCTOR refused; SLOWLOG a bounded ring per node;
    # LATENCY over the same samples (event "command").
    "memory": ["usage", "stats", "doctor", "help"],
    "slowlog": ["get", "len", "reset", "help"],
    "latency": ["latest", "history", "reset", "doctor", "help"],
    # Redis's serialized values, for strings and records as hashes (docs/design/dump-restore.md):
    # what MIGRATE from a Redis, `redis-cli --cluster import` and DUMP/RESTORE tools send.
    "dump": None, "restore": None, "restore-asking": None,
}


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def send(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.s.recv(65536)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self.buf += self.s.recv(65536)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return ("simple", rest)
        if t == b"-":
            raise RuntimeError(rest)
        if t == b":":
            return ("int", int(rest))
        if t == b"$":
            return ("bulk", self._exact(int(rest)))
        if t == b"_":
            return ("null", None)
        if t in (b"*", b"~"):
            items = [self.read() for _ in range(int(rest))]
            return ("array" if t == b"*" else "set", items)
        if t == b"%":
            items = [(self.read(), self.read()) for _ in range(int(rest))]
            return ("map", items)
        raise RuntimeError("unexpected reply type %r" % line)


def lit(b):
    return '"' + b.decode().replace("\\", "\\\\").replace('"', '\\"') + '"'


def emit(v):
    t, x = v
    if t == "simple":
        return "s(%s)" % lit(x)
    if t == "bulk":
        return "b(%s)" % lit(x)
    if t == "int":
        return "i(%d)" % x
    if t == "null":
        return "Reply::Nil"
    if t == "array":
        return "a(vec![%s])" % ", ".join(emit(i) for i in x)
    if t == "set":
        return "st(vec![%s])" % ", ".join(emit(i) for i in x)
    if t == "map":
        return "m(vec![%s])" % ", ".join("(%s, %s)" % (emit(k), emit(v)) for k, v in x)
    raise RuntimeError(t)


def keep_subcommands(v, wanted, parent):
    """Drop the subcommands Ringlet does not implement from a COMMAND INFO entry."""
    t, items = v
    subs = items[9]
    kept = [s for s in subs[1] if s[1][0][1].decode().split("|", 1)[1] in wanted]
    items = list(items)
    items[9] = ("array", kept)
    return (t, items)


def keep_doc_subcommands(doc, wanted):
    t, pairs = doc
    out = []
    for k, v in pairs:
        if k[1] == b"subcommands":
            v = ("map", [(sk, sv) for sk, sv in v[1] if sk[1].decode().split("|", 1)[1] in wanted])
        out.append((k, v))
    return (t, out)


def main():
    port = int(sys.argv[1])
    c = Conn(port)
    c.send("HELLO", "3")
    version = dict((k[1], v[1]) for k, v in c.send("HELLO", "3")[1])[b"version"].decode()
    print("// @generated by crates/command/tools/gen_command_table.py from redis-server %s." % version)
    print("// Do not edit by hand: re-run the generator (see its docstring).")
    print("use crate::table_data_helpers::*;")
    print("use crate::reply::Reply;")
    print()
    print("/// Redis version the data below was read from.")
    print('pub const SOURCE_REDIS_VERSION: &str = "%s";' % version)
    print()
    print("/// `(name, COMMAND INFO entry, COMMAND DOCS entry)` for every implemented command.")
    print("pub fn commands() -> Vec<(&'static str, Reply, Reply)> {")
    print("    vec![")
    for name, subs in COMMANDS.items():
        info = c.send("COMMAND", "INFO", name)[1][0]
        docs = c.send("COMMAND", "DOCS", name)[1]
        assert len(docs) == 1, name
        doc = docs[0][1]
        if subs is not None:
            info = keep_subcommands(info, set(subs), name)
            doc = keep_doc_subcommands(doc, set(subs))
        print("        (%s, %s, %s)," % (lit(name.encode()), emit(info), emit(doc)))
    print("    ]")
    print("}")


if __name__ == "__main__":
    main()
