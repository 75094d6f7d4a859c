#!/usr/bin/env bash
# Runs every test of the workspace, including those against real Slurm (slurm-testenv) and
# kube-sim. Needs root on a Debian host with network access to the package registries; the first
# run builds the Slurm root file system (about a minute) and compiles the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if [ "$(id -u)" != 0 ]; then
  echo "hack/test.sh: the tests start real Slurm daemons in namespaces and need root" >&2
  exit 1
fi

echo "==> building slurm-testenv and preparing the Slurm root file system"
cargo build -p slurm-testenv --bin slurm-testenv
./target/debug/slurm-testenv prepare

echo "==> cargo test --workspace"
cargo test --workspace --no-fail-fast
