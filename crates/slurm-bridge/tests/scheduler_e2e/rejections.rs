//! What is not submitted, and why: an invalid annotation, a gated pod, a pod larger than every
//! node, a job Slurm rejects for good (not sent again until something changes).

use crate::e2e::{self, Env, job_id_of, pod};
use crate::support::{BIND_TIMEOUT, passes_over_alone, start_watched};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_annotation_is_reported_and_nothing_is_submitted() {
    let mut env = Env::start(1).await;
    env.start_scheduler().await;
    env.create_pod(pod(
        "bad",
        json!({"slurmjob.slinky.slurm.net/timelimit": "soon"}),
        json!({}),
    ))
    .await;
    let message = env
        .wait_condition("bad", "InvalidAnnotation", Duration::from_secs(30))
        .await;
    assert!(
        message.contains("slurmjob.slinky.slurm.net/timelimit"),
        "{message}"
    );
    assert!(message.contains("soon"), "{message}");
    let events = env.wait_event("bad", "InvalidAnnotation").await;
    assert!(
        events.iter().any(|(r, _)| r == "InvalidAnnotation"),
        "{events:?}"
    );
    assert!(env.slurm_job_ids().is_empty());
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_waits_for_its_gates_to_be_removed() {
    let mut env = Env::start(1).await;
    let rest = e2e::rest_client(&env.slurm);
    let watched = start_watched(&mut env, rest).await;
    env.create_pod(pod(
        "gated",
        json!({}),
        json!({"schedulingGates": [{"name": "example.com/quota"}]}),
    ))
    .await;
    // A whole pass over the gated pod has run.
    passes_over_alone(&env, &watched, "gated", "gated", |p| {
        p.spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty())
    })
    .await;
    assert!(
        env.slurm_job_ids().is_empty(),
        "no Slurm job for a gated pod"
    );
    let p = env.pods().get("gated").await.unwrap();
    assert!(!e2e::node_name_is_set(&p));
    assert_eq!(
        e2e::scheduled_condition(&p).map(|c| c.1),
        Some("SchedulingGated".to_string()),
        "kube-apiserver's own condition stays"
    );
    // Removing the gate (the only change the API allows to gates) lets it schedule.
    env.pods()
        .patch(
            "gated",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"schedulingGates": null}})),
        )
        .await
        .unwrap();
    env.wait_bound(&["gated".into()], BIND_TIMEOUT).await;
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_larger_than_every_node_is_not_submitted() {
    // Nodes have cpu 8 and memory 16000Mi allocatable.
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    let sized = |name: &str, cpu: &str| {
        pod(
            name,
            json!({}),
            json!({"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                                   "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]}),
        )
    };
    env.create_pod(sized("huge", "16")).await;
    let message = env
        .wait_condition("huge", "NoFeasibleNodes", Duration::from_secs(30))
        .await;
    assert!(
        message.contains("0/2 nodes are available")
            && message.contains("2 Insufficient cpu (requested 16, largest node allocatable 8)"),
        "{message}"
    );
    assert!(
        env.slurm_job_ids().is_empty(),
        "no Slurm job for a pod no node can hold"
    );
    // A pod that fits is scheduled beside it, through Slurm.
    env.create_pod(sized("fits", "2")).await;
    let pods = env.wait_bound(&["fits".into()], BIND_TIMEOUT).await;
    assert_eq!(env.slurm_job_ids(), [job_id_of(&pods[0])]);
    let huge = env.pods().get("huge").await.unwrap();
    assert!(!e2e::node_name_is_set(&huge));
    assert!(
        !huge
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(slurm_bridge::wellknown::LABEL_SLURM_JOBID),
        "no job label on the pod that does not fit"
    );
    env.assert_consistent().await;
    env.assert_invariants().await;
}

/// Item 4: a job Slurm rejects for good is not sent again every few seconds: the pod shows
/// Slurm's text and waits until it (or its group, or the nodes) changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_slurm_rejection_waits_for_a_change() {
    let mut env = Env::start(1).await;
    let writes = e2e::SlurmWrites::open();
    let gated = e2e::Gated {
        inner: env.rest.clone(),
        writes: writes.clone(),
    };
    let watched = start_watched(&mut env, gated).await;
    env.create_pod(pod(
        "nowhere",
        json!({"slurmjob.slinky.slurm.net/partition": "nosuch"}),
        json!({}),
    ))
    .await;
    let message = env
        .wait_condition("nowhere", "SlurmSubmitFailed", BIND_TIMEOUT)
        .await;
    assert!(message.contains("Invalid partition name"), "{message}");
    // Passes after the rejection (the one its condition triggers, then two more) send nothing:
    // still one submit.
    passes_over_alone(&env, &watched, "nowhere", "rejected", |p| {
        e2e::scheduled_condition(p).is_some_and(|c| c.1 == "SlurmSubmitFailed")
    })
    .await;
    assert_eq!(*writes.submits_entered.borrow(), 1, "sent once");
    let events = env.event_reasons("nowhere").await;
    assert_eq!(
        events
            .iter()
            .filter(|(r, _)| r == "SlurmSubmitFailed")
            .count(),
        1,
        "{events:?}"
    );
    // The user fixes the pod: sent again at once, and it runs.
    env.pods()
        .patch(
            "nowhere",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "slurmjob.slinky.slurm.net/partition": "slurm-bridge"}}})),
        )
        .await
        .unwrap();
    env.wait_bound(&["nowhere".into()], BIND_TIMEOUT).await;
    assert_eq!(*writes.submits_entered.borrow(), 2);
    env.assert_consistent().await;
    env.assert_invariants().await;
}
