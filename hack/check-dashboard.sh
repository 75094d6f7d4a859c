#!/usr/bin/env bash
# Type-checks the chart's Grafana dashboard (helm/slurm-bridge/dashboards/slurm-bridge.json)
# against Grafana's own schema types: the `Dashboard` type of @grafana/schema (Apache-2.0, the
# npm registry), with TypeScript's excess-property checks, so an unknown field or a value of the
# wrong type fails, naming it. Versions are pinned in helm/slurm-bridge/tests/dashboard/
# (package-lock.json); the packages are cached in /var/cache/slurm-bridge/dashboard-check.
set -euo pipefail
cd "$(dirname "$0")/.."
src=helm/slurm-bridge/tests/dashboard
dashboard=helm/slurm-bridge/dashboards/slurm-bridge.json
cache="${SLURM_BRIDGE_CACHE:-/var/cache/slurm-bridge}/dashboard-check"
key=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)
work="$cache/$key"
if [ ! -x "$work/node_modules/.bin/tsc" ]; then
  command -v npm >/dev/null || { echo "check-dashboard: npm (Node.js) is needed" >&2; exit 1; }
  rm -rf "$work.tmp"
  mkdir -p "$work.tmp"
  cp "$src/package.json" "$src/package-lock.json" "$work.tmp/"
  (cd "$work.tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  rm -rf "$work"
  mv "$work.tmp" "$work"
fi
cp "$src/tsconfig.json" "$work/"
# Line N of check.ts is line N-1 of the dashboard.
{
  echo "import type { Dashboard } from '@grafana/schema';"
  printf 'export const dashboard: Dashboard = '
  cat "$dashboard"
  echo ';'
} >"$work/check.ts"
if ! (cd "$work" && ./node_modules/.bin/tsc -p .); then
  echo "check-dashboard: $dashboard does not match @grafana/schema's Dashboard (line N above is line N-1 of the dashboard)" >&2
  exit 1
fi
echo "check-dashboard: $dashboard matches @grafana/schema $(node -p "require('$work/node_modules/@grafana/schema/package.json').version")'s Dashboard"
