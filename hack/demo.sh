#!/usr/bin/env bash
# The main job: a short demo of slurm-bridge on real Slurm and a real Kubernetes control plane.
#   real Slurm 26.05 (slurm-testenv) with two hybrid nodes node-1, node-2 run by real slurmd
#   + a real Kubernetes control plane (kube-testenv: kube-apiserver, etcd,
#     kube-controller-manager, and a node agent playing the kubelets) with nodes node-1..node-8
#   + slurm-bridge run (the scheduler and the controllers in one process),
# labels node-3..node-8 as external nodes (the node controller registers them in Slurm), then
# applies examples/*.yaml with kubectl (a bare pod, a Job of 2 that runs 15 s, a gang of 3),
# prints each pod as it binds (pod -> Slurm job -> node), the table, the same from Slurm's side,
# the Job running to completion (its Slurm jobs end with its pods), and a DRA GPU pod: a node's
# ResourceSlice registers its GPUs in Slurm, and the pod gets a ResourceClaim naming the GPU
# indices Slurm allocated (examples/dra/). Last, the hybrid nodes: an sbatch job and a Kubernetes
# Job take turns on node-1 and node-2, and a pod of a higher-tier partition preempts a batch job
# (examples/hybrid/), with squeue and kubectl side by side.
#
#   hack/demo.sh          run it, then stop everything (the logs stay in the work folder)
#   hack/demo.sh --keep   leave slurm-bridge, Slurm and Kubernetes running to explore
#   hack/demo.sh --stop   stop what --keep left running and remove the work folder
#
# Work folder (config, slurm-bridge log and PID): $SLURM_BRIDGE_DEMO_DIR, default
# /tmp/slurm-bridge-demo. Slurm's and Kubernetes' own state and logs are in
# /run/slurm-testenv/demo and /run/kube-testenv/demo while they run.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

mode=run
case "${1:-}" in
  "") ;;
  --keep) mode=keep ;;
  --stop) mode=stop ;;
  -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: hack/demo.sh [--keep | --stop]" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
  echo "hack/demo.sh: needs root (Slurm runs in mount and PID namespaces)" >&2
  exit 1
fi
# Go's own installer puts it in /usr/local/go, which a non-login shell may not have on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="$PATH:/usr/local/go/bin"
fi

# cargo puts the binaries under CARGO_TARGET_DIR when that is set.
bin="${CARGO_TARGET_DIR:-./target}/debug"
st=$bin/slurm-testenv
kt=$bin/kube-testenv
work="${SLURM_BRIDGE_DEMO_DIR:-/tmp/slurm-bridge-demo}"
name=demo # the slurm-testenv and kube-testenv instance names

# Colour and the progress line only on a terminal.
if [ -t 1 ]; then bold=$'\e[1m' plain=$'\e[0m'; else bold='' plain=''; fi
started=$(date +%s%N)
step_started=$started
# step TITLE: a header; done_step: how long the step took.
step() { step_started=$(date +%s%N); echo "${bold}==> $*${plain}"; }
since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f s", (b - a) / 1e9 }'; }
done_step() { echo "    (${1:-done} in $(since "$step_started"))"; }

