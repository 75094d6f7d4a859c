//! The Slurm writes the scheduler makes, behind a small trait (as the original's `slurmcontrol`),
//! so reconcile logic can be unit-tested with a fake and run end to end against real Slurm.

use slurm_rest::models::JobDescMsg;
use std::future::Future;

/// Submit, update and cancel external jobs.
pub trait SchedulerSlurm: Send + Sync + 'static {
    /// Submits a job; returns its id.
    fn submit(
        &self,
        desc: &JobDescMsg,
    ) -> impl Future<Output = Result<u32, slurm_rest::Error>> + Send;
    /// Changes a pending job.
    fn update(
        &self,
        job_id: u32,
        desc: &JobDescMsg,
    ) -> impl Future<Output = Result<(), slurm_rest::Error>> + Send;
    /// Cancels a job; a job Slurm no longer knows counts as cancelled.
    fn cancel(&self, job_id: u32) -> impl Future<Output = Result<(), slurm_rest::Error>> + Send;
}

impl SchedulerSlurm for slurm_rest::Client {
    async fn submit(&self, desc: &JobDescMsg) -> Result<u32, slurm_rest::Error> {
        Ok(self.submit_job(desc).await?.job_id)
    }

    async fn update(&self, job_id: u32, desc: &JobDescMsg) -> Result<(), slurm_rest::Error> {
        self.update_job(job_id, desc).await.map(|_| ())
    }

    async fn cancel(&self, job_id: u32) -> Result<(), slurm_rest::Error> {
        match self.cancel_job(job_id, None, None).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }
}
