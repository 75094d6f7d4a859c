//! The node controller end to end: real Slurm (slurm-testenv, no external nodes of its own) and a
//! real Kubernetes control plane (kube-testenv), through the kube-rs client. The test builds the
//! shared pieces the process would share (a node reflector, its change stream, the Slurm node
//! listing) and runs the controller on them.
//!
//! The support (that harness, and what the tests read of Slurm and Kubernetes nodes) is in
//! `harness`; the tests by what they prove: `registration` (register, cordon, an admin's drain,
//! re-create, remove; a bad partition), `owned_nodes` (only the bridge's own Slurm nodes are
//! changed or removed, issue 21).

#[path = "../e2e/mod.rs"]
mod e2e;

mod harness;
mod owned_nodes;
mod registration;
