#!/usr/bin/env bash
# Prints the folder holding `prometheus` and `promtool` from Debian's prometheus package (pinned
# below), fetched once with `apt-get download` from the machine's own apt sources and unpacked
# (not installed: no service starts) into /var/cache/slurm-bridge/. The alert tests use them
# (crates/slurm-bridge/tests/alerts_e2e.rs): `promtool test rules` on the chart's rules, and a
# real Prometheus scraping the bridge.
#
#   hack/prometheus.sh            # fetch if needed, print the bin folder
#
# PROMETHEUS_DEB_VERSION overrides the pinned version.
set -euo pipefail
version="${PROMETHEUS_DEB_VERSION:-2.42.0+ds-5+deb12u1}"
cache="${SLURM_BRIDGE_CACHE:-/var/cache/slurm-bridge}"
dir="$cache/prometheus-$version"
if [ ! -x "$dir/usr/bin/promtool" ] || [ ! -x "$dir/usr/bin/prometheus" ]; then
  mkdir -p "$cache"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"
  fetch() { (cd "$tmp" && apt-get download "prometheus=$version") >&2; }
  if ! fetch; then
    echo "hack/prometheus.sh: prometheus=$version not in the apt lists; running apt-get update" >&2
    apt-get update >&2
    fetch
  fi
  rm -rf "$dir.partial"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$dir.partial"
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
fi
echo "$dir/usr/bin"
