//! What the pod controller does with a pod, decided from the cached facts alone (no I/O), so
//! every rule of the lifecycle is a table test.
//!
//! Rules, per pod the controller owns (bound, or finished; and an unlabelled pending pod deleted
//! with the finalizer the admission webhook gave it, which is released):
//! - A bound pod that still runs needs a RUNNING job. Otherwise it is removed as kube-scheduler's
//!   preemption removes a pod: `DisruptionTarget` with a reason naming the cause, then a delete
//!   with the pod's grace period. Except in state-loss hold ([`crate::controllers::state_loss`]):
//!   a pod whose job Slurm does not know is kept and marked `SlurmJobLost`, and the mark is
//!   lifted once its job is known again.
//! - A pod is *finished* once its containers have stopped: phase Succeeded or Failed, or deleted
//!   with no container running, or on a node lost for longer than the grace period (no kubelet
//!   will ever report it).
//! - A finished pod never keeps its finalizer for its siblings' sake: the finalizer guards
//!   running containers, and a finished pod has none. Holding it would deadlock Kubernetes'
//!   garbage collector, which keeps a pod's dependents (a LeaderWorkerSet leader's worker
//!   StatefulSet) while the pod exists.
//! - The job ends with its pods: once no pod of the job is alive, an active job is cancelled,
//!   once; then the finalizers of all its finished pods are released. A pod the kubelet
//!   rejected at admission (OutOfcpu, OutOfmemory: Slurm's node offers more than the kubelet's
//!   allocatable) is Failed, so finished like any other: its job is cancelled
//!   (`KubeletRejected`) and the pod, terminal, is never submitted again.
//! - A deleted member ends its group: a pod deleted before it succeeded breaks the gang the job
//!   was allocated for, so once its containers have stopped the job's other live bound pods are
//!   removed too (`GroupMemberDeleted`). The job is cancelled when the last of them has stopped
//!   (never while containers run), and the owner's recreated pods make a new job.

use crate::slurm::WatchedJob;
use slurm_rest::models::JobState;

/// The Slurm job of a pod as the controller sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum JobView<'a> {
    /// The pod has no job id label.
    NoLabel,
    /// The label names a job Slurm does not know (purged, or never the bridge's).
    Unknown(u32),
    Known(&'a WatchedJob),
}

impl JobView<'_> {
    /// Pending, running or suspended: the job still holds (or will hold) resources.
    pub fn is_active(&self) -> bool {
        matches!(self, JobView::Known(j) if j.is_active())
    }

    pub fn is_running(&self) -> bool {
        matches!(self, JobView::Known(j) if j.is_running())
    }

    pub fn job_id(&self) -> Option<u32> {
        match self {
            JobView::NoLabel => None,
            JobView::Unknown(id) => Some(*id),
            JobView::Known(j) => Some(j.job_id),
        }
    }
}

/// The facts about one pod of a job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Member {
    /// `ns/name`.
    pub key: String,
    pub bound: bool,
    /// Phase Succeeded or Failed.
    pub terminal: bool,
    /// Phase Succeeded: the pod did its part of the job.
    pub succeeded: bool,
    /// deletionTimestamp set.
    pub deleting: bool,
    /// Some container (init or regular) is running.
    pub containers_running: bool,
    /// Bound to a node that is gone or NotReady beyond the grace period.
    pub node_lost: bool,
    pub has_finalizer: bool,
    /// Carries the bridge's `DisruptionTarget` condition already.
    pub disrupted: bool,
    /// Failed because the kubelet refused to admit it (`Pod was rejected: ...`, reason
    /// `OutOfcpu`, `OutOfmemory`, ...): its containers never started.
    pub rejected: bool,
    /// Carries `SlurmJobLost=True`: held already for a job Slurm does not know.
    pub lost_marked: bool,
    /// The state-loss census ([`crate::controllers::state_loss`]) keeps this pod should its job
    /// be unknown: the bridge is in state-loss hold, or the pod is held already.
    pub hold_if_unknown: bool,
}

