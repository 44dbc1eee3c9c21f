#!/usr/bin/env bash
# The README's run command: builds Ringlet and runs its main job, a local cluster on the
# embedded control plane, in the foreground (Ctrl-C stops it). Extra arguments go to `ringlet up`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "up: cargo (Rust) is required; install it with rustup" >&2; exit 1; }
cargo build --release -q -p ringlet-cli --bin ringlet
exec ./target/release/ringlet up "$@"
