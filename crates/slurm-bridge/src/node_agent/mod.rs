//! The node agent (`slurm-bridge node-agent`): on a hybrid node, pins each container of a pod
//! the bridge bound to the CPUs Slurm gave the pod's job on that node, so pods and batch jobs
//! sharing the node each stay on their own cores (docs/hybrid.md).
//!
//! It is a containerd NRI plugin: the runtime asks it about every container it creates
//! ([`plugin`]); the answer ([`pin::decide`]) comes from the pod's job-id label, checked
//! against the job's admin_comment, and the job's layout read from Slurm ([`jobs`]), mapped
//! onto this machine's CPUs ([`topology`]).
//!
//! With `--dra-cpu` it is also the node's `dra.cpu` DRA driver ([`dra_cpu`]): it publishes the
//! node's CPUs as a ResourceSlice and serves the kubelet's DRA plugin API ([`grpc`],
//! [`kubelet_api`]), preparing the claims the bridge wrote; the pin then follows the claims.

pub mod authority;
pub mod dra_cpu;
pub mod grpc;
pub mod health;
pub mod jobs;
pub mod kubelet_api;
pub mod pin;
pub mod plugin;
pub mod topology;

pub use health::{Health, Metrics};
pub use pin::{Pin, PodFacts, Unmanaged, decide};
pub use plugin::{Agent, serve};
pub use topology::Topology;
