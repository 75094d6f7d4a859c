//! A gang member that kube-apiserver will not bind for a while: every write about it (its
//! Binding, its label patch, its condition) is answered 503 by a fault proxy. Its sibling is
//! bound, runs and finishes meanwhile, and the Slurm job they share must stay for the waiting
//! member: the job's admin_comment names it, though it carries no job id label yet. Once the
//! writes go through, it is bound into that job, and the job ends with it. (The chaos suite
//! found the job cancelled when its labelled members had finished, and the other member
//! pending forever.)

mod e2e;

use e2e::controllers::Controllers;
use e2e::*;
use fault_proxy::Faults;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;
use slurm_bridge::wellknown::{LABEL_SLURM_JOBID, holds_finalizer};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

/// A pod of the coscheduling PodGroup `duo` that sleeps `secs`.
fn member(name: &str, secs: &str) -> serde_json::Value {
    let mut p = sleeper(name, secs, 1);
    p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "duo"});
    p
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Waits until pod `name` has Succeeded and the pod controller released it (it decides about
/// the pod's job in the pass that removes the finalizer).
async fn wait_released(env: &Env, name: &str) {
    env.wait_pod(name, "Succeeded and released", WAIT, |p: Option<&Pod>| {
        p.is_some_and(|p| phase(p) == Some("Succeeded") && !holds_finalizer(p))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_member_kube_apiserver_will_not_bind_keeps_its_job_while_its_sibling_finishes() {
    let mut env = Env::start(2).await;
    let refuse_duo_1 = Faults {
        error_5xx: 1.0,
        routes: vec!["/pods/duo-1".into()],
        ..Faults::none()
    };
    let (proxy, proxied) = kube_proxy::through_proxy(&env, refuse_duo_1).await;
    let direct = std::mem::replace(&mut env.kube, proxied);
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;
    env.kube = direct;

    env.create(
        json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "duo", "namespace": NS}, "spec": {"minMember": 2}}),
    )
    .await;
    env.create_pod(member("duo-0", "2")).await;
    env.create_pod(member("duo-1", "3")).await;

    // duo-0 is bound into the gang's job, runs and finishes; the pod controller releases it
    // (deciding about the job in the same pass).
    let first = env.wait_bound(&["duo-0".into()], WAIT).await.remove(0);
    let job = job_id_of(&first);
    wait_released(&env, "duo-0").await;
    let waiting = env.pods().get("duo-1").await.unwrap();
    assert!(
        waiting.spec.as_ref().unwrap().node_name.is_none()
            && !waiting.labels().contains_key(LABEL_SLURM_JOBID),
        "duo-1 waits unbound and unlabelled while its writes are refused: {}",
        describe(&waiting)
    );
    assert!(
        proxy.stats().error_5xx >= 1,
        "duo-1's Binding was refused: {:?}",
        proxy.stats()
    );
    assert!(
        env.active_job_ids().contains(&job),
        "job {job} was ended while its member duo-1 still waited to join it: {}",
        env.scontrol_job(job)
    );

    // The writes go through: duo-1 joins the same job, runs, and the job ends with it.
    proxy.set_faults(Faults::none()).unwrap();
    let second = env.wait_bound(&["duo-1".into()], WAIT).await.remove(0);
    assert_eq!(job_id_of(&second), job, "duo-1 joined its gang's job");
    env.assert_invariants().await;
    wait_released(&env, "duo-1").await;
    env.wait_job_ended(job, WAIT).await;
    env.assert_invariants().await;
}
