#!/usr/bin/env bash
# Create .venv (if missing) and install the pinned stack, the packages (api, env, runtime, SDK) and the services.
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
echo "==> installing tinker-cookbook (requirements/tinker.txt; the cookbook itself without its deps)"
.venv/bin/python -m pip install -q -r requirements/tinker.txt
.venv/bin/python -m pip install -q --no-deps tinker-cookbook==0.6.1
echo "==> installing the API, environment, runtime and SDK packages and the services (editable)"
.venv/bin/python -m pip install -q --no-deps -e packages/api -e packages/env -e packages/runtime \
  -e clients/python \
  -e services/scheduler -e services/trainer -e services/rollout \
  -e services/envhost -e services/coordinator -e services/gateway
if command -v node >/dev/null 2>&1; then
  bash scripts/setup_node.sh   # the Node.js client (clients/node) and its test
else
  echo "==> no Node.js here: skipping clients/node (its test will fail; install Node.js >= 20)"
fi
echo "==> ready: $(.venv/bin/python -c 'import opentinker, torch; print("opentinker", opentinker.__version__, "torch", torch.__version__)')"
