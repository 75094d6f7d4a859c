//! Unit tests of the pass rules and helpers.

use super::rules::{Step, step};
use super::submit::{as_update, desc_hash};
use super::*;
use crate::k8s::slim_pod::Pod;
use crate::scheduler::podgroup::all_bound;
use crate::slurm::WatchedJob;
use crate::workload::GangStatus;
use crate::workload::admin_comment::AdminComment;
use slurm_rest::models::JobState;

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
            desc: None,
            cluster: None,
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

/// The hash a job's admin_comment carries is the same in every build and Rust release: a
/// restarted or upgraded scheduler compares it with the one it computes.
#[test]
fn a_description_hash_is_stable_across_builds() {
    let desc = slurm_rest::models::JobDescMsg {
        name: Some("ns/pod".into()),
        ..Default::default()
    };
    // FNV-1a of the JSON text; a different value here means every pending job is updated once
    // after the upgrade that changed it.
    let text = serde_json::to_string(&desc).unwrap();
    assert_eq!(text, r#"{"name":"ns/pod"}"#);
    assert_eq!(desc_hash(&desc), 0x5acd_9916_ab73_5c59);
    assert_ne!(desc_hash(&desc), desc_hash(&Default::default()));
}

/// Issue 23: an incomplete gang is marked once its PodGroup's scheduleTimeoutSeconds passed;
/// until then the pass looks again when the timeout falls due.
#[test]
fn incomplete_gang_timeout_rule() {
    use super::waiting::{GangWait, incomplete_wait};
    use crate::workload::GangTimeout;
    let t = GangTimeout {
        seconds: 60,
        since: 1000,
    };
    let cases = [
        (None, 5000, GangWait::Waiting(None)),
        (Some(t), 1000, GangWait::Waiting(Some(60))),
        (Some(t), 1059, GangWait::Waiting(Some(1))),
        (Some(t), 1060, GangWait::TimedOut(60)),
        (Some(t), 9999, GangWait::TimedOut(60)),
    ];
    for (timeout, now, want) in cases {
        assert_eq!(incomplete_wait(timeout, now), want, "{timeout:?} at {now}");
    }
}
