//! Kubernetes pieces every component shares: the pod writer, Events, the short text of API
//! errors, node naming, write counts.
//!
//! Nothing here knows the scheduler, the controllers, translation or Slurm: it imports only the
//! base modules (`wellknown`, `leader`), and everything above builds on it.

pub mod api_error;
pub mod events;
pub mod node;
pub mod pod_writer;
pub mod writes;

pub use node::slurm_node_name;
pub use pod_writer::PodWriter;

use k8s_openapi::api::core::v1::Pod;

/// `ns/name` of a pod: the key every cache, lock, log line and admin_comment uses for it.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}
