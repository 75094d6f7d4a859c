//! What the pod controller does with a pod, decided from the cached facts alone (no I/O), so
//! every rule of the lifecycle is a table test.
//!
//! Rules, per pod the controller owns (bound, or finished; and an unlabelled pending pod deleted
//! with the finalizer the admission webhook gave it, which is released):
//! - A bound pod that still runs needs a RUNNING job. Otherwise it is removed as kube-scheduler's
//!   preemption removes a pod: `DisruptionTarget` with a reason naming the cause, then a delete
//!   with the pod's grace period.
//! - A pod is *finished* once its containers have stopped: phase Succeeded or Failed, or deleted
//!   with no container running, or on a node lost for longer than the grace period (no kubelet
//!   will ever report it).
//! - A finished pod never keeps its finalizer for its siblings' sake: the finalizer guards
//!   running containers, and a finished pod has none. Holding it would deadlock Kubernetes'
//!   garbage collector, which keeps a pod's dependents (a LeaderWorkerSet leader's worker
//!   StatefulSet) while the pod exists.
//! - The job ends with its pods: once no pod of the job is alive, an active job is cancelled,
//!   once; then the finalizers of all its finished pods are released.
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
            Some(cause) if !me.deleting => Plan::Remove(cause),
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

/// Why the job of finished pods is cancelled: a lost node, deletions, or the pods' own end.
fn finished_cause(members: &[Member], me: &Member) -> Cause {
    let all = || members.iter().chain(std::iter::once(me));
    if all().any(|m| m.node_lost) {
        Cause::NodeLost
    } else if all().any(|m| m.deleting && !m.terminal) || all().all(|m| m.deleting) {
        Cause::PodsDeleted
    } else {
        Cause::PodsFinished
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::admin_comment::AdminComment;

    fn job(id: u32, states: &[JobState]) -> WatchedJob {
        WatchedJob {
            job_id: id,
            state: states.to_vec(),
            state_reason: None,
            nodes: Some("node-1".into()),
            comment: AdminComment::default(),
        }
    }

    fn running_pod(key: &str) -> Member {
        Member {
            key: key.into(),
            bound: true,
            containers_running: true,
            has_finalizer: true,
            ..Default::default()
        }
    }

    fn done_pod(key: &str) -> Member {
        Member {
            terminal: true,
            containers_running: false,
            ..running_pod(key)
        }
    }

    #[test]
    fn a_bound_running_pod_needs_a_running_job() {
        let cases: &[(&[JobState], Option<Cause>)] = &[
            (&[JobState::Running], None),
            (&[JobState::Cancelled], Some(Cause::JobCancelled)),
            (&[JobState::Timeout], Some(Cause::JobTimeout)),
            (&[JobState::Deadline], Some(Cause::JobTimeout)),
            (&[JobState::Preempted], Some(Cause::JobPreempted)),
            (&[JobState::Pending], Some(Cause::JobRequeued)),
            (
                &[JobState::Pending, JobState::Requeued],
                Some(Cause::JobRequeued),
            ),
            (&[JobState::Suspended], Some(Cause::JobSuspended)),
            (&[JobState::NodeFail], Some(Cause::NodeFailure)),
            (&[JobState::Completed], Some(Cause::JobEnded)),
            (&[JobState::Failed], Some(Cause::JobEnded)),
            // A newer Slurm's state, or flags only: kept until the state is one we know.
            (&[JobState::Other("WARPING".into())], None),
            (&[JobState::Completing], None),
            (
                &[JobState::Completed, JobState::Other("NEW_FLAG".into())],
                Some(Cause::JobEnded),
            ),
        ];
        let me = running_pod("ns/a");
        for (states, want) in cases {
            let j = job(1, states);
            let plan = decide(&me, &JobView::Known(&j), std::slice::from_ref(&me));
            let expected = match want {
                None => Plan::Keep,
                Some(c) => Plan::Remove(*c),
            };
            assert_eq!(plan, expected, "job state {states:?}");
        }
        for (view, cause) in [
            (JobView::NoLabel, Cause::NoJobLabel),
            (JobView::Unknown(7), Cause::JobUnknown),
        ] {
            assert_eq!(
                decide(&me, &view, std::slice::from_ref(&me)),
                Plan::Remove(cause)
            );
        }
    }

    #[test]
    fn a_crash_looping_pod_with_a_running_job_is_kept() {
        // Not Ready but not terminal: still the job's.
        let me = running_pod("ns/a");
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(&me, &JobView::Known(&j), std::slice::from_ref(&me)),
            Plan::Keep
        );
    }

    #[test]
    fn unbound_pods_belong_to_the_scheduler() {
        let me = Member {
            bound: false,
            containers_running: false,
            ..running_pod("ns/a")
        };
        for view in [
            JobView::NoLabel,
            JobView::Unknown(7),
            JobView::Known(&job(1, &[JobState::Pending])),
            JobView::Known(&job(1, &[JobState::Cancelled])),
        ] {
            assert_eq!(
                decide(&me, &view, std::slice::from_ref(&me)),
                Plan::Keep,
                "{view:?}"
            );
        }
    }

    #[test]
    fn an_unlabelled_pending_pod_deleted_with_the_admission_finalizer_is_released() {
        let pending = Member {
            bound: false,
            containers_running: false,
            deleting: true,
            ..running_pod("ns/a")
        };
        assert_eq!(
            decide(&pending, &JobView::NoLabel, std::slice::from_ref(&pending)),
            Plan::Release {
                cancel: None,
                pods: vec!["ns/a".into()]
            }
        );
        // Labelled: its job is the scheduler's to cancel first; without the finalizer: nothing.
        for view in [
            JobView::Unknown(7),
            JobView::Known(&job(1, &[JobState::Pending])),
        ] {
            assert_eq!(
                decide(&pending, &view, std::slice::from_ref(&pending)),
                Plan::Keep,
                "{view:?}"
            );
        }
        let bare = Member {
            has_finalizer: false,
            ..pending
        };
        assert_eq!(
            decide(&bare, &JobView::NoLabel, std::slice::from_ref(&bare)),
            Plan::Keep
        );
    }

    #[test]
    fn a_pod_being_deleted_waits_for_its_containers() {
        let me = Member {
            deleting: true,
            ..running_pod("ns/a")
        };
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(&me, &JobView::Known(&j), std::slice::from_ref(&me)),
            Plan::Keep
        );
        // Deleted because its job was cancelled: no second removal while it stops.
        let j = job(1, &[JobState::Cancelled]);
        assert_eq!(
            decide(&me, &JobView::Known(&j), std::slice::from_ref(&me)),
            Plan::Keep
        );

        // Containers stopped: the job is cancelled, then the finalizer released.
        let stopped = Member {
            containers_running: false,
            ..me
        };
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(
                &stopped,
                &JobView::Known(&j),
                std::slice::from_ref(&stopped)
            ),
            Plan::Release {
                cancel: Some((1, Cause::PodsDeleted)),
                pods: vec!["ns/a".into()]
            }
        );
    }

    #[test]
    fn the_last_finished_pod_cancels_the_job_and_releases_the_whole_group() {
        let a = done_pod("ns/a");
        let b = running_pod("ns/b");
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(&a, &JobView::Known(&j), &[a.clone(), b.clone()]),
            Plan::Disband {
                remove: vec![],
                pods: vec!["ns/a".into()]
            },
            "b still runs on the job, which stays; a's finalizer goes"
        );
        let b = done_pod("ns/b");
        let plan = decide(&a, &JobView::Known(&j), &[a.clone(), b]);
        assert_eq!(
            plan,
            Plan::Release {
                cancel: Some((1, Cause::PodsFinished)),
                pods: vec!["ns/a".into(), "ns/b".into()]
            }
        );
    }

    #[test]
    fn an_ended_job_is_not_cancelled_again() {
        let a = done_pod("ns/a");
        for states in [[JobState::Cancelled], [JobState::Completed]] {
            let j = job(1, &states);
            assert_eq!(
                decide(&a, &JobView::Known(&j), std::slice::from_ref(&a)),
                Plan::Release {
                    cancel: None,
                    pods: vec!["ns/a".into()]
                }
            );
        }
        // Nothing left to do once the finalizer is gone.
        let released = Member {
            has_finalizer: false,
            ..a
        };
        let j = job(1, &[JobState::Cancelled]);
        assert_eq!(
            decide(
                &released,
                &JobView::Known(&j),
                std::slice::from_ref(&released)
            ),
            Plan::Keep
        );
    }

    #[test]
    fn a_terminating_pod_that_still_runs_keeps_the_job() {
        let a = done_pod("ns/a");
        let b = Member {
            deleting: true,
            ..running_pod("ns/b")
        };
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(&a, &JobView::Known(&j), &[a.clone(), b.clone()]),
            Plan::Disband {
                remove: vec![],
                pods: vec!["ns/a".into()]
            },
            "the job stays for b; a's own finalizer goes"
        );
        let released = Member {
            has_finalizer: false,
            ..a
        };
        assert_eq!(
            decide(&released, &JobView::Known(&j), &[released.clone(), b]),
            Plan::Keep
        );
    }

    #[test]
    fn a_finished_unbound_pod_of_a_pending_job_with_live_siblings_keeps_the_job() {
        // A gang member that failed before binding while the rest wait for the job.
        let a = Member {
            bound: false,
            ..done_pod("ns/a")
        };
        let b = Member {
            bound: false,
            containers_running: false,
            ..running_pod("ns/b")
        };
        let j = job(1, &[JobState::Pending]);
        assert_eq!(
            decide(&a, &JobView::Known(&j), &[a.clone(), b]),
            Plan::Disband {
                remove: vec![],
                pods: vec!["ns/a".into()]
            },
            "no cancel: the scheduler sees to a pending gang"
        );
    }

    /// A pod deleted while it ran, whose containers have stopped (phase Failed, as a kubelet
    /// reports a killed pod): a LeaderWorkerSet leader after `kubectl delete leaderworkerset`.
    fn deleted_pod(key: &str) -> Member {
        Member {
            deleting: true,
            ..done_pod(key)
        }
    }

    #[test]
    fn a_deleted_member_never_holds_its_finalizer_for_its_siblings() {
        // The deadlock of issue 21: the leader held its finalizer while the workers ran, and the
        // garbage collector kept the workers while the leader existed.
        let leader = deleted_pod("ns/lws-0");
        let w1 = running_pod("ns/lws-0-1");
        let w2 = running_pod("ns/lws-0-2");
        let j = job(1, &[JobState::Running]);
        let members = [leader.clone(), w1.clone(), w2.clone()];
        assert_eq!(
            decide(&leader, &JobView::Known(&j), &members),
            Plan::Disband {
                remove: vec!["ns/lws-0-1".into(), "ns/lws-0-2".into()],
                pods: vec!["ns/lws-0".into()]
            },
            "the leader's finalizer goes at once and the broken gang is removed"
        );
        // Without a phase yet (deleted, containers stopped): the same.
        let stopped = Member {
            terminal: false,
            ..leader.clone()
        };
        assert!(matches!(
            decide(&stopped, &JobView::Known(&j), &[stopped.clone(), w1.clone()]),
            Plan::Disband { remove, .. } if remove == ["ns/lws-0-1"]
        ));
        // A worker's own pass sees nothing to do while the leader is still listed.
        assert_eq!(decide(&w1, &JobView::Known(&j), &members), Plan::Keep);
    }

    #[test]
    fn a_deleted_member_whose_containers_run_waits_and_removes_nobody() {
        let a = Member {
            deleting: true,
            ..running_pod("ns/a")
        };
        let b = running_pod("ns/b");
        let j = job(1, &[JobState::Running]);
        assert_eq!(decide(&a, &JobView::Known(&j), &[a.clone(), b]), Plan::Keep);
    }

    #[test]
    fn a_member_that_succeeded_before_its_deletion_leaves_the_group_running() {
        let a = Member {
            succeeded: true,
            ..deleted_pod("ns/a")
        };
        let b = running_pod("ns/b");
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(&a, &JobView::Known(&j), &[a.clone(), b]),
            Plan::Disband {
                remove: vec![],
                pods: vec!["ns/a".into()]
            }
        );
    }

    #[test]
    fn siblings_already_deleting_or_unbound_are_not_removed_again() {
        let a = deleted_pod("ns/a");
        let b = Member {
            deleting: true,
            ..running_pod("ns/b")
        };
        let c = Member {
            bound: false,
            containers_running: false,
            ..running_pod("ns/c")
        };
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(&a, &JobView::Known(&j), &[a.clone(), b, c]),
            Plan::Disband {
                remove: vec![],
                pods: vec!["ns/a".into()]
            }
        );
    }

    #[test]
    fn a_disbanded_group_cancels_its_job_when_the_last_pod_stops() {
        // The removed workers stop; the leader is gone already.
        let w1 = deleted_pod("ns/lws-0-1");
        let w2 = Member {
            deleting: true,
            ..running_pod("ns/lws-0-2")
        };
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(&w1, &JobView::Known(&j), &[w1.clone(), w2.clone()]),
            Plan::Disband {
                remove: vec![],
                pods: vec!["ns/lws-0-1".into()]
            },
            "w2's containers still run: the job is not cancelled under them"
        );
        let w2 = deleted_pod("ns/lws-0-2");
        assert_eq!(
            decide(&w2, &JobView::Known(&j), std::slice::from_ref(&w2)),
            Plan::Release {
                cancel: Some((1, Cause::PodsDeleted)),
                pods: vec!["ns/lws-0-2".into()]
            }
        );
    }

    #[test]
    fn unbound_siblings_of_an_ended_job_do_not_hold_the_finalizer() {
        let a = done_pod("ns/a");
        let b = Member {
            bound: false,
            containers_running: false,
            ..running_pod("ns/b")
        };
        let j = job(1, &[JobState::Cancelled]);
        assert_eq!(
            decide(&a, &JobView::Known(&j), &[a.clone(), b]),
            Plan::Release {
                cancel: None,
                pods: vec!["ns/a".into()]
            }
        );
    }

    #[test]
    fn a_pod_on_a_lost_node_is_removed_then_released_with_its_job() {
        let a = Member {
            node_lost: true,
            ..running_pod("ns/a")
        };
        let j = job(1, &[JobState::Running]);
        assert_eq!(
            decide(&a, &JobView::Known(&j), std::slice::from_ref(&a)),
            Plan::Remove(Cause::NodeLost)
        );
        let deleting = Member {
            deleting: true,
            ..a
        };
        assert_eq!(
            decide(
                &deleting,
                &JobView::Known(&j),
                std::slice::from_ref(&deleting)
            ),
            Plan::Release {
                cancel: Some((1, Cause::NodeLost)),
                pods: vec!["ns/a".into()]
            }
        );
    }

    #[test]
    fn a_finished_pod_without_a_job_only_loses_its_finalizer() {
        let a = done_pod("ns/a");
        for view in [JobView::NoLabel, JobView::Unknown(9)] {
            assert_eq!(
                decide(&a, &view, std::slice::from_ref(&a)),
                Plan::Release {
                    cancel: None,
                    pods: vec!["ns/a".into()]
                }
            );
        }
    }
}
