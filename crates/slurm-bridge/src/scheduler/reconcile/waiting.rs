//! Passes of a group whose job is not allocated: keep a pending job's description up to date and
//! show Slurm's reason, wait out a suspended job, cancel a pending job whose gang shrank, and say
//! why a group that is not complete waits.

use super::ReconcileError;
use super::allocated::bind_group;
use super::report::{report, slurm_failed};
use super::submit::{
    as_update, desc_hash, job_desc, label_all, rejected, sent_hash, stamped, still_rejected,
};
use crate::k8s::is_bound;
use crate::k8s::slim_pod::Pod;
use crate::scheduler::context::{Ctx, Slurm};
use crate::scheduler::reason;
use crate::scheduler::rejection;
use crate::scheduler::runner::Action;
use crate::slurm::WatchedJob;
use crate::sync::MutexExt;
use crate::wellknown::LABEL_SLURM_JOBID;
use crate::workload::{GangStatus, GangTimeout, Translation};
use kube::ResourceExt;
use slurm_rest::ErrorKind;
use std::time::Duration;

/// How long a job submitted by this scheduler may be pending before its pods show
/// `SlurmJobPending`: Slurm starts most jobs within this, often in its next scheduling cycle.
pub(super) const PENDING_REPORT_DELAY: Duration = Duration::from_secs(5);

/// The group's job is pending: update its description when it changed (binding at once if it
/// started meanwhile), label the pods, and show Slurm's reason once the job has waited a while.
pub(super) async fn pending<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    job: &WatchedJob,
) -> Result<Action, ReconcileError> {
    let desc = match job_desc(ctx, tr).await.map(as_update) {
        Ok(desc) => desc,
        Err((why, message)) => {
            // Fewer nodes are usable now than the job needs (cordoned, tainted, NotReady, a
            // volume gone...), or the authors changed what they ask to something their tenant
            // refuses. The job is left as it is (Slurm may still run it where and as it was
            // allowed to) and the pod says why it may wait.
            label_all(ctx, tr, job.job_id);
            let message = format!("{message}; Slurm job {} stays pending", job.job_id);
            report(ctx, pod, why, &message);
            return Ok(Action::requeue(super::submit::retry_after(why)));
        }
    };
    let hash = desc_hash(&desc);
    if sent_hash(ctx, job) != Some(hash) {
        let fingerprint = ctx.fingerprint(hash);
        if let Some(action) = still_rejected(ctx, pod, tr, fingerprint).await {
            return Ok(action);
        }
        let (desc, comment) = stamped(&ctx.config, desc, tr, hash);
        match ctx.slurm.update(job.job_id, &desc).await {
            Ok(()) => {
                ctx.rejections().clear(&tr.group_key);
                ctx.sent.locked().insert(job.job_id, hash);
                // Only the comment is news: `job` was read at the start of the pass, and a
                // poll may have recorded its allocation since.
                ctx.watcher.record_update(job, comment);
                tracing::info!(job_id = job.job_id, "updated pending external job");
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
    label_all(ctx, tr, job.job_id);
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
            report(ctx, pod, reason::SLURM_JOB_PENDING, &message);
            Ok(Action::requeue(Duration::from_secs(30)))
        }
        // The watcher reports the reason (or the allocation) when it comes.
        None => Ok(Action::requeue(Duration::from_secs(30))),
    }
}

/// The group's job is suspended: it is still the group's job (no second one is submitted), but
/// its pods are not bound until it resumes; the watcher's event for the resume triggers the bind.
pub(super) async fn suspended<S: Slurm>(ctx: &Ctx<S>, pod: &Pod, job: &WatchedJob) -> Action {
    let message = format!(
        "Slurm job {} is suspended; the pod is bound when it resumes",
        job.job_id
    );
    report(ctx, pod, reason::SLURM_JOB_SUSPENDED, &message);
    Action::requeue(Duration::from_secs(30))
}

/// The group's pending job lost pods below the gang's minimum: cancel it, and clear its label
/// from the group's unbound pods (a pending job has no bound pods; bound ones are never touched).
pub(super) async fn shrunk_while_pending<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    gang: &GangStatus,
    job: &WatchedJob,
) -> Result<Action, ReconcileError> {
    tracing::info!(
        job_id = job.job_id,
        "gang below its minimum while pending; cancelling its job"
    );
    if let Err(e) = ctx.slurm.cancel(job.job_id).await {
        let message = format!(
            "the gang {} shrank below its minimum; cancelling its pending Slurm job {} failed: {e}",
            tr.group_key, job.job_id
        );
        report(ctx, pod, reason::SLURM_CANCEL_FAILED, &message);
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
                crate::k8s::api_error::Brief(&e)
            );
            report(ctx, p, reason::SCHEDULER_ERROR, &message);
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
    report(ctx, pod, reason::WAITING_FOR_GANG, &message);
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// The group is not schedulable now (too few pods, or a closed coscheduling PodGroup): say so on
/// the pod. Nothing is submitted, updated or cancelled.
pub(super) async fn not_ready<S: Slurm>(
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
        GangStatus::Incomplete { .. } => match incomplete_wait(tr.gang_timeout, unix_now()) {
            GangWait::TimedOut(seconds) => (
                reason::GANG_TIMEOUT,
                format!(
                    "{}: {} after scheduleTimeoutSeconds {seconds} of {}; nothing is submitted to \
                     Slurm until the gang is complete",
                    gang.message(),
                    gang_count(gang, tr),
                    tr.ir.root
                ),
            ),
            GangWait::Waiting(_) => (
                reason::WAITING_FOR_GANG,
                format!("{}: {}", gang.message(), gang_count(gang, tr)),
            ),
        },
        GangStatus::Complete => (reason::WAITING_FOR_GANG, gang.message()),
    };
    report(ctx, pod, why, &message);
    // Arrivals of the other pods reconcile the group; look again now and then regardless, and
    // when a gang's timeout falls due, so its mark comes on time.
    let again = match (gang, incomplete_wait(tr.gang_timeout, unix_now())) {
        (GangStatus::Incomplete { .. }, GangWait::Waiting(Some(left))) => {
            Duration::from_secs(left.clamp(1, 30))
        }
        _ => Duration::from_secs(30),
    };
    Action::requeue(again)
}

/// How an incomplete gang stands against its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GangWait {
    /// Still within it (seconds left), or unbounded (`None`).
    Waiting(Option<u64>),
    /// Past it (the timeout, seconds).
    TimedOut(u32),
}

/// The timeout rule for an incomplete gang at unix time `now` (docs/scheduler.md,
/// "scheduleTimeoutSeconds").
pub(super) fn incomplete_wait(timeout: Option<GangTimeout>, now: i64) -> GangWait {
    match timeout {
        None => GangWait::Waiting(None),
        Some(t) if t.expired(now) => GangWait::TimedOut(t.seconds),
        Some(t) => GangWait::Waiting(Some(t.remaining(now))),
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// "`ready` of `required` pods of `group`", for messages about an incomplete gang.
pub(super) fn gang_count(gang: &GangStatus, tr: &Translation) -> String {
    match gang {
        GangStatus::Incomplete {
            ready, required, ..
        } => format!("{ready} of {required} pods of {}", tr.group_key),
        _ => tr.group_key.clone(),
    }
}
