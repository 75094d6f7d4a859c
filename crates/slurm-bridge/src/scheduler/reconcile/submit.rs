//! Where a pod group becomes a Slurm job: find the group's job, or build its description
//! (restricted to the nodes Kubernetes can use) and submit it, then label the group's pods;
//! remember descriptions Slurm rejected for good.

use super::ReconcileError;
use super::report::{report, slurm_failed};
use crate::k8s::slim_pod::Pod;
use crate::scheduler::context::{Ctx, Slurm};
use crate::scheduler::reason;
use crate::scheduler::rejection;
use crate::scheduler::runner::Action;
use crate::slurm::WatchedJob;
use crate::sync::MutexExt;
use crate::tenancy::TenancyError;
use crate::wellknown::LABEL_SLURM_JOBID;
use crate::workload::Translation;
use crate::workload::admin_comment::AdminComment;
use crate::workload::ir::pod_key;
use crate::workload::job_desc::admin_comment;
use kube::ResourceExt;
use slurm_rest::models::JobState;
use std::sync::Arc;
use std::time::Duration;

/// The group's active job, if any. Jobs made by the Go original carry no group key and are found
/// through their pods. Duplicates (never made by this scheduler, but possible after a crash of
/// the original) are cancelled, keeping an allocated one or else the oldest.
///
/// A job whose admin_comment names none of the group's pods with their current uids belongs to
/// pods recreated since under the same names: it is not this group's (the sweep cancels it).
pub(super) async fn find_job<S: Slurm>(ctx: &Ctx<S>, tr: &Translation) -> Option<Arc<WatchedJob>> {
    let mut jobs = ctx.watcher.index().active_for_group(&tr.group_key);
    jobs.retain(|j| {
        tr.ir
            .pods
            .iter()
            .any(|p| j.comment.names_pod(&pod_key(p), p.metadata.uid.as_deref()))
    });
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
        tracing::warn!(job_id = dup.job_id, "cancelling a duplicate external job");
        if let Err(e) = ctx.slurm.cancel(dup.job_id).await {
            tracing::warn!(job_id = dup.job_id, error = %e, "cancelling a duplicate job failed");
        }
    }
    keep
}

/// A hash of a job description, to send a pending job's update only when it changed. It is
/// kept in the job's admin_comment across restarts and upgrades, so it is FNV-1a over the JSON
/// text, the same in every build (std's `DefaultHasher` may change with the Rust release, which
/// would cost one update per pending job after an upgrade).
pub(super) fn desc_hash(desc: &slurm_rest::models::JobDescMsg) -> u64 {
    let text = serde_json::to_string(desc).unwrap_or_default();
    let mut h = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut h, text.as_bytes());
    std::hash::Hasher::finish(&h)
}

/// `desc` (with the group's admin_comment) as sent: its admin_comment also carries `hash`, the
/// hash of `desc` as an update, so a restarted scheduler, which remembers no hashes, sends no
/// update for a job whose description is unchanged (9,000 updates after a restart at 10,000
/// pending pods otherwise). Returns the description and the comment the watcher records.
pub(super) fn stamped(
    cfg: &crate::config::Config,
    mut desc: slurm_rest::models::JobDescMsg,
    tr: &Translation,
    hash: u64,
) -> (slurm_rest::models::JobDescMsg, AdminComment) {
    let comment = admin_comment(&tr.ir, &tr.group_key, cfg).with_desc_hash(hash);
    desc.admin_comment = Some(comment.encode());
    (desc, comment)
}

/// The hash of the description last sent for `job`: this process's memory of it, else the one
/// its admin_comment carries.
pub(super) fn sent_hash<S: Slurm>(ctx: &Ctx<S>, job: &WatchedJob) -> Option<u64> {
    let sent = ctx.sent.locked().get(&job.job_id).copied();
    sent.or_else(|| job.comment.desc_hash())
}

/// `desc` as an update of a pending job sends it (and as its hash is remembered at submit). An
/// update changes only what it names, so an exclusion made while fewer nodes were schedulable
/// must be cleared explicitly: slurmrestd reads `[]` as "unchanged" and `[""]` as an empty
/// ExcNodeList (tried on Slurm 26.05).
pub(super) fn as_update(
    mut desc: slurm_rest::models::JobDescMsg,
) -> slurm_rest::models::JobDescMsg {
    desc.excluded_nodes
        .get_or_insert_with(|| vec![String::new()]);
    desc
}

