#!/usr/bin/env bash
# The README's run command: builds Ringlet and runs its main job, a local cluster on the
# embedded control plane, in the foreground (Ctrl-C stops it). With no arguments: 3 nodes and 1
# warm spare on ports 7379..7382 with rep:3 as the default memgest; any arguments replace these
# and go to `ringlet up` as they are (e.g. `./scripts/up.sh --nodes 1` for a single node).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "up: cargo (Rust) is required; install it with rustup" >&2; exit 1; }
# etcd-client's build script needs protoc; without it, build without the etcd backend (the
# local cluster does not use it; `ringlet server --etcd` then says how to get it).
features=()
if ! command -v protoc >/dev/null && [ ! -x "${PROTOC:-}" ]; then
  echo "up: protoc not found: building without the etcd backend (not needed by ringlet up)" >&2
  features=(--no-default-features)
fi
cargo build --release -q -p ringlet-cli --bin ringlet "${features[@]}"
if [ $# -eq 0 ]; then
  set -- --nodes 3 --spares 1 --default-memgest rep:3
fi
exec ./target/release/ringlet up "$@"
