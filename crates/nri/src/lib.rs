//! The plugin side of containerd's NRI (Node Resource Interface), so a node agent can pin
//! containers' cpusets: the runtime asks the plugin how to adjust each container it creates, tells
//! it the containers it already runs, and takes unsolicited updates of running containers.
//!
//! The protocol, as containerd v2.4.2 speaks it (containerd/nri v0.12.3, containerd/ttrpc
//! v1.2.9): the plugin connects to the runtime's unix socket; the connection is multiplexed into
//! two logical connections; on the first the plugin serves `nri.pkg.api.v1alpha1.Plugin` over
//! ttrpc, on the second it calls `nri.pkg.api.v1alpha1.Runtime`. The framing is in `frame`, the
//! messages in [`api`].
//!
//! ```no_run
//! use nri_plugin::{Container, ContainerAdjustment, ContainerUpdate, Handler, PodSandbox, Runtime};
//! use std::sync::Arc;
//!
//! struct Pinner;
//! impl Handler for Pinner {
//!     async fn synchronize(&self, _: Vec<PodSandbox>, _: Vec<Container>) -> Vec<ContainerUpdate> {
//!         Vec::new()
//!     }
//!     async fn create_container(&self, _: PodSandbox, _: Container) -> Result<ContainerAdjustment, String> {
//!         Ok(ContainerAdjustment::cpuset("0-1"))
//!     }
//! }
//!
//! # async fn agent() {
//! let runtime = Runtime::new(); // keep a clone to re-pin: runtime.update_containers(...)
//! loop {
//!     let socket = std::path::Path::new("/var/run/nri/nri.sock");
//!     if let Err(e) = nri_plugin::run_with(socket, "slurm-bridge", "10", Arc::new(Pinner), &runtime).await {
//!         tracing::warn!(error = %e, "NRI connection ended");
//!     }
//!     tokio::time::sleep(std::time::Duration::from_secs(1)).await; // then reconnect
//! }
//! # }
//! ```

pub mod api;
mod frame;
mod plugin;

pub use api::{
    Container, ContainerAdjustment, ContainerState, ContainerUpdate, LinuxResources, PodSandbox,
};
pub use plugin::{Error, Handler, NRI_VERSION, Runtime, run, run_with};

#[cfg(test)]
mod tests;
