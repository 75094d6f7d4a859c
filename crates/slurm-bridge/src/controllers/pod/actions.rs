//! The pod controller's writes: remove a pod as preemption does, cancel a job, release a
//! finalizer.

use super::decide::{Cause, JobView};
use super::{PodCtx, PodError};
use crate::k8s::slim_pod::Pod;
use crate::slurm::Slurm;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

/// The condition type kube-scheduler's preemption and the eviction API set before a delete.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// `pods/status` patch kind, as counted in the write metrics.
const WRITE_DISRUPTION: &str = "disruption";
/// Pod deletion, as counted in the write metrics.
const WRITE_DELETE: &str = "delete";

/// True when the pod carries a `DisruptionTarget=True` condition.
pub fn is_disrupted(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == DISRUPTION_TARGET && c.status == "True")
        })
}

/// The kubelet's refusal of a pod, as (reason, message): phase Failed with the message the
/// kubelet writes when its admission rejects a pod (`Pod was rejected: Node didn't have enough
/// resource: cpu, ...`, reason `OutOfcpu`; `OutOfmemory`, `OutOfpods`, `NodeAffinity`, ...).
pub fn kubelet_rejection(pod: &Pod) -> Option<(&str, &str)> {
    let status = pod.status.as_ref()?;
    let message = status.message.as_deref()?;
    (status.phase.as_deref() == Some("Failed") && message.starts_with("Pod was rejected"))
        .then(|| (status.reason.as_deref().unwrap_or("Rejected"), message))
}

/// What a pod the kubelet rejected is told when its finalizer is released (its job has been
/// cancelled, or another pod of the job keeps it).
pub fn rejected_message(pod: &Pod) -> String {
    let (reason, message) = kubelet_rejection(pod).unwrap_or(("Rejected", ""));
    let node = crate::k8s::bound_node(pod).unwrap_or("its node");
    let job = crate::workload::kinds::jobid_label(pod).unwrap_or("?");
    format!(
        "the kubelet on {node} refused the pod Slurm placed there ({reason}: {message}); \
         Slurm's node offers more than the kubelet's allocatable. Slurm job {job} is released \
         and the pod, Failed, is not submitted again: recreate it (or let its owner) once the \
         node's Slurm CPUs and memory match the kubelet's allocatable"
    )
}

/// The Warning Event `KubeletRejected` on a pod the kubelet refused.
pub async fn rejected_event<S: Slurm>(ctx: &PodCtx<S>, pod: &Pod) {
    let text = rejected_message(pod);
    tracing::warn!(pod = %super::pod_key(pod), "{text}");
    ctx.writer
        .event_for(
            "Releasing",
            &ctx.metrics.kube_writes,
            pod,
            true,
            Cause::KubeletRejected.reason(),
            text,
        )
        .await;
}

/// What the pod is told: the Slurm job, its state and Slurm's reason.
pub fn message(job: &JobView, cause: Cause) -> String {
    match job {
        JobView::NoLabel => format!(
            "the pod is bound but has no {} label: no Slurm job holds its node",
            crate::wellknown::LABEL_SLURM_JOBID
        ),
        JobView::Unknown(id) => format!("Slurm does not know job {id}, which held the pod's node"),
        JobView::Known(j) if cause == Cause::GroupMemberDeleted => format!(
            "another pod of the group of Slurm job {} was deleted: the group is removed, and the \
             job ends once all its pods have stopped",
            j.job_id
        ),
        JobView::Known(j) if cause == Cause::NodeLost => format!(
            "the pod's node is gone or NotReady beyond the grace period; Slurm job {} is released",
            j.job_id
        ),
        JobView::Known(j) => {
            let state: Vec<&str> = j.state.iter().map(|s| s.as_str()).collect();
            format!(
                "Slurm job {} is {} (reason: {}): the pod may not keep its node",
                j.job_id,
                state.join(","),
                j.state_reason.as_deref().unwrap_or("None")
            )
        }
    }
}

/// Removes a pod whose job does not run, as kube-scheduler's preemption does: the
/// `DisruptionTarget` condition naming the cause, an Event with Slurm's view, then a delete with
/// the pod's own grace period.
pub async fn remove<S: Slurm>(
    ctx: &PodCtx<S>,
    pod: &Pod,
    job: &JobView<'_>,
    cause: Cause,
) -> Result<(), PodError> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let name = pod.name_any();
    let text = message(job, cause);
    tracing::info!(pod = %super::pod_key(pod), job_id = ?job.job_id(), reason = cause.reason(), "removing pod: {text}");
    if !is_disrupted(pod) {
        let condition = (DISRUPTION_TARGET, true, cause.reason(), text.as_str());
        if !patch_condition(ctx, pod, condition, WRITE_DISRUPTION).await? {
            return Ok(());
        }
        ctx.writer
            .event_for(
                "Deleting",
                &ctx.metrics.kube_writes,
                pod,
                true,
                cause.reason(),
                text,
            )
            .await;
    }
    ctx.metrics.kube_writes.inc(WRITE_DELETE);
    // The UID precondition: never delete a namesake created since.
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.pod_removed(cause.label());
    Ok(())
}

