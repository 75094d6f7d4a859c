//! The simulated batch/v1 Job controller, through the real kube-rs client against kube-sim.

mod sim_common;

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use sim_common::*;

fn job(
    name: &str,
    parallelism: i32,
    completions: Option<i32>,
    indexed: bool,
    command: serde_json::Value,
) -> Job {
    let mut v = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36", "command": command}],
                },
            },
        },
    });
    if let Some(c) = completions {
        v["spec"]["completions"] = json!(c);
    }
    if indexed {
        v["spec"]["completionMode"] = json!("Indexed");
    }
    from_json(v)
}

fn job_condition(j: &Job, type_: &str) -> Option<k8s_openapi::api::batch::v1::JobCondition> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .cloned()
}

#[tokio::test]
async fn job_with_parallelism_3_creates_pods_like_the_real_controller_and_completes() {
    let sim = start(3).await;
    let client = sim.client();
    namespace(&client, "jobs").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "jobs");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "jobs");
    let created = jobs
        .create(
            &PostParams::default(),
            &job("train", 3, Some(5), false, json!(["sleep", "1"])),
        )
        .await
        .unwrap();
    let uid = created.uid().unwrap();

    // Unbound, the pods wait: exactly `parallelism` of them.
    let lp = ListParams::default().labels("job-name=train");
    let first = wait_list(&pods, &lp, "3 pods", |ps| ps.len() == 3).await;
    for p in &first {
        let name = p.name_any();
        let suffix = name.strip_prefix("train-").expect("name <job>-<suffix>");
        assert_eq!(suffix.len(), 5, "{name}");
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{name}"
        );
        let l = p.labels();
        assert_eq!(l["app"], "train");
        assert_eq!(l["batch.kubernetes.io/job-name"], "train");
        assert_eq!(l["job-name"], "train");
        assert_eq!(l["batch.kubernetes.io/controller-uid"], uid);
        assert_eq!(l["controller-uid"], uid);
        assert!(!l.contains_key("batch.kubernetes.io/job-completion-index"));
        let owner = controller_ref(p);
        assert_eq!(owner.api_version, "batch/v1");
        assert_eq!(owner.kind, "Job");
        assert_eq!(owner.name, "train");
        assert_eq!(owner.uid, uid);
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert!(p.spec.as_ref().unwrap().node_name.is_none());
    }
    let j = wait_for(&jobs, "train", "3 active", |j| {
        j.status.as_ref().and_then(|s| s.active) == Some(3)
    })
    .await;
    assert!(j.status.unwrap().start_time.is_some());

    // Schedule them; as pods succeed, replacements are made until 5 have succeeded.
    let sched = scheduler(client.clone(), "jobs", 3);
    let done = wait_for(&jobs, "train", "Complete", |j| {
        job_condition(j, "Complete").is_some()
    })
    .await;
    sched.abort();
    let st = done.status.clone().unwrap();
    assert_eq!(st.succeeded, Some(5));
    assert_eq!(st.failed, Some(0));
    assert_eq!(st.active, Some(0));
    assert!(st.completion_time.is_some());
    assert!(job_condition(&done, "SuccessCriteriaMet").is_some());
    let all = pods.list(&lp).await.unwrap().items;
    assert_eq!(all.len(), 5);
    assert!(all.iter().all(|p| phase(p) == "Succeeded"));
    sim.stop().await;
}

#[tokio::test]
async fn indexed_job_names_and_labels_pods_by_index() {
    let sim = start(2).await;
    let client = sim.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job("idx", 3, Some(3), true, json!(["sleep", "0.5"])),
    )
    .await
    .unwrap();
    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=idx");
    let ps = wait_list(&pods, &lp, "3 pods", |ps| ps.len() == 3).await;
    let mut indexes = BTreeSet::new();
    for p in &ps {
        let i = p.labels()["batch.kubernetes.io/job-completion-index"].clone();
        assert_eq!(
            p.annotations()["batch.kubernetes.io/job-completion-index"],
            i
        );
        assert!(
            p.name_any().starts_with(&format!("idx-{i}-")),
            "{}",
            p.name_any()
        );
        assert_eq!(
            p.spec.as_ref().unwrap().hostname.as_deref(),
            Some(format!("idx-{i}").as_str())
        );
        indexes.insert(i);
    }
    assert_eq!(
        indexes,
        ["0", "1", "2"].iter().map(|s| s.to_string()).collect()
    );
    let sched = scheduler(client.clone(), "default", 2);
    let done = wait_for(&jobs, "idx", "Complete", |j| {
        job_condition(j, "Complete").is_some()
    })
    .await;
    sched.abort();
    assert_eq!(
        done.status.unwrap().completed_indexes.as_deref(),
        Some("0-2")
    );
    sim.stop().await;
}

