//! Tests of the Helm chart `helm/slurm-bridge` with a real `helm` (built from its pinned Go module
//! by kube-testenv, cached): `helm lint`, `helm template` golden files for the default values and
//! each major option, values the chart must refuse, and least-privilege RBAC: every rule the
//! chart renders must be in an allow-list that mirrors the Kubernetes calls each component's
//! code makes (`crates/slurm-bridge/src`), and every call in the list must be granted.
//!
//! Regenerate the golden files with `UPDATE_GOLDEN=1 cargo test -p kube-testenv --test helm_chart`.
//!
//! The helm runs, renders and lookups are in `support`; the tests by what they check: `goldens`
//! (lint, the pinned version, the golden files), `options` (what each option renders), `values`
//! (values refused, the Go original's values file), `rbac` (grants against the allow-lists).

mod goldens;
mod options;
mod rbac;
mod support;
mod values;
