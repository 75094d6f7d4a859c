//! DRA end to end on real Slurm (GresTypes=gpu) and the real control plane (resource.k8s.io/v1,
//! DRAExtendedResource): node registration from ResourceSlices (and re-registration when a slice
//! changes), claims naming exactly what Slurm allocated, two pods of one job on one node with
//! disjoint claims, a failure injected at each step of making a claim leaving none behind,
//! device-plugin GPUs without claims, and claims deleted when their pods finish.
//!
//! kube-testenv's node agent runs no DRA driver: the test creates the DeviceClasses and
//! ResourceSlices through the API, as a driver would.
//!
//! The support (the test nodes, their devices and slices, DRA pods, what Slurm shows) is in
//! `support`; the tests by what they prove: `claims` (registration, claims naming what Slurm
//! allocated, disjoint claims for pods of one job, cleanup), `failures` (a failure at each step
//! of a claim leaves none), `slices` (a changed slice re-registers its node).

#[path = "../e2e/mod.rs"]
mod e2e;

mod claims;
mod failures;
mod slices;
mod support;
