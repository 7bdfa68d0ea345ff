#!/usr/bin/env bash
# Install what the dashboard's browser test needs: Debian's chromium and chromium-driver (apt,
# only when missing) and Selenium (pip, pinned in tests/dashboard/requirements-browser.txt) into
# .venv. Idempotent: a second run only checks. Usage: bash scripts/setup_browser.sh
# (after scripts/setup.sh). Machines without a browser on purpose: OPENTINKER_SKIP_BROWSER=1.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "setup_browser: apt needs root (or sudo)" >&2; exit 1; }
    sudo=sudo
  fi
  echo "==> browser: installing chromium and chromium-driver (apt)"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup_browser: no .venv; run scripts/setup.sh first" >&2
  exit 1
fi
if [ -x .venv/bin/uv ]; then  # setup.sh installed uv: the same sources as pip, faster
  mapfile -t sources < <(.venv/bin/python scripts/uv_index_args.py)
  .venv/bin/uv pip install --python .venv/bin/python -q "${sources[@]}" -r tests/dashboard/requirements-browser.txt
else
  .venv/bin/python -m pip install -q -r tests/dashboard/requirements-browser.txt
fi
echo "==> browser: ready: $(chromium --version 2>/dev/null), $(chromedriver --version | cut -d' ' -f1-2)," \
     "selenium $(.venv/bin/python -c 'import selenium; print(selenium.__version__)')"
