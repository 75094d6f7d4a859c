//! What the HA tests check on the Slurm and API server side: pods in Slurm jobs (none in two),
//! and the Events a replica wrote.

use crate::e2e::Env;
use kube::api::{Api, ListParams};
use slurm_bridge::slurm::SlurmJobs;
use slurm_bridge::workload::admin_comment::AdminComment;
use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

/// Pods (`ns/name`) in bridge jobs (live ones only: pending or running), each with the jobs
/// listing it.
pub async fn pods_in_jobs(env: &Env, live_only: bool) -> BTreeMap<String, BTreeSet<u32>> {
    let live: BTreeSet<u32> = env.active_job_ids().into_iter().collect();
    let mut by_pod: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let Ok(jobs) = env.rest.list_jobs().await else {
        return by_pod;
    };
    for j in jobs
        .iter()
        .filter(|j| !live_only || live.contains(&j.job_id))
    {
        let Ok(c) = AdminComment::decode(j.admin_comment.as_deref().unwrap_or("")) else {
            continue;
        };
        for p in c.pods {
            by_pod.entry(p).or_default().insert(j.job_id);
        }
    }
    by_pod
}

/// No pod is in two live Slurm jobs.
pub async fn assert_no_duplicate_job(env: &Env) {
    for (p, jobs) in pods_in_jobs(env, true).await {
        assert!(
            jobs.len() <= 1,
            "pod {p} is in {} live jobs: {jobs:?}",
            jobs.len()
        );
    }
}

/// No pod was ever submitted twice: each is in at most one Slurm job of any state (the tests
/// never reuse a pod name).
pub async fn assert_one_job_per_pod_ever(env: &Env) {
    for (p, jobs) in pods_in_jobs(env, false).await {
        assert!(
            jobs.len() <= 1,
            "pod {p} was submitted {} times: {jobs:?}",
            jobs.len()
        );
    }
}

/// Events of the bridge written by `instance` (events.k8s.io reportingInstance): their times.
pub async fn event_times_by(env: &Env, instance: &str) -> Vec<SystemTime> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.kube.clone());
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reporting_instance.as_deref() == Some(instance))
        .filter_map(|e| {
            e.event_time
                .map(|t| SystemTime::from(t.0))
                .or_else(|| e.metadata.creation_timestamp.map(|t| SystemTime::from(t.0)))
        })
        .collect()
}
