//! Changes under a job: its waiting pod deleted, its pending job cancelled in Slurm, its nodes
//! becoming schedulable, unusable, or deleted from Kubernetes.

use crate::e2e::{self, Env, job_id_of, pod};
use crate::support::{BIND_TIMEOUT, label_of};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_waiting_pod_cancels_its_job_and_completes_the_deletion() {
    let mut env = Env::start(1).await;
    env.start_scheduler().await;
    env.create_pod(pod("runs", json!({}), json!({}))).await;
    env.wait_bound(&["runs".into()], BIND_TIMEOUT).await;
    env.create_pod(pod("waits", json!({}), json!({}))).await;
    env.wait_condition("waits", "SlurmJobPending", Duration::from_secs(30))
        .await;
    let waiting_job = job_id_of(&env.pods().get("waits").await.unwrap());
    assert!(env.active_job_ids().contains(&waiting_job));
    env.pods()
        .delete("waits", &Default::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while env.pods().get_opt("waits").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the deleted pod stayed (finalizer)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while env.active_job_ids().contains(&waiting_job) {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiting pod's job was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(env.scontrol_job(waiting_job).contains("JobState=CANCELLED"));
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_job_cancelled_under_its_pod_is_replaced() {
    let mut env = Env::start(1).await;
    env.start_scheduler().await;
    env.create_pod(pod("first", json!({}), json!({}))).await;
    let first = env.wait_bound(&["first".into()], BIND_TIMEOUT).await;
    env.create_pod(pod("second", json!({}), json!({}))).await;
    env.wait_condition("second", "SlurmJobPending", Duration::from_secs(30))
        .await;
    let stale = job_id_of(&env.pods().get("second").await.unwrap());
    // An admin cancels the pending job: the pod is labelled with a job that no longer stands for it.
    env.slurm.run(&["scancel", &stale.to_string()]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let fresh = loop {
        let id = job_id_of(&env.pods().get("second").await.unwrap());
        if id != stale {
            break id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new job after the cancel"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(env.active_job_ids().contains(&fresh));
    // When the node frees up, the pod runs under the new job.
    env.slurm
        .run(&["scancel", &job_id_of(&first[0]).to_string()])
        .unwrap();
    let second = env.wait_bound(&["second".into()], BIND_TIMEOUT).await;
    assert_eq!(job_id_of(&second[0]), fresh);
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_job_follows_a_node_that_becomes_schedulable() {
    let mut env = Env::start(2).await;
    env.kube_env
        .kubectl(&[
            "taint",
            "node",
            "node-2",
            "example.com/maintenance=yes:NoSchedule",
        ])
        .unwrap();
    env.start_scheduler().await;
    for i in 0..2 {
        env.create_pod(pod(&format!("m-{i}"), json!({}), json!({})))
            .await;
    }
    // node-2 is excluded: one pod binds to node-1, the other's job waits in Slurm.
    let deadline = std::time::Instant::now() + BIND_TIMEOUT;
    let waiting = loop {
        let pods = env.pods().list(&Default::default()).await.unwrap().items;
        let (bound, waiting): (Vec<_>, Vec<_>) = pods.into_iter().partition(e2e::node_name_is_set);
        if bound.len() == 1
            && waiting.len() == 1
            && kube::ResourceExt::labels(&waiting[0])
                .contains_key(slurm_bridge::wellknown::LABEL_SLURM_JOBID)
        {
            assert_eq!(
                bound[0].spec.as_ref().unwrap().node_name.as_deref(),
                Some("node-1")
            );
            break kube::ResourceExt::name_any(&waiting[0]);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pod bound to node-1"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    env.kube_env
        .kubectl(&["taint", "node", "node-2", "example.com/maintenance-"])
        .unwrap();
    let pods = env.wait_bound(&[waiting], BIND_TIMEOUT).await;
    assert_eq!(
        pods[0].spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-2")
    );
    env.assert_consistent().await;
    env.assert_invariants().await;
}

/// Item 13: a pending job whose nodes all become unusable is reported, not dropped silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_job_whose_nodes_become_unusable_is_reported() {
    let mut env = Env::start(1).await;
    env.start_scheduler().await;
    env.create_pod(pod("first", json!({}), json!({}))).await;
    let first = env.wait_bound(&["first".into()], BIND_TIMEOUT).await;
    env.create_pod(pod("second", json!({}), json!({}))).await;
    let mut id = None;
    for _ in 0..300 {
        id = label_of(&env, "second").await;
        if id.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(id.is_some(), "second submitted");
    let node = first[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(env.kube.clone());
    nodes
        .patch(
            &node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let message = env
        .wait_condition("second", "NoFeasibleNodes", Duration::from_secs(60))
        .await;
    assert!(message.contains("stays pending"), "{message}");
    env.assert_invariants().await;
}

/// Issue 21: a job Slurm starts on a Slurm node whose Kubernetes node is gone (deleted while
/// the job was pending, its external node still IDLE) is cancelled with a reason on the pod and
/// the pod submitted again without that node, instead of waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_allocated_a_deleted_node_is_resubmitted_without_it() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    for n in ["a-1", "a-2"] {
        env.create_pod(pod(n, json!({}), json!({}))).await;
    }
    let busy = env
        .wait_bound(&["a-1".into(), "a-2".into()], BIND_TIMEOUT)
        .await;
    env.create_pod(pod("waits", json!({}), json!({}))).await;
    env.wait_condition("waits", "SlurmJobPending", Duration::from_secs(30))
        .await;
    let pending = job_id_of(&env.pods().get("waits").await.unwrap());
    // While the scheduler is down: node-1 is deleted from Kubernetes (its Slurm node stays, as
    // without a node controller), and freed in Slurm: Slurm starts the pending job there.
    env.stop_scheduler().await;
    let on = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let (gone, other): (Vec<&Pod>, Vec<&Pod>) = busy.iter().partition(|p| on(p) == "node-1");
    env.kube_env
        .kubectl(&["delete", "node", "node-1", "--wait=false"])
        .unwrap();
    env.slurm
        .run(&["scancel", &job_id_of(gone[0]).to_string()])
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let job = env.rest.job(pending).await.unwrap();
        if job.nodes.as_deref() == Some("node-1")
            && job
                .job_state
                .contains(&slurm_rest::models::JobState::Running)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job never ran on node-1"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.start_scheduler().await;
    // Cancelled, with the reason on the pod; a new job that excludes node-1.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !env.scontrol_job(pending).contains("JobState=CANCELLED") {
        assert!(
            std::time::Instant::now() < deadline,
            "the job on the deleted node was not cancelled: {}",
            env.scontrol_job(pending)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reasons = env.wait_event("waits", "SlurmAllocationUnmapped").await;
    assert!(
        reasons
            .iter()
            .any(|(_, m)| m.contains("submitted again without node-1")),
        "{reasons:?}"
    );
    // When node-2 frees up, the pod runs there under its new job.
    env.slurm
        .run(&["scancel", &job_id_of(other[0]).to_string()])
        .unwrap();
    let waits = env.wait_bound(&["waits".into()], BIND_TIMEOUT).await;
    assert_eq!(on(&waits[0]), "node-2");
    let fresh = job_id_of(&waits[0]);
    assert_ne!(fresh, pending);
    assert!(
        env.scontrol_job(fresh).contains("ExcNodeList=node-1"),
        "{}",
        env.scontrol_job(fresh)
    );
    env.assert_invariants().await;
}

/// A bare pod deleted and created again under the same name (another uid) while the scheduler is
/// down: its predecessor's running job is not taken over; the new pod gets a job of its own and
/// the old one is cancelled by the sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_recreated_under_its_name_never_takes_over_its_predecessors_job() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    env.create_pod(pod("reborn", json!({}), json!({}))).await;
    let old = env.wait_bound(&["reborn".into()], BIND_TIMEOUT).await;
    let old_job = job_id_of(&old[0]);
    env.stop_scheduler().await;
    // Gone for good (no finalizer to wait on), then the same manifest again.
    env.pods()
        .delete(
            "reborn",
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await
        .unwrap();
    let _ = env
        .pods()
        .patch(
            "reborn",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while env.pods().get_opt("reborn").await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "the pod stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.create_pod(pod("reborn", json!({}), json!({}))).await;
    assert!(
        env.active_job_ids().contains(&old_job),
        "the old job runs on"
    );
    env.start_scheduler().await;
    let new = env.wait_bound(&["reborn".into()], BIND_TIMEOUT).await;
    assert_ne!(
        new[0].metadata.uid, old[0].metadata.uid,
        "a new pod, not the old one"
    );
    assert_ne!(
        job_id_of(&new[0]),
        old_job,
        "the predecessor's job was taken over"
    );
    env.wait_job_ended(old_job, Duration::from_secs(30)).await;
    env.assert_invariants().await;
}