#[tokio::test]
async fn failed_pod_beyond_backoff_limit_fails_the_job() {
    let sim = start(1).await;
    let client = sim.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let mut j = job(
        "bad",
        1,
        Some(1),
        false,
        json!(["sh", "-c", "sleep 0.2; exit 2"]),
    );
    j.spec.as_mut().unwrap().backoff_limit = Some(1);
    jobs.create(&PostParams::default(), &j).await.unwrap();
    let sched = scheduler(client.clone(), "default", 1);
    let failed = wait_for(&jobs, "bad", "Failed", |j| {
        job_condition(j, "Failed").is_some()
    })
    .await;
    sched.abort();
    let c = job_condition(&failed, "Failed").unwrap();
    assert_eq!(c.reason.as_deref(), Some("BackoffLimitExceeded"));
    // backoffLimit 1: the first failure is retried with a new pod, the second fails the Job.
    assert_eq!(failed.status.clone().unwrap().failed, Some(2));
    assert!(job_condition(&failed, "Complete").is_none());
    sim.stop().await;
}

#[tokio::test]
async fn suspended_job_creates_no_pods_and_deleted_job_takes_its_pods() {
    let sim = start(1).await;
    let client = sim.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut j = job("held", 2, Some(2), false, json!(["sleep", "infinity"]));
    j.spec.as_mut().unwrap().suspend = Some(true);
    jobs.create(&PostParams::default(), &j).await.unwrap();
    let held = wait_for(&jobs, "held", "Suspended", |j| {
        job_condition(j, "Suspended").is_some()
    })
    .await;
    assert_eq!(held.status.unwrap().active, Some(0));
    let lp = ListParams::default().labels("job-name=held");
    assert!(pods.list(&lp).await.unwrap().items.is_empty());

    // Resume: pods appear. Delete the Job: its pods go too (garbage collection).
    let patch = json!({"spec": {"suspend": false}});
    jobs.patch(
        "held",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    wait_list(&pods, &lp, "2 pods", |ps| ps.len() == 2).await;
    let bg = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Background),
        ..Default::default()
    };
    jobs.delete("held", &bg).await.unwrap();
    wait_list(&pods, &lp, "no pods", |ps| ps.is_empty()).await;
    sim.stop().await;
}

#[tokio::test]
async fn suspending_a_running_job_deletes_its_pods() {
    let sim = start(2).await;
    let client = sim.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job("pausable", 2, Some(2), false, json!(["sleep", "infinity"])),
    )
    .await
    .unwrap();
    let sched = scheduler(client.clone(), "default", 2);
    let lp = ListParams::default().labels("job-name=pausable");
    wait_list(&pods, &lp, "2 running pods", |ps| {
        ps.len() == 2 && ps.iter().all(|p| phase(p) == "Running")
    })
    .await;
    sched.abort();
    let patch = json!({"spec": {"suspend": true}});
    jobs.patch(
        "pausable",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let held = wait_for(&jobs, "pausable", "Suspended", |j| {
        job_condition(j, "Suspended").is_some()
    })
    .await;
    let st = held.status.unwrap();
    assert_eq!(st.start_time, None, "a suspended Job has no start time");
    assert_eq!(st.active, Some(0));
    // Its pods were deleted (they end after their grace period).
    wait_list(&pods, &lp, "pods terminating", |ps| {
        ps.iter().all(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
    sim.stop().await;
}

#[tokio::test]
async fn active_deadline_fails_the_job() {
    let sim = start(1).await;
    let client = sim.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let mut j = job("slow", 1, Some(1), false, json!(["sleep", "infinity"]));
    j.spec.as_mut().unwrap().active_deadline_seconds = Some(1);
    jobs.create(&PostParams::default(), &j).await.unwrap();
    let sched = scheduler(client.clone(), "default", 1);
    let failed = wait_for(&jobs, "slow", "Failed", |j| {
        job_condition(j, "Failed").is_some()
    })
    .await;
    sched.abort();
    let c = job_condition(&failed, "Failed").unwrap();
    assert_eq!(c.reason.as_deref(), Some("DeadlineExceeded"));
    sim.stop().await;
}
