#!/usr/bin/env bash
# The README's test command: sets up what the tests need, then runs every check CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec ./scripts/ci.sh
