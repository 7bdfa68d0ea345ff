#!/usr/bin/env bash
# The test command (the README's and CI's): set up, then run every test.
# Extra arguments go to pytest, e.g. bash scripts/test.sh -k stack
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_browser.sh   # chromium + chromedriver for the dashboard's browser test
exec .venv/bin/python -m pytest "$@"
