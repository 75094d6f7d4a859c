//! The node agent's Slurm reads: a job and its layout, kept a few seconds so the containers of
//! one pod (init containers, sidecars) and a resynchronisation of many cost one read per job.

use super::pin::JobLookup;
use crate::slurm::{SlurmJobs, WatchedJob};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an answer is reused: a running job's cores do not change.
const KEEP: Duration = Duration::from_secs(10);

/// Job reads with a short memory, for the bridge of cluster `cluster`.
pub struct JobReads<S> {
    slurm: S,
    cluster: Option<String>,
    kept: Mutex<HashMap<u32, (Instant, JobLookup)>>,
}

impl<S: SlurmJobs> JobReads<S> {
    pub fn new(slurm: S, cluster: Option<String>) -> Self {
        JobReads {
            slurm,
            cluster,
            kept: Mutex::new(HashMap::new()),
        }
    }

    /// What Slurm says of `job_id`: the job (when it is this bridge's) and, when it runs, its
    /// layout. Failures are not kept.
    pub async fn lookup(&self, job_id: u32) -> JobLookup {
        if let Some((at, l)) = self.kept().get(&job_id)
            && at.elapsed() < KEEP
        {
            return l.clone();
        }
        let found = self.read(job_id).await;
        if !matches!(found, JobLookup::Failed(_)) {
            let mut kept = self.kept();
            kept.retain(|_, (at, _)| at.elapsed() < KEEP);
            kept.insert(job_id, (Instant::now(), found.clone()));
        }
        found
    }

    async fn read(&self, job_id: u32) -> JobLookup {
        let info = match self.slurm.job(job_id).await {
            Ok(Some(info)) => info,
            Ok(None) => return JobLookup::Unknown,
            Err(e) => return JobLookup::Failed(e.to_string()),
        };
        let Some(job) = WatchedJob::from_info_of(&info, self.cluster.as_deref()) else {
            return JobLookup::Unknown;
        };
        let layout = if job.is_running() {
            match self.slurm.job_resources(job_id).await {
                Ok(l) => l,
                Err(e) => return JobLookup::Failed(e.to_string()),
            }
        } else {
            Vec::new()
        };
        JobLookup::Found { job, layout }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (Instant, JobLookup)>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}
