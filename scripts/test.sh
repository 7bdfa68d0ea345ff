#!/usr/bin/env bash
# The test command (the README's and CI's): set up, then run every test.
# Extra arguments go to pytest, e.g. bash scripts/test.sh -k stack
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
