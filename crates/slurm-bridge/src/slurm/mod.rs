//! Shared Slurm state: one job watcher and one node cache serve every pod, so the work per pod
//! does not grow with the number of jobs in Slurm.
//!
//! Slurm I/O goes through the small [`SlurmJobs`] and [`SlurmNodes`] traits; production uses
//! [`slurm_rest::Client`], unit tests a fake, and end-to-end tests real Slurm.

pub mod job_index;
pub mod job_watcher;
pub mod node_cache;
pub mod node_control;

use slurm_rest::models::{JobInfo, JobStateEntry, Node};
use std::future::Future;

pub use job_index::{JobIndex, WatchedJob};
pub use job_watcher::{JobEvent, JobWatcher, JobWatcherConfig};
pub use node_cache::SlurmNodeCache;

/// The Slurm job reads the watcher makes.
pub trait SlurmJobs: Send + Sync + 'static {
    /// Every job with every field (once, at start).
    fn list_jobs(&self) -> impl Future<Output = Result<Vec<JobInfo>, slurm_rest::Error>> + Send;
    /// Id and state of every job (the cheap poll).
    fn job_states(
        &self,
    ) -> impl Future<Output = Result<Vec<JobStateEntry>, slurm_rest::Error>> + Send;
    /// One job; `None` when Slurm no longer knows it.
    fn job(
        &self,
        job_id: u32,
    ) -> impl Future<Output = Result<Option<JobInfo>, slurm_rest::Error>> + Send;
}

/// The Slurm node reads the node cache makes.
pub trait SlurmNodes: Send + Sync + 'static {
    /// Every node.
    fn list_nodes(&self) -> impl Future<Output = Result<Vec<Node>, slurm_rest::Error>> + Send;
}

impl SlurmJobs for slurm_rest::Client {
    async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
        Ok(self.jobs(None).await?.jobs)
    }

    async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        slurm_rest::Client::job_states(self).await
    }

    async fn job(&self, job_id: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
        match slurm_rest::Client::job(self, job_id).await {
            Ok(job) => Ok(Some(job)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl SlurmNodes for slurm_rest::Client {
    async fn list_nodes(&self) -> Result<Vec<Node>, slurm_rest::Error> {
        self.nodes().await
    }
}
