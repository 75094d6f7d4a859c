//! Batch jobs and pods on the same nodes take turns, and preempt each other by partition
//! priority tier.

use crate::e2e::controllers::{Controllers, disruption};
use crate::e2e::{Env, NS, job_field, job_id_of, node_of, wait_some};
use crate::support::{
    WAIT, job_pods, k8s_job, names, pending_reason, pod, sbatch, wait_job_state,
    wait_job_succeeded, wait_no_external_job,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use slurm_testenv::conf::{Partition, Policy, PreemptMode};
use std::collections::BTreeSet;

/// 1. A batch job and a Kubernetes Job on the same two nodes take turns, both ways.
#[tokio::test]
async fn batch_jobs_and_pods_take_turns_on_the_same_nodes() {
    let mut env = Env::start_hybrid(2, Policy::default(), |_| {}).await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;

    // A batch job holds both nodes: the Job's pods wait with Slurm's reason.
    let batch = sbatch(&env, &["-N", "2", "--exclusive", "--wrap", "sleep 300"]);
    wait_job_state(&env, &batch, "RUNNING").await;
    assert_eq!(job_field(&env, &batch, "NodeList"), "node-[1-2]");
    env.create(k8s_job("first", 2, "3", json!({}))).await;
    let pods = job_pods(&env, "first", 2).await;
    for name in names(&pods) {
        let msg = env.wait_condition(&name, "SlurmJobPending", WAIT).await;
        assert!(pending_reason(&msg), "{name}: {msg}");
    }
    for p in env.pods().list(&ListParams::default()).await.unwrap() {
        assert!(
            node_of(&p).is_empty(),
            "{} bound beside the batch job",
            p.name_any()
        );
    }
    env.assert_invariants().await;

    // It ends: they bind, one on each node, and run to completion.
    env.slurm.run(&["scancel", &batch]).unwrap();
    let bound = env.wait_bound(&names(&pods), WAIT).await;
    let nodes: BTreeSet<String> = bound.iter().map(node_of).collect();
    assert_eq!(nodes, BTreeSet::from(["node-1".into(), "node-2".into()]));
    env.assert_invariants().await;
    wait_job_succeeded(&env, "first", 2).await;
    wait_no_external_job(&env).await;
    env.assert_invariants().await;

    // The other way round: pods hold the nodes, a batch job waits for them, then runs.
    env.create(k8s_job("second", 2, "8", json!({}))).await;
    let pods = job_pods(&env, "second", 2).await;
    env.wait_bound(&names(&pods), WAIT).await;
    let batch = sbatch(&env, &["-N", "2", "--exclusive", "--wrap", "sleep 300"]);
    wait_some(
        "the batch job pending for the pods' nodes",
        WAIT,
        async || {
            let (state, reason) = (
                job_field(&env, &batch, "JobState"),
                job_field(&env, &batch, "Reason"),
            );
            (state == "PENDING" && pending_reason(&reason)).then_some(())
        },
    )
    .await;
    env.assert_invariants().await;
    wait_job_succeeded(&env, "second", 2).await;
    wait_job_state(&env, &batch, "RUNNING").await;
    wait_no_external_job(&env).await;
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &batch]).unwrap();
}

/// 2. Preemption both ways, by partition priority tier (`high` over `slurm-bridge`).
#[tokio::test]
async fn batch_jobs_preempt_pods_and_pods_preempt_batch_jobs() {
    let policy = Policy {
        preempt: Some(PreemptMode::Requeue),
        partitions: vec![Partition::new("high", 10)],
        ..Default::default()
    };
    let mut env = Env::start_hybrid(1, policy, |_| {}).await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;

    env.create(k8s_job("low", 1, "infinity", json!({}))).await;
    let first = job_pods(&env, "low", 1).await.remove(0);
    let first_name = first.name_any();
    let first = env
        .wait_bound(std::slice::from_ref(&first_name), WAIT)
        .await
        .remove(0);
    let first_job = job_id_of(&first);

    // A batch job of the higher tier takes the node: the pod is removed as preemption does.
    let high = sbatch(&env, &["-p", "high", "--exclusive", "--wrap", "sleep 300"]);
    wait_job_state(&env, &high, "RUNNING").await;
    let removed = env
        .wait_pod(&first_name, "DisruptionTarget and deletion", WAIT, |p| {
            p.is_some_and(|p| disruption(p).is_some() && p.metadata.deletion_timestamp.is_some())
        })
        .await
        .unwrap();
    let (reason, message) = disruption(&removed).unwrap();
    assert!(
        ["SlurmJobPreempted", "SlurmJobRequeued"].contains(&reason.as_str()),
        "{reason}: {message}"
    );
    assert!(message.contains(&first_job.to_string()), "{message}");
    // Its grace period is honoured: the deletion carries the pod's own 2 s.
    assert_eq!(removed.metadata.deletion_grace_period_seconds, Some(2));
    let events = env.event_reasons(&first_name).await;
    assert!(
        events.iter().any(|(r, _)| *r == reason),
        "no {reason} Event: {events:?}"
    );
    env.wait_pod(&first_name, "gone", WAIT, |p| p.is_none())
        .await;
    env.wait_job_ended(first_job, WAIT).await;

    // The Job's replacement waits while the batch job runs, then runs when it ends.
    let replacement = job_pods(&env, "low", 1).await.remove(0).name_any();
    assert_ne!(replacement, first_name);
    let msg = env
        .wait_condition(&replacement, "SlurmJobPending", WAIT)
        .await;
    assert!(pending_reason(&msg), "{msg}");
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &high]).unwrap();
    let bound = env
        .wait_bound(std::slice::from_ref(&replacement), WAIT)
        .await;
    assert_eq!(node_of(&bound[0]), "node-1");
    env.assert_invariants().await;

    // A pod of the higher tier preempts a batch job of the lower one, which is requeued.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(env.kube.clone(), NS);
    jobs.delete("low", &DeleteParams::background())
        .await
        .unwrap();
    wait_no_external_job(&env).await;
    let low = sbatch(
        &env,
        &[
            "-p",
            "slurm-bridge",
            "--exclusive",
            "--requeue",
            "--wrap",
            "sleep 300",
        ],
    );
    wait_job_state(&env, &low, "RUNNING").await;
    env.create_pod(pod(
        "urgent",
        json!({"slurmjob.slinky.slurm.net/partition": "high"}),
        json!({}),
    ))
    .await;
    let bound = env.wait_bound(&["urgent".into()], WAIT).await;
    assert_eq!(node_of(&bound[0]), "node-1");
    wait_job_state(&env, &low, "PENDING").await;
    assert_eq!(job_field(&env, &low, "Restarts"), "1");
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &low]).unwrap();
}
