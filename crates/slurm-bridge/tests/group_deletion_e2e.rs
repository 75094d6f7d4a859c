//! Deleting a workload through its owner, for every workload kind the bridge groups
//! (LeaderWorkerSet, JobSet, Job, Deployment, a coscheduling PodGroup owning its pods), with
//! background and foreground propagation (issue 21): every pod goes, no finalizer is left, the
//! owner goes, and every Slurm job of the workload ends. Real Slurm, the real control plane with
//! its garbage collector and the real JobSet and LWS controllers, the scheduler and the
//! controllers in-process. One environment serves every case; the cases run side by side.
//!
//! The LeaderWorkerSet case is the deadlock of issue 21: a deleted leader (containers stopped)
//! kept the bridge's finalizer while its workers ran, and the garbage collector kept the workers'
//! StatefulSet while its owner, the leader pod, existed.

mod e2e;

use e2e::Env;
use e2e::controllers::Controllers;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PropagationPolicy};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const BIND_TIMEOUT: Duration = Duration::from_secs(90);
const GONE_TIMEOUT: Duration = Duration::from_secs(90);

/// A pod template: our scheduler, runs until deleted, stops 1 s after its deletion.
fn template(labels: Value, restart: &str) -> Value {
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "schedulerName": e2e::SCHEDULER,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}],
        }
    })
}

/// One workload: its owner, how to find its pods, and how many there are.
struct Case {
    name: String,
    api_version: &'static str,
    kind: &'static str,
    selector: String,
    pods: usize,
    policy: PropagationPolicy,
}

fn policy_name(p: &PropagationPolicy) -> &'static str {
    match p {
        PropagationPolicy::Foreground => "fg",
        PropagationPolicy::Background => "bg",
        PropagationPolicy::Orphan => "orphan",
    }
}

async fn dynamic_api(env: &Env, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, _) = kube::discovery::pinned_kind(&env.kube, &gvk)
        .await
        .expect("kind served");
    Api::namespaced_with(env.kube.clone(), e2e::NS, &ar)
}

/// The workload of `kind` named `name`: (apiVersion, spec, the selector of its pods, how many).
fn workload(kind: &str, name: &str) -> (&'static str, Value, String, usize) {
    match kind {
        // As the original's example: 2 groups (replicas) of a leader and a worker each.
        "LeaderWorkerSet" => (
            "leaderworkerset.x-k8s.io/v1",
            json!({"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                "workerTemplate": template(json!({}), "Always")}}),
            format!("leaderworkerset.sigs.k8s.io/name={name}"),
            4,
        ),
        "JobSet" => (
            "jobset.x-k8s.io/v1alpha2",
            json!({"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 0,
                "template": template(json!({}), "Never")}}}]}),
            format!("jobset.sigs.k8s.io/jobset-name={name}"),
            2,
        ),
        "Job" => (
            "batch/v1",
            json!({"parallelism": 2, "completions": 2, "backoffLimit": 0,
                "template": template(json!({}), "Never")}),
            format!("batch.kubernetes.io/job-name={name}"),
            2,
        ),
        "Deployment" => (
            "apps/v1",
            json!({"replicas": 2, "selector": {"matchLabels": {"app": name}},
                "template": template(json!({"app": name}), "Always")}),
            format!("app={name}"),
            2,
        ),
        // A coscheduling gang of 3 whose pods the PodGroup owns (made by `create`), so its
        // deletion takes them.
        "PodGroup" => (
            "scheduling.x-k8s.io/v1alpha1",
            json!({"minMember": 3}),
            format!("scheduling.x-k8s.io/pod-group={name}"),
            3,
        ),
        other => panic!("no workload kind {other}"),
    }
}

/// Creates the workload of `kind` (named after the kind and the policy); returns its case.
async fn create(env: &Env, kind: &'static str, policy: PropagationPolicy) -> Case {
    let name = format!("{}-{}", kind.to_lowercase(), policy_name(&policy));
    let (api_version, spec, selector, pods) = workload(kind, &name);
    let owner = env
        .create(json!({
            "apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec,
        }))
        .await;
    if kind == "PodGroup" {
        for i in 0..pods {
            let mut p = template(json!({"scheduling.x-k8s.io/pod-group": name}), "Always");
            p["apiVersion"] = json!("v1");
            p["kind"] = json!("Pod");
            p["metadata"]["name"] = json!(format!("{name}-{i}"));
            p["metadata"]["ownerReferences"] = json!([{
                "apiVersion": api_version, "kind": kind,
                "name": name, "uid": owner.uid().unwrap(),
                "controller": true, "blockOwnerDeletion": true,
            }]);
            env.create_pod(p).await;
        }
    }
    Case {
        name,
        api_version,
        kind,
        selector,
        pods,
        policy,
    }
}