# The kept scheduler's PID, if it still runs (checked by its command line, not just the number).
scheduler_pid() {
  local pid
  pid=$(cat "$work/scheduler.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "slurm-bridge run" \
    && echo "$pid"
}

# What a previous --keep run left running, one line each; empty when nothing.
running_parts() {
  local pid
  if pid=$(scheduler_pid); then echo "  slurm-bridge run, PID $pid (log $work/scheduler.log)"; fi
  if [ -x "$st" ] && $st env --name "$name" >/dev/null 2>&1; then
    echo "  Slurm instance \"$name\" (slurm-testenv, state and logs in /run/slurm-testenv/$name)"
  fi
  if [ -x "$kt" ] && $kt env --name "$name" >/dev/null 2>&1; then
    echo "  Kubernetes instance \"$name\" (kube-testenv, state and logs in /run/kube-testenv/$name)"
  fi
}

stop_all() {
  local pid
  if pid=$(scheduler_pid); then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$work/scheduler.pid"
  if [ -x "$st" ]; then $st down --name "$name" >/dev/null 2>&1 || true; fi
  if [ -x "$kt" ]; then $kt down --name "$name" >/dev/null 2>&1 || true; fi
}

if [ "$mode" = stop ]; then
  parts=$(running_parts)
  stop_all
  rm -rf "$work"
  if [ -n "$parts" ]; then
    echo "stopped:"; echo "$parts"; echo "and removed $work"
  else
    echo "no demo was running; removed $work (if it existed)"
  fi
  exit 0
fi

# A kept demo holds the instance names: refuse at once rather than fight over them.
parts=$(running_parts)
if [ -n "$parts" ]; then
  echo "hack/demo.sh: a demo is still running (left by hack/demo.sh --keep, or by a run that was killed):" >&2
  echo "$parts" >&2
  echo "stop it first with: hack/demo.sh --stop" >&2
  exit 1
fi

rm -rf "$work"
mkdir -p "$work"

# The first run builds everything: each slow step starts as soon as the tool it needs is built,
# and runs beside the rest (the Slurm root fs is mostly network and dpkg, the Go builds and cargo
# share the cores). One cargo feature set for all three builds (-p of every crate), so no crate
# is compiled twice. Each tool prints its own progress lines; cargo's output is in a log.
packages=(-p slurm-testenv -p kube-testenv -p slurm-bridge)
builders=()
# Each background build runs in a session of its own; stopping it stops its compilers too.
stop_builders() { local p; for p in "${builders[@]}"; do kill -- "-$p" 2>/dev/null || true; done; }
trap stop_builders EXIT
trap 'exit 130' INT TERM
# cargo_build WHAT EXPECTED ARGS...: builds with its output in $work/cargo.log.
cargo_build() {
  local what=$1 expected=$2 t
  shift 2
  t=$(date +%s%N)
  if [ -x "$bin/$what" ] && [ -n "$cargo_warm" ]; then
    echo "    cargo build ($what): up to date in seconds, or recompiles what changed"
  else
    echo "    cargo build ($what): the first time $expected"
  fi
  if ! cargo build "${packages[@]}" "$@" >>"$work/cargo.log" 2>&1; then
    echo "cargo build failed; the last lines of $work/cargo.log:" >&2
    tail -n 30 "$work/cargo.log" >&2
    exit 1
  fi
  echo "    cargo build ($what): done in $(since "$t")"
}
# in_background WHAT LOG COMMAND...: runs COMMAND beside the rest, its lines shown and in LOG.
in_background() {
  local what=$1 log=$2
  shift 2
  setsid "$@" > >(tee "$log") 2>&1 &
  builders+=("$!")
  eval "${what//-/_}_pid=$!"
}
# wait_for WHAT LOG: waits for that background build; its log's tail if it failed.
wait_for() {
  local pid_var="${1//-/_}_pid"
  if ! wait "${!pid_var}"; then
    echo "$1 failed; the last lines of $2:" >&2
    tail -n 30 "$2" >&2
    exit 1
  fi
}
cargo_warm=
[ -x "$bin/slurm-bridge" ] && [ -x "$st" ] && [ -x "$kt" ] && cargo_warm=1
step "builds, side by side (cached after the first run; the first demo took 7.5 minutes in all on 2 idle cores, longer on a busy machine)"
cargo_build slurm-testenv "about 30 s (and the crates' download)" --bin slurm-testenv
echo "    Slurm root file system (slurm-testenv prepare): cached, else the first time about a minute with debootstrap"
in_background slurm-testenv "$work/slurm-testenv-prepare.log" "$st" prepare
cargo_build kube-testenv "about 2 minutes" --bin kube-testenv
echo "    Kubernetes binaries (kube-testenv prepare --only kubernetes,etcd: what the demo runs; cached, else the first time about 7 minutes beside cargo; one line per tool, progress every 20 s)"
in_background kube-testenv "$work/kube-testenv-prepare.log" "$kt" prepare --only kubernetes,etcd
cargo_build slurm-bridge "about 1.5 minutes, beside the Go builds"
wait_for slurm-testenv "$work/slurm-testenv-prepare.log"
wait_for kube-testenv "$work/kube-testenv-prepare.log"
trap - EXIT
done_step "built and prepared"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$mode" = keep ]; then
    kept_message
    exit "$rc"
  fi
  stop_all
  echo "stopped slurm-bridge, Slurm and Kubernetes; the slurm-bridge log is $work/scheduler.log"
  exit "$rc"
}
kept_message() {
  echo
  echo "${bold}Still running (--keep):${plain}"
  running_parts
  cat <<EOF
Try:
  $kt exec --name $name -- kubectl get pods -o wide
  $kt exec --name $name -- kubectl describe pod sleep
  $kt exec --name $name -- kubectl get podgroups.scheduling.x-k8s.io
  $st exec --name $name -- squeue
  $st exec --name $name -- scontrol show job 1
or, in this shell: export KUBECONFIG=/run/kube-testenv/$name/kubeconfig, and eval "\$($st env --name $name)"
Stop everything (and remove $work) with: hack/demo.sh --stop
EOF
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "real Slurm with accounting (slurmdbd, MariaDB) and hybrid nodes node-1, node-2 run by slurmd; partition high preempts slurm-bridge (slurm-testenv up)"
eval "$($st up --name "$name" --slurmd-nodes 2 --preempt requeue --partition high:10 --accounting)"
# The tenant's account: the demo's pods are charged to it (sacct at the end).
$st exec --name "$name" -- sacctmgr -i add account demo >/dev/null
$st exec --name "$name" -- sacctmgr -i add user root account=demo >/dev/null
done_step up

step "Kubernetes control plane with nodes node-1..node-8 (kube-testenv up)"
eval "$($kt up --name "$name" --nodes 8)"
done_step up
kc() { $kt exec --name "$name" -- kubectl "$@"; }

cat >"$work/config.yaml" <<CFG
schedulerName: slurm-bridge-scheduler
slurmRestApi: $SLURM_REST_URL
partition: slurm-bridge
mcsLabel: kubernetes
# The namespace default is one tenant: its pods' jobs are charged to account demo, and they may
# ask for partition high (the preemption step below) but never for another Slurm user, account
# or priority (docs/tenancy.md).
tenants:
  - name: demo
    namespaces: [default]
    account: demo
    partitions: [slurm-bridge, high]
CFG
step "slurm-bridge run: the scheduler and the controllers (log $work/scheduler.log)"
# Port 0: the kernel picks a free probe port; the scheduler logs the one it got.
: >"$work/scheduler.log"
RUST_LOG="${RUST_LOG:-info,kube=warn,tower=warn,hyper=warn},slurm_bridge::server=info" \
  setsid "$bin/slurm-bridge" run --config "$work/config.yaml" \
  --leader-elect=false --health-probe-bind-address 127.0.0.1:0 \
  </dev/null >"$work/scheduler.log" 2>&1 &
echo $! >"$work/scheduler.pid"
probe=
for _ in $(seq 300); do
  probe=$(sed -n 's/.*serving \/healthz.* addr=\(127\.0\.0\.1:[0-9]*\).*/\1/p' "$work/scheduler.log" || true)
  [ -n "$probe" ] && curl -sf "http://$probe/readyz" >/dev/null 2>&1 && break
  scheduler_pid >/dev/null || break
  sleep 0.1
done
if [ -z "$probe" ] || ! curl -sf "http://$probe/readyz" >/dev/null 2>&1; then
  echo "slurm-bridge did not get ready; its log ($work/scheduler.log):"
  tail -n 20 "$work/scheduler.log"
  exit 1
fi
echo "$probe" >"$work/probe-address"
done_step "ready, probes and metrics on http://$probe"

step "label node-3..node-8 as external nodes; the node controller registers them in Slurm (node-1, node-2 are slurmd's)"
external=(node-3 node-4 node-5 node-6 node-7 node-8)
kc annotate nodes "${external[@]}" scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge >/dev/null
kc label nodes "${external[@]}" scheduler.slinky.slurm.net/external-node=true >/dev/null
for _ in $(seq 300); do
  [ "$($st exec --name "$name" -- sinfo -h -N -o %N 2>/dev/null | sort -u | wc -l)" -ge 8 ] && break
  sleep 0.1
done
$st exec --name "$name" -- sinfo -N -p slurm-bridge -o '%N %c %m %f %T'
done_step registered

step "kubectl apply -f examples/pod.yaml -f examples/job.yaml -f examples/gang.yaml"
kc apply -f examples/pod.yaml -f examples/job.yaml -f examples/gang.yaml
applied=$(date +%s%N)

echo
echo "as they bind (pod -> Slurm job -> node, time since apply):"
columns='POD:.metadata.name,SLURM_JOB:.metadata.labels.scheduler\.slinky\.slurm\.net/slurm-jobid,NODE:.spec.nodeName,PHASE:.status.phase'
declare -A seen=()
deadline=$(($(date +%s) + 60))
next_note=$(($(date +%s) + 10))
while :; do
  out=$(kc get pods -o custom-columns="$columns" --sort-by=.metadata.name --no-headers)
  while read -r pod job node _; do
    [ -n "$pod" ] && [ "$node" != "<none>" ] && [ -z "${seen[$pod]:-}" ] || continue
    seen[$pod]=1
    printf '  %-15s Slurm job %-4s %-8s %s\n' "$pod" "$job" "$node" "$(since "$applied")"
  done <<<"$out"
  pending=$(grep -c '<none>' <<<"$out" || true)
  [ "$(wc -l <<<"$out")" -ge 6 ] && [ "$pending" = 0 ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then break; fi
  if [ "$(date +%s)" -ge "$next_note" ]; then
    echo "  ... $pending pod(s) not bound yet"
    next_note=$(($(date +%s) + 10))
  fi
  sleep 0.5
done
echo
kc get pods -o custom-columns="$columns" --sort-by=.metadata.name
echo
step "the same from Slurm's side (squeue)"
$st exec --name "$name" -- squeue -o '%.6i %.22j %.9T %.6D %N'
if [ "$pending" != 0 ] || [ "$(wc -l <<<"$out")" -lt 6 ]; then
  echo "some pods did not bind within 60 s; the scheduler's log ($work/scheduler.log) ends with:"
  tail -n 20 "$work/scheduler.log"
  exit 1
fi
echo
step "the scheduler's events on a pod (kubectl describe pod trio-0, its Events)"
kc describe pod trio-0 | sed -n '/^Events:/,$p'
echo
step "the Job runs to completion; its pods' Slurm jobs end with them"
jobs_of_compute=$(kc get pods -l batch.kubernetes.io/job-name=compute \
  -o jsonpath='{.items[*].metadata.labels.scheduler\.slinky\.slurm\.net/slurm-jobid}')
kc wait --for=condition=Complete job/compute --timeout=90s
for _ in $(seq 100); do
  live=$($st exec --name "$name" -- squeue -h -t PENDING,RUNNING -o %i | grep -xF -f <(tr ' ' '\n' <<<"$jobs_of_compute") || true)
  [ -z "$live" ] && break
  sleep 0.1
done
kc get pods -l batch.kubernetes.io/job-name=compute -o custom-columns="$columns,FINALIZERS:.metadata.finalizers"
$st exec --name "$name" -- squeue -t all -o '%.6i %.22j %.9T %.6D %N'
if [ -n "$live" ]; then
  echo "Slurm jobs $live of the finished Job are still live"
  exit 1
fi
echo
step "DRA: a node publishes 4 GPUs in a ResourceSlice; a pod asks for 2 and gets a claim naming the ones Slurm chose"
# A node no running pod uses (the Job's pods are done), so its re-registration with GRES is at once.
busy=$(kc get pods --field-selector=status.phase=Running -o jsonpath='{.items[*].spec.nodeName}')
gpu_node=
for n in "${external[@]}"; do
  grep -qw "$n" <<<"$busy" || { gpu_node=$n; break; }
done
kc apply -f examples/dra/gpu-class.yaml >/dev/null
# What a DRA driver on that node would publish.
kc apply -f - >/dev/null <<SLICE
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: $gpu_node-gpus}
spec:
  driver: gpu.example.com
  nodeName: $gpu_node
  pool: {name: $gpu_node, generation: 1, resourceSliceCount: 1}
  devices:
$(for i in 0 1 2 3; do echo "  - {name: gpu-$i, attributes: {index: {int: $i}}}"; done)
SLICE
for _ in $(seq 300); do
  $st exec --name "$name" -- scontrol show node "$gpu_node" 2>/dev/null | grep -q 'Gres=gpu:gpu.example.com:4' && break
  sleep 0.1
done
$st exec --name "$name" -- scontrol show node "$gpu_node" | grep -E 'NodeName|Gres='
kc apply -f examples/dra/gpu-pod.yaml
gpu_bound=
for _ in $(seq 600); do
  gpu_bound=$(kc get pod gpu -o jsonpath='{.spec.nodeName}')
  [ -n "$gpu_bound" ] && break
  sleep 0.1
done
if [ -z "$gpu_bound" ]; then
  echo "the GPU pod did not bind within 60 s:"
  kc describe pod gpu | sed -n '/^Conditions:/,$p'
  exit 1
fi
claim=$(kc get pod gpu -o jsonpath='{.status.extendedResourceClaimStatus.resourceClaimName}')
gpu_job=$(kc get pod gpu -o jsonpath='{.metadata.labels.scheduler\.slinky\.slurm\.net/slurm-jobid}')
echo "pod gpu -> Slurm job $gpu_job -> $gpu_bound, claim $claim"
$st exec --name "$name" -- scontrol show -d job "$gpu_job" | grep -E 'JobId|JOB_GRES|GRES=gpu'
kc get resourceclaim "$claim" \
  -o custom-columns='CLAIM:.metadata.name,DEVICES:.status.allocation.devices.results[*].device,NODE:.status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0].values[0],RESERVED_FOR:.status.reservedFor[0].name'
done_step "bound with its claim"

echo
step "hybrid nodes: the examples go (their Slurm jobs end with them); node-1 and node-2 are free for batch work"
kc delete -f examples/pod.yaml -f examples/gang.yaml -f examples/dra/gpu-pod.yaml --grace-period=1 --wait=true >/dev/null
for _ in $(seq 300); do
  [ -z "$($st exec --name "$name" -- squeue -h -t PENDING,RUNNING -o %i)" ] && break
  sleep 0.1
done
# squeue and kubectl side by side (the example pods of before left out).
both() {
  awk 'NR == FNR { left[FNR] = $0; n = FNR; next }
       { right[FNR] = $0; m = FNR }
       END { for (i = 1; i <= (n > m ? n : m); i++) printf "%-62s  %s\n", left[i], right[i] }' \
    <($st exec --name "$name" -- squeue -o '%.4i %.15j %.12P %.8T %.10r %N') \
    <(kc get pods -l 'batch.kubernetes.io/job-name!=compute' --sort-by=.metadata.name \
      -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase,WHY:.status.conditions[?(@.type=="PodScheduled")].message')
}
batch=$($st exec --name "$name" -- sbatch --parsable -J hpc-batch -N 2 -w node-1,node-2 --exclusive --wrap 'sleep 10')
kc apply -f examples/hybrid/job.yaml
for _ in $(seq 150); do
  kc get pods -l batch.kubernetes.io/job-name=train -o jsonpath='{.items[*].status.conditions[*].reason}' | grep -q SlurmJobPending && break
  sleep 0.1
