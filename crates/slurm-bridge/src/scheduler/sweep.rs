//! Cancels external jobs whose pods are all gone (a pending gang deleted before Slurm ran it,
//! say), so Slurm does not hold resources for nothing.

use super::context::{Ctx, Slurm};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;

/// One sweep: candidates come from the pod cache; each is confirmed with the API server before
/// its job is cancelled (the cache may lag).
pub async fn sweep_once<S: Slurm>(ctx: &Ctx<S>) -> usize {
    let candidates: Vec<Arc<crate::slurm::WatchedJob>> = ctx
        .watcher
        .index()
        .jobs()
        .filter(|j| j.is_active())
        .filter(|j| {
            j.comment.pod_names().all(|(ns, name)| {
                ctx.pods
                    .get(&ObjectRef::<Pod>::new(name).within(ns))
                    .is_none()
            })
        })
        .cloned()
        .collect();
    let mut cancelled = 0;
    for job in candidates {
        let mut any_left = false;
        for (ns, name) in job.comment.pod_names() {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            match api.get_opt(name).await {
                Ok(None) => {}
                Ok(Some(_)) | Err(_) => {
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
        match ctx.slurm.cancel(job.job_id).await {
            Ok(()) => {
                cancelled += 1;
                let _ = ctx.watcher.refresh(job.job_id).await;
            }
            Err(e) => tracing::warn!(job_id = job.job_id, error = %e, "cancelling failed"),
        }
    }
    cancelled
}
