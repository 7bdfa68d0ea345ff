#!/usr/bin/env bash
# Create .venv (if missing) and install the pinned stack, the SDK and the five services.
# Idempotent: a second run only checks. Usage: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
echo "==> installing pinned dependencies (requirements/dev.txt)"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements/dev.txt
echo "==> installing opentinker and the services (editable)"
.venv/bin/python -m pip install -q --no-deps -e clients/python \
  -e services/scheduler -e services/trainer -e services/rollout \
  -e services/envhost -e services/coordinator
echo "==> ready: $(.venv/bin/python -c 'import opentinker, torch; print("opentinker", opentinker.__version__, "torch", torch.__version__)')"
