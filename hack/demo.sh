#!/usr/bin/env bash
# The main job: a short demo of slurm-bridge on real Slurm.
#   real Slurm 26.05 (slurm-testenv) with 6 external nodes node-1..node-6
#   + a real Kubernetes control plane (kube-testenv: kube-apiserver, etcd,
#     kube-controller-manager, and a node agent playing the kubelets) with the same 6 nodes
#   + the slurm-bridge scheduler,
# then applies examples/*.yaml with kubectl (a bare pod, a Job of 2, a gang of 3) and prints
# pod -> Slurm job id -> node as they bind. Pass --keep to leave everything running.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
keep=false
[ "${1:-}" = "--keep" ] && keep=true

echo "==> building (first run: about 10 minutes, plus about 15 for Kubernetes from its Go modules)"
cargo build -q -p slurm-testenv -p kube-testenv -p slurm-bridge
bin=./target/debug
st=$bin/slurm-testenv
kt=$bin/kube-testenv
$kt prepare
work=$(mktemp -d /tmp/slurm-bridge-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  $st down --name demo >/dev/null 2>&1 || true
  $kt down --name demo >/dev/null 2>&1 || true
  cp "$work/scheduler.log" /tmp/demo-scheduler.log 2>/dev/null; rm -rf "$work"
}

$st down --name demo >/dev/null 2>&1 || true
$kt down --name demo >/dev/null 2>&1 || true
echo "==> real Slurm with 6 external nodes"
eval "$($st up --name demo --nodes 6)"
if $keep; then
  echo "(--keep: stop later with: kill the printed PIDs; $st down --name demo; $kt down --name demo)"
else
  trap cleanup EXIT
fi

echo "==> Kubernetes control plane with nodes node-1..node-6"
eval "$($kt up --name demo --nodes 6)"
export KUBECONFIG
kc() { $kt exec --name demo -- kubectl "$@"; }

cat >"$work/config.yaml" <<CFG
schedulerName: slurm-bridge-scheduler
slurmRestApi: $SLURM_REST_URL
partition: slurm-bridge
mcsLabel: kubernetes
CFG
echo "==> slurm-bridge scheduler"
SLURM_JWT_FILE="$SLURM_JWT_FILE" $bin/slurm-bridge scheduler --config "$work/config.yaml" \
  --leader-elect=false --health-probe-bind-address 127.0.0.1:18081 2>"$work/scheduler.log" &
pids+=($!)
for _ in $(seq 300); do curl -sf http://127.0.0.1:18081/readyz >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf http://127.0.0.1:18081/readyz >/dev/null || { echo "scheduler not ready:"; tail "$work/scheduler.log"; exit 1; }

echo "==> kubectl apply -f examples/pod.yaml -f examples/job.yaml -f examples/gang.yaml"
kc apply -f examples/pod.yaml -f examples/job.yaml -f examples/gang.yaml

columns='POD:.metadata.name,SLURM_JOB:.metadata.labels.scheduler\.slinky\.slurm\.net/slurm-jobid,NODE:.spec.nodeName,PHASE:.status.phase'
for _ in $(seq 60); do
  out=$(kc get pods -o custom-columns="$columns" --sort-by=.metadata.name)
  if ! grep -q '<none>' <<<"$out" && [ "$(wc -l <<<"$out")" -ge 7 ]; then break; fi
  sleep 1
done
echo
echo "$out"
echo
echo "==> the same from Slurm's side (squeue)"
$st exec --name demo -- squeue -o '%.6i %.12j %.9T %.6D %N'
if grep -q '<none>' <<<"$out"; then
  echo "some pods did not bind; scheduler log:"; tail -n 20 "$work/scheduler.log"; exit 1
fi
if $keep; then
  echo "PIDs: ${pids[*]}; KUBECONFIG=$KUBECONFIG"
  trap - EXIT
fi
