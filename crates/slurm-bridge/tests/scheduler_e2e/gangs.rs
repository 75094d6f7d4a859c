//! Gangs: a coscheduling gang submitted only when complete, a closed PodGroup refusing
//! newcomers, a gang shrinking while pending or while running, a gang below its size.

use crate::e2e::{self, Env, job_id_of, pod};
use crate::support::{
    BIND_TIMEOUT, coscheduling_api, coscheduling_group, label_of, member, pass_over_reported,
};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coscheduling_gang_is_submitted_only_when_complete() {
    let mut env = Env::start(4).await;
    env.start_scheduler().await;
    env.create(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "gang"}, "spec": {"minMember": 4}
    }))
    .await;
    let member = |i: usize| {
        let mut p = pod(&format!("gang-{i}"), json!({}), json!({}));
        p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "gang"});
        p
    };
    for i in 0..3 {
        env.create_pod(member(i)).await;
    }
    // The scheduler may see gang-0 before the other members exist: wait for the count to reach 3.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let message = env
            .wait_condition("gang-0", "WaitingForGang", Duration::from_secs(30))
            .await;
        if message.contains("3 of 4") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{message}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        env.slurm_job_ids().is_empty(),
        "nothing submitted for an incomplete gang"
    );
    env.create_pod(member(3)).await;
    let names: Vec<String> = (0..4).map(|i| format!("gang-{i}")).collect();
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let ids: std::collections::BTreeSet<u32> = pods.iter().map(job_id_of).collect();
    assert_eq!(ids.len(), 1, "one job for the gang");
    let nodes: std::collections::BTreeSet<String> = pods
        .iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
        .collect();
    assert_eq!(nodes.len(), 4, "one node per pod");
    env.assert_consistent().await;
    env.assert_invariants().await;
}

/// Item 1: a coscheduling PodGroup in phase Running refuses new pods, and its running gang keeps
/// its job and its labels (the original only refused to schedule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_podgroup_refuses_newcomers_and_keeps_its_running_gang() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    coscheduling_group(&env, "closed", 2).await;
    for i in 0..2 {
        env.create_pod(member(&format!("closed-{i}"), "closed", None))
            .await;
    }
    let names: Vec<String> = (0..2).map(|i| format!("closed-{i}")).collect();
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let id = job_id_of(&pods[0]);
    coscheduling_api(&env)
        .patch_status(
            "closed",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    // A replacement pod arrives: refused, with the reason.
    env.create_pod(member("closed-2", "closed", None)).await;
    let message = env
        .wait_condition("closed-2", "PodGroupClosed", BIND_TIMEOUT)
        .await;
    assert!(message.contains("Running"), "{message}");
    let events = env.wait_event("closed-2", "PodGroupClosed").await;
    assert!(
        events.iter().any(|(r, _)| r == "PodGroupClosed"),
        "{events:?}"
    );
    // Its passes go on: after a whole pass over it that read the refusal, the gang's job and
    // labels stay.
    pass_over_reported(&env, "closed-2", "PodGroupClosed").await;
    assert_eq!(e2e::job_field(&env, id, "JobState"), "RUNNING");
    for name in &names {
        assert_eq!(
            label_of(&env, name).await,
            Some(id),
            "{name} keeps its label"
        );
    }
    assert_eq!(
        env.slurm_job_ids(),
        [id],
        "no job cancelled, none submitted"
    );
    assert_eq!(label_of(&env, "closed-2").await, None);
    env.assert_invariants().await;
}

