#!/usr/bin/env bash
# Cost of the ACL check (docs/design/acl.md): redis-benchmark GET/SET against Redis 7 and
# `ringlet server`, each as the default user (unrestricted: the check is one branch) and as
# a restricted user (`~key:* +get +set`: command bit + key pattern per request), in the same
# run, ROUNDS rounds; prints every figure and the medians.
#
#   cargo build --release -p ringlet-cli --bin ringlet
#   ROUNDS=3 N=100000 bench/acl.sh
set -euo pipefail
BIN=${RINGLET_BIN:-target/release/ringlet}
ROUNDS=${ROUNDS:-3}
N=${N:-100000}
C=${C:-50}
rport=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
redis-server --port "$rport" --save '' --appendonly no --bind 127.0.0.1 >/dev/null 2>&1 &
rpid=$!
out=$(mktemp)
"$BIN" server --port 0 --threads 2 --memory-mb 256 >"$out" 2>/dev/null &
gpid=$!
trap 'kill $rpid $gpid 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$out" && break; sleep 0.05; done
gport=$(sed -n 's/^ringlet: listening on .*:\([0-9]*\)$/\1/p' "$out")
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
for p in "$rport" "$gport"; do
  redis-cli -p "$p" ACL SETUSER bench on '>bpw' '~key:*' +get +set >/dev/null
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
run() { # port, label, extra args...
  local p=$1 label=$2; shift 2
  redis-benchmark -p "$p" -t get,set -n "$N" -c "$C" --csv "$@" 2>/dev/null |
    awk -F, -v l="$label" 'NR>1 {gsub(/"/,""); print l, $1, $2}'
}
res=$(mktemp)
for r in $(seq "$ROUNDS"); do
  run "$rport" redis-default >>"$res"
  run "$rport" redis-acl --user bench -a bpw >>"$res"
  run "$gport" ringlet-default >>"$res"
  run "$gport" ringlet-acl --user bench -a bpw >>"$res"
done
cat "$res"
echo "medians (requests/s):"
python3 - "$res" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {}
for who in sorted({r[0] for r in rows}):
    for op in ("SET", "GET"):
        v = [float(r[2]) for r in rows if r[0] == who and r[1] == op]
        med[(who, op)] = statistics.median(v)
        print(f"  {who:16} {op}: {med[(who, op)]:.0f}  (n={len(v)})")
for op in ("SET", "GET"):
    print(f"  {op}: ringlet/redis default {med[('ringlet-default', op)] / med[('redis-default', op)]:.2f}x, "
          f"restricted {med[('ringlet-acl', op)] / med[('redis-acl', op)]:.2f}x; "
          f"restricted/default ringlet {med[('ringlet-acl', op)] / med[('ringlet-default', op)]:.2f}, "
          f"redis {med[('redis-acl', op)] / med[('redis-default', op)]:.2f}")
PY
rm -f "$res"
