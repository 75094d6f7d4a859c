#!/usr/bin/env bash
# The main job, for now: bring up a real Slurm (slurmctld + slurmrestd, data_parser v0.0.44) with
# three external nodes, show it answering on the REST API and the CLI, and stop it again.
# Pass --keep to leave it running (stop it later with ./target/debug/slurm-testenv down).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
keep=false
[ "${1:-}" = "--keep" ] && keep=true

cargo build -q -p slurm-testenv --bin slurm-testenv
st=./target/debug/slurm-testenv
$st down --name demo 2>/dev/null || true
eval "$($st up --name demo --nodes 3)"
$keep || trap '$st down --name demo' EXIT

echo
echo "slurmrestd: $SLURM_REST_URL   token file: $SLURM_JWT_FILE   slurm.conf: $SLURM_CONF"
echo
echo "\$ curl -H 'X-SLURM-USER-TOKEN: ...' $SLURM_REST_URL/slurm/v0.0.44/ping/"
curl -sS -H "X-SLURM-USER-TOKEN: $SLURM_JWT" "$SLURM_REST_URL/slurm/v0.0.44/ping/" \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); p=d["pings"][0]; print("ping:", p["hostname"], p["pinged"], "latency", p["latency"], "us; slurm", d["meta"]["slurm"]["release"])'
echo
echo "\$ curl ... $SLURM_REST_URL/slurm/v0.0.44/nodes/"
curl -sS -H "X-SLURM-USER-TOKEN: $SLURM_JWT" "$SLURM_REST_URL/slurm/v0.0.44/nodes/" \
  | python3 -c 'import json,sys
for n in json.load(sys.stdin)["nodes"]:
    print("  ", n["name"], "+".join(n["state"]), n["cpus"], "cpus", n["real_memory"], "MB", ",".join(n["features"]))'
echo
echo "\$ slurm-testenv exec --name demo -- sinfo"
$st exec --name demo -- sinfo