/// Item 2: a gang that loses a member while its job is pending gets a new job once it is
/// complete again (the pending one is cancelled, its unbound pods unlabelled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_shrinks_while_pending_gets_a_new_job() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    // A pod holding node-1 keeps the gang's job pending.
    env.create_pod(pod("blocker", json!({}), json!({}))).await;
    let blocker = env.wait_bound(&["blocker".into()], BIND_TIMEOUT).await;
    let blocker_job = job_id_of(&blocker[0]);
    coscheduling_group(&env, "shrinks", 2).await;
    for i in 0..2 {
        env.create_pod(member(&format!("shrinks-{i}"), "shrinks", None))
            .await;
    }
    let mut first = None;
    for _ in 0..300 {
        if let Some(id) = label_of(&env, "shrinks-0").await {
            first = Some(id);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = first.expect("the gang's job");
    e2e::wait_until("the gang's job pending", BIND_TIMEOUT, async || {
        e2e::job_field(&env, first, "JobState") == "PENDING"
    })
    .await;
    // A member goes before the job runs.
    env.pods()
        .delete("shrinks-1", &Default::default())
        .await
        .unwrap();
    // Nothing triggers shrinks-0 when its sibling goes: its next pass comes with its requeue
    // (at most 30 s). The condition then says "1 of 2" (the next pass rewrites the cancel's
    // message); the Event keeps it.
    e2e::wait_until(
        "the pending job cancelled",
        Duration::from_secs(90),
        async || e2e::job_field(&env, first, "JobState") == "CANCELLED",
    )
    .await;
    let mut events = Vec::new();
    for _ in 0..50 {
        events = env.event_reasons("shrinks-0").await;
        if events
            .iter()
            .any(|(r, n)| r == "WaitingForGang" && n.contains("cancelled"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "WaitingForGang" && n.contains("1 of 2") && n.contains("cancelled")),
        "{events:?}"
    );
    let message = env
        .wait_condition("shrinks-0", "WaitingForGang", BIND_TIMEOUT)
        .await;
    assert!(message.contains("1 of 2"), "{message}");
    assert_eq!(label_of(&env, "shrinks-0").await, None, "label cleared");
    // The gang is complete again: a new job, which runs once node-1 is free.
    env.create_pod(member("shrinks-1", "shrinks", None)).await;
    let mut second = None;
    for _ in 0..300 {
        if let Some(id) = label_of(&env, "shrinks-1").await {
            second = Some(id);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let second = second.expect("a new job");
    assert_ne!(second, first);
    env.slurm
        .run(&["scancel", &blocker_job.to_string()])
        .unwrap();
    let names = ["shrinks-0".to_string(), "shrinks-1".to_string()];
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    assert!(pods.iter().all(|p| job_id_of(p) == second));
    env.assert_invariants().await;
}

/// Item 2: a running gang below its minimum is left to the controllers: a new pod of the group
/// waits, the job keeps running and its pods their labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_gang_below_its_minimum_is_left_alone() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    coscheduling_group(&env, "runs", 3).await;
    env.create_pod(member("runs-0", "runs", None)).await;
    for i in 1..3 {
        env.create_pod(member(&format!("runs-{i}"), "runs", Some(&["sleep", "2"])))
            .await;
    }
    let names: Vec<String> = (0..3).map(|i| format!("runs-{i}")).collect();
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let id = job_id_of(&pods[0]);
    for name in &names[1..] {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let p = env.pods().get(name).await.unwrap();
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{name} finishes");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // One live pod of 3; a new one makes 2.
    env.create_pod(member("runs-3", "runs", None)).await;
    let message = env
        .wait_condition("runs-3", "WaitingForGang", BIND_TIMEOUT)
        .await;
    assert!(message.contains("2 of 3"), "{message}");
    // After a whole pass over the waiting pod that read its report, the running job is untouched.
    pass_over_reported(&env, "runs-3", "WaitingForGang").await;
    assert_eq!(e2e::job_field(&env, id, "JobState"), "RUNNING");
    assert_eq!(label_of(&env, "runs-0").await, Some(id));
    assert_eq!(env.slurm_job_ids(), [id]);
}

/// Items 3 and 5: a coscheduling PodGroup with minMember 2 and 3 pods on 2 nodes is submitted
/// (Slurm may grant 2 to 3 nodes), the pods that fit are bound, and the one left over, like a
/// pod that joins after the allocation, is told so and gets a job of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_below_its_size_starts_its_minimum_and_the_rest_follow_alone() {
    let mut env = Env::start(2).await;
    coscheduling_group(&env, "partial", 2).await;
    for i in 0..3 {
        env.create_pod(member(&format!("partial-{i}"), "partial", None))
            .await;
    }
    // Started once all three exist, so the group's job names all three (with the scheduler
    // running, minMember 2 may be submitted before the third pod is created, which makes it a
    // pod that joined after the allocation: the case of `partial-late` below).
    env.start_scheduler().await;
    let placed = ["partial-0".to_string(), "partial-1".to_string()];
    let pods = env.wait_bound(&placed, BIND_TIMEOUT).await;
    let group_job = job_id_of(&pods[0]);
    assert_eq!(job_id_of(&pods[1]), group_job);
    assert!(env.scontrol_job(group_job).contains("NumNodes=2"));
    // The last pod by name was left over: told why, and submitted alone.
    env.wait_condition("partial-2", "OutsideGroupAllocation", BIND_TIMEOUT)
        .await;
    let events = env.wait_event("partial-2", "OutsideGroupAllocation").await;
    let note = events
        .iter()
        .find(|(r, _)| r == "OutsideGroupAllocation")
        .map(|(_, n)| n.clone())
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(note.contains("allocated 2 node(s)"), "{note}");
    let mut alone = None;
    for _ in 0..300 {
        alone = label_of(&env, "partial-2")
            .await
            .filter(|id| *id != group_job);
        if alone.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let alone = alone.expect("a job of its own");
    assert_eq!(
        e2e::job_field(&env, alone, "JobState"),
        "PENDING",
        "both nodes are taken"
    );
    // A pod that joins the running group: told so, and submitted alone too.
    env.create_pod(member("partial-late", "partial", None))
        .await;
    env.wait_condition("partial-late", "OutsideGroupAllocation", BIND_TIMEOUT)
        .await;
    let events = env
        .wait_event("partial-late", "OutsideGroupAllocation")
        .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "OutsideGroupAllocation" && n.contains("joined")),
        "{events:?}"
    );
    // The group's job ends: the two followers run.
    env.slurm.run(&["scancel", &group_job.to_string()]).unwrap();
    let followers = ["partial-2".to_string(), "partial-late".to_string()];
    let pods = env.wait_bound(&followers, BIND_TIMEOUT).await;
    assert_eq!(job_id_of(&pods[0]), alone);
    assert_ne!(job_id_of(&pods[1]), group_job);
    assert_ne!(job_id_of(&pods[1]), alone);
    env.assert_invariants().await;
}
