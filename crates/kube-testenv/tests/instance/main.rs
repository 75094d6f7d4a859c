//! kube-testenv against the control plane it builds and runs: these tests need root and the
//! cached (or buildable) Kubernetes binaries. Each test starts its own instance; independent
//! checks share one to keep the run short.
//!
//! The helpers (a polling wait, node and pod readers, a phase log) are in `support`; the tests
//! by what they check: `control_plane` (Leases, nodes, kubectl, discovery, CRDs), `rbac` (a
//! token's rights), `pods` (the agent as kubelet), `nodes` (nodes added and lost), `isolation`
//! (two instances, and what dropping one leaves), `workloads` (JobSet and LeaderWorkerSet).

#[path = "../common/mod.rs"]
mod common;

mod control_plane;
mod isolation;
mod nodes;
mod pods;
mod rbac;
mod support;
mod workloads;
