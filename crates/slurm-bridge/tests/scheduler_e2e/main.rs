//! The scheduler end to end: real Slurm (slurm-testenv) and a real Kubernetes control plane
//! (kube-testenv), through the kube-rs client. Each test checks the invariants of `Env::assert_consistent`.
//!
//! The support (a scheduler on caches the test keeps, proofs that a pass has run, coscheduling
//! PodGroups and their members) is in `support`; the tests by what they prove: `binding` (pods
//! and workloads bound to their Slurm allocations), `gangs` (gangs submitted when complete,
//! closed, shrinking, partial), `writes` (what reaches Kubernetes and Slurm), `rejections` (what
//! is not submitted, and why), `changes` (a job's pod deleted, its job cancelled, its nodes
//! changed or gone), `restarts` (the scheduler killed after a submit, slurmrestd down).

#[path = "../e2e/mod.rs"]
mod e2e;

mod binding;
mod changes;
mod gangs;
mod rejections;
mod restarts;
mod support;
mod writes;
