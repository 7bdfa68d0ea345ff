#!/usr/bin/env bash
# The test command (the README's and CI's): set up, then run every test, tier by tier
# (tests/_tiers.py): the fast tier first (unit tests, not slow: one process each, on every core),
# then the rest (slow unit tests, stacks, chaos), one after another by default: on a 2-core
# machine the rest is CPU-bound: 3 workers were 8% faster and made stacks miss their deadlines.
# OPENTINKER_TEST_WORKERS=N runs the rest on N workers, each shared stack on one of them.
# Extra arguments go to both pytest runs, e.g. bash scripts/test.sh -k stack
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode caches on: with PYTHONDONTWRITEBYTECODE set (as on our CI machines) every pytest process
# rewrote and compiled all 339 test modules again (collection: 36 s of CPU instead of 16 s) and
# every service process compiled this repository's modules from source.
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh
bash scripts/setup_browser.sh   # chromium + chromedriver for the dashboard's browser test
cores=$(nproc 2>/dev/null || echo 2)
workers=${OPENTINKER_TEST_WORKERS:-1}

run_tier() {  # a tier that selects nothing (-k, a path) is not a failure: pytest's exit code 5
  local status=0
  .venv/bin/python -m pytest "$@" || status=$?
  if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
    exit "$status"
  fi
}

echo "==> the fast tier: unit tests, not slow ($cores workers)"
run_tier -m "unit and not slow" -n "$cores" "$@"
echo "==> the rest: slow unit tests, stacks, chaos ($workers worker(s))"
if [ "$workers" -gt 1 ]; then
  run_tier -m "not (unit and not slow)" -n "$workers" --dist loadgroup "$@"
else
  run_tier -m "not (unit and not slow)" "$@"
fi
