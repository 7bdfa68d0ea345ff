#!/usr/bin/env bash
# The main job on a fresh machine: install, start the local stack, check every
# service through the generated stubs, then stop it (use --keep to leave it up).
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
[ "${1:-}" = "--keep" ] && keep=1
bash scripts/setup.sh
OT=.venv/bin/opentinker
$OT up
trap '[ $keep = 1 ] || $OT down' EXIT
.venv/bin/python scripts/smoke_stack.py
if [ $keep = 1 ]; then
  echo "stack left running; stop it with: $OT down"
fi
