//! Kubernetes pod priority through the bridge, end to end on real Slurm and the real control plane:
//! `priorityClasses` in the config gives a PriorityClass's pods Slurm's partition and priority
//! (annotations win), and pods waiting together are submitted in kube-scheduler's queue order,
//! higher priority first. Each test checks the lifecycle invariants.

mod e2e;

use e2e::controllers::Controllers;
use e2e::{Env, NS, job_field, job_id_of, pod};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use slurm_bridge::config::PriorityMapping;
use slurm_bridge::scheduler::SchedulerOptions;
use slurm_testenv::conf::{Partition, Policy};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// Real Slurm with external nodes `node-1..N` and a partition `high` (tier 10) over them, the
/// control plane with the same nodes, and PriorityClasses `high` (1000) and `low` (0).
async fn start(nodes: u32) -> Env {
    let mut kube = kube_testenv::InstanceOptions::with_nodes(nodes as usize);
    for n in &mut kube.nodes {
        n.labels.insert(
            slurm_bridge::wellknown::LABEL_EXTERNAL_NODE.into(),
            "true".into(),
        );
    }
    let slurm = slurm_testenv::InstanceOptions {
        nodes,
        policy: Policy {
            partitions: vec![Partition::new("high", 10)],
            ..Default::default()
        },
        ..Default::default()
    };
    let env = Env::start_with(slurm, kube).await;
    let classes: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(env.kube.clone());
    for (name, value) in [("high", 1000), ("low", 0)] {
        let pc =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value})).unwrap();
        classes.create(&PostParams::default(), &pc).await.unwrap();
    }
    env
}

fn mapped(opts: &mut SchedulerOptions) {
    opts.config.priority_classes.insert(
        "high".into(),
        PriorityMapping {
            qos: None,
            partition: Some("high".into()),
            priority: Some(900),
        },
    );
}

fn with_class(name: &str, class: &str, annotations: serde_json::Value) -> serde_json::Value {
    pod(
        name,
        annotations,
        json!({"priorityClassName": class, "terminationGracePeriodSeconds": 1}),
    )
}

#[tokio::test]
async fn a_priority_class_maps_to_slurm_partition_and_priority_unless_annotated() {
    let mut env = start(3).await;
    let slurm = e2e::rest_client(&env.slurm);
    env.start_scheduler_opts(slurm, tokio::sync::watch::channel(true).1, mapped)
        .await;
    let _controllers = Controllers::start(&env, |_| {}).await;

    env.create_pod(with_class("urgent", "high", json!({})))
        .await;
    env.create_pod(with_class(
        "pinned",
        "high",
        json!({"slurmjob.slinky.slurm.net/partition": "slurm-bridge"}),
    ))
    .await;
    env.create_pod(with_class("ordinary", "low", json!({})))
        .await;
    let bound = env
        .wait_bound(&["urgent".into(), "pinned".into(), "ordinary".into()], WAIT)
        .await;
    let (urgent, pinned, ordinary) = (
        job_id_of(&bound[0]),
        job_id_of(&bound[1]),
        job_id_of(&bound[2]),
    );
    assert_eq!(job_field(&env, urgent, "Partition"), "high");
    assert_eq!(job_field(&env, urgent, "Priority"), "900");
    // The annotation wins over the map's partition; the map's priority still applies.
    assert_eq!(job_field(&env, pinned, "Partition"), "slurm-bridge");
    assert_eq!(job_field(&env, pinned, "Priority"), "900");
    // An unmapped class changes nothing: the config's partition, Slurm's own priority.
    assert_eq!(job_field(&env, ordinary, "Partition"), "slurm-bridge");
    assert_ne!(job_field(&env, ordinary, "Priority"), "900");
    env.assert_invariants().await;
}

#[tokio::test]
async fn waiting_pods_are_submitted_higher_priority_first() {
    let mut env = start(2).await;
    // Twenty pods wait before the scheduler starts, the low ones created first.
    let mut names = Vec::new();
    for class in ["low", "high"] {
        for i in 0..10 {
            let name = format!("{class}-{i}");
            env.create_pod(with_class(&name, class, json!({}))).await;
            names.push(name);
        }
    }
    // One pass at a time, so the submit order is the queue's order.
    let slurm = e2e::rest_client(&env.slurm);
    env.start_scheduler_opts(slurm, tokio::sync::watch::channel(true).1, |o| {
        o.concurrency = 1
    })
    .await;
    let _controllers = Controllers::start(&env, |_| {}).await;
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), NS);
    let deadline = std::time::Instant::now() + WAIT;
    let labelled = loop {
        let all = pods.list(&ListParams::default()).await.unwrap().items;
        if all.iter().all(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(slurm_bridge::wellknown::LABEL_SLURM_JOBID))
        }) && all.len() == 20
        {
            break all;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "20 pods labelled with their jobs within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let ids = |class: &str| -> Vec<u32> {
        labelled
            .iter()
            .filter(|p| p.metadata.name.as_deref().unwrap().starts_with(class))
            .map(job_id_of)
            .collect()
    };
    let (high, low) = (ids("high-"), ids("low-"));
    let last_high = *high.iter().max().unwrap();
    let first_low = *low.iter().min().unwrap();
    assert!(
        last_high < first_low,
        "high-priority jobs {high:?} should all come before low-priority ones {low:?}"
    );
    env.assert_invariants().await;
}
