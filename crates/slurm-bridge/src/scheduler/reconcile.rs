//! One scheduling pass for a pod, and through it for its whole group: translate, wait for the
//! gang, find or submit the group's one external job, keep it up to date while pending, and bind
//! every pod of the group once Slurm allocates.

use super::assign::{self, AssignError};
use super::context::{Ctx, Slurm};
use super::reason;
use super::rejection;
use crate::dra::claims::{self, ClaimError};
use crate::k8s::slurm_node_name;
use crate::slurm::WatchedJob;
use crate::wellknown::{ANNOTATION_SLURM_NODE, LABEL_SLURM_JOBID};
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
    #[error("Kubernetes API: {}", crate::kube_error::Brief(.0))]
    Kube(#[from] kube::Error),
    #[error("Slurm: {0}")]
    Slurm(#[from] slurm_rest::Error),
    #[error("{0}")]
    Translate(#[from] TranslateError),
    #[error("{0}")]
    Assign(#[from] AssignError),
    #[error("{0}")]
    Claim(#[from] ClaimError),
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

/// What a pass does with a group, from its gang status and its active job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Bind the pods the allocation covers (and see to the reconciled pod if it does not).
    Bind,
    /// The job is suspended: wait for it to resume.
    Suspended,
    /// No job: submit one.
    Submit,
    /// The job is pending: keep its description up to date, report Slurm's reason.
    Pending,
    /// The job is between states (running without nodes yet): look again shortly.
    Recheck,
    /// The gang lost members while its job was pending: cancel the job.
    CancelShrunk,
    /// Too few pods, or a closed PodGroup: report, and nothing else.
    NotReady,
}

/// The rules of a pass (docs/scheduler.md, "One pass for a pod"). `pod` is the reconciled
/// pod's key.
fn step(gang: &GangStatus, job: Option<&WatchedJob>, pod: &str) -> Step {
    match (gang, job) {
        // An allocation is honoured whatever the group looks like now (closed, shrunk): its pods
        // are bound. What becomes of a running gang is the pod controller's business; the
        // scheduler never cancels an allocated job nor touches its bound pods.
        (_, Some(job)) if job.allocated_nodes().is_some() => Step::Bind,
        (_, Some(job)) if job.is_suspended() => Step::Suspended,
        (GangStatus::Complete, None) => Step::Submit,
        (GangStatus::Complete, Some(job)) if job.is_pending() => Step::Pending,
        (GangStatus::Complete, Some(_)) => Step::Recheck,
        // The gang lost members while its job was pending: the job no longer stands for a
        // runnable gang. Only a pass of one of the job's own pods cancels it (a new pod of the
        // group is no reason to); a new job is submitted once the gang is complete again.
        (GangStatus::Incomplete { .. }, Some(job))
            if job.is_pending() && job.comment.pods.iter().any(|p| p == pod) =>
        {
            Step::CancelShrunk
        }
        // Too few pods, or a closed PodGroup: nothing is submitted, updated or cancelled.
        (GangStatus::Incomplete { .. } | GangStatus::Closed { .. }, _) => Step::NotReady,
    }
}

async fn schedule<S: Slurm>(
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
        // Still worth an Event: the user sees the reason there.
        Err(e) => {
            tracing::warn!(pod = %pod_key(pod), reason = why, error = %e, "setting PodScheduled=False failed");
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
    let needed = tr.nodes_needed();
    if placement.feasible < needed {
        return Err(format!(
            "{}/{} nodes are available for {} pod(s) of {}, which need{} {needed} node(s){}{}",
            placement.feasible,
            placement.nodes,
            tr.ir.pods.len(),
            tr.group_key,
            if needed == tr.ir.node_count() {
                ""
            } else {
                " at least"
            },
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
    let fingerprint = ctx.fingerprint(desc_hash(&as_update(desc.clone())));
    if let Some(action) = still_rejected(ctx, pod, tr, fingerprint).await {
        return Ok(action);
    }
    let job_id = match ctx.slurm.submit(&desc).await {
        Ok(id) => id,
        Err(e) if rejection::is_permanent(&e) => {
            return Ok(rejected(ctx, pod, tr, fingerprint, &e).await);
        }
        Err(e) => return slurm_failed(ctx, pod, reason::SLURM_SUBMIT_FAILED, e).await,
    };
    ctx.rejections().clear(&tr.group_key);
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

/// The message a permanently rejected group shows (stable, so a waiting pod is not written to
/// again on every pass).
fn rejection_message(tr: &Translation, slurm_text: &str) -> String {
    format!(
        "Slurm rejected the job of {}: {slurm_text}. It is sent again when the pods, their group \
         or the nodes change, or after {} minutes",
        tr.group_key,
        rejection::RETRY_AFTER.as_secs() / 60
    )
}

/// The group's description was rejected for good and nothing it is made of has changed since:
/// show Slurm's answer again (no write if the pod shows it already) and wait.
async fn still_rejected<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    fingerprint: u64,
) -> Option<Action> {
    let still = ctx
        .rejections()
        .check(&tr.group_key, fingerprint, std::time::Instant::now())?;
    report(ctx, pod, reason::SLURM_SUBMIT_FAILED, &still.message).await;
    Some(Action::requeue(still.retry_in))
}

/// Slurm refused the group's description for good: remember it, show it, wait.
async fn rejected<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    fingerprint: u64,
    e: &slurm_rest::Error,
) -> Action {
    let message = rejection_message(tr, &e.to_string());
    tracing::warn!(group = %tr.group_key, error = %e, retry_in = ?rejection::RETRY_AFTER, "Slurm rejected the job; not sent again until the group or the nodes change");
    ctx.rejections().record(
        &tr.group_key,
        fingerprint,
        message.clone(),
        std::time::Instant::now(),
    );
    report(ctx, pod, reason::SLURM_SUBMIT_FAILED, &message).await;
    Action::requeue(rejection::RETRY_AFTER)
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
    let desc = match job_desc(ctx, tr).map(as_update) {
        Ok(desc) => desc,
        Err(message) => {
            // Fewer nodes are usable now than the job needs (cordoned, tainted, NotReady...).
            // The job is left as it is (Slurm may still run it where it was allowed to) and the
            // pod says why it may wait.
            label_all(ctx, tr, job.job_id).await?;
            let message = format!("{message}; Slurm job {} stays pending", job.job_id);
            report(ctx, pod, reason::NO_FEASIBLE_NODES, &message).await;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
    };
    let hash = desc_hash(&desc);
    let sent = ctx
        .sent
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&job.job_id)
        .copied();
    if sent != Some(hash) {
        let fingerprint = ctx.fingerprint(hash);
        if let Some(action) = still_rejected(ctx, pod, tr, fingerprint).await {
            return Ok(action);
        }
        match ctx.slurm.update(job.job_id, &desc).await {
            Ok(()) => {
                ctx.rejections().clear(&tr.group_key);
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
                    return Box::pin(bind_group(ctx, pod, tr, &GangStatus::Complete, &fresh)).await;
                }
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            Err(e) if rejection::is_permanent(&e) => {
                // The job keeps its earlier description and may still run.
                return Ok(rejected(ctx, pod, tr, fingerprint, &e).await);
            }
            Err(e) => return slurm_failed(ctx, pod, reason::SLURM_SUBMIT_FAILED, e).await,
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

/// The group's pending job lost pods below the gang's minimum: cancel it, and clear its label
/// from the group's unbound pods (a pending job has no bound pods; bound ones are never touched).
async fn shrunk_while_pending<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    gang: &GangStatus,
    job: &WatchedJob,
) -> Result<Action, ReconcileError> {
    tracing::info!(job_id = job.job_id, group = %tr.group_key, "gang below its minimum while pending; cancelling its job");
    if let Err(e) = ctx.slurm.cancel(job.job_id).await {
        let message = format!(
            "the gang {} shrank below its minimum; cancelling its pending Slurm job {} failed: {e}",
            tr.group_key, job.job_id
        );
        report(ctx, pod, reason::SLURM_CANCEL_FAILED, &message).await;
        return Err(e.into());
    }
    ctx.watcher.refresh(job.job_id).await?;
    let label = job.job_id.to_string();
    for p in tr.ir.pods.iter().filter(|p| !is_bound(p)) {
        if p.labels().get(LABEL_SLURM_JOBID) == Some(&label)
            && let Err(e) = ctx.writer.clear_job(&ctx.metrics.kube_writes, p).await
        {
            if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                continue;
            }
            let message = format!(
                "removing the label of cancelled Slurm job {} failed: {}",
                job.job_id,
                crate::kube_error::Brief(&e)
            );
            report(ctx, p, reason::SCHEDULER_ERROR, &message).await;
            return Err(e.into());
        }
    }
    let message = format!(
        "{}: {} (the gang shrank below its minimum while Slurm job {} was pending; the job was \
         cancelled, and a new one is submitted once the gang is complete)",
        gang.message(),
        gang_count(gang, tr),
        job.job_id
    );
    report(ctx, pod, reason::WAITING_FOR_GANG, &message).await;
    Ok(Action::requeue(Duration::from_secs(30)))
}

fn gang_count(gang: &GangStatus, tr: &Translation) -> String {
    match gang {
        GangStatus::Incomplete {
            ready, required, ..
        } => format!("{ready} of {required} pods of {}", tr.group_key),
        _ => tr.group_key.clone(),
    }
}

/// The group is not schedulable now (too few pods, or a closed coscheduling PodGroup): say so on
/// the pod. Nothing is submitted, updated or cancelled.
async fn not_ready<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    gang: &GangStatus,
) -> Action {
    let (why, message) = match gang {
        GangStatus::Closed { .. } => (
            reason::POD_GROUP_CLOSED,
            format!(
                "{}: {} takes no new pods; pods its Slurm job does not cover are not scheduled",
                gang.message(),
                tr.ir.root
            ),
        ),
        GangStatus::Incomplete { .. } => (
            reason::WAITING_FOR_GANG,
            format!("{}: {}", gang.message(), gang_count(gang, tr)),
        ),
        GangStatus::Complete => (reason::WAITING_FOR_GANG, gang.message()),
    };
    report(ctx, pod, why, &message).await;
    // Arrivals of the other pods reconcile the group; look again now and then regardless.
    Action::requeue(Duration::from_secs(30))
}

/// The node a pod is bound to, if any.
fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Binds the unbound pods of an allocated job's plan, then deals with the reconciled pod if the
/// allocation does not cover it.
async fn bind_group<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    gang: &GangStatus,
    job: &WatchedJob,
) -> Result<Action, ReconcileError> {
    let Allocation { plan, bound_now } = bind_allocation(ctx, pod, tr, job).await?;
    if tr.ir.root.is(kind::PODGROUP.0, kind::PODGROUP.1) && !bound_now.is_empty() {
        mark_if_all_bound(ctx, pod, tr, &bound_now).await;
    }
    let key = pod_key(pod);
    if is_bound(pod) || plan.contains_key(&key) {
        return Ok(Action::await_change());
    }
    // Not covered: a pod that joined after the allocation, or one beyond the node count Slurm
    // granted (a coscheduling PodGroup with minMember below its size).
    let why = if job.comment.pods.contains(&key) {
        format!(
            "Slurm job {} of {} was allocated {} node(s) ({}) for {} pod(s)",
            job.job_id,
            tr.group_key,
            plan.len(),
            job.allocated_nodes().unwrap_or_default(),
            job.comment.pods.len()
        )
    } else {
        format!(
            "the pod joined {} after its Slurm job {} was allocated ({})",
            tr.group_key,
            job.job_id,
            job.allocated_nodes().unwrap_or_default()
        )
    };
    match gang {
        // The group's minimum runs: the pod is scheduled on its own, as the coscheduling
        // plugin schedules pods beyond minMember.
        GangStatus::Complete => {
            let alone = tr.alone(pod);
            let message = format!("{why}; a Slurm job of its own is submitted for this pod");
            report(ctx, pod, reason::OUTSIDE_GROUP_ALLOCATION, &message).await;
            Box::pin(schedule_alone(ctx, pod, &alone, None)).await
        }
        GangStatus::Closed { .. } => {
            let message = format!("{why}; {}: no new job is submitted", gang.message());
            report(ctx, pod, reason::POD_GROUP_CLOSED, &message).await;
            Ok(Action::requeue(Duration::from_secs(30)))
        }
        GangStatus::Incomplete { .. } => {
            let message = format!("{why}; {}: {}", gang.message(), gang_count(gang, tr));
            report(ctx, pod, reason::WAITING_FOR_GANG, &message).await;
            Ok(Action::requeue(Duration::from_secs(30)))
        }
    }
}

/// `PodGroupScheduled=True` once every pod of the group is bound: those bound before and those
/// this pass bound (reference §5.8.6). A failure is a warning and a Warning Event on the pod.
async fn mark_if_all_bound<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    bound_now: &[String],
) {
    if !all_bound(&tr.ir.pods, bound_now) {
        return;
    }
    if let Err(e) = super::podgroup::mark_scheduled(ctx, tr).await {
        tracing::warn!(podgroup = %tr.ir.root, error = %e, "marking the PodGroup scheduled failed");
        let note = format!("marking {} PodGroupScheduled failed: {e}", tr.ir.root);
        ctx.writer
            .event(
                &ctx.metrics.kube_writes,
                pod,
                true,
                reason::POD_GROUP_UPDATE_FAILED,
                note,
            )
            .await;
    }
}

/// True when every pod of `pods` is bound, or among `bound_now`.
fn all_bound(pods: &[Pod], bound_now: &[String]) -> bool {
    pods.iter()
        .all(|p| is_bound(p) || bound_now.contains(&pod_key(p)))
}

/// The group key of `pod`'s job of its own, and that job if it is active.
fn alone_job<S: Slurm>(
    ctx: &Ctx<S>,
    tr: &Translation,
    pod: &Pod,
) -> Option<(Translation, Arc<WatchedJob>)> {
    let key = Translation::alone_key(&tr.group_key, pod);
    let mut jobs = ctx.watcher.index().active_for_group(&key);
    jobs.sort_by_key(|j| (j.allocated_nodes().is_none(), j.job_id));
    let job = jobs.into_iter().next()?;
    Some((tr.alone(pod), job))
}

/// A pod its group's allocation does not cover, on a job of its own (`alone`: the group's
/// translation narrowed to this pod, [`Translation::alone`]).
async fn schedule_alone<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    alone: &Translation,
    job: Option<Arc<WatchedJob>>,
) -> Result<Action, ReconcileError> {
    let job = match job {
        Some(j) => Some(j),
        None => find_job(ctx, alone).await,
    };
    match job {
        None => submit(ctx, pod, alone).await,
        Some(job) if job.allocated_nodes().is_some() => {
            // The group's PodGroupScheduled is left to the group's own passes.
            bind_allocation(ctx, pod, alone, &job).await?;
            Ok(Action::await_change())
        }
        Some(job) if job.is_pending() => pending(ctx, pod, alone, &job).await,
        Some(job) if job.is_suspended() => Ok(suspended(ctx, pod, &job).await),
        Some(_) => Ok(Action::requeue(Duration::from_secs(2))),
    }
}

/// What a pass did with an allocation.
struct Allocation {
    /// `pod key -> node` for every pod on the allocation, bound before or now.
    plan: BTreeMap<String, String>,
    /// The pods this pass bound (or found bound by an earlier pass of its own).
    bound_now: Vec<String>,
}

/// Binds the unbound pods the allocation covers.
async fn bind_allocation<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    job: &WatchedJob,
) -> Result<Allocation, ReconcileError> {
    let nodes = job.allocated_nodes().unwrap_or_default();
    let slurm_names = match slurm_rest::hostlist::expand(nodes) {
        Ok(n) => n,
        Err(e) => {
            let message = format!(
                "Slurm job {} has a malformed node list {nodes:?}: {e}",
                job.job_id
            );
            report(ctx, pod, reason::ALLOCATION_UNMAPPED, &message).await;
            return Err(ReconcileError::NodeList {
                job_id: job.job_id,
                nodes: nodes.to_string(),
                message: e.to_string(),
            });
        }
    };
    let slurm_to_kube: BTreeMap<String, String> = ctx
        .nodes
        .state()
        .iter()
        .map(|n| (slurm_node_name(n), n.name_any()))
        .collect();
    let kube = match assign::kube_nodes(&slurm_names, &slurm_to_kube) {
        Ok(k) => k,
        Err(e) => {
            let message = format!("Slurm job {} allocated {nodes}: {e}", job.job_id);
            report(ctx, pod, reason::ALLOCATION_UNMAPPED, &message).await;
            return Err(e.into());
        }
    };
    let members: Vec<&Pod> = tr
        .ir
        .pods
        .iter()
        .filter(|p| job.comment.pods.contains(&pod_key(p)) || tr.ir.pods.len() == 1)
        .collect();
    // Pods bound to a node of the allocation first, then the unbound ones with their node
    // annotation. A member bound elsewhere (on a job of its own) is not this allocation's.
    let mut wanted: Vec<(String, Option<String>)> = members
        .iter()
        .filter_map(|p| bound_node(p).map(|n| (pod_key(p), n.to_string())))
        .filter(|(_, n)| kube.contains(n))
        .map(|(k, n)| (k, Some(n)))
        .collect();
    wanted.extend(members.iter().filter(|p| !is_bound(p)).map(|p| {
        (
            pod_key(p),
            p.annotations().get(ANNOTATION_SLURM_NODE).cloned(),
        )
    }));
    let plan = assign::assign(&wanted, &kube, tr.ir.job.pods_per_node());
    ctx.metrics.allocated(job.job_id);
    // DRA: the devices each pod asking for them gets (no Slurm call for pods without).
    let kube_to_slurm: BTreeMap<&String, &String> =
        slurm_to_kube.iter().map(|(s, k)| (k, s)).collect();
    let claim_writer = &ctx.claims();
    let claim_plan = match claims::plan(
        claim_writer,
        &*ctx.slurm,
        job.job_id,
        &plan,
        &members,
        |k| {
            kube_to_slurm
                .get(&k.to_string())
                .map(|s| s.to_string())
                .unwrap_or_else(|| k.to_string())
        },
    )
    .await
    {
        Ok(c) => c,
        Err((who, e)) => {
            let message = format!("Slurm job {}: {e}", job.job_id);
            let target = who
                .and_then(|k| members.iter().find(|p| pod_key(p) == k).copied())
                .unwrap_or(pod);
            report(ctx, target, claims::REASON_CLAIM_FAILED, &message).await;
            return Err(e.into());
        }
    };
    let claim_plan = &claim_plan;
    let to_bind: Vec<(&Pod, &String)> = members
        .iter()
        .filter(|p| !is_bound(p))
        .filter_map(|p| plan.get(&pod_key(p)).map(|n| (*p, n)))
        .collect();
    let results = futures::future::join_all(to_bind.iter().map(|(p, node)| async move {
        let writes = &ctx.metrics.kube_writes;
        let bound = match ctx.writer.label(writes, p, job.job_id, false).await {
            // The pod's ResourceClaim, if it asks for DRA devices, is allocated before binding.
            Ok(()) => match claims::ensure_claim(claim_writer, claim_plan, p).await {
                Ok(claim) => {
                    let bound = ctx.writer.bind(writes, p, node).await;
                    if let (Err(_), Some(name)) = (&bound, &claim) {
                        claims::undo(claim_writer, p, name).await;
                    }
                    bound
                }
                Err(e) => {
                    let message = format!("Slurm job {} on node {node}: {e}", job.job_id);
                    report(ctx, p, claims::REASON_CLAIM_FAILED, &message).await;
                    return Err(ReconcileError::Claim(e));
                }
            },
            Err(e) => Err(e),
        };
        match bound {
            Ok(true) => {
                let note = format!(
                    "Successfully assigned {} to {node} (Slurm job {})",
                    pod_key(p),
                    job.job_id
                );
                ctx.writer.event(writes, p, false, "Scheduled", note).await;
                Ok(true)
            }
            // Bound by an earlier pass (this one read the pod before the cache showed it):
            // its Scheduled Event was sent then.
            Ok(false) => Ok(true),
            // Deleted meanwhile.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => {
                let message = format!(
                    "binding to node {node} (Slurm job {}) failed: {}",
                    job.job_id,
                    crate::kube_error::Brief(&e)
                );
                report(ctx, p, reason::BINDING_FAILED, &message).await;
                Err(e.into())
            }
        }
    }))
    .await;
    let mut bound = 0u64;
    let mut bound_now = Vec::new();
    let mut first_error = None;
    for (r, (p, _)) in results.into_iter().zip(&to_bind) {
        match r {
            Ok(true) => {
                bound += 1;
                bound_now.push(pod_key(p));
            }
            Ok(false) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    ctx.metrics.group_bound(job.job_id, bound);
    tracing::info!(job_id = job.job_id, group = %tr.group_key, nodes, bound, "bound pods");
    Ok(Allocation { plan, bound_now })
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
    use crate::workload::admin_comment::AdminComment;

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

    fn job(state: JobState, nodes: Option<&str>, pods: &[&str]) -> WatchedJob {
        WatchedJob {
            job_id: 7,
            state: vec![state],
            state_reason: None,
            nodes: nodes.map(str::to_string),
            comment: AdminComment {
                pods: pods.iter().map(|p| p.to_string()).collect(),
                group: Some("coscheduling/ns/g".into()),
                uids: vec![],
            },
        }
    }

    /// Items 1 and 2 of issue 10: a closed or shrunk group never cancels an allocated job, and
    /// a pending job is cancelled only by a pass of one of its own pods.
    #[test]
    fn the_rules_of_a_pass() {
        let closed = GangStatus::Closed {
            phase: "Running".into(),
        };
        let short = GangStatus::Incomplete {
            ready: 1,
            required: 2,
            job_id: None,
        };
        let complete = GangStatus::Complete;
        let running = job(JobState::Running, Some("n[1-2]"), &["ns/a", "ns/b"]);
        let pending = job(JobState::Pending, None, &["ns/a", "ns/b"]);
        let suspended = job(JobState::Suspended, Some("n[1-2]"), &["ns/a", "ns/b"]);
        let starting = job(JobState::Running, None, &["ns/a"]);
        let table: [(&GangStatus, Option<&WatchedJob>, &str, Step); 15] = [
            (&complete, None, "ns/a", Step::Submit),
            (&complete, Some(&pending), "ns/a", Step::Pending),
            (&complete, Some(&pending), "ns/new", Step::Pending),
            (&complete, Some(&running), "ns/a", Step::Bind),
            (&complete, Some(&running), "ns/late", Step::Bind),
            (&complete, Some(&suspended), "ns/a", Step::Suspended),
            (&complete, Some(&starting), "ns/a", Step::Recheck),
            // A closed PodGroup: a running gang is bound, never cancelled; nothing new starts.
            (&closed, Some(&running), "ns/replacement", Step::Bind),
            (&closed, Some(&pending), "ns/a", Step::NotReady),
            (&closed, None, "ns/a", Step::NotReady),
            // Below the minimum: a running gang is left alone...
            (&short, Some(&running), "ns/new", Step::Bind),
            (&short, Some(&suspended), "ns/a", Step::Suspended),
            // ... a pending one is cancelled by a pass of its own pods only.
            (&short, Some(&pending), "ns/a", Step::CancelShrunk),
            (&short, Some(&pending), "ns/new", Step::NotReady),
            (&short, None, "ns/a", Step::NotReady),
        ];
        for (gang, job, pod, want) in table {
            assert_eq!(
                step(gang, job, pod),
                want,
                "{gang:?} {:?} {pod}",
                job.map(|j| &j.state)
            );
        }
    }

    fn pod(name: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [], "nodeName": node},
        }))
        .expect("pod")
    }

    /// Item 6: PodGroupScheduled only once every pod of the group is bound.
    #[test]
    fn a_group_is_bound_when_every_pod_is_bound_before_or_now() {
        let pods = [pod("a", Some("n1")), pod("b", None), pod("c", None)];
        assert!(!all_bound(&pods, &[]));
        assert!(!all_bound(&pods, &["ns/b".into()]));
        assert!(all_bound(&pods, &["ns/b".into(), "ns/c".into()]));
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
