//! The rules of a pass (docs/scheduler.md, "One pass for a pod"): from the group's gang status
//! and its active job, what the pass does.

use crate::slurm::WatchedJob;
use crate::workload::GangStatus;

/// What a pass does with a group, from its gang status and its active job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
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
pub(super) fn step(gang: &GangStatus, job: Option<&WatchedJob>, pod: &str) -> Step {
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
