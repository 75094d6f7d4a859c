//! Sharing a node safely (issue 39): on one hybrid node with real slurmd confining batch jobs
//! with cgroups (slurm-testenv `cgroups`), a real kubelet and containerd, and the bridge's node
//! agent pinning pods' containers through NRI, a batch job and a pod each run on the CPUs Slurm
//! gave their job, and a memory overrun ends only the one that overran. Each test checks the
//! lifecycle invariants.
//!
//! By concern: `cpus` (Cpus_allowed_list against CPU_IDs, progress alone and side by side, pods
//! the bridge did not bind), `memory` (OOM on either side, memory asked of Slurm), `agent` (the
//! node agent started after a pod, and restarted), `dra` (the agent as the node's `dra.cpu` DRA
//! driver: a pod asking `dra.cpu` runs on the kubelet with its claim's CPUs). The support is in
//! `support`.

#[path = "../e2e/mod.rs"]
mod e2e;

mod agent;
mod cpus;
mod dra;
mod memory;
mod support;
