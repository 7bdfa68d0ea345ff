#!/usr/bin/env bash
# Install the Node.js client's pinned dependencies (clients/node/node_modules) from its
# package-lock.json with `npm ci`. Idempotent and quick: when node_modules was installed from the
# same lock file (a stamp holds the lock's hash) it only checks. Usage: bash scripts/setup_node.sh
set -euo pipefail
cd "$(dirname "$0")/../clients/node"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup_node: node and npm are needed (Node.js >= 20)" >&2
  exit 1
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "setup_node: Node.js >= 20 is needed, found $(node --version)" >&2
  exit 1
fi
stamp=node_modules/.opentinker-lock.sha256
wanted=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  echo "==> node client: dependencies up to date ($(node --version))"
  exit 0
fi
echo "==> node client: npm ci (clients/node)"
npm ci --no-audit --no-fund --loglevel=error
echo "$wanted" > "$stamp"
echo "==> node client: ready ($(node --version))"
