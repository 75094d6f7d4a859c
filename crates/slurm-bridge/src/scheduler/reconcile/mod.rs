//! One scheduling pass for a pod, and through it for its whole group: translate, wait for the
//! gang, find or submit the group's one external job, keep it up to date while pending, and bind
//! every pod of the group once Slurm allocates.
//!
//! Where each part of a pass is:
//! - this file: the entry ([`reconcile`]), its errors and backoff, a pod deleted before binding;
//! - `rules`: what a pass does, from the gang status and the group's job (`rules::step`);
//! - `submit`: a pod group turned into a Slurm job (find it, or build and submit it; label pods);
//! - `waiting`: a pending, suspended or shrunk group's job, an incomplete gang;
//! - `allocated`: an allocated job's group seen to (PodGroup marking, pods the allocation leaves out);
//! - `bind`: an allocation turned into bound pods (node mapping, assignment, DRA claims);
//! - `volumes`: the group's PersistentVolumeClaims (nodes excluded before submit, PVs reserved
//!   or nodes selected before binding);
//! - `report`: PodScheduled=False and Events on the pod.
//!
//! PodGroupScheduled on a built-in PodGroup is [`super::podgroup`].

mod allocated;
mod bind;
mod report;
mod rules;
mod submit;
#[cfg(test)]
mod tests;
mod volumes;
mod waiting;

use crate::dra::claims::ClaimError;
use crate::k8s::is_bound;
use crate::k8s::slim_pod::Pod;
use crate::scheduler::assign::AssignError;
use crate::scheduler::context::{Ctx, Slurm};
use crate::scheduler::runner::Action;
use crate::slurm::WatchedJob;
use crate::workload::ir::pod_key;
use crate::workload::kinds::is_terminal;
use crate::workload::{GangStatus, TranslateError, Translation, translate};
use allocated::{alone_job, bind_group, schedule_alone};
use report::translation_failed;
use rules::{Step, step};
use std::sync::Arc;
use std::time::Duration;
use submit::{find_job, submit};
use tracing::Instrument;
use waiting::{not_ready, pending, shrunk_while_pending, suspended};

