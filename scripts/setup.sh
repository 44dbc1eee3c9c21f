#!/usr/bin/env bash
# Installs what Ringlet's tests and benchmarks compare against or drive: Redis 7 and memcached
# (differential tests and benchmarks), etcd 3.4 (control-plane backend), nftables/iproute2
# (partition tests), redis-py and pytest (Python differential tests), headless Chromium (the
# status page test).
# Idempotent: skips what is already installed.
set -euo pipefail
need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v memcached >/dev/null || need_apt+=(memcached)
# etcd 3.4 (the etcd control-plane backend's tests run a real etcd) and protoc (etcd-client's
# build script compiles etcd's protobufs); nft and iproute2 for the network-namespace partition
# tests.
command -v etcd >/dev/null || need_apt+=(etcd-server)
command -v etcdctl >/dev/null || need_apt+=(etcd-client)
command -v protoc >/dev/null || need_apt+=(protobuf-compiler)
command -v nft >/dev/null || need_apt+=(nftables)
command -v ip >/dev/null || need_apt+=(iproute2)
# Headless Chromium: the status page test loads the admin page in a real browser
# (crates/cli/tests/status_page.rs).
command -v chromium >/dev/null || need_apt+=(chromium)
# PostgreSQL: `ringlet load --postgres` is tested against a real server (initdb/pg_ctl in a
# temp dir, crates/cli/tests/load.rs); the package's own cluster is stopped below.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# The Debian package starts a system redis on 6379 and memcached on 11211; tests use their own
# ports, so those are harmless, but stop them to keep the machine quiet for benchmarks.
(service redis-server stop || true) >/dev/null 2>&1
(service postgresql stop || true) >/dev/null 2>&1
(service memcached stop || true) >/dev/null 2>&1
(service etcd stop || true) >/dev/null 2>&1
python3 -c 'import redis, pytest' 2>/dev/null || python3 -m pip install -q redis pytest
command -v cargo >/dev/null || { echo "setup: cargo (Rust) is required; install it with rustup" >&2; exit 1; }