done
echo "sbatch job $batch holds node-1 and node-2; the Job's pods wait with Slurm's reason:"
both
for _ in $(seq 300); do
  [ "$(kc get pods -l batch.kubernetes.io/job-name=train -o jsonpath='{.items[*].spec.nodeName}' | wc -w)" -ge 2 ] && break
  sleep 0.1
done
echo
echo "the batch job ended; the pods run on the same nodes:"
both
kc wait --for=condition=Complete job/train --timeout=60s >/dev/null
done_step "took turns"

step "preemption: a pod of partition high (tier 10) requeues a batch job of partition slurm-bridge (tier 1) on node-1"
low=$($st exec --name "$name" -- sbatch --parsable -J low-batch -w node-1 --exclusive --requeue --wrap 'sleep 300')
for _ in $(seq 100); do
  [ "$($st exec --name "$name" -- squeue -h -j "$low" -o %T)" = RUNNING ] && break
  sleep 0.1
done
kc apply -f examples/hybrid/urgent.yaml
for _ in $(seq 300); do
  [ -n "$(kc get pod urgent -o jsonpath='{.spec.nodeName}')" ] && break
  sleep 0.1
done
both
if [ -z "$(kc get pod urgent -o jsonpath='{.spec.nodeName}')" ]; then
  echo "the urgent pod did not bind within 30 s"
  exit 1
fi
$st exec --name "$name" -- scontrol show job "$low" | grep -E 'JobState|Restarts' | sed 's/^ */    /'
done_step preempted

step "accounting: Slurm charged every pod's job to the tenant's account, beside the batch jobs (sacct)"
$st exec --name "$name" -- sacct -a -X --format=JobID,JobName%16,User,Account,Partition%12,State%14
done_step sacct

echo
echo "demo done in $(since "$started") (Slurm, Kubernetes and slurm-bridge started, nodes registered, 7 pods bound, a Job completed, a GPU pod given its DRA claim, a batch job and a Job taking turns on hybrid nodes, a pod preempting a batch job, the pods' jobs in sacct under the tenant's account)"
