#!/usr/bin/env bash
# The full Jepsen-style fault run (issue 10): node processes in network namespaces, register
# and counter clients, a nemesis of SIGKILL / SIGSTOP / nft partitions one at a time, then the
# linearizability and counter checks (crates/cluster-tests/tests/nemesis.rs). Needs root and nft.
#
#   scripts/nemesis.sh                 # 10 minutes
#   RINGLET_NEMESIS_SECS=120 scripts/nemesis.sh
#   RINGLET_NEMESIS_SEED=12345 scripts/nemesis.sh   # replay a fault sequence
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGLET_REQUIRE_NETNS=1
exec cargo test --release -p ringlet-cluster-tests --test nemesis nemesis_full -- --ignored --nocapture
