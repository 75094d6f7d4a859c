//! Kueue in front of the bridge, with Kueue v0.17's real controller and webhooks (kube-testenv
//! `kueue`, integrations `batch/job` and `pod`), real slurmctld and slurmrestd, and the bridge's
//! admission webhook serving the namespace (it gives the pods the bridge scheduler).
//!
//! A ClusterQueue of 8 CPUs and a LocalQueue in the managed namespace:
//! - two Jobs of 6 CPUs: Kueue admits the first (unsuspends it), its pod goes through the
//!   bridge to Slurm and runs; the second stays suspended (no pod, nothing in Slurm) while the
//!   first runs, then is admitted and runs through the bridge;
//! - a Kueue plain-pod group of 2 pods becomes exactly one Slurm external job.
//!
//! Both cases share one environment (they run one after the other; the quota is free again
//! once the Jobs are done).

mod e2e;

use e2e::clients::{Admission, api_for, create_object};
use e2e::controllers::Controllers;
use e2e::wait_for;
use e2e::{Env, NS, SCHEDULER, job_id_of};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
const KUEUE_API: &str = "kueue.x-k8s.io/v1beta2";

/// A Job of one pod asking for 6 of the queue's 8 CPUs, running `secs` seconds.
fn job(name: &str, secs: u32) -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {QUEUE_LABEL: "lq"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": "busybox", "command": ["sh", "-c", format!("sleep {secs}")],
            "resources": {"requests": {"cpu": "6", "memory": "100Mi"}}}]}}},
    })
}

/// A member of the Kueue plain-pod group `g` of 2 pods.
fn group_pod(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
            "labels": {QUEUE_LABEL: "lq", "kueue.x-k8s.io/pod-group-name": "g"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 3"],
            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]},
    })
}

fn jobs(env: &Env) -> Api<Job> {
    Api::namespaced(env.kube.clone(), NS)
}

async fn job_pods(env: &Env, name: &str) -> Vec<Pod> {
    env.pods()
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
        .await
        .unwrap()
        .items
}

fn bound(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Waits for Job `name`'s pod bound by the bridge; returns it.
async fn wait_bound_job_pod(env: &Env, name: &str) -> Pod {
    wait_for(
        &format!("Job {name}'s pod bound"),
        Duration::from_secs(90),
        || async {
            let pods = job_pods(env, name).await;
            let states: Vec<String> = pods
                .iter()
                .map(|p| format!("{} {}", p.name_any(), phase(p)))
                .collect();
            pods.into_iter()
                .find(bound)
                .ok_or_else(|| format!("no bound pod: {states:?}"))
        },
    )
    .await
}

/// Waits for Job `name`'s Complete condition.
async fn wait_complete(env: &Env, name: &str) {
    wait_for(
        &format!("Job {name} Complete"),
        Duration::from_secs(90),
        || async {
            let j = jobs(env).get(name).await.unwrap();
            let complete = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
                });
            if complete {
                Ok(())
            } else {
                Err(format!("{:?}", j.status))
            }
        },
    )
    .await;
}