/// Cancels a job whose pods are all finished; a job that ended meanwhile counts as cancelled.
pub async fn cancel<S: Slurm>(ctx: &PodCtx<S>, job_id: u32, cause: Cause) -> Result<(), PodError> {
    tracing::info!(
        job_id,
        cause = cause.label(),
        "cancelling Slurm job: no pod of it runs any more"
    );
    if let Err(e) = ctx.caches.slurm.cancel(job_id).await {
        // Slurm refuses to cancel a job that is already completing or done.
        let ended = ctx
            .caches
            .jobs
            .refresh(job_id)
            .await?
            .is_none_or(|j| !j.is_active());
        if !ended {
            return Err(e.into());
        }
    } else {
        ctx.metrics.job_cancelled(cause.label());
        ctx.caches.jobs.refresh(job_id).await?;
    }
    Ok(())
}

/// Drops the bridge finalizer so the pod can go, after deleting the DRA ResourceClaim the
/// scheduler made for it (reference §6.1; the claim goes first, so a failed delete keeps the
/// finalizer and is retried while the pod still names the claim).
pub async fn release<S: Slurm>(ctx: &PodCtx<S>, pod: &Pod) -> Result<(), PodError> {
    crate::dra::claims::delete_pod_claim(&ctx.client, pod).await?;
    ctx.writer
        .remove_finalizer(&ctx.metrics.kube_writes, pod)
        .await?;
    tracing::debug!(pod = %super::pod_key(pod), "finalizer released");
    Ok(())
}

/// `pods/status` patch of the `SlurmJobLost` condition, as counted in the write metrics.
const WRITE_JOB_LOST: &str = "job_lost";

/// Sets the pod condition `SlurmJobLost` (`held`: True) with `reason` and `text`, then
/// publishes `text` as an Event (Warning when held), unless the pod is gone.
async fn mark_lost<S: Slurm>(
    ctx: &PodCtx<S>,
    pod: &Pod,
    held: bool,
    reason: &str,
    text: String,
) -> Result<(), PodError> {
    let condition = (
        crate::controllers::state_loss::CONDITION,
        held,
        reason,
        text.as_str(),
    );
    if !patch_condition(ctx, pod, condition, WRITE_JOB_LOST).await? {
        return Ok(());
    }
    ctx.writer
        .event_for("Keeping", &ctx.metrics.kube_writes, pod, held, reason, text)
        .await;
    Ok(())
}

/// Sets one pod condition, `(type, status, reason, message)`, counted as a `write` of that
/// kind: a strategic merge patch keyed by type, so the other conditions stay as they are.
/// False when the pod is gone.
async fn patch_condition<S: Slurm>(
    ctx: &PodCtx<S>,
    pod: &Pod,
    (kind, status, reason, message): (&str, bool, &str, &str),
    write: &'static str,
) -> Result<bool, PodError> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let patch = json!({"status": {"conditions": [{
        "type": kind,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }]}});
    ctx.metrics.kube_writes.inc(write);
    let params = PatchParams {
        field_manager: Some(format!("{}-controllers", ctx.opts.scheduler_name)),
        ..Default::default()
    };
    match api
        .patch_status(&pod.name_any(), &params, &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Keeps a pod whose job Slurm does not know (state-loss hold): the condition
/// `SlurmJobLost=True` with the census, and one Warning Event (the condition marks it done, so
/// a restarted controller does not repeat it).
pub async fn hold<S: Slurm>(
    ctx: &PodCtx<S>,
    pod: &Pod,
    job_id: u32,
    census: &crate::controllers::state_loss::Census,
) -> Result<(), PodError> {
    use crate::controllers::state_loss::REASON_HELD;
    let text = census.message(job_id);
    tracing::warn!(pod = %super::pod_key(pod), job_id, "keeping pod: {text}");
    mark_lost(ctx, pod, true, REASON_HELD, text).await
}

/// Lifts the hold of a pod whose job Slurm knows again: `SlurmJobLost=False` and a Normal
/// Event.
pub async fn unhold<S: Slurm>(ctx: &PodCtx<S>, pod: &Pod, job_id: u32) -> Result<(), PodError> {
    use crate::controllers::state_loss::REASON_FOUND;
    let text = format!("Slurm knows job {job_id} again: the pod is no longer held");
    tracing::info!(pod = %super::pod_key(pod), job_id, "{text}");
    mark_lost(ctx, pod, false, REASON_FOUND, text).await
}