async fn pods_of(env: &Env, case: &Case) -> Vec<Pod> {
    env.pods()
        .list(&ListParams::default().labels(&case.selector))
        .await
        .unwrap()
        .items
}

fn job_id(p: &Pod) -> Option<u32> {
    p.labels()
        .get(slurm_bridge::wellknown::LABEL_SLURM_JOBID)
        .and_then(|v| v.parse().ok())
}

/// Waits until the case's pods are all there and bound; returns their Slurm job ids.
async fn wait_running(env: &Env, case: &Case) -> BTreeSet<u32> {
    let deadline = Instant::now() + BIND_TIMEOUT;
    loop {
        let pods = pods_of(env, case).await;
        let bound = pods
            .iter()
            .filter(|p| e2e::node_name_is_set(p) && job_id(p).is_some())
            .count();
        if pods.len() == case.pods && bound == case.pods {
            return pods.iter().filter_map(job_id).collect();
        }
        assert!(
            Instant::now() < deadline,
            "{}: {bound} of {} pods bound within {BIND_TIMEOUT:?}: {:?}",
            case.name,
            case.pods,
            pods.iter().map(e2e::describe).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the owner with the case's propagation, then waits until its pods and the owner are
/// gone and its jobs have ended; returns how long that took.
async fn delete_and_wait(env: &Env, case: &Case, jobs: &BTreeSet<u32>) -> Duration {
    let api = dynamic_api(env, case.api_version, case.kind).await;
    let params = DeleteParams {
        propagation_policy: Some(case.policy.clone()),
        ..Default::default()
    };
    let started = Instant::now();
    api.delete(&case.name, &params).await.expect("delete owner");
    let deadline = started + GONE_TIMEOUT;
    loop {
        let pods = pods_of(env, case).await;
        let owner = api.get_opt(&case.name).await.unwrap();
        let mut live = Vec::new();
        for id in jobs {
            let job = env.rest.job(*id).await.expect("job");
            if job.job_state.iter().any(|s| {
                matches!(
                    s,
                    slurm_rest::models::JobState::Pending | slurm_rest::models::JobState::Running
                )
            }) {
                live.push(*id);
            }
        }
        if pods.is_empty() && owner.is_none() && live.is_empty() {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{}: {} pods left {:?}, owner {}, live jobs {live:?} {GONE_TIMEOUT:?} after the delete",
            case.name,
            pods.len(),
            pods.iter()
                .map(|p| format!(
                    "{} (phase {:?}, deleting {}, finalizers {:?})",
                    p.name_any(),
                    p.status.as_ref().and_then(|s| s.phase.clone()),
                    p.metadata.deletion_timestamp.is_some(),
                    p.finalizers()
                ))
                .collect::<Vec<_>>(),
            if owner.is_some() {
                "still there"
            } else {
                "gone"
            },
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every workload kind, deleted through its owner with background and with foreground
/// propagation. 28 nodes: each Slurm job here holds whole nodes, and the 10 workloads make 26
/// pods, all running at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_any_workload_through_its_owner_ends_its_pods_and_jobs() {
    let mut env = Env::start_with_workload_controllers(28).await;
    env.start_scheduler().await;
    let controllers = Controllers::start(&env, |_| {}).await;
    let kinds = ["LeaderWorkerSet", "JobSet", "Job", "Deployment", "PodGroup"];
    let mut cases = Vec::new();
    for kind in kinds {
        for policy in [PropagationPolicy::Background, PropagationPolicy::Foreground] {
            cases.push(create(&env, kind, policy).await);
        }
    }
    let env_ref = &env;
    let running = futures::future::join_all(cases.iter().map(|c| wait_running(env_ref, c))).await;
    for (case, jobs) in cases.iter().zip(&running) {
        let groups = match case.kind {
            "LeaderWorkerSet" => 2,
            "PodGroup" => 1,
            _ => case.pods,
        };
        assert_eq!(jobs.len(), groups, "{}: one Slurm job per group", case.name);
    }
    env.assert_invariants().await;
    let took = futures::future::join_all(
        cases
            .iter()
            .zip(&running)
            .map(|(c, jobs)| delete_and_wait(env_ref, c, jobs)),
    )
    .await;
    for (case, took) in cases.iter().zip(&took) {
        println!(
            "{}: pods, owner and jobs gone {:.1} s after the delete",
            case.name,
            took.as_secs_f64()
        );
    }
    env.assert_invariants().await;
    // No pod of any case is left, and no Slurm job runs or waits.
    let left = Api::<Pod>::all(env.kube.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let ours: Vec<String> = left
        .iter()
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(e2e::SCHEDULER)
        })
        .map(|p| p.name_any())
        .collect();
    assert!(ours.is_empty(), "pods left: {ours:?}");
    assert!(
        env.active_job_ids().is_empty(),
        "live Slurm jobs left: {:?}",
        env.active_job_ids()
    );
    controllers.stop().await;
}
