//! The scheduler killed right after Slurm accepted a job (no second job), and slurmrestd down
//! (reported, then recovered).

use crate::e2e::{self, Env, job_id_of, pod};
use crate::support::BIND_TIMEOUT;
use serde_json::json;
use slurm_bridge::slurm::instrumented::RequestLabels;
use std::time::Duration;

/// Wraps the real client; `submit` submits, then hangs, as if the scheduler died right after
/// Slurm accepted the job and before the pods were labelled.
struct DieAfterSubmit {
    inner: slurm_rest::Client,
    submitted: tokio::sync::mpsc::UnboundedSender<u32>,
}

impl slurm_bridge::slurm::JobControl for DieAfterSubmit {
    async fn submit(
        &self,
        desc: &slurm_rest::models::JobDescMsg,
    ) -> Result<u32, slurm_rest::Error> {
        let id = slurm_bridge::slurm::JobControl::submit(&self.inner, desc).await?;
        let _ = self.submitted.send(id);
        std::future::pending().await
    }
    async fn update(
        &self,
        id: u32,
        d: &slurm_rest::models::JobDescMsg,
    ) -> Result<(), slurm_rest::Error> {
        slurm_bridge::slurm::JobControl::update(&self.inner, id, d).await
    }
    async fn cancel(&self, id: u32) -> Result<(), slurm_rest::Error> {
        slurm_bridge::slurm::JobControl::cancel(&self.inner, id).await
    }
}

impl slurm_bridge::slurm::SlurmJobs for DieAfterSubmit {
    async fn list_jobs(&self) -> Result<Vec<slurm_rest::models::JobInfo>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmJobs::list_jobs(&self.inner).await
    }
    async fn job_states(
        &self,
    ) -> Result<Vec<slurm_rest::models::JobStateEntry>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmJobs::job_states(&self.inner).await
    }
    async fn job_states_of(
        &self,
        ids: &[u32],
    ) -> Result<Vec<slurm_rest::models::JobStateEntry>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmJobs::job_states_of(&self.inner, ids).await
    }
    async fn job(&self, id: u32) -> Result<Option<slurm_rest::models::JobInfo>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmJobs::job(&self.inner, id).await
    }
}

impl slurm_bridge::slurm::SlurmNodes for DieAfterSubmit {
    async fn list_nodes(&self) -> Result<Vec<slurm_rest::models::Node>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmNodes::list_nodes(&self.inner).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_killed_right_after_submit_makes_no_second_job() {
    let mut env = Env::start(4).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    env.start_scheduler_with(DieAfterSubmit {
        inner: e2e::rest_client(&env.slurm),
        submitted: tx,
    })
    .await;
    // A gang of 3 (coscheduling PodGroup) and a bare pod.
    env.create(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "trio"}, "spec": {"minMember": 3}
    }))
    .await;
    for i in 0..3 {
        let mut p = pod(&format!("trio-{i}"), json!({}), json!({}));
        p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "trio"});
        env.create_pod(p).await;
    }
    env.create_pod(pod("single", json!({}), json!({}))).await;
    let mut submitted = Vec::new();
    for _ in 0..2 {
        let id = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("both groups submitted")
            .unwrap();
        submitted.push(id);
    }
    env.stop_scheduler().await;
    // Killed between submit and label: Slurm has the jobs, the pods know nothing of them.
    let pods = env.pods().list(&Default::default()).await.unwrap().items;
    assert!(pods.iter().all(|p| {
        !kube::ResourceExt::labels(p).contains_key("scheduler.slinky.slurm.net/slurm-jobid")
    }));
    submitted.sort();
    let mut before = env.slurm_job_ids();
    before.sort();
    assert_eq!(before, submitted);

    env.start_scheduler().await;
    let names: Vec<String> = ["trio-0", "trio-1", "trio-2", "single"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let mut after = env.slurm_job_ids();
    after.sort();
    assert_eq!(after, submitted, "no second job after the restart");
    let mut used: Vec<u32> = pods.iter().map(job_id_of).collect();
    used.sort();
    used.dedup();
    assert_eq!(used, submitted);
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmrestd_outage_is_reported_and_recovered() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    env.create_pod(pod("before", json!({}), json!({}))).await;
    env.wait_bound(&["before".into()], BIND_TIMEOUT).await;
    let slurm = env.slurm.clone();
    tokio::task::spawn_blocking(move || slurm.stop_slurmrestd())
        .await
        .unwrap()
        .unwrap();
    env.create_pod(pod("during", json!({}), json!({}))).await;
    let message = env
        .wait_condition("during", "SlurmUnavailable", Duration::from_secs(40))
        .await;
    assert!(!message.is_empty());
    // The outage lasts until the scheduler has retried the submit with backoff (0.5, 1, 2 s):
    // four submits slurmrestd did not answer.
    let failed_submits = env
        .handle()
        .metrics
        .slurm_requests
        .get_or_create(&RequestLabels {
            endpoint: "job_submit",
            outcome: "unavailable",
        })
        .clone();
    e2e::wait_until(
        "four submits during the outage",
        Duration::from_secs(40),
        async || failed_submits.get() >= 4,
    )
    .await;
    let slurm = env.slurm.clone();
    tokio::task::spawn_blocking(move || slurm.start_slurmrestd())
        .await
        .unwrap()
        .unwrap();
    env.wait_bound(&["during".into()], BIND_TIMEOUT).await;
    assert_eq!(
        env.slurm_job_ids().len(),
        2,
        "one job per pod, nothing duplicated"
    );
    env.assert_consistent().await;
    env.assert_invariants().await;
}
