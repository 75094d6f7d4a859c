//! A group whose job is allocated: its pods are bound ([`super::bind`]), a built-in PodGroup is
//! marked scheduled once all are, and a pod the allocation does not cover gets a job of its own
//! (or waits, or is refused, by the gang's state).

use super::ReconcileError;
use super::bind::{Allocation, bind_allocation};
use super::report::report;
use super::submit::{find_job, submit};
use super::waiting::{gang_count, pending, suspended};
use crate::k8s::is_bound;
use crate::k8s::slim_pod::Pod;
use crate::scheduler::context::{Ctx, Slurm};
use crate::scheduler::podgroup::mark_if_all_bound;
use crate::scheduler::reason;
use crate::scheduler::runner::Action;
use crate::slurm::WatchedJob;
use crate::workload::ir::pod_key;
use crate::workload::{GangStatus, Translation, kind};
use std::sync::Arc;
use std::time::Duration;

/// How soon a group whose pods wait for their claims' binding is looked at again.
const VOLUME_RECHECK: Duration = Duration::from_secs(1);

/// Binds the unbound pods of an allocated job's plan, then deals with the reconciled pod if the
/// allocation does not cover it.
pub(super) async fn bind_group<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    gang: &GangStatus,
    job: &WatchedJob,
) -> Result<Action, ReconcileError> {
    let Allocation {
        plan,
        bound_now,
        waiting_for_volumes,
    } = bind_allocation(ctx, pod, tr, job).await?;
    if tr.ir.root.is(kind::PODGROUP.0, kind::PODGROUP.1) && !bound_now.is_empty() {
        mark_if_all_bound(ctx, pod, tr, &bound_now).await;
    }
    if waiting_for_volumes {
        // A claim's binding shows as a PVC change too; this is the bound on the wait.
        return Ok(Action::requeue(VOLUME_RECHECK));
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
            report(ctx, pod, reason::OUTSIDE_GROUP_ALLOCATION, &message);
            Box::pin(schedule_alone(ctx, pod, &alone, None)).await
        }
        GangStatus::Closed { .. } => {
            let message = format!("{why}; {}: no new job is submitted", gang.message());
            report(ctx, pod, reason::POD_GROUP_CLOSED, &message);
            Ok(Action::requeue(Duration::from_secs(30)))
        }
        GangStatus::Incomplete { .. } => {
            let message = format!("{why}; {}: {}", gang.message(), gang_count(gang, tr));
            report(ctx, pod, reason::WAITING_FOR_GANG, &message);
            Ok(Action::requeue(Duration::from_secs(30)))
        }
    }
}

/// The group key of `pod`'s job of its own, and that job if it is active.
pub(super) fn alone_job<S: Slurm>(
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
pub(super) async fn schedule_alone<S: Slurm>(
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
            let done = bind_allocation(ctx, pod, alone, &job).await?;
            Ok(if done.waiting_for_volumes {
                Action::requeue(VOLUME_RECHECK)
            } else {
                Action::await_change()
            })
        }
        Some(job) if job.is_pending() => pending(ctx, pod, alone, &job).await,
        Some(job) if job.is_suspended() => Ok(suspended(ctx, pod, &job).await),
        Some(_) => Ok(Action::requeue(Duration::from_secs(2))),
    }
}
