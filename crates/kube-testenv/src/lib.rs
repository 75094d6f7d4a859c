//! A real Kubernetes control plane for tests, the demo and benchmarks: kube-apiserver, etcd,
//! kube-controller-manager (optionally kube-scheduler and the JobSet, LeaderWorkerSet, Kueue
//! and Kubeflow Trainer controllers) built once from their pinned Go modules, and a node agent that plays the
//! kubelets of simulated nodes.
//!
//! ```no_run
//! # async fn demo() -> kube_testenv::Result<()> {
//! let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions::with_nodes(3)).await?;
//! let client = env.client(); // cluster admin
//! env.kubectl(&["get", "nodes"])?;
//! // dropped: every process stops and the state is removed
//! # Ok(()) }
//! ```

pub mod agent;
mod attached;
pub mod binaries;
pub mod crds;
pub mod dra_driver;
pub mod error;
pub mod faults;
mod gobuild;
mod instance;
mod kubeconfig;
mod launcher;
pub mod paths;
mod pki;
pub mod pod_state;
mod ports;
pub mod realnodes;
mod workloads;

pub use agent::NodeSpec;
pub use attached::Attached;
pub use dra_driver::DraTestDriver;
pub use error::{Error, Result};
pub use faults::Daemon;
pub use instance::{
    FEATURE_GATES, Instance, InstanceOptions, client_for, sweep_stale, validate_name,
};
pub use realnodes::{CDI_DIR, IMAGE, KubeletDirs, NRI_SOCKET};

/// Builds every binary an instance may need (kube-scheduler included; with `workloads`, the
/// JobSet, LWS, Trainer and Kueue controllers too); returns their folders.
pub fn prepare(workloads: bool) -> Result<Vec<std::path::PathBuf>> {
    let mut mods = vec![
        &binaries::KUBERNETES,
        &binaries::KUBE_SCHEDULER,
        &binaries::ETCD,
    ];
    if workloads {
        mods.extend([
            &binaries::JOBSET,
            &binaries::LWS,
            &binaries::TRAINER,
            &binaries::KUEUE,
        ]);
    }
    mods.into_iter().map(binaries::ensure).collect()
}