impl Member {
    /// Its containers have stopped, or never will report (see the module doc).
    pub fn finished(&self) -> bool {
        self.terminal || (self.deleting && !self.containers_running) || self.node_lost
    }

    /// Deleted before it succeeded, and stopped: its group's gang is broken.
    pub fn deleted_from_group(&self) -> bool {
        self.deleting && !self.succeeded && self.finished()
    }
}

/// Why a pod is removed or a job cancelled; the condition and Event reason, and the metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    JobCancelled,
    JobTimeout,
    JobPreempted,
    JobRequeued,
    JobSuspended,
    NodeFailure,
    JobEnded,
    NoJobLabel,
    JobUnknown,
    NodeLost,
    /// The kubelet refused to admit the pod Slurm placed.
    KubeletRejected,
    PodsFinished,
    PodsDeleted,
    /// Another pod of the job's group was deleted.
    GroupMemberDeleted,
}

impl Cause {
    /// The reason on the pod's `DisruptionTarget` condition and Event.
    pub fn reason(self) -> &'static str {
        match self {
            Cause::JobCancelled => "SlurmJobCancelled",
            Cause::JobTimeout => "SlurmJobTimeout",
            Cause::JobPreempted => "SlurmJobPreempted",
            Cause::JobRequeued => "SlurmJobRequeued",
            Cause::JobSuspended => "SlurmJobSuspended",
            Cause::NodeFailure => "SlurmNodeFailure",
            Cause::JobEnded => "SlurmJobEnded",
            Cause::NoJobLabel | Cause::JobUnknown => "SlurmJobMissing",
            Cause::NodeLost => "NodeLost",
            Cause::KubeletRejected => "KubeletRejected",
            Cause::PodsFinished => "PodsFinished",
            Cause::PodsDeleted => "PodsDeleted",
            Cause::GroupMemberDeleted => "SlurmGroupMemberDeleted",
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Cause::JobCancelled => "job_cancelled",
            Cause::JobTimeout => "job_timeout",
            Cause::JobPreempted => "job_preempted",
            Cause::JobRequeued => "job_requeued",
            Cause::JobSuspended => "job_suspended",
            Cause::NodeFailure => "node_failure",
            Cause::JobEnded => "job_ended",
            Cause::NoJobLabel => "no_job_label",
            Cause::JobUnknown => "job_unknown",
            Cause::NodeLost => "node_lost",
            Cause::KubeletRejected => "kubelet_rejected",
            Cause::PodsFinished => "pods_finished",
            Cause::PodsDeleted => "pods_deleted",
            Cause::GroupMemberDeleted => "group_member_deleted",
        }
    }
}

/// Why a bound, live pod may not keep running: its job is not RUNNING.
pub fn removal_cause(job: &JobView) -> Option<Cause> {
    let j = match job {
        JobView::NoLabel => return Some(Cause::NoJobLabel),
        JobView::Unknown(_) => return Some(Cause::JobUnknown),
        JobView::Known(j) => j,
    };
    // A state this client does not know (a newer Slurm's) is no reason to stop a pod.
    if j.is_running() || j.state_unknown() {
        return None;
    }
    let has = |s: JobState| j.state.contains(&s);
    Some(if has(JobState::Suspended) {
        Cause::JobSuspended
    } else if has(JobState::Pending) || has(JobState::Requeued) || has(JobState::RequeueHold) {
        Cause::JobRequeued
    } else if has(JobState::Preempted) {
        Cause::JobPreempted
    } else if has(JobState::Cancelled) {
        Cause::JobCancelled
    } else if has(JobState::Timeout) || has(JobState::Deadline) {
        Cause::JobTimeout
    } else if has(JobState::NodeFail) {
        Cause::NodeFailure
    } else {
        Cause::JobEnded
    })
}

