#!/usr/bin/env bash
# Runs every test of the workspace, including those against real Slurm (slurm-testenv) and a
# real Kubernetes control plane (kube-testenv). Needs root on a Debian host with network access
# to the package registries (Debian's, crates.io, the Go module proxy) and Go 1.26 or newer. The
# first run builds the Slurm root file system (about a minute), Kubernetes, kube-scheduler, etcd
# and the JobSet, LeaderWorkerSet, Kubeflow Trainer and Kueue controllers from their Go modules
# (about 25 minutes on 2 cores, module downloads included; helm for the chart tests about 3
# more), and compiles the workspace; later runs reuse all of it. (hack/demo.sh alone builds only
# its own set: its first run took 7.5 minutes on 2 idle cores, docs/performance.md.)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if [ "$(id -u)" != 0 ]; then
  echo "hack/test.sh: the tests start real Slurm daemons in namespaces and need root" >&2
  exit 1
fi
# Go's own installer puts it in /usr/local/go, which a non-login shell may not have on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="$PATH:/usr/local/go/bin"
fi
if ! command -v go >/dev/null 2>&1 && [ -z "${KUBE_TESTENV_GO:-}" ]; then
  echo "hack/test.sh: Go 1.26 or newer must be on PATH (or set KUBE_TESTENV_GO): kube-testenv builds Kubernetes from its Go modules" >&2
  exit 1
fi

echo "==> building slurm-testenv and kube-testenv"
cargo build -p slurm-testenv --bin slurm-testenv -p kube-testenv --bin kube-testenv
echo "==> preparing the Slurm root file system"
./target/debug/slurm-testenv prepare
echo "==> building Kubernetes, kube-scheduler, etcd, JobSet, LeaderWorkerSet, Trainer, Kueue and helm from their Go modules (cached; the first time about 25 minutes on 2 cores, the demo's own set about 7 of them)"
# KUBE_TESTENV_PRUNE=1 (set by .ci/run) empties Go's caches once everything is built.
./target/debug/kube-testenv prepare ${KUBE_TESTENV_PRUNE:+--prune}

echo "==> Prometheus and promtool from Debian's package, for the alert tests (cached)"
./hack/prometheus.sh
echo "==> the chart's Grafana dashboard against Grafana's schema (@grafana/schema, cached)"
./hack/check-dashboard.sh

echo "==> cargo test --workspace"
# The whole output goes to a log too; on a failure each failing test's panic is printed again at
# the end, where a CI excerpt (its head and tail) shows it rather than burying it mid-output.
log=target/cargo-test.log
mkdir -p target
status=0
cargo test --workspace --no-fail-fast 2>&1 | tee "$log" || status=$?
if [ "$status" != 0 ]; then
  echo "==> failure digest: each failing test's panic, without its backtrace (the whole output is in $log)"
  awk '/^---- .* stdout ----$/ { print; next }
       /panicked at/ { n = 80 }
       n > 0 { if ($0 ~ /^stack backtrace:/) { n = 0; next }
               print; n--; if ($0 ~ /^note: run with/) n = 0 }' "$log"
  grep -E "^test .* FAILED$|^error: .*target.* failed" "$log" || true
  exit "$status"
fi

echo "==> the benchmark's smoke: every mode at 100 pods (prints figures, asserts only that every pod was bound)"
cargo test -p slurm-bridge --bench scheduler -- --mode all --pods 100

echo "==> hack/demo.sh (the README's demo, end to end)"
./hack/demo.sh
