#!/usr/bin/env bash
# Builds the `ringlet` Python package (PyO3 + maturin, abi3) into a venv and runs its tests
# (tests/test_*.py) against a real cluster and a real shared-memory node started from
# RINGLET_BIN.
#
#   RINGLET_BIN=/path/to/ringlet crates/python/build_and_test.sh [pytest args...]
#
# RINGLET_BIN defaults to target/debug/ringlet of this checkout (built here if missing:
# `cargo build -p ringlet-cli --bin ringlet`, honouring CARGO_TARGET_DIR). Needs a Rust
# toolchain (rustup) and, on Debian, apt for python3 / python3-venv / python3-pip when they
# are missing. The venv is crates/python/.venv (gitignored; RINGLET_PY_VENV overrides it);
# maturin and pytest come from PyPI into it. Any failure exits non-zero.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
PYTHON="${PYTHON:-python3}"

# 1. Python with venv and pip (Debian splits them into python3-venv and python3-pip).
if ! command -v "$PYTHON" >/dev/null || ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "== apt-get install python3 python3-venv python3-pip"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
  PYTHON=python3
fi

# openssl makes the throwaway CA of the TLS test (Debian installs it by default; not always).
if ! command -v openssl >/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssl >/dev/null
fi

# 2. The venv, with maturin, pytest and redis-py.
venv="${RINGLET_PY_VENV:-$here/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "== python venv at $venv"
  "$PYTHON" -m venv "$venv"
fi
py="$venv/bin/python"
# redis-py writes through the RESP port in test_shm.py (and is the benchmark's baseline).
"$py" -c 'import maturin, pytest, redis' 2>/dev/null \
  || "$py" -m pip install -q 'maturin>=1.16,<2' pytest redis

# 3. The cluster binary the tests start.
if [ -z "${RINGLET_BIN:-}" ]; then
  RINGLET_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/ringlet"
  if [ ! -x "$RINGLET_BIN" ]; then
    echo "== cargo build -p ringlet-cli --bin ringlet"
    cargo build -p ringlet-cli --bin ringlet
  fi
fi
[ -x "$RINGLET_BIN" ] || { echo "RINGLET_BIN=$RINGLET_BIN is not an executable" >&2; exit 1; }
export RINGLET_BIN

# 4. Build the wheel and install it (not editable: the tests import the installed package).
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
echo "== maturin build (crates/python)"
# The dev profile by default: it shares the workspace's debug artifacts (CI builds them
# anyway), where a cold release build of the wheel took 4-5 minutes on 2 cores.
# RINGLET_PY_RELEASE=1 builds an optimised wheel (benchmarks).
profile=()
[ "${RINGLET_PY_RELEASE:-0}" = 1 ] && profile=(--release)
"$venv/bin/maturin" build "${profile[@]}" --quiet --manifest-path "$here/Cargo.toml" --out "$wheels"
"$py" -m pip install -q --force-reinstall --no-deps "$wheels"/ringlet-*.whl

# 5. The tests, from outside the source tree so `import ringlet` finds the installed wheel.
echo "== pytest crates/python/tests (RINGLET_BIN=$RINGLET_BIN)"
cd "$here/tests"
# An exception Python could not raise (e.g. in a finaliser) fails the run, not a warning.
exec "$py" -m pytest -q -p no:cacheprovider -W error::pytest.PytestUnraisableExceptionWarning "$@" .