/// The job description for the group, as its tenant allows and restricted to nodes Kubernetes
/// can use for its pods and their volumes; `Err` carries the reason and a user message when the
/// tenant refuses what the authors asked, too few nodes are feasible or the volumes are not
/// ready.
pub(super) async fn job_desc<S: Slurm>(
    ctx: &Ctx<S>,
    tr: &Translation,
) -> Result<slurm_rest::models::JobDescMsg, (&'static str, String)> {
    let granted = match ctx
        .tenancy
        .decide(&tr.ir.root.namespace, &tr.asked(&ctx.config))
        .await
    {
        Ok(g) => g,
        Err(TenancyError::Refused(r)) => {
            return Err((
                reason::NOT_ALLOWED_BY_TENANT,
                format!("{r}; {} is not submitted to Slurm", tr.group_key),
            ));
        }
        Err(TenancyError::Labels(e)) => return Err((reason::SCHEDULER_ERROR, e.to_string())),
    };
    let placement = ctx.placement(&tr.ir.pods);
    let (feasible, excluded, rejections) =
        match super::volumes::restrict(ctx, &tr.ir.pods, &placement) {
            Ok(None) => (
                placement.feasible,
                placement.excluded.clone(),
                placement.rejections.clone(),
            ),
            Ok(Some(r)) => (r.feasible, r.excluded, r.rejections),
            Err(e) => {
                return Err((
                    reason::VOLUMES_NOT_READY,
                    format!(
                        "{e}; {} is submitted once its volumes can be served",
                        tr.group_key
                    ),
                ));
            }
        };
    let needed = tr.nodes_needed();
    if feasible < needed {
        return Err((
            reason::NO_FEASIBLE_NODES,
            format!(
                "{}/{} nodes are available for {} pod(s) of {}, which need{} {needed} node(s){}{}",
                feasible,
                placement.nodes,
                tr.ir.pods.len(),
                tr.group_key,
                if needed == tr.ir.node_count() {
                    ""
                } else {
                    " at least"
                },
                if rejections.is_empty() { "" } else { ": " },
                rejections
            ),
        ));
    }
    Ok(tr.to_job_desc(&ctx.config, &granted, &excluded))
}

/// When a group that cannot be described (yet) is looked at again: a tenant's refusal only when
/// the pod changes (every change is a pass) or after a long while, the rest soon.
pub(super) fn retry_after(why: &str) -> Duration {
    if why == reason::NOT_ALLOWED_BY_TENANT {
        rejection::RETRY_AFTER
    } else {
        Duration::from_secs(10)
    }
}