/// Why a pass failed; the pod is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API: {}", crate::k8s::api_error::Brief(.0))]
    Kube(#[from] kube::Error),
    #[error("Slurm: {0}")]
    Slurm(#[from] slurm_rest::Error),
    #[error("{0}")]
    Translate(#[from] TranslateError),
    #[error("{0}")]
    Assign(#[from] AssignError),
    #[error("{0}")]
    Claim(#[from] ClaimError),
    #[error("{0}")]
    Volume(#[from] crate::volumes::VolumeError),
    #[error("Slurm job {job_id} has a malformed node list {nodes:?}: {message}")]
    NodeList {
        job_id: u32,
        nodes: String,
        message: String,
    },
}

/// Reconciles one pod (and its group).
pub async fn reconcile<S: Slurm>(
    pod: Arc<Pod>,
    ctx: Arc<Ctx<S>>,
) -> Result<Action, ReconcileError> {
    // Every line a pass logs carries the pod, and the group once it is known.
    let span = tracing::info_span!(
        "scheduling_pass",
        pod = %pod_key(&pod),
        group = tracing::field::Empty
    );
    pass(pod, ctx).instrument(span).await
}

async fn pass<S: Slurm>(pod: Arc<Pod>, ctx: Arc<Ctx<S>>) -> Result<Action, ReconcileError> {
    tracing::trace!("pass started");
    if !ctx.may_start_pass() {
        // The passes run only while this replica leads (scheduler/lifecycle.rs) and are dropped
        // when leadership is lost; a pass that starts in between, or once a shutdown has begun,
        // does nothing (the next leader or the next start passes over the pod again).
        return Ok(Action::await_change());
    }
    if !is_bound(&pod) && pod.metadata.deletion_timestamp.is_some() {
        return release_deleted(&ctx, &pod).await;
    }
    if is_bound(&pod) || pod.metadata.deletion_timestamp.is_some() || is_terminal(&pod) {
        return Ok(Action::await_change());
    }
    let key = pod_key(&pod);
    let read_at = ctx.locks.ticket();
    let mut tr = match translate(&ctx.reader, &pod).await {
        Ok(t) => t,
        Err(e) => return translation_failed(&ctx, &pod, e).await,
    };
    tracing::Span::current().record("group", tracing::field::display(&tr.group_key));
    let group = ctx.locks.lock(&tr.group_key, read_at).await;
    if group.waited && !ctx.may_start_pass() {
        // It waited for another pass of its group into a shutdown: it has done nothing yet.
        return Ok(Action::await_change());
    }
    if group.waited {
        // Another pass of this group ran since the read (labelled, bound, submitted for members
        // this read had not seen yet...): read the group again.
        tr = match translate(&ctx.reader, &pod).await {
            Ok(t) if t.group_key == tr.group_key => t,
            Ok(_) => return Ok(Action::requeue(Duration::from_millis(100))),
            Err(e) => return translation_failed(&ctx, &pod, e).await,
        };
        if tr.ir.pods.iter().any(|p| pod_key(p) == key && is_bound(p)) {
            return Ok(Action::await_change());
        }
    }
    if tr.ir.pods.iter().any(is_gated) {
        // As kube-scheduler: a pod with scheduling gates is not scheduled (kube-apiserver refuses
        // to bind it), and neither is its group; removing the last gate is a pod update.
        return Ok(Action::await_change());
    }
    let gang = gang_by_membership(&tr.gang, tr.ir.pods.len());
    let action = match alone_job(&ctx, &tr, &pod) {
        // The pod was left out of its group's allocation and has a job of its own.
        Some((alone, job)) => schedule_alone(&ctx, &pod, &alone, Some(job)).await?,
        None => {
            let job = find_job(&ctx, &tr).await;
            schedule(&ctx, &pod, &tr, &gang, job).await?
        }
    };
    ctx.succeeded(&key);
    Ok(action)
}

/// Runs the step the rules choose for the group ([`rules::step`]) with its job.
pub(super) async fn schedule<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    gang: &GangStatus,
    group_job: Option<Arc<WatchedJob>>,
) -> Result<Action, ReconcileError> {
    let step = step(gang, group_job.as_deref(), &pod_key(pod));
    match (step, group_job) {
        (Step::Submit, _) => submit(ctx, pod, tr).await,
        (Step::NotReady, _) => Ok(not_ready(ctx, pod, tr, gang).await),
        (Step::Recheck, _) => Ok(Action::requeue(Duration::from_secs(2))),
        (Step::Bind, Some(job)) => bind_group(ctx, pod, tr, gang, &job).await,
        (Step::Suspended, Some(job)) => Ok(suspended(ctx, pod, &job).await),
        (Step::Pending, Some(job)) => pending(ctx, pod, tr, &job).await,
        (Step::CancelShrunk, Some(job)) => shrunk_while_pending(ctx, pod, tr, gang, &job).await,
        // Every step but Submit and NotReady comes with a job.
        (_, None) => Ok(Action::requeue(Duration::from_secs(2))),
    }
}

/// A pod deleted before it was bound: cancel its job unless another live pod of the job still
/// needs it, then remove the bridge finalizer so the deletion completes (bound pods are the pod
/// controller's business).
async fn release_deleted<S: Slurm>(ctx: &Ctx<S>, pod: &Pod) -> Result<Action, ReconcileError> {
    let key = pod_key(pod);
    let jobs = ctx.watcher.index().active_for_pod(&key);
    for job in jobs {
        let mut others_alive = false;
        for (ns, name) in job.comment.pod_names() {
            if format!("{ns}/{name}") == key {
                continue;
            }
            let api: kube::Api<Pod> = kube::Api::namespaced(ctx.client.clone(), ns);
            if let Some(p) = api.get_opt(name).await?
                && p.metadata.deletion_timestamp.is_none()
                && !is_terminal(&p)
            {
                others_alive = true;
                break;
            }
        }
        if !others_alive {
            tracing::info!(
                job_id = job.job_id,
                "pod deleted before it ran; cancelling its job"
            );
            ctx.slurm.cancel(job.job_id).await?;
            ctx.watcher.refresh(job.job_id).await?;
        }
    }
    ctx.writer
        .remove_finalizer(&ctx.metrics.kube_writes, pod)
        .await?;
    Ok(Action::await_change())
}

/// Backoff per pod; the error is also shown on the pod when it is Slurm's.
pub fn error_policy<S: Slurm>(pod: Arc<Pod>, err: &ReconcileError, ctx: Arc<Ctx<S>>) -> Action {
    let key = pod_key(&pod);
    let delay = ctx.backoff(&key);
    // A pod deleted meanwhile is not retried: drop its count. Checked after counting, so a
    // deletion seen in between is not undone.
    if !ctx.is_cached(&key) {
        ctx.forget_pod(&key);
    }
    tracing::warn!(pod = %key, error = %err, retry_in = ?delay, "scheduling failed");
    Action::requeue(delay)
}

/// Gang completeness from the group's live pods. The reference counts the pods that carry the
/// translated pod's job id label, but labels are written pod by pod after a submit: a gang member
/// reconciled in between saw "1 of 3" and cancelled the fresh job. Which pods a job stands for is
/// its admin_comment's business; the gang is complete when enough pods exist.
pub(super) fn gang_by_membership(gang: &GangStatus, pods: usize) -> GangStatus {
    match gang {
        GangStatus::Incomplete { required, .. } if pods >= *required => GangStatus::Complete,
        GangStatus::Incomplete { required, .. } => GangStatus::Incomplete {
            ready: pods,
            required: *required,
            job_id: None,
        },
        other => other.clone(),
    }
}

/// True when the pod still has `spec.schedulingGates`.
fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}
