//! What the hybrid tests share: batch jobs through `sbatch` and `scontrol`, Kubernetes Jobs and
//! pods for the bridge, a CPU DRA slice, and the nodes as Slurm and Kubernetes show them.

use crate::e2e::{self, Env, NS, SCHEDULER, is_terminal, job_field, wait_some};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use slurm_bridge::controllers::node::slurm_view::CONDITION_TYPE;
use slurm_bridge::wellknown::TAINT_MANAGED_NODE;
use std::collections::BTreeSet;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(60);

/// Submits a batch job with `sbatch --parsable ARGS`; returns its id.
pub fn sbatch(env: &Env, args: &[&str]) -> String {
    let mut argv = vec!["sbatch", "--parsable"];
    argv.extend_from_slice(args);
    env.slurm.run(&argv).expect("sbatch").trim().to_string()
}

pub fn scontrol(env: &Env, args: &[&str]) {
    let mut argv = vec!["scontrol"];
    argv.extend_from_slice(args);
    env.slurm.run(&argv).expect("scontrol");
}

pub async fn wait_job_state(env: &Env, id: &str, state: &str) {
    let what = format!("batch job {id} {state}");
    wait_some(&what, WAIT, async || {
        (job_field(env, id, "JobState") == state).then_some(())
    })
    .await;
}

/// A `batch/v1` Job of `pods` pods for the bridge, each running `sleep SECS`, killed `grace`
/// seconds after deletion.
pub fn k8s_job(name: &str, pods: u32, secs: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 6,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "main", "image": "busybox", "command": ["sleep", secs],
                                    "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
                },
            },
        },
    })
}

/// The live (not being deleted) pods of Job `job`, once there are `n`.
pub async fn job_pods(env: &Env, job: &str, n: usize) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    wait_some(&format!("{n} pods of Job {job}"), WAIT, async || {
        let pods: Vec<Pod> = env
            .pods()
            .list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !is_terminal(p))
            .collect();
        (pods.len() == n).then_some(pods)
    })
    .await
}

pub fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.name_any()).collect()
}

/// Waits until Job `job` reports `n` succeeded pods.
pub async fn wait_job_succeeded(env: &Env, job: &str, n: i32) {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(env.kube.clone(), NS);
    wait_some(&format!("Job {job}: {n} succeeded"), WAIT, async || {
        let j = jobs.get(job).await.unwrap();
        (j.status.and_then(|s| s.succeeded).unwrap_or(0) >= n).then_some(())
    })
    .await;
}

/// Deletes pods `names` and waits until each is gone (its containers stopped, its finalizer
/// released).
pub async fn delete_pods(env: &Env, names: &[&str]) {
    for name in names {
        env.pods()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        env.wait_pod(name, "gone", WAIT, |p| p.is_none()).await;
    }
}

/// Waits until Slurm runs no external job (every pod's job has ended with its pod).
pub async fn wait_no_external_job(env: &Env) {
    wait_some("no live external job", WAIT, async || {
        env.active_job_ids().is_empty().then_some(())
    })
    .await;
}

/// A bridge pod running `sleep infinity`, stopped 1 s after its deletion.
pub fn pod(name: &str, annotations: Value, mut spec_extra: Value) -> Value {
    spec_extra["terminationGracePeriodSeconds"] = json!(1);
    e2e::pod(name, annotations, spec_extra)
}

pub fn pending_reason(message: &str) -> bool {
    message.contains("Resources") || message.contains("Priority")
}

/// Expands `scontrol show -d job`'s `CPU_IDs=0-1,4` into the CPU ids.
pub fn cpu_ids(env: &Env, id: &str) -> BTreeSet<u32> {
    let text = env
        .slurm
        .run(&["scontrol", "show", "-d", "job", id])
        .unwrap();
    let list = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("CPU_IDs="))
        .unwrap_or_else(|| panic!("no CPU_IDs in {text}"));
    list.split(',')
        .flat_map(|r| match r.split_once('-') {
            Some((a, b)) => a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap(),
            None => r.parse::<u32>().unwrap()..=r.parse::<u32>().unwrap(),
        })
        .collect()
}

/// A `dra.cpu` DeviceClass and a slice for `node` as the CPU DRA driver would publish for an
/// 8-core host with one thread per core: device `cpuN` is machine CPU N on core N.
pub async fn publish_cpu_slice(env: &Env, node: &str) {
    let classes: Api<DeviceClass> = Api::all(env.kube.clone());
    let dc: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "dra.cpu"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"dra.cpu\""}}]},
    }))
    .unwrap();
    classes.create(&PostParams::default(), &dc).await.unwrap();
    let devices: Vec<Value> = (0..8)
        .map(|id| {
            json!({"name": format!("cpu{id}"), "attributes": {
                "dra.cpu/cpuID": {"int": id}, "dra.cpu/coreID": {"int": id},
                "dra.cpu/socketID": {"int": 0}, "dra.cpu/coreType": {"int": 2}}})
        })
        .collect();
    let slice: ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": format!("{node}-cpu")},
        "spec": {"driver": "dra.cpu", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }))
    .unwrap();
    Api::<ResourceSlice>::all(env.kube.clone())
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
}

pub fn unavailable(n: &Node) -> Option<(String, String)> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

pub fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_MANAGED_NODE))
}

pub async fn wait_node(env: &Env, name: &str, what: &str, ok: impl Fn(&Node) -> bool) -> Node {
    let nodes: Api<Node> = Api::all(env.kube.clone());
    wait_some(&format!("node {name}: {what}"), WAIT, async || {
        let n = nodes.get(name).await.unwrap();
        ok(&n).then_some(n)
    })
    .await
}

/// Slurm's `State=` of a node, e.g. `IDLE+DRAIN`.
pub fn slurm_state(env: &Env, node: &str) -> String {
    env.slurm
        .run(&["scontrol", "show", "node", node])
        .unwrap()
        .split_whitespace()
        .find_map(|w| w.strip_prefix("State="))
        .unwrap_or_default()
        .to_string()
}
