//! Pods really run: the scheduler and the controllers in-process on real Slurm (slurm-testenv)
//! and a control plane whose `node-1` .. `node-N` run a real kubelet with containerd and runc
//! (kube-testenv `kubelet_nodes`). What the simulated node agent only pretends is checked here
//! on real containers: their output, exit codes, SIGTERM and the grace period, a kubelet that
//! dies under a running pod, the kubelet refusing a pod Slurm placed, and a batch job's step
//! beside a pod's container on one hybrid node. Each test checks the lifecycle invariants.
//!
//! By concern: `runs` (output, a Job completing, an exit code), `hybrid` (sbatch and a pod at
//! once on one node), `deletion` (SIGTERM and grace; a stopped kubelet), `refused` (OutOfcpu;
//! registration from the kubelet's allocatable). The support is in `support`.

#[path = "../e2e/mod.rs"]
mod e2e;

mod deletion;
mod hybrid;
mod refused;
mod runs;
mod support;
