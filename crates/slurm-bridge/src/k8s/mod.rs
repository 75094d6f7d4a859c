//! Kubernetes pieces every component shares: the pod writer, Events, the short text of API
//! errors, node naming, pod keys and binding, write counts, the client's request limits.
//!
//! Nothing here knows the scheduler, the controllers, translation or Slurm: it imports only the
//! base modules (`wellknown`, `leader`), and everything above builds on it.

pub mod api_error;
pub mod client;
pub mod events;
pub mod fenced;
mod label_memo;
pub mod label_patch;
pub mod node;
pub mod pod;
pub mod pod_writer;
pub mod rate_limit;
pub mod selector;
pub mod slim_meta;
pub mod slim_pod;
pub mod trim;
pub mod writes;

pub use node::slurm_node_name;
pub use pod::{bound_node, is_bound, pod_key, pod_ref};
pub use pod_writer::PodWriter;
