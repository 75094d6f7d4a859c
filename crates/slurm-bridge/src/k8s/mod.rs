//! Kubernetes pieces every component shares: the pod writer, Events, the short text of API
//! errors, node naming, write counts.
//!
//! Nothing here knows the scheduler or the controllers; both build on it.

pub mod api_error;
pub mod events;
pub mod node;
pub mod pod_writer;
pub mod writes;

pub use node::slurm_node_name;
pub use pod_writer::PodWriter;
