//! Hybrid nodes end to end: Slurm nodes run by real slurmd daemons (slurm-testenv), the same
//! hosts as Kubernetes nodes (kube-testenv's agent plays their kubelets), the scheduler and the
//! controllers in-process. Batch jobs (sbatch) and pods meet on the same nodes under one Slurm
//! policy: they take turns, preempt each other, share a node's cores, and share reservations and
//! licenses. Each test checks the lifecycle invariants.
//!
//! The support (batch jobs, Jobs and pods, nodes on both sides) is in `support`; the tests by
//! what they prove: `turns` (batch jobs and pods take turns and preempt each other), `sharing`
//! (cores of one node, reservations, licenses), `node_states` (Slurm's node states in
//! Kubernetes; slurmd nodes never managed).

#[path = "../e2e/mod.rs"]
mod e2e;

mod node_states;
mod sharing;
mod support;
mod turns;