/// The condition `type_` of a Kueue Workload: (status, reason, message).
fn condition(w: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let c = w.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// Asserts that Slurm lists exactly the external jobs `want` (any state).
fn assert_slurm_jobs(env: &Env, want: &[u32], what: &str) {
    let got: BTreeSet<u32> = env.slurm_job_ids().into_iter().collect();
    let want: BTreeSet<u32> = want.iter().copied().collect();
    assert_eq!(got, want, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kueue_admits_by_quota_and_the_bridge_runs_what_it_admits() {
    let mut env = Env::start_configured(2, |o| o.kueue = true).await;
    env.start_scheduler().await;
    let controllers = Controllers::start(&env, |_| {}).await;
    let _admission = Admission::start(&env, &[NS]).await;

    create_object(
        &env.kube,
        json!({"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
               "metadata": {"name": "default-flavor"}}),
    )
    .await;
    create_object(
        &env.kube,
        json!({"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": "cq"},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": "default-flavor", "resources": [
                    {"name": "cpu", "nominalQuota": 8},
                    {"name": "memory", "nominalQuota": "64Gi"}]}]}]}}),
    )
    .await;
    create_object(
        &env.kube,
        json!({"apiVersion": KUEUE_API, "kind": "LocalQueue",
               "metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}}),
    )
    .await;
    let workloads = api_for(&env.kube, KUEUE_API, "Workload", Some(NS)).await;

    // Case 1: two Jobs of 6 CPUs against a quota of 8. The first runs 10 s: long enough for
    // the checks below to happen while it still runs (asserted, not assumed).
    create_object(&env.kube, job("first", 10)).await;
    let first = wait_bound_job_pod(&env, "first").await;
    assert_eq!(
        first.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some(SCHEDULER),
        "the admission webhook gave the Job's pod the bridge scheduler"
    );
    let first_id = job_id_of(&first);
    assert_slurm_jobs(&env, &[first_id], "Slurm has the first Job's job only");

    create_object(&env.kube, job("second", 3)).await;
    // Kueue suspends the second on creation (its webhook) and, once it has looked at its
    // Workload, leaves it pending for lack of quota.
    let pending = wait_for(
        "Kueue leaves the second Job's Workload pending for quota",
        Duration::from_secs(30),
        || async {
            let all = workloads.list(&ListParams::default()).await.unwrap().items;
            let w = all
                .iter()
                .find(|w| w.owner_references().iter().any(|o| o.name == "second"));
            match w.and_then(|w| condition(w, "QuotaReserved")) {
                Some((status, _, message)) if status == "False" => Ok(message),
                Some((status, _, message)) if status == "True" => {
                    panic!("Kueue reserved quota for the second Job: {message}")
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        pending.contains("insufficient unused quota for cpu"),
        "Kueue's quota holds the second Job back: {pending}"
    );
    let second_job = jobs(&env).get("second").await.unwrap();
    assert_eq!(
        second_job.spec.as_ref().unwrap().suspend,
        Some(true),
        "the second Job waits suspended in Kueue"
    );
    assert!(
        job_pods(&env, "second").await.is_empty(),
        "a suspended Job has no pods"
    );
    assert_slurm_jobs(&env, &[first_id], "nothing submitted for the suspended Job");
    env.assert_consistent().await;
    env.assert_invariants().await;

    // Again just before the first ends: its Slurm job still runs after the check.
    wait_for(
        "the first Job's pod running",
        Duration::from_secs(30),
        || async {
            let pods = job_pods(&env, "first").await;
            let phases: Vec<String> = pods.iter().map(phase).collect();
            if phases.iter().any(|p| p == "Running") {
                Ok(())
            } else {
                Err(format!("{phases:?}"))
            }
        },
    )
    .await;
    assert!(
        jobs(&env)
            .get("second")
            .await
            .unwrap()
            .spec
            .unwrap()
            .suspend
            == Some(true)
    );
    assert!(job_pods(&env, "second").await.is_empty());
    assert_slurm_jobs(&env, &[first_id], "nothing submitted for the suspended Job");
    assert!(
        env.job_running(first_id).await,
        "the second check happened while the first Job's Slurm job {first_id} ran"
    );

    wait_complete(&env, "first").await;
    env.wait_job_ended(first_id, Duration::from_secs(30)).await;
    let second = wait_bound_job_pod(&env, "second").await;
    let second_id = job_id_of(&second);
    assert_ne!(second_id, first_id);
    wait_complete(&env, "second").await;
    env.wait_job_ended(second_id, Duration::from_secs(30)).await;
    assert_slurm_jobs(
        &env,
        &[first_id, second_id],
        "one Slurm job per admitted Job",
    );
    env.assert_consistent().await;
    env.assert_invariants().await;

    // Case 2: a Kueue plain-pod group of 2 pods is one Slurm external job.
    for name in ["g-0", "g-1"] {
        create_object(&env.kube, group_pod(name)).await;
    }
    let names = ["g-0".to_string(), "g-1".to_string()];
    let members = env.wait_bound(&names, Duration::from_secs(90)).await;
    // Kueue's pod integration took the group in: one Workload for both pods, admitted.
    let all = workloads.list(&ListParams::default()).await.unwrap().items;
    let group_workloads: Vec<&DynamicObject> = all
        .iter()
        .filter(|w| {
            w.owner_references()
                .iter()
                .any(|o| o.name.starts_with("g-"))
        })
        .collect();
    assert_eq!(
        group_workloads.len(),
        1,
        "one Kueue Workload for the pod group"
    );
    let w = group_workloads[0];
    let owners: BTreeSet<&str> = w
        .owner_references()
        .iter()
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(
        owners,
        BTreeSet::from(["g-0", "g-1"]),
        "the Workload is the group's"
    );
    assert_eq!(
        condition(w, "Admitted").map(|c| c.0).as_deref(),
        Some("True"),
        "Kueue admitted the pod group"
    );
    let ids: BTreeSet<u32> = members.iter().map(job_id_of).collect();
    assert_eq!(
        ids.len(),
        1,
        "one Slurm job for the Kueue pod group: {ids:?}"
    );
    let group_id = *ids.first().unwrap();
    let nodes: BTreeSet<&str> = members
        .iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.as_deref().unwrap())
        .collect();
    assert_eq!(nodes.len(), 2, "one member per node: {nodes:?}");
    assert_slurm_jobs(
        &env,
        &[first_id, second_id, group_id],
        "the pod group added exactly one Slurm job",
    );
    env.assert_consistent().await;
    env.assert_invariants().await;
    wait_for(
        "the pod group's members Succeeded",
        Duration::from_secs(60),
        || async {
            let mut phases = Vec::new();
            for n in &names {
                phases.push(
                    env.pods()
                        .get(n)
                        .await
                        .map(|p| phase(&p))
                        .unwrap_or_default(),
                );
            }
            if phases.iter().all(|p| p == "Succeeded") {
                Ok(())
            } else {
                Err(format!("{phases:?}"))
            }
        },
    )
    .await;
    env.wait_job_ended(group_id, Duration::from_secs(30)).await;
    assert_slurm_jobs(
        &env,
        &[first_id, second_id, group_id],
        "nothing else was submitted",
    );
    env.assert_consistent().await;
    env.assert_invariants().await;
    controllers.stop().await;
}
