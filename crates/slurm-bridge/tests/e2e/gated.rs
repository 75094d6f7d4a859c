//! A Slurm client that counts the scheduler's writes (and layout reads) and holds each submit at
//! a gate.

use slurm_bridge::slurm::{JobControl, SlurmJobs, SlurmNodes};
use slurm_rest::models::{JobDescMsg, JobInfo, JobStateEntry};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

/// What the scheduler asked of Slurm through a [`Gated`] client, and the gate its submits pass.
pub struct SlurmWrites {
    /// Submits that reached the client (passed the gate or waiting at it).
    pub submits_entered: watch::Sender<usize>,
    pub submitted: AtomicUsize,
    pub updated: AtomicUsize,
    pub cancelled: AtomicUsize,
    /// A submit takes a permit before it reaches Slurm.
    pub gate: Semaphore,
    /// The job of each GET /resources/{id} the scheduler made, in order.
    pub resource_reads: std::sync::Mutex<Vec<u32>>,
}

impl SlurmWrites {
    /// Submits wait at the gate until [`SlurmWrites::let_through`].
    pub fn closed() -> Arc<Self> {
        Arc::new(SlurmWrites {
            submits_entered: watch::Sender::new(0),
            submitted: AtomicUsize::new(0),
            updated: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            gate: Semaphore::new(0),
            resource_reads: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Every submit passes.
    pub fn open() -> Arc<Self> {
        let w = Self::closed();
        w.let_through(Semaphore::MAX_PERMITS);
        w
    }

    /// Lets `n` more submits through the gate.
    pub fn let_through(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// Waits until `n` submits have reached the client.
    pub async fn wait_entered(&self, n: usize, timeout: Duration) {
        let mut entered = self.submits_entered.subscribe();
        tokio::time::timeout(timeout, entered.wait_for(|e| *e >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} submit(s) within {timeout:?}"))
            .unwrap();
    }

    /// How many times the scheduler read `job_id`'s layout (GET /resources/{id}).
    pub fn resource_reads_of(&self, job_id: u32) -> usize {
        let reads = self.resource_reads.lock().unwrap();
        reads.iter().filter(|j| **j == job_id).count()
    }

    /// Submits, updates and cancels that reached Slurm.
    pub fn writes(&self) -> usize {
        self.submitted.load(Ordering::SeqCst)
            + self.updated.load(Ordering::SeqCst)
            + self.cancelled.load(Ordering::SeqCst)
    }
}

/// The real Slurm client, counting the scheduler's writes and holding each submit at a gate.
pub struct Gated {
    pub inner: slurm_rest::Client,
    pub writes: Arc<SlurmWrites>,
}

impl JobControl for Gated {
    async fn submit(&self, desc: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
        self.writes.submits_entered.send_modify(|n| *n += 1);
        self.writes
            .gate
            .acquire()
            .await
            .expect("the gate stays open")
            .forget();
        let id = JobControl::submit(&self.inner, desc).await?;
        self.writes.submitted.fetch_add(1, Ordering::SeqCst);
        Ok(id)
    }
    async fn update(&self, id: u32, desc: &JobDescMsg) -> Result<(), slurm_rest::Error> {
        self.writes.updated.fetch_add(1, Ordering::SeqCst);
        JobControl::update(&self.inner, id, desc).await
    }
    async fn cancel(&self, id: u32) -> Result<(), slurm_rest::Error> {
        self.writes.cancelled.fetch_add(1, Ordering::SeqCst);
        JobControl::cancel(&self.inner, id).await
    }
}

impl SlurmJobs for Gated {
    async fn list_jobs(&self) -> Result<Vec<JobInfo>, slurm_rest::Error> {
        SlurmJobs::list_jobs(&self.inner).await
    }
    async fn job_states(&self) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        SlurmJobs::job_states(&self.inner).await
    }
    async fn job_states_of(&self, ids: &[u32]) -> Result<Vec<JobStateEntry>, slurm_rest::Error> {
        SlurmJobs::job_states_of(&self.inner, ids).await
    }
    async fn job(&self, id: u32) -> Result<Option<JobInfo>, slurm_rest::Error> {
        SlurmJobs::job(&self.inner, id).await
    }
    async fn job_resources(
        &self,
        id: u32,
    ) -> Result<Vec<slurm_rest::models::NodeResourceLayout>, slurm_rest::Error> {
        self.writes.resource_reads.lock().unwrap().push(id);
        SlurmJobs::job_resources(&self.inner, id).await
    }
}

impl SlurmNodes for Gated {
    async fn list_nodes(&self) -> Result<Vec<slurm_rest::models::Node>, slurm_rest::Error> {
        SlurmNodes::list_nodes(&self.inner).await
    }
}
