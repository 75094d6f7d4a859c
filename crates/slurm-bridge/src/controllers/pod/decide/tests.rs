//! Table tests of the pod lifecycle rules.

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

#[test]
fn a_pod_the_kubelet_rejected_ends_its_job_once() {
    let rejected = Member {
        terminal: true,
        containers_running: false,
        rejected: true,
        ..running_pod("ns/a")
    };
    let active = job(1, &[JobState::Running]);
    assert_eq!(
        decide(
            &rejected,
            &JobView::Known(&active),
            std::slice::from_ref(&rejected)
        ),
        Plan::Release {
            cancel: Some((1, Cause::KubeletRejected)),
            pods: vec!["ns/a".into()],
        }
    );
    // Once cancelled and released, nothing more: no second cancel, no resubmission.
    let released = Member {
        has_finalizer: false,
        ..rejected.clone()
    };
    let cancelled = job(1, &[JobState::Cancelled]);
    assert_eq!(
        decide(
            &released,
            &JobView::Known(&cancelled),
            std::slice::from_ref(&released)
        ),
        Plan::Keep
    );
    assert_eq!(Cause::KubeletRejected.reason(), "KubeletRejected");
}

/// Slurm losing its state: a pod whose job is unknown is held (not removed) when the census
/// says so, or once marked; the mark goes when the job is known again; a held pod deleted by the
/// admin is released as any finished pod whose job is gone.
#[test]
fn state_loss_hold() {
    let running = job(7, &[JobState::Running]);
    let cancelled = job(7, &[JobState::Cancelled]);
    let live = running_pod("ns/a");
    let holding = Member {
        hold_if_unknown: true,
        ..live.clone()
    };
    let marked = Member {
        lost_marked: true,
        hold_if_unknown: true,
        ..live.clone()
    };
    let deleting = |m: &Member| Member {
        deleting: true,
        ..m.clone()
    };
    let stopped = |m: &Member| Member {
        deleting: true,
        containers_running: false,
        ..m.clone()
    };
    // (me, job, want)
    let cases: Vec<(Member, JobView, Plan)> = vec![
        // No hold: removed as ever (a single job purged, say).
        (
            live.clone(),
            JobView::Unknown(7),
            Plan::Remove(Cause::JobUnknown),
        ),
        // Hold: kept and marked; marked already: the same plan (the action writes nothing).
        (holding.clone(), JobView::Unknown(7), Plan::Hold),
        (marked.clone(), JobView::Unknown(7), Plan::Hold),
        // The hold covers unknown jobs only: a job Slurm reports ended still removes the pod,
        // and a pod without a label is no state loss.
        (
            holding.clone(),
            JobView::Known(&cancelled),
            Plan::Remove(Cause::JobCancelled),
        ),
        (
            holding.clone(),
            JobView::NoLabel,
            Plan::Remove(Cause::NoJobLabel),
        ),
        // The job known again: the mark goes; unmarked: nothing.
        (marked.clone(), JobView::Known(&running), Plan::Unhold),
        (holding.clone(), JobView::Known(&running), Plan::Keep),
        // A marked pod whose job comes back not running goes as any such pod.
        (
            marked.clone(),
            JobView::Known(&cancelled),
            Plan::Remove(Cause::JobCancelled),
        ),
        // The admin accepts the loss: deleted, it waits for its containers, then its finalizer
        // is released (no job to cancel).
        (deleting(&marked), JobView::Unknown(7), Plan::Keep),
        (
            stopped(&marked),
            JobView::Unknown(7),
            Plan::Release {
                cancel: None,
                pods: vec!["ns/a".into()],
            },
        ),
    ];
    for (me, view, want) in cases {
        assert_eq!(
            decide(&me, &view, std::slice::from_ref(&me)),
            want,
            "{me:?} {view:?}"
        );
    }
    // A held pod deleted while a new pod owns its old job id (Slurm counts from FirstJobId
    // again): its view is Unknown (the job does not name it) and the new pod is not its member,
    // so nothing of the new pod is touched.
    let new_pod = running_pod("ns/new");
    let gone = stopped(&marked);
    assert_eq!(
        decide(&gone, &JobView::Unknown(7), &[gone.clone(), new_pod]),
        Plan::Release {
            cancel: None,
            pods: vec!["ns/a".into()],
        }
    );
}