/// Submits the group's external job: the description restricted to the feasible nodes (or the
/// reason there are too few), unless Slurm rejected the same for good; then records the job in
/// the watcher, so a pass right after finds it, and starts the pods' label patches
/// ([`crate::k8s::PodWriter::label_in_background`]).
pub(super) async fn submit<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
) -> Result<Action, ReconcileError> {
    let desc = match job_desc(ctx, tr).await {
        Ok(d) => d,
        Err((why, message)) => {
            report(ctx, pod, why, &message);
            return Ok(Action::requeue(retry_after(why)));
        }
    };
    if let Some(action) = wait_for_doubt(ctx, tr) {
        return Ok(action);
    }
    let hash = desc_hash(&as_update(desc.clone()));
    let fingerprint = ctx.fingerprint(hash);
    if let Some(action) = still_rejected(ctx, pod, tr, fingerprint).await {
        return Ok(action);
    }
    let (desc, comment) = stamped(&ctx.config, desc, tr, hash);
    let submitted = {
        // The label patches queued meanwhile wait, also while this submit waits for its slot:
        // those of the pods Slurm starts at once ride on their Bindings.
        let _labels_wait = ctx.writer.labels_wait();
        // The semaphore is never closed.
        let _slot = ctx.submit_slots.acquire().await.ok();
        ctx.slurm.submit(&desc).await
    };
    let job_id = match submitted {
        Ok(id) => id,
        Err(e) if rejection::is_permanent(&e) => {
            return Ok(rejected(ctx, pod, tr, fingerprint, &e).await);
        }
        Err(e) => {
            if may_have_acted(&e) {
                doubt(ctx, tr, &e);
            }
            return slurm_failed(ctx, pod, reason::SLURM_SUBMIT_FAILED, e).await;
        }
    };
    ctx.submits_in_doubt.locked().remove(&tr.group_key);
    ctx.rejections().clear(&tr.group_key);
    ctx.metrics.submitted(job_id);
    ctx.sent.locked().insert(job_id, hash);
    ctx.watcher.record(WatchedJob {
        job_id,
        state: vec![JobState::Pending],
        state_reason: None,
        nodes: None,
        comment,
    });
    tracing::info!(job_id, pods = tr.ir.pods.len(), "submitted external job");
    // No Event for the submit: the label names the job, and the pod's next Event does too
    // (`Scheduled`, or `SlurmJobPending` with Slurm's reason while it waits). The labels go out
    // from tasks of their own: the pass ends with the submit, and the worker goes on to the next
    // pod at Slurm's pace. Crash-safe as before: the job's admin_comment names its pods already,
    // and every later pass (the bind's first) waits for the label or sends it.
    label_all(ctx, tr, job_id);
    // The watcher reports the allocation; look again anyway after a while.
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// How long after a failed submit Slurm may still act on it (a request still queued in
/// slurmrestd when the client gave up): the job watcher's listing must start this much later.
const DOUBT_MARGIN: Duration = Duration::from_secs(1);

/// Doubts older than this are forgotten (their groups were dealt with or went).
const DOUBT_KEPT: Duration = Duration::from_secs(600);

/// Whether Slurm may have made the job although the submit failed: the request may have
/// reached it (a reset or timeout after the write, a gateway's 5xx, an answer that could not be
/// read). Refusals Slurm answered (a bad token, an invalid description) did not.
fn may_have_acted(e: &slurm_rest::Error) -> bool {
    !e.not_sent()
        && matches!(
            e.kind(),
            slurm_rest::ErrorKind::Transient | slurm_rest::ErrorKind::Other
        )
}

/// Remembers that the group's submit may have made a job.
fn doubt<S: Slurm>(ctx: &Ctx<S>, tr: &Translation, e: &slurm_rest::Error) {
    ctx.metrics.submits_in_doubt.inc();
    let mut doubts = ctx.submits_in_doubt.locked();
    let now = tokio::time::Instant::now();
    doubts.retain(|_, at| now.saturating_duration_since(*at) < DOUBT_KEPT);
    doubts.insert(tr.group_key.clone(), now + DOUBT_MARGIN);
    tracing::info!(group = %tr.group_key, error = %e, "the submit's outcome is unknown: the group is submitted again only once Slurm's jobs were listed since");
}

/// While the group's last submit is in doubt and the job watcher has not listed Slurm's jobs
/// since, a pass waits (the watcher is asked to poll soon) instead of submitting a second job;
/// once it has, a job that submit made is in the index and the pass found it before coming
/// here.
fn wait_for_doubt<S: Slurm>(ctx: &Ctx<S>, tr: &Translation) -> Option<Action> {
    let mut doubts = ctx.submits_in_doubt.locked();
    let since = *doubts.get(&tr.group_key)?;
    if ctx.watcher.has_listed_since(since) {
        doubts.remove(&tr.group_key);
        return None;
    }
    ctx.watcher.nudge();
    ctx.metrics.submit_waits_for_listing();
    Some(Action::requeue(Duration::from_millis(200)))
}

/// Labels every pod of the group with `job_id` in the background
/// ([`crate::k8s::PodWriter::label_in_background`]): a pod labelled already, or whose patch is
/// queued or in flight, costs nothing, and no pass waits for the API server (nor for
/// `LABEL_MIN_AGE`). A patch that fails is sent again by the pod's next pass.
pub(super) fn label_all<S: Slurm>(ctx: &Ctx<S>, tr: &Translation, job_id: u32) {
    for p in &tr.ir.pods {
        let stale = p
            .labels()
            .get(LABEL_SLURM_JOBID)
            .is_some_and(|l| *l != job_id.to_string());
        ctx.writer
            .label_in_background(&ctx.metrics.kube_writes, p, job_id, stale);
    }
}

/// The message a permanently rejected group shows (stable, so a waiting pod is not written to
/// again on every pass).
pub(super) fn rejection_message(tr: &Translation, slurm_text: &str) -> String {
    format!(
        "Slurm rejected the job of {}: {slurm_text}. It is sent again when the pods, their group \
         or the nodes change, or after {} minutes",
        tr.group_key,
        rejection::RETRY_AFTER.as_secs() / 60
    )
}

/// The group's description was rejected for good and nothing it is made of has changed since:
/// show Slurm's answer again (no write if the pod shows it already) and wait.
pub(super) async fn still_rejected<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    fingerprint: u64,
) -> Option<Action> {
    let still = ctx
        .rejections()
        .check(&tr.group_key, fingerprint, std::time::Instant::now())?;
    report(ctx, pod, reason::SLURM_SUBMIT_FAILED, &still.message);
    Some(Action::requeue(still.retry_in))
}

/// Slurm refused the group's description for good: remember it, show it, wait.
pub(super) async fn rejected<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    fingerprint: u64,
    e: &slurm_rest::Error,
) -> Action {
    let message = rejection_message(tr, &e.to_string());
    tracing::warn!(error = %e, retry_in = ?rejection::RETRY_AFTER, "Slurm rejected the job; not sent again until the group or the nodes change");
    ctx.rejections().record(
        &tr.group_key,
        fingerprint,
        message.clone(),
        std::time::Instant::now(),
    );
    report(ctx, pod, reason::SLURM_SUBMIT_FAILED, &message);
    Action::requeue(rejection::RETRY_AFTER)
}
