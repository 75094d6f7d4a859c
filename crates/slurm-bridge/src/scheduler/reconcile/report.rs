//! What a pod shows when it cannot be bound yet: PodScheduled=False with a reason and Slurm's
//! own text, and an Event when that changes.

use super::ReconcileError;
use crate::k8s::slim_pod::Pod;
use crate::scheduler::context::{Ctx, Slurm};
use crate::scheduler::reason;
use crate::scheduler::runner::Action;
use crate::workload::TranslateError;
use std::time::Duration;

/// Shows a scheduling problem on the pod: the PodScheduled=False condition and an Event (only
/// when the condition changes, so a waiting pod does not collect thousands of events). Queued
/// for the pod writer's report workers: the pass does not wait for the two writes.
pub(super) fn report<S: Slurm>(ctx: &Ctx<S>, pod: &Pod, why: &str, message: &str) {
    let warning = ![
        reason::SLURM_JOB_PENDING,
        reason::SLURM_JOB_SUSPENDED,
        reason::WAITING_FOR_GANG,
    ]
    .contains(&why);
    ctx.writer
        .report(&ctx.metrics.kube_writes, pod, why, message, warning);
}

/// The pod's group could not be worked out: shown on the pod; retried with backoff when the
/// read failed, else looked at again after 30 s (the fix is an edit).
pub(super) async fn translation_failed<S: Slurm>(
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
    report(ctx, pod, why, &message);
    if transient {
        return Err(e.into());
    }
    // The fix is an edit (of the pod, or of its Job, JobSet, ...): look again now and then.
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// A Slurm call failed: shown on the pod (`SlurmUnavailable` when transient), then retried
/// with backoff.
pub(super) async fn slurm_failed<S: Slurm>(
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
    report(ctx, pod, why, &e.to_string());
    Err(e.into())
}
