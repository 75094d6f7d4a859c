//! One scheduling pass for a pod, and through it for its whole group: translate, wait for the
//! gang, find or submit the group's one external job, keep it up to date while pending, and bind
//! every pod of the group once Slurm allocates.

use super::assign::{self, AssignError};
use super::context::{Ctx, Slurm};
use super::feasibility::slurm_node_name;
use super::pod_ops::reason;
use crate::slurm::WatchedJob;
use crate::wellknown::{ANNOTATION_SLURM_NODE, LABEL_SLURM_JOBID};
use crate::workload::admin_comment::AdminComment;
use crate::workload::ir::pod_key;
use crate::workload::job_desc::admin_comment;
use crate::workload::kinds::is_terminal;
use crate::workload::{GangStatus, TranslateError, Translation, kind, translate};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use slurm_rest::ErrorKind;
use slurm_rest::models::JobState;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

/// Why a pass failed; the pod is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("Slurm: {0}")]
    Slurm(#[from] slurm_rest::Error),
    #[error("{0}")]
    Translate(#[from] TranslateError),
    #[error("{0}")]
    Assign(#[from] AssignError),
    #[error("Slurm job {job_id} has a malformed node list {nodes:?}: {message}")]
    NodeList {
        job_id: u32,
        nodes: String,
        message: String,
    },
}

/// How long a job submitted by this scheduler may be pending before its pods show
/// `SlurmJobPending`: Slurm starts most jobs within this, often in its next scheduling cycle.
const PENDING_REPORT_DELAY: Duration = Duration::from_secs(5);

/// Reconciles one pod (and its group).
pub async fn reconcile<S: Slurm>(
    pod: Arc<Pod>,
    ctx: Arc<Ctx<S>>,
) -> Result<Action, ReconcileError> {
    if !ctx.is_leader() {
        // The controller runs only while this replica leads (scheduler/mod.rs) and is dropped
        // when leadership is lost; a pass that starts in between does nothing.
        return Ok(Action::await_change());
    }
    if !is_bound(&pod) && pod.metadata.deletion_timestamp.is_some() {
        return release_deleted(&ctx, &pod).await;
    }
    if is_bound(&pod) || pod.metadata.deletion_timestamp.is_some() || is_terminal(&pod) {
        return Ok(Action::await_change());
    }
    let key = pod_key(&pod);
    let mut tr = match translate(&ctx.reader, &pod).await {
        Ok(t) => t,
        Err(e) => return translation_failed(&ctx, &pod, e).await,
    };
    let group = ctx.locks.lock(&tr.group_key).await;
    if group.waited {
        // Another pass of this group ran meanwhile (labelled, bound...): read the group again.
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
    let job = find_job(&ctx, &tr).await;
    let action = match (&gang, job) {
        (GangStatus::Complete, None) => submit(&ctx, &pod, &tr).await?,
        (GangStatus::Complete, Some(job)) if job.allocated_nodes().is_some() => {
            bind_group(&ctx, &pod, &tr, &job).await?
        }
        (GangStatus::Complete, Some(job)) if job.is_pending() => {
            pending(&ctx, &pod, &tr, &job).await?
        }
        (GangStatus::Complete, Some(job)) if job.is_suspended() => {
            suspended(&ctx, &pod, &job).await
        }
        (GangStatus::Complete, Some(_)) => Action::requeue(Duration::from_secs(2)),
        (gang, job) => gang_not_ready(&ctx, &pod, &tr, gang, job).await?,
    };
    ctx.succeeded(&key);
    Ok(action)
}

/// A pod deleted before it was bound: cancel its job unless another live pod of the job still
/// needs it, then remove the bridge finalizer so the deletion completes (bound pods are the pod
/// controller's business).
async fn release_deleted<S: Slurm>(ctx: &Ctx<S>, pod: &Pod) -> Result<Action, ReconcileError> {
    let key = pod_key(pod);
    let jobs = ctx.watcher.index().active_for_pod(&key);
    for job in jobs {
        let mut others_alive = false;
        for (ns, name) in comment_pods(&job.comment) {
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
            tracing::info!(job_id = job.job_id, pod = %key, "pod deleted before it ran; cancelling its job");
            ctx.slurm.cancel(job.job_id).await?;
            ctx.watcher.refresh(job.job_id).await?;
        }
    }
    ctx.writer
        .remove_finalizer(&ctx.metrics.kube_writes, pod)
        .await?;
    Ok(Action::await_change())
}

/// Gang completeness from the group's live pods. The reference counts the pods that carry the
/// translated pod's job id label, but labels are written pod by pod after a submit: a gang member
/// reconciled in between saw "1 of 3" and cancelled the fresh job. Which pods a job stands for is
/// its admin_comment's business; the gang is complete when enough pods exist.
fn gang_by_membership(gang: &GangStatus, pods: usize) -> GangStatus {
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

fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

async fn translation_failed<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    e: TranslateError,
) -> Result<Action, ReconcileError> {
    let transient = matches!(
        &e,
        TranslateError::Read(crate::workload::ReadError::Other { .. })
    );
    let why = if matches!(e, TranslateError::Annotations { .. }) {
        reason::INVALID_ANNOTATION
    } else {
        reason::TRANSLATION_FAILED
    };
    let message = e.to_string();
    report(ctx, pod, why, &message).await;
    if transient {
        return Err(e.into());
    }
    // The fix is an edit (of the pod, or of its Job, JobSet, ...): look again now and then.
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// Shows a scheduling problem on the pod: the PodScheduled=False condition and a Warning event
/// (only when the condition changes, so a waiting pod does not collect thousands of events).
async fn report<S: Slurm>(ctx: &Ctx<S>, pod: &Pod, why: &str, message: &str) {
    match ctx
        .writer
        .set_unschedulable(&ctx.metrics.kube_writes, pod, why, message)
        .await
    {
        Ok(true) => {}
        // The pod already shows it: no second event.
        Ok(false) => return,
        Err(e) => {
            tracing::debug!(pod = %pod_key(pod), error = %e, "setting PodScheduled failed");
        }
    }
    let warning = ![
        reason::SLURM_JOB_PENDING,
        reason::SLURM_JOB_SUSPENDED,
        reason::WAITING_FOR_GANG,
    ]
    .contains(&why);
    ctx.writer
        .event(
            &ctx.metrics.kube_writes,
            pod,
            warning,
            why,
            message.to_string(),
        )
        .await;
}

/// The group's active job, if any. Jobs made by the Go original carry no group key and are found
/// through their pods. Duplicates (never made by this scheduler, but possible after a crash of
/// the original) are cancelled, keeping an allocated one or else the oldest.
async fn find_job<S: Slurm>(ctx: &Ctx<S>, tr: &Translation) -> Option<Arc<WatchedJob>> {
    let mut jobs = ctx.watcher.index().active_for_group(&tr.group_key);
    if jobs.is_empty() {
        let index = ctx.watcher.index();
        for pod in &tr.ir.pods {
            for j in index.active_for_pod(&pod_key(pod)) {
                if j.comment.group.is_none() && !jobs.iter().any(|x| x.job_id == j.job_id) {
                    jobs.push(j);
                }
            }
        }
    }
    jobs.sort_by_key(|j| (j.allocated_nodes().is_none(), j.job_id));
    let mut jobs = jobs.into_iter();
    let keep = jobs.next();
    for dup in jobs {
        tracing::warn!(job_id = dup.job_id, group = %tr.group_key, "cancelling a duplicate external job");
        if let Err(e) = ctx.slurm.cancel(dup.job_id).await {
            tracing::warn!(job_id = dup.job_id, error = %e, "cancelling a duplicate job failed");
        }
    }
    keep
}

fn desc_hash(desc: &slurm_rest::models::JobDescMsg) -> u64 {
    let text = serde_json::to_string(desc).unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// `desc` as an update of a pending job sends it (and as its hash is remembered at submit). An
/// update changes only what it names, so an exclusion made while fewer nodes were schedulable
/// must be cleared explicitly: slurmrestd reads `[]` as "unchanged" and `[""]` as an empty
/// ExcNodeList (tried on Slurm 26.05).
fn as_update(mut desc: slurm_rest::models::JobDescMsg) -> slurm_rest::models::JobDescMsg {
    desc.excluded_nodes
        .get_or_insert_with(|| vec![String::new()]);
    desc
}

/// The job description for the group, restricted to nodes Kubernetes can use; `Err` carries a
/// user message when too few nodes are feasible.
fn job_desc<S: Slurm>(
    ctx: &Ctx<S>,
    tr: &Translation,
) -> Result<slurm_rest::models::JobDescMsg, String> {
    let placement = ctx.placement(&tr.ir.pods);
    let needed = tr.ir.pods.len();
    if placement.feasible < needed {
        return Err(format!(
            "{}/{} nodes are available for {needed} pod(s) of {}{}{}",
            placement.feasible,
            placement.nodes,
            tr.group_key,
            if placement.rejections.is_empty() {
                ""
            } else {
                ": "
            },
            placement.rejections
        ));
    }
    Ok(tr.to_job_desc(&ctx.config, &placement.excluded))
}

async fn submit<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
) -> Result<Action, ReconcileError> {
    let desc = match job_desc(ctx, tr) {
        Ok(d) => d,
        Err(message) => {
            report(ctx, pod, reason::NO_FEASIBLE_NODES, &message).await;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
    };
    let job_id = match ctx.slurm.submit(&desc).await {
        Ok(id) => id,
        Err(e) => return slurm_failed(ctx, pod, reason::SLURM_SUBMIT_FAILED, e).await,
    };
    ctx.metrics.submitted(job_id);
    ctx.sent
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(job_id, desc_hash(&as_update(desc.clone())));
    ctx.watcher.record(WatchedJob {
        job_id,
        state: vec![JobState::Pending],
        state_reason: None,
        nodes: None,
        comment: admin_comment(&tr.ir, &tr.group_key),
    });
    tracing::info!(job_id, group = %tr.group_key, pods = tr.ir.pods.len(), "submitted external job");
    // No Event for the submit: the label names the job, and the pod's next Event does too
    // (`Scheduled`, or `SlurmJobPending` with Slurm's reason while it waits).
    label_all(ctx, tr, job_id).await?;
    // The watcher reports the allocation; look again anyway after a while.
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// Labels every pod of the group with the job id (plus finalizer and toleration), in parallel.
async fn label_all<S: Slurm>(
    ctx: &Ctx<S>,
    tr: &Translation,
    job_id: u32,
) -> Result<(), ReconcileError> {
    let results = futures::future::join_all(tr.ir.pods.iter().map(|p| {
        let stale = p
            .labels()
            .get(LABEL_SLURM_JOBID)
            .is_some_and(|l| *l != job_id.to_string());
        ctx.writer.label(&ctx.metrics.kube_writes, p, job_id, stale)
    }))
    .await;
    for r in results {
        match r {
            Ok(()) => {}
            // A pod deleted meanwhile: its job is corrected on the next pass.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn slurm_failed<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    why: &str,
    e: slurm_rest::Error,
) -> Result<Action, ReconcileError> {
    let why = if e.is_transient() {
        reason::SLURM_UNAVAILABLE
    } else {
        why
    };
    report(ctx, pod, why, &e.to_string()).await;
    Err(e.into())
}

async fn pending<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    job: &WatchedJob,
) -> Result<Action, ReconcileError> {
    if let Ok(desc) = job_desc(ctx, tr).map(as_update) {
        let hash = desc_hash(&desc);
        let sent = ctx
            .sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&job.job_id)
            .copied();
        if sent != Some(hash) {
            match ctx.slurm.update(job.job_id, &desc).await {
                Ok(()) => {
                    ctx.sent
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(job.job_id, hash);
                    let mut updated = job.clone();
                    updated.comment = admin_comment(&tr.ir, &tr.group_key);
                    ctx.watcher.record(updated);
                    tracing::info!(job_id = job.job_id, group = %tr.group_key, "updated pending external job");
                }
                Err(e) if e.kind() == ErrorKind::JobNotPending => {
                    // It started meanwhile: bind from the fresh allocation.
                    if let Some(fresh) = ctx.watcher.refresh(job.job_id).await?
                        && fresh.allocated_nodes().is_some()
                    {
                        return bind_group(ctx, pod, tr, &fresh).await;
                    }
                    return Ok(Action::requeue(Duration::from_secs(1)));
                }
                Err(e) => return slurm_failed(ctx, pod, reason::SLURM_SUBMIT_FAILED, e).await,
            }
        }
    }
    label_all(ctx, tr, job.job_id).await?;
    // Shown once Slurm has given a reason (a just-submitted job is usually allocated before).
    match job.state_reason.as_deref().filter(|r| *r != "None") {
        Some(_)
            if let Some(ago) = ctx.metrics.submitted_ago(job.job_id)
                && ago < PENDING_REPORT_DELAY =>
        {
            // Not yet: a job Slurm starts a moment later would cost each pod a condition and an
            // Event for nothing. The allocation, if it comes first, triggers the bind.
            Ok(Action::requeue(PENDING_REPORT_DELAY - ago))
        }
        Some(why) => {
            let message = format!("Slurm job {} is pending: {why}", job.job_id);
            report(ctx, pod, reason::SLURM_JOB_PENDING, &message).await;
            Ok(Action::requeue(Duration::from_secs(30)))
        }
        // The watcher reports the reason (or the allocation) when it comes.
        None => Ok(Action::requeue(Duration::from_secs(30))),
    }
}

/// The group's job is suspended: it is still the group's job (no second one is submitted), but
/// its pods are not bound until it resumes; the watcher's event for the resume triggers the bind.
async fn suspended<S: Slurm>(ctx: &Ctx<S>, pod: &Pod, job: &WatchedJob) -> Action {
    let message = format!(
        "Slurm job {} is suspended; the pod is bound when it resumes",
        job.job_id
    );
    report(ctx, pod, reason::SLURM_JOB_SUSPENDED, &message).await;
    Action::requeue(Duration::from_secs(30))
}

async fn gang_not_ready<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    gang: &GangStatus,
    job: Option<Arc<WatchedJob>>,
) -> Result<Action, ReconcileError> {
    let shrank = job.is_some();
    if let Some(job) = job {
        // The gang shrank below its minimum: the job no longer stands for a runnable group.
        tracing::info!(job_id = job.job_id, group = %tr.group_key, "gang below its minimum; cancelling its job");
        ctx.slurm.cancel(job.job_id).await?;
        ctx.watcher.refresh(job.job_id).await?;
        for p in &tr.ir.pods {
            if p.labels().get(LABEL_SLURM_JOBID) == Some(&job.job_id.to_string()) {
                ctx.writer.clear_job(&ctx.metrics.kube_writes, p).await?;
            }
        }
    }
    let (why, message) = match gang {
        GangStatus::Closed { .. } => (reason::POD_GROUP_CLOSED, gang.message()),
        GangStatus::Incomplete {
            ready, required, ..
        } => (
            reason::WAITING_FOR_GANG,
            format!(
                "{}: {ready} of {required} pods of {}{}",
                gang.message(),
                tr.group_key,
                if shrank {
                    " (the gang shrank below its minimum; its Slurm job was cancelled)"
                } else {
                    ""
                }
            ),
        ),
        GangStatus::Complete => (reason::WAITING_FOR_GANG, gang.message()),
    };
    report(ctx, pod, why, &message).await;
    // Arrivals of the other pods reconcile the group; look again now and then regardless.
    Ok(Action::requeue(Duration::from_secs(30)))
}

async fn bind_group<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    job: &WatchedJob,
) -> Result<Action, ReconcileError> {
    let nodes = job.allocated_nodes().unwrap_or_default();
    let slurm_names =
        slurm_rest::hostlist::expand(nodes).map_err(|e| ReconcileError::NodeList {
            job_id: job.job_id,
            nodes: nodes.to_string(),
            message: e.to_string(),
        })?;
    let slurm_to_kube: BTreeMap<String, String> = ctx
        .nodes
        .state()
        .iter()
        .map(|n| (slurm_node_name(n), n.name_any()))
        .collect();
    let members: Vec<&Pod> = tr
        .ir
        .pods
        .iter()
        .filter(|p| job.comment.pods.contains(&pod_key(p)) || tr.ir.pods.len() == 1)
        .collect();
    let plan = assign::kube_nodes(&slurm_names, &slurm_to_kube).and_then(|kube| {
        let wanted: Vec<(String, Option<String>)> = members
            .iter()
            .map(|p| {
                (
                    pod_key(p),
                    p.annotations().get(ANNOTATION_SLURM_NODE).cloned(),
                )
            })
            .collect();
        assign::assign(&wanted, &kube)
    });
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            let message = format!("Slurm job {} allocated {nodes}: {e}", job.job_id);
            report(ctx, pod, reason::ALLOCATION_UNMAPPED, &message).await;
            return Err(e.into());
        }
    };
    ctx.metrics.allocated(job.job_id);
    let results = futures::future::join_all(members.iter().filter(|p| !is_bound(p)).map(|p| {
        let node = plan.get(&pod_key(p)).cloned().unwrap_or_default();
        async move {
            let writes = &ctx.metrics.kube_writes;
            ctx.writer.label(writes, p, job.job_id, false).await?;
            if !ctx.writer.bind(writes, p, &node).await? {
                // Bound by an earlier pass (this one read the pod before the cache showed it):
                // its Scheduled Event was sent then.
                return Ok(());
            }
            let note = format!(
                "Successfully assigned {} to {node} (Slurm job {})",
                pod_key(p),
                job.job_id
            );
            ctx.writer.event(writes, p, false, "Scheduled", note).await;
            Ok::<(), kube::Error>(())
        }
    }))
    .await;
    let mut bound = 0u64;
    for r in results {
        match r {
            Ok(()) => bound += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    ctx.metrics.group_bound(job.job_id, bound);
    tracing::info!(job_id = job.job_id, group = %tr.group_key, nodes, bound, "bound pods");
    if tr.ir.root.is(kind::PODGROUP.0, kind::PODGROUP.1) {
        super::podgroup::mark_scheduled(ctx, tr).await;
    }
    Ok(Action::await_change())
}

/// The admin_comment pods of a job as `(namespace, name)`.
pub fn comment_pods(comment: &AdminComment) -> impl Iterator<Item = (&str, &str)> {
    comment.pods.iter().filter_map(|p| p.split_once('/'))
}

/// True when the pod still has `spec.schedulingGates`.
fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gang_completeness_counts_live_pods_not_labels() {
        let labelled_short = GangStatus::Incomplete {
            ready: 1,
            required: 3,
            job_id: Some(4),
        };
        assert_eq!(gang_by_membership(&labelled_short, 3), GangStatus::Complete);
        assert_eq!(
            gang_by_membership(&labelled_short, 2),
            GangStatus::Incomplete {
                ready: 2,
                required: 3,
                job_id: None
            }
        );
        let closed = GangStatus::Closed {
            phase: "Running".into(),
        };
        assert_eq!(gang_by_membership(&closed, 9), closed);
        assert_eq!(
            gang_by_membership(&GangStatus::Complete, 0),
            GangStatus::Complete
        );
    }

    #[test]
    fn an_update_clears_an_old_exclusion_and_keeps_a_current_one() {
        let none = as_update(slurm_rest::models::JobDescMsg::default());
        assert_eq!(none.excluded_nodes, Some(vec![String::new()]));
        let some = as_update(slurm_rest::models::JobDescMsg {
            excluded_nodes: Some(vec!["node-2".into()]),
            ..Default::default()
        });
        assert_eq!(some.excluded_nodes, Some(vec!["node-2".to_string()]));
        // What submit remembers equals what the first pending pass computes: no needless update.
        let desc = slurm_rest::models::JobDescMsg::default();
        assert_eq!(
            desc_hash(&as_update(desc.clone())),
            desc_hash(&as_update(desc))
        );
    }
}
