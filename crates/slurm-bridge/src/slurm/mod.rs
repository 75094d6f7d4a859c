//! Shared Slurm state: one job watcher and one node cache serve every pod, so the work per pod
//! does not grow with the number of jobs in Slurm.
//!
//! Every Slurm call goes through the small traits of [`traits`]; production uses
//! [`slurm_rest::Client`], unit tests a fake, and end-to-end tests real Slurm.

pub mod fenced;
pub mod instrumented;
pub mod job_index;
pub mod job_watcher;
pub mod node_cache;
pub mod sweep;
pub mod traits;

pub use fenced::Fenced;
pub use instrumented::{Instrumented, SlurmMetrics};
pub use job_index::{JobIndex, WatchedJob};
pub use job_watcher::{JobEvent, JobWatcher, JobWatcherConfig};
pub use node_cache::SlurmNodeCache;
pub use traits::{JobControl, NodeControl, Slurm, SlurmJobs, SlurmNodes};
