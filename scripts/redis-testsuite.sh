#!/usr/bin/env bash
# Run Redis's own test suite (external mode) against Redis 7, a single Ringlet node and a
# one-node Ringlet cluster, same files, and print ok / err / exception counts per target.
# Nothing of Redis is copied into this repository: point REDIS_SRC at a checkout of
# redis/redis at tag 7.0.15 (its `runtest` and `tests/`), e.g.
#   git clone --branch 7.0.15 https://github.com/redis/redis /tmp/redis-src
#   REDIS_SRC=/tmp/redis-src scripts/redis-testsuite.sh
# Needs tclsh (apt: tcl), redis-server, and a release build of ringlet.
#
# FILES overrides the test files (default: unit/type/string unit/keyspace unit/type/incr
# unit/expire). Tests tagged needs:debug, needs:repl, needs:config-maxmemory etc. are skipped
# by the suite itself in external mode.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${REDIS_SRC:?set REDIS_SRC to a redis/redis 7.0.15 checkout}"
FILES=${FILES:-"unit/type/string unit/keyspace unit/type/incr unit/expire"}
RINGLET=${RINGLET:-target/release/ringlet}
[ -x "$RINGLET" ] || cargo build --release -q -p ringlet-cli
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }

run_suite() { # name port
  local name=$1 p=$2 f log
  for f in $FILES; do
    log=$(mktemp)
    (cd "$REDIS_SRC" && timeout 600 ./runtest --host 127.0.0.1 --port "$p" --single "$f" --singledb --durable \
        --tags -needs:debug --tags -needs:repl --tags -needs:save --tags -needs:config-maxmemory \
        2>&1 | sed 's/\x1b\[[0-9;]*m//g' >"$log")
    local ok err exc
    ok=$(grep -c '\[ok\]' "$log")
    err=$(grep -c '\[err\]' "$log")
    exc=$(grep -c '\[exception\]' "$log")
    printf '%-22s %-18s ok %4d  err %4d  exception %d\n' "$name" "$f" "$ok" "$err" "$exc"
    grep -E '\[err\]|\[exception\]' "$log" | head -${SHOW:-0} | sed 's/^/    /'
    rm -f "$log"
  done
}

P=$(port); redis-server --port "$P" --save '' --appendonly no >/dev/null 2>&1 & RP=$!
wait_port "$P" && run_suite "redis-server 7" "$P"; kill $RP; wait $RP 2>/dev/null

P=$(port); "$RINGLET" server --port "$P" --memory-mb 512 >/dev/null 2>&1 & NP=$!
wait_port "$P" && run_suite "ringlet server" "$P"; kill $NP; wait $NP 2>/dev/null

P=$(port); "$RINGLET" up --nodes 1 --port "$P" --default-memgest none --pg-data 1 --pg-redundant 0 \
    --memory-mb 512 --no-admin >/dev/null 2>&1 & UP=$!
wait_port "$P" && sleep 1 && run_suite "ringlet up (1-node cluster)" "$P"; kill $UP; wait $UP 2>/dev/null
