#!/usr/bin/env bash
# Run Redis's own test suite (external mode) against Redis 7, a single Ringlet node (`ringlet
# server`, and `ringlet up --nodes 1`, which starts the same single node) and a one-node
# Ringlet cluster (`ringlet up --nodes 1 --default-memgest none`: the cluster front), the same
# files and flags against each, and print passed / failed per file per target plus a
# machine-readable summary (docs/design/redis-test-suite.md).
#
# Nothing of Redis is copied into this repository: point REDIS_SRC at a checkout of
# redis/redis at the tag of the installed redis-server (7.0.15 here), e.g.
#   git clone --depth 1 --branch 7.0.15 https://github.com/redis/redis /tmp/redis-src
#   REDIS_SRC=/tmp/redis-src scripts/redis-suite.sh
# Needs tclsh (apt: tcl), redis-server and redis-cli (apt: redis), python3 (free ports).
#
# Environment:
#   REDIS_SRC  the checkout (required)
#   RINGLET    the binary (default: target/debug/ringlet, built with `cargo build -p ringlet-cli`)
#   TARGETS    any of: redis server up cluster (default: all four)
#   FILES      test files (default: the four of issue 11, unit/type/incr, unit/type/hash, unit/dump)
#   OUT        where logs and per-test lists go (default: target/redis-suite)
#   SHOW       print up to SHOW failing test names per file (default 0)
#
# Each file runs in its own tclsh process, so a file that aborts with an exception stops only
# itself: its figure says how many tests ran before the abort. Tests tagged needs:debug,
# needs:repl, needs:save and needs:config-maxmemory are skipped on every target (DEBUG,
# replication, persistence and maxmemory policies are not what these files measure, and
# `--tags` is the suite's own switch for it); the suite itself skips external:skip and
# singledb:skip tests in this mode.
#
# Output: one line per target and file, then lines
#   RESULT target=T file=F passed=N failed=N exception=0|1
# and $OUT/summary.json; $OUT/<target>/<file>.{log,ok,err} keep the run's log and the names
# of the passed and failed tests (diff two targets' .ok files to see what differs).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${REDIS_SRC:?set REDIS_SRC to a redis/redis checkout at the installed redis-server tag}"
[ -f "$REDIS_SRC/tests/test_helper.tcl" ] || { echo "no tests/test_helper.tcl in $REDIS_SRC" >&2; exit 2; }
for t in tclsh redis-server redis-cli python3; do
  command -v "$t" >/dev/null || { echo "redis-suite: $t is missing" >&2; exit 2; }
done
TARGETS=${TARGETS:-"redis server up cluster"}
FILES=${FILES:-"unit/type/string unit/keyspace unit/expire unit/protocol unit/type/incr unit/type/hash unit/dump"}
OUT=${OUT:-target/redis-suite}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
if [ -z "${RINGLET:-}" ]; then
  RINGLET=target/debug/ringlet
  case " $TARGETS " in *" server "* | *" up "* | *" cluster "*)
    cargo build -j 2 -q -p ringlet-cli || exit 2 ;;
  esac
fi
RINGLET=$(realpath "$RINGLET")

