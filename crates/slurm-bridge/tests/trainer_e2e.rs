//! Kubeflow Trainer v2 through the bridge, set up as Trainer's operator guide for slurm-bridge
//! says: a ClusterTrainingRuntime with `podGroupPolicy: coscheduling`, the namespace in the
//! bridge's managed namespaces (its admission webhook gives the pods the bridge scheduler), and
//! Trainer's own controller, CRDs and webhook on a real control plane (kube-testenv
//! `trainer`), with real slurmctld and slurmrestd.
//!
//! A torch-distributed-style runtime of 4 nodes: Trainer creates the JobSet and a coscheduling
//! PodGroup named after the TrainJob (minMember 4); the bridge submits one Slurm job for the
//! whole TrainJob, binds the 4 pods to its nodes, they run to completion, the TrainJob is
//! Complete and the Slurm job ended. The TrainJob's `slurmjob.*` annotation reaches the job
//! (the PodGroup has none). The scheduler and the controllers act with the chart's RBAC.

mod e2e;

use e2e::clients::{Admission, api_for, create_object, has_condition};
use e2e::controllers::Controllers;
use e2e::wait_for;
use e2e::{Env, NS, job_id_of};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const NODES: u32 = 4;

fn runtime() -> serde_json::Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-slurm", "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": NODES, "torch": {"numProcPerNode": 1}},
            "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 120}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{
                        "name": "node", "image": "busybox",
                        // The node agent runs `sh -c` scripts: each node trains for 3 s.
                        "command": ["sh", "-c", "echo torch; sleep 3"],
                        "resources": {"requests": {"cpu": "1", "memory": "100Mi"}},
                    }]}}},
                },
            }]}},
        },
    })
}

async fn pods_of(env: &Env, trainjob: &str) -> Vec<Pod> {
    env.pods()
        .list(&ListParams::default().labels(&format!("scheduling.x-k8s.io/pod-group={trainjob}")))
        .await
        .unwrap()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trainjob_runs_as_one_slurm_job() {
    let mut env = Env::start_configured(NODES, |o| o.trainer = true).await;
    // The scheduler and the controllers run under the chart's RBAC (their ServiceAccounts'
    // tokens): a TrainJob read the chart did not grant would be Forbidden, and its annotation
    // lost.
    let dir = e2e::temp_dir("trainer-rbac");
    let (scheduler_client, controllers_client) = e2e::helm::chart_rbac_clients(&env, &dir).await;
    let admin = std::mem::replace(&mut env.kube, scheduler_client);
    env.start_scheduler().await;
    env.kube = controllers_client;
    let controllers = Controllers::start(&env, |_| {}).await;
    env.kube = admin;
    let _admission = Admission::start(&env, &[NS]).await;

    create_object(&env.kube, runtime()).await;
    create_object(
        &env.kube,
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": NS,
                         "annotations": {"slurmjob.slinky.slurm.net/timelimit": "7"}},
            "spec": {"runtimeRef": {"name": "torch-slurm"}},
        }),
    )
    .await;

    // Trainer's PodGroup: named after the TrainJob, all pods, no annotations.
    let podgroups = api_for(
        &env.kube,
        "scheduling.x-k8s.io/v1alpha1",
        "PodGroup",
        Some(NS),
    )
    .await;
    let pg = wait_for(
        "Trainer creates PodGroup tj",
        Duration::from_secs(60),
        || async {
            podgroups
                .get_opt("tj")
                .await
                .unwrap()
                .ok_or_else(|| "none".to_string())
        },
    )
    .await;
    assert_eq!(pg.data["spec"]["minMember"], NODES);
    assert!(pg.annotations().keys().all(|k| !k.starts_with("slurmjob.")));

    // All 4 pods bound, through one Slurm job.
    let bound = wait_for("4 TrainJob pods bound", Duration::from_secs(90), || async {
        let pods = pods_of(&env, "tj").await;
        let bound = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        if pods.len() == NODES as usize && bound == pods.len() {
            Ok(pods)
        } else {
            Err(format!("{} pods, {bound} bound", pods.len()))
        }
    })
    .await;
    for p in &bound {
        assert_eq!(
            p.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some(e2e::SCHEDULER),
            "the admission webhook gave {} the bridge scheduler",
            p.name_any()
        );
    }
    let ids: BTreeSet<u32> = bound.iter().map(job_id_of).collect();
    assert_eq!(ids.len(), 1, "one Slurm job for the TrainJob: {ids:?}");
    let id = *ids.first().unwrap();
    assert_eq!(
        env.slurm_job_ids(),
        vec![id],
        "Slurm has only the TrainJob's job"
    );
    let nodes: BTreeSet<&str> = bound
        .iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.as_deref().unwrap())
        .collect();
    assert_eq!(nodes.len(), NODES as usize, "one pod per node: {nodes:?}");
    let job = env.scontrol_job(id);
    assert!(
        job.contains("TimeLimit=00:07:00"),
        "the TrainJob's timelimit annotation applies: {job}"
    );
    env.assert_consistent().await;
    env.assert_invariants().await;

    // The pods run to completion, the TrainJob is Complete, the Slurm job ended.
    wait_for(
        "TrainJob pods Succeeded",
        Duration::from_secs(60),
        || async {
            let phases: Vec<String> = pods_of(&env, "tj")
                .await
                .iter()
                .map(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default()
                })
                .collect();
            if phases.len() == NODES as usize && phases.iter().all(|p| p == "Succeeded") {
                Ok(())
            } else {
                Err(format!("{phases:?}"))
            }
        },
    )
    .await;
    let trainjobs = api_for(
        &env.kube,
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        Some(NS),
    )
    .await;
    wait_for("TrainJob tj Complete", Duration::from_secs(60), || async {
        let tj = trainjobs.get("tj").await.unwrap();
        if has_condition(&tj, "Complete") {
            Ok(())
        } else {
            Err(tj.data["status"].to_string())
        }
    })
    .await;
    env.wait_job_ended(id, Duration::from_secs(30)).await;
    assert_eq!(env.slurm_job_ids(), vec![id], "nothing else was submitted");
    env.assert_consistent().await;
    env.assert_invariants().await;
    controllers.stop().await;
}
