//! Cancels external jobs whose pods are all gone (a pending gang deleted before Slurm ran it, a
//! pod force-deleted, say), so Slurm does not hold resources for nothing. A pod recreated under
//! the same name (another uid than the job's admin_comment records) does not keep its
//! predecessor's job. Shared: the scheduler
//! runs it, and so do the controllers when they run without the scheduler (split mode), since
//! components never import each other.

use crate::k8s::slim_pod::Pod;
use crate::slurm::{JobControl, JobWatcher, SlurmJobs, WatchedJob};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What a sweep reads and writes through.
pub struct Sweep<S> {
    /// For the confirming GET of each pod.
    pub client: kube::Client,
    /// For the cancels.
    pub slurm: Arc<S>,
    /// The jobs (the one job watcher).
    pub watcher: Arc<JobWatcher<S>>,
    /// The pods naming the bridge's scheduler.
    pub pods: Store<Pod>,
}

impl<S: JobControl + SlurmJobs> Sweep<S> {
    /// One sweep: candidates come from the pod cache; each is confirmed with the API server
    /// before its job is cancelled (the cache may lag). Returns the jobs cancelled.
    pub async fn once(&self) -> usize {
        let candidates: Vec<Arc<WatchedJob>> = self
            .watcher
            .index()
            .jobs()
            .filter(|j| j.is_active())
            .filter(|j| {
                j.comment.pod_names().all(|(ns, name)| {
                    self.pods
                        .get(&ObjectRef::<Pod>::new(name).within(ns))
                        .is_none_or(|p| {
                            !j.comment
                                .names_pod(&format!("{ns}/{name}"), p.metadata.uid.as_deref())
                        })
                })
            })
            .cloned()
            .collect();
        let mut cancelled = 0;
        for job in candidates {
            let mut any_left = false;
            for (ns, name) in job.comment.pod_names() {
                // A list by name, not a GET: the controllers' role may list pods, not get them.
                let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
                let key = format!("{ns}/{name}");
                match api.list_metadata(&by_name).await {
                    Ok(l)
                        if l.items
                            .iter()
                            .all(|p| !job.comment.names_pod(&key, p.metadata.uid.as_deref())) => {}
                    Ok(_) | Err(_) => {
                        any_left = true;
                        break;
                    }
                }
            }
            if any_left {
                continue;
            }
            tracing::info!(
                job_id = job.job_id,
                "cancelling external job: its pods were deleted"
            );
            match self.slurm.cancel(job.job_id).await {
                Ok(()) => {
                    cancelled += 1;
                    let _ = self.watcher.refresh(job.job_id).await;
                }
                Err(e) => tracing::warn!(job_id = job.job_id, error = %e, "cancelling failed"),
            }
        }
        cancelled
    }

    /// A sweep every `interval` (once the job watcher is synced) until `stop` reads true (a
    /// sweep in flight finishes first).
    pub async fn every(&self, interval: Duration, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if self.watcher.is_synced() {
                self.once().await;
            }
        }
    }
}
