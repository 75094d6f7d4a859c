//! The Slurm side of a test and the invariants every test checks against it: the external
//! jobs Slurm lists, the Kubernetes <-> Slurm node names, and pods, jobs and admin_comments
//! consistent with each other.

use super::{Env, NS};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;
use slurm_bridge::wellknown::LABEL_SLURM_JOBID;
use slurm_bridge::workload::admin_comment::AdminComment;
use std::collections::{BTreeMap, BTreeSet};

/// Whether `p` is job `id`'s pod: labelled with its id, or one of the pods (`uids`) its
/// admin_comment names (a pending pod's label follows the submit by up to `LABEL_MAX_LAG`).
pub fn is_pod_of_job(p: &k8s_openapi::api::core::v1::Pod, id: u32, uids: &[String]) -> bool {
    p.labels().get(LABEL_SLURM_JOBID) == Some(&id.to_string())
        || p.metadata.uid.as_ref().is_some_and(|u| uids.contains(u))
}

impl Env {
    /// Ids of the external jobs (the bridge's kind) Slurm lists in `states`; batch jobs of
    /// hybrid nodes belong to no pod and are left out.
    fn external_job_ids(&self, states: &str) -> Vec<u32> {
        let out = self
            .slurm
            .run(&["squeue", "--json", &format!("--states={states}")])
            .unwrap();
        let v: Value = serde_json::from_str(&out).expect("squeue --json");
        v["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|j| {
                j["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f == "EXTERNAL_JOB"))
            })
            .filter_map(|j| j["job_id"].as_u64())
            .map(|id| id as u32)
            .collect()
    }

    /// Ids of every external job Slurm lists (any state).
    pub fn slurm_job_ids(&self) -> Vec<u32> {
        self.external_job_ids("all")
    }

    /// Ids of pending or running external jobs.
    pub fn active_job_ids(&self) -> Vec<u32> {
        self.external_job_ids("PENDING,RUNNING")
    }

    /// Kubernetes node name -> the Slurm node behind it (the `slurm-nodename` label, else the
    /// node's own name).
    pub async fn slurm_names(&self) -> BTreeMap<String, String> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.kube.clone());
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|n| {
                let slurm = n
                    .labels()
                    .get(slurm_bridge::wellknown::LABEL_SLURM_NODENAME)
                    .cloned()
                    .unwrap_or_else(|| n.name_any());
                (n.name_any(), slurm)
            })
            .collect()
    }

    /// Uids of the pods job `id`'s admin_comment names (the bridge's own record of its pods,
    /// which a pending pod's label follows by up to `LABEL_MAX_LAG`); empty for a job not the
    /// bridge's.
    pub async fn job_pod_uids(&self, id: u32) -> Vec<String> {
        let job = self.rest.job(id).await.expect("job");
        AdminComment::decode(job.admin_comment.as_deref().unwrap_or(""))
            .map(|c| c.uids)
            .unwrap_or_default()
    }

    pub fn scontrol_job(&self, id: u32) -> String {
        self.slurm
            .run(&["scontrol", "show", "job", &id.to_string()])
            .unwrap()
    }

    /// Pod `pod`, bound to Kubernetes node `node`, runs on the node behind one of its Slurm job
    /// `id`'s allocated nodes (`slurm_names`: [`Env::slurm_names`]).
    pub async fn assert_on_its_job(
        &self,
        pod: &str,
        node: &str,
        id: u32,
        slurm_names: &BTreeMap<String, String>,
    ) {
        let job = self.rest.job(id).await.expect("job of a bound pod exists");
        let allocated = slurm_rest::hostlist::expand(job.nodes.as_deref().unwrap_or("")).unwrap();
        let slurm_node = slurm_names.get(node).map_or(node, String::as_str);
        assert!(
            allocated.iter().any(|n| n == slurm_node),
            "pod {pod} runs on {node} (Slurm node {slurm_node}), not on its job {id}'s nodes {allocated:?}",
        );
    }

    /// The invariants every test checks: each bound pod runs on the Kubernetes node behind one
    /// of its Slurm job's allocated nodes, each bridge job's admin_comment lists exactly the pods
    /// labelled with its id, and Slurm has no other job (none submitted twice or cancelled).
    /// A pending pod's label follows its submit by up to `LABEL_MAX_LAG`, so a job no pod is
    /// labelled with yet is looked at again until a while after that.
    pub async fn assert_consistent(&self) {
        let deadline = std::time::Instant::now()
            + slurm_bridge::k8s::pod_writer::LABEL_MAX_LAG
            + std::time::Duration::from_secs(5);
        let (pods, by_job) = loop {
            let pods = self
                .pods()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items;
            let mut by_job: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
            for p in &pods {
                if let Some(id) = p.labels().get(LABEL_SLURM_JOBID) {
                    let id: u32 = id.parse().expect("numeric job id label");
                    by_job
                        .entry(id)
                        .or_default()
                        .insert(format!("{NS}/{}", p.name_any()));
                }
            }
            // Every job Slurm knows (any state) stands for labelled pods: no stray or cancelled
            // duplicate was ever submitted.
            let stray: Vec<u32> = self
                .slurm_job_ids()
                .into_iter()
                .filter(|id| !by_job.contains_key(id))
                .collect();
            if let Some(id) = stray.first() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "Slurm job {id} belongs to no pod: {}",
                    self.scontrol_job(*id)
                );
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
            break (pods, by_job);
        };
        let slurm_names = self.slurm_names().await;
        for p in &pods {
            if let (Some(id), Some(node)) = (
                p.labels().get(LABEL_SLURM_JOBID),
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            ) {
                let id: u32 = id.parse().expect("numeric job id label");
                self.assert_on_its_job(&p.name_any(), node, id, &slurm_names)
                    .await;
            }
        }
        for (id, labelled) in by_job {
            let job = self.rest.job(id).await.expect("labelled job exists");
            let comment = AdminComment::decode(job.admin_comment.as_deref().unwrap_or("")).unwrap();
            let listed: BTreeSet<String> = comment.pods.into_iter().collect();
            assert_eq!(listed, labelled, "job {id}: admin_comment vs labelled pods");
        }
    }
}

/// A field of `scontrol show job ID` (`JobState`, `Reason`, `NodeList`, `Restarts`...); empty
/// when the job shows no such field.
pub fn job_field(env: &Env, id: impl std::fmt::Display, key: &str) -> String {
    env.slurm
        .run(&["scontrol", "show", "job", &id.to_string()])
        .expect("scontrol show job")
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_string()
}
