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
# uv installs the same pins from the same sources as pip (scripts/uv_index_args.py reads pip's
# configuration), about 5x faster on a fresh machine; pip does it when uv cannot be installed.
.venv/bin/python -m pip install -q --upgrade pip
if .venv/bin/python -m pip install -q "uv==0.13.9" "setuptools>=68" wheel; then
  mapfile -t sources < <(.venv/bin/python scripts/uv_index_args.py)
  # --compile-bytecode: uv writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set (CI)
  # no process ever does, so every service start compiled torch and transformers from source again
  # (the Rollout's imports: 24.5 s instead of 8.8 s on a 2-core machine).
  install() { .venv/bin/uv pip install --python .venv/bin/python -q --compile-bytecode "${sources[@]}" "$@"; }
  editable() { install --no-build-isolation "$@"; }
else
  echo "==> uv not available: installing with pip"
  install() { .venv/bin/python -m pip install -q "$@"; }
  editable() { install "$@"; }
fi
echo "==> installing pinned dependencies (requirements/dev.txt)"
install -r requirements/dev.txt
echo "==> installing tinker-cookbook (requirements/tinker.txt; the cookbook itself without its deps)"
install -r requirements/tinker.txt
install --no-deps tinker-cookbook==0.6.1
echo "==> installing the API, environment, runtime and SDK packages and the services (editable)"
editable --no-deps -e packages/api -e packages/env -e packages/runtime -e clients/python \
  -e services/scheduler -e services/trainer -e services/rollout \
  -e services/envhost -e services/coordinator -e services/gateway
echo "==> compiling the repository's own Python (the packages, harness, bench)"
.venv/bin/python -m compileall -q -j 0 packages clients/python services harness bench scripts >/dev/null
if command -v node >/dev/null 2>&1; then
  bash scripts/setup_node.sh   # the Node.js client (clients/node) and its test
else
  echo "==> no Node.js here: skipping clients/node (its test will fail; install Node.js >= 20)"
fi
echo "==> ready: $(.venv/bin/python -c 'import opentinker, torch; print("opentinker", opentinker.__version__, "torch", torch.__version__)')"