/// What to do for one pod (and, through it, its job).
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Nothing now.
    Keep,
    /// Mark `DisruptionTarget` (unless already there) and delete the pod.
    Remove(Cause),
    /// Keep the pod running though Slurm does not know its job (state-loss hold): mark it
    /// `SlurmJobLost` (unless already marked).
    Hold,
    /// The pod was held and its job is known again: lift the `SlurmJobLost` mark.
    Unhold,
    /// Cancel the job (if given), then release the finalizers of these pods.
    Release {
        cancel: Option<(u32, Cause)>,
        pods: Vec<String>,
    },
    /// The job still serves live pods: remove these (`GroupMemberDeleted`: a member of their
    /// group was deleted), then release the finalizers of those (finished pods).
    Disband {
        remove: Vec<String>,
        pods: Vec<String>,
    },
}

/// The plan for pod `me`, one of `members` (the live and finished pods carrying its job id, `me`
/// included).
pub fn decide(me: &Member, job: &JobView, members: &[Member]) -> Plan {
    if !me.bound && !me.terminal {
        if me.deleting && me.has_finalizer && matches!(job, JobView::NoLabel) {
            // Deleted before the scheduler labelled it, with the finalizer the admission webhook
            // gave it at creation: nothing runs and no job names it by label, so nothing is
            // guarded. Released here too, so the deletion completes while no scheduler runs (a
            // job submitted for it meanwhile is the sweep's: its pods are all gone).
            return Plan::Release {
                cancel: None,
                pods: vec![me.key.clone()],
            };
        }
        // Unbound pods belong to the scheduler (it releases those deleted before binding).
        return Plan::Keep;
    }
    if !me.finished() {
        return match removal_cause(job) {
            // Slurm may have lost its state: the pod keeps running, marked (see
            // `controllers::state_loss`).
            Some(Cause::JobUnknown) if me.hold_if_unknown && !me.deleting => Plan::Hold,
            Some(cause) if !me.deleting => Plan::Remove(cause),
            // Its job is back (Slurm's state restored): the mark goes.
            None if me.lost_marked && !me.deleting => Plan::Unhold,
            // Being deleted: wait for the containers to stop.
            _ => Plan::Keep,
        };
    }
    if me.node_lost && !me.deleting && !me.terminal {
        // The kubelet is gone: nothing else will remove the pod.
        return Plan::Remove(Cause::NodeLost);
    }
    let others_alive = members
        .iter()
        .any(|m| m.key != me.key && !m.finished() && (m.bound || job.is_active()));
    if others_alive && job.is_active() {
        // The job still serves a live pod: it stays, but this pod's finalizer (which guards only
        // running containers) goes now. A deleted member breaks the gang: its live siblings go.
        let pods: Vec<String> = if me.has_finalizer {
            vec![me.key.clone()]
        } else {
            Vec::new()
        };
        let remove: Vec<String> = if me.deleted_from_group() {
            members
                .iter()
                .filter(|m| m.key != me.key && m.bound && !m.finished() && !m.deleting)
                .map(|m| m.key.clone())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect()
        } else {
            Vec::new()
        };
        if pods.is_empty() && remove.is_empty() {
            return Plan::Keep;
        }
        return Plan::Disband { remove, pods };
    }
    let cancel = match job {
        JobView::Known(j) if j.is_active() => Some((j.job_id, finished_cause(members, me))),
        _ => None,
    };
    let pods: Vec<String> = members
        .iter()
        .chain(std::iter::once(me))
        .filter(|m| m.has_finalizer && m.finished())
        .map(|m| m.key.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if cancel.is_none() && pods.is_empty() {
        return Plan::Keep;
    }
    Plan::Release { cancel, pods }
}

/// Why the job of finished pods is cancelled: a lost node, the kubelet's refusal, deletions, or
/// the pods' own end.
fn finished_cause(members: &[Member], me: &Member) -> Cause {
    let all = || members.iter().chain(std::iter::once(me));
    if all().any(|m| m.node_lost) {
        Cause::NodeLost
    } else if all().any(|m| m.rejected) {
        Cause::KubeletRejected
    } else if all().any(|m| m.deleting && !m.terminal) || all().all(|m| m.deleting) {
        Cause::PodsDeleted
    } else {
        Cause::PodsFinished
    }
}

#[cfg(test)]
mod tests;
