#!/usr/bin/env bash
# The main job on a fresh machine: install, start the local stack, check every service,
# then run SFT warm-up -> GRPO RL -> held-out evaluation on a built-in tiny model
# (examples/math_rl.py) and stop the stack. Options: --keep (leave the stack running),
# anything else is passed to examples/math_rl.py (e.g. --seed 2 --rl-steps 40).
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
args=()
for arg in "$@"; do
  if [ "$arg" = "--keep" ]; then keep=1; else args+=("$arg"); fi
done
bash scripts/setup.sh
OT=.venv/bin/opentinker
$OT up
trap '[ $keep = 1 ] || $OT down' EXIT
.venv/bin/python scripts/smoke_stack.py
echo "dashboard: http://127.0.0.1:8080 (jobs, live reward curves, workers)"
.venv/bin/python examples/math_rl.py --out runs/quickstart "${args[@]}"
echo "learning curve: runs/quickstart/learning_curve.png (CSV beside it), summary: runs/quickstart/summary.json"
[ $keep = 1 ] && echo "stack left running; stop it with: $OT down"
exit 0