# Every process this script starts is the leader of its own process group (setsid), so the
# trap can stop it and whatever it spawned (`up` starts one child per node) by group id.
PGIDS=()
stop_all() {
  local g
  for g in "${PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
  for g in "${PGIDS[@]}"; do
    for _ in $(seq 50); do kill -0 -- "-$g" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$g" 2>/dev/null
  done
  PGIDS=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# A free base port below the ephemeral range (32768..), with `span` free ports from it: a
# cluster's node binds its client port and the control plane the next one, and an outgoing
# connection or a port-0 listener can never take a port below 32768 between probe and bind.
free_port() {
  python3 - "$1" <<'EOF'
import random, socket, sys
span = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(20000, 32000 - span)
    socks = []
    try:
        for p in range(base, base + span):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
    except OSError:
        continue
    finally:
        for s in socks: s.close()
    print(base); break
else:
    sys.exit("no free port")
EOF
}

# Ready when a write succeeds: a cluster answers PING before its slots are assigned.
wait_ready() {
  local r
  for _ in $(seq 300); do
    r=$(redis-cli -p "$1" set __redis_suite_ready 1 2>/dev/null)
    [ "$r" = OK ] && { redis-cli -p "$1" del __redis_suite_ready >/dev/null; return 0; }
    sleep 0.1
  done
  return 1
}

start_target() { # name port -> sets PGIDS
  local name=$1 p=$2 log="$OUT/$1/server.log"
  mkdir -p "$OUT/$name"
  case $name in
    # The suite's own default.conf enables DEBUG; the same here so Redis's figure is what
    # Redis passes under its own test configuration.
    redis) setsid redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
             --enable-debug-command yes >"$log" 2>&1 & ;;
    server) setsid "$RINGLET" server --port "$p" --memory-mb 512 >"$log" 2>&1 & ;;
    # `up --nodes 1` alone starts the single node (main.rs: a cluster needs more nodes, a
    # spare, a default memgest or a placement shape).
    up) setsid "$RINGLET" up --nodes 1 --port "$p" --memory-mb 512 --no-admin >"$log" 2>&1 & ;;
    # A default memgest makes it a one-node cluster (control plane on p+1): the cluster front.
    cluster) setsid "$RINGLET" up --nodes 1 --port "$p" --default-memgest none --pg-data 1 \
          --pg-redundant 0 --memory-mb 512 --no-admin >"$log" 2>&1 & ;;
    *) echo "unknown target $name" >&2; return 1 ;;
  esac
  PGIDS+=($!)
  wait_ready "$p" || { echo "redis-suite: $name did not start (see $log)" >&2; return 1; }
}

SUMMARY=()
run_target() { # name
  local name=$1 p f base log ok err exc
  p=$(free_port 2) || return 1
  start_target "$name" "$p" || { stop_all; return 1; }
  for f in $FILES; do
    base="$OUT/$name/${f//\//_}"
    log="$base.log"
    # --timeout: the suite's own watchdog (seconds without progress); `timeout` bounds a file.
    (cd "$REDIS_SRC" && timeout 1200 tclsh tests/test_helper.tcl --host 127.0.0.1 --port "$p" \
        --singledb --durable --single "$f" --timeout 300 \
        --tags -needs:debug --tags -needs:repl --tags -needs:save --tags -needs:config-maxmemory \
        2>&1 | sed 's/\x1b\[[0-9;]*m//g' >"$log")
    sed -n 's/^\[ok\]: \(.*\) ([0-9]* ms)$/\1/p' "$log" >"$base.ok"
    sed -n 's/^\[err\]: \(.*\) in tests\/.*$/\1/p' "$log" >"$base.err"
    ok=$(wc -l <"$base.ok")
    err=$(grep -c '^\[err\]' "$log")
    exc=0
    grep -q '^\[exception\]\|^\[TIMEOUT\]\|^Killing' "$log" && exc=1
    # A file is whole when the suite reported it done ("[1/1 done]: ...").
    grep -q '^\[[0-9]*/[0-9]* done\]' "$log" || exc=1
    printf '%-8s %-18s passed %4d  failed %4d%s\n' "$name" "$f" "$ok" "$err" \
      "$([ "$exc" = 1 ] && echo '  (aborted: exception)')"
    [ "${SHOW:-0}" -gt 0 ] && head -n "$SHOW" "$base.err" | sed 's/^/    /'
    SUMMARY+=("$name $f $ok $err $exc")
    redis-cli -p "$p" ping >/dev/null 2>&1 || {
      echo "redis-suite: $name stopped answering after $f (see $OUT/$name/server.log)" >&2
      break
    }
  done
  stop_all
}

for t in $TARGETS; do run_target "$t"; done

echo
json='['
sep=''
for s in "${SUMMARY[@]}"; do
  read -r name f ok err exc <<<"$s"
  echo "RESULT target=$name file=$f passed=$ok failed=$err exception=$exc"
  json+=$(printf '%s\n  {"target": "%s", "file": "%s", "passed": %d, "failed": %d, "aborted": %s}' \
    "$sep" "$name" "$f" "$ok" "$err" "$([ "$exc" = 1 ] && echo true || echo false)")
  sep=','
done
printf '%s\n]\n' "$json" >"$OUT/summary.json"
echo "summary: $OUT/summary.json"
