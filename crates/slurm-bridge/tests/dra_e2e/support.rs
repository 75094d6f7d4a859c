//! What the DRA tests share: the two test nodes (one with DRA slices, one with device-plugin
//! GPUs), their DeviceClasses and ResourceSlices, DRA pods, and what Slurm shows of nodes and
//! jobs.

use crate::e2e::controllers::Controllers;
use crate::e2e::{self, Env, NS};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub const DRA_NODE: &str = "dra-1";
pub const PLUGIN_NODE: &str = "plugin-1";

/// Machine CPU id of (socket, core, thread) on the test node: 2 sockets x 2 cores x 2 threads,
/// siblings numbered apart (0 and 4 are one core), then 2 E-cores (8, 9).
pub fn cpu_id(socket: i64, core: i64, thread: i64) -> i64 {
    socket * 2 + core + thread * 4
}

pub fn cpu_devices() -> Value {
    let mut d = Vec::new();
    for s in 0..2 {
        for c in 0..2 {
            for t in 0..2 {
                let id = cpu_id(s, c, t);
                d.push(json!({"name": format!("cpu{id}"), "attributes": {
                    "dra.cpu/cpuID": {"int": id}, "dra.cpu/coreID": {"int": c},
                    "dra.cpu/socketID": {"int": s}, "dra.cpu/coreType": {"int": 2}}}));
            }
        }
    }
    for (id, core) in [(8, 2), (9, 3)] {
        d.push(json!({"name": format!("cpu{id}"), "attributes": {
            "dra.cpu/cpuID": {"int": id}, "dra.cpu/coreID": {"int": core},
            "dra.cpu/socketID": {"int": 0}, "dra.cpu/coreType": {"int": 3}}}));
    }
    json!(d)
}

/// Machine CPUs of abstract core `i` (cores sorted by socket, then core).
pub fn machine_cpus(i: usize) -> [i64; 2] {
    let (s, c) = ((i / 2) as i64, (i % 2) as i64);
    [cpu_id(s, c, 0), cpu_id(s, c, 1)]
}

pub async fn setup_devices(env: &Env) {
    let classes: Api<DeviceClass> = Api::all(env.kube.clone());
    for class in ["dra.cpu", "gpu.example.com"] {
        let dc: DeviceClass = serde_json::from_value(json!({
            "metadata": {"name": class},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{class}\"")}}]},
        }))
        .unwrap();
        classes.create(&PostParams::default(), &dc).await.unwrap();
    }
    let slices: Api<ResourceSlice> = Api::all(env.kube.clone());
    let gpus: Vec<Value> = (0..4)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"index": {"int": i}}}))
        .collect();
    for (name, driver, pool, devices) in [
        ("dra-1-cpu", "dra.cpu", DRA_NODE, cpu_devices()),
        ("dra-1-gpu", "gpu.example.com", "pool-numa0", json!(gpus)),
    ] {
        let s: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": DRA_NODE,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices},
        }))
        .unwrap();
        slices.create(&PostParams::default(), &s).await.unwrap();
    }
}

pub async fn start() -> (Env, Controllers) {
    let (env, controllers, _) = start_counting().await;
    (env, controllers)
}

/// [`start`], the scheduler's Slurm client counting its reads of job layouts.
pub async fn start_counting() -> (Env, Controllers, std::sync::Arc<e2e::SlurmWrites>) {
    let mut env = Env::start_configured(0, |o| {
        let mut dra = kube_testenv::NodeSpec::standard(DRA_NODE);
        let mut plugin = kube_testenv::NodeSpec::standard(PLUGIN_NODE);
        plugin.capacity.insert("nvidia.com/gpu".into(), "2".into());
        for n in [&mut dra, &mut plugin] {
            n.labels.insert(
                slurm_bridge::wellknown::LABEL_EXTERNAL_NODE.into(),
                "true".into(),
            );
            // In the test partition (its node set selects the feature slurm-bridge).
            n.annotations.insert(
                slurm_bridge::wellknown::ANNOTATION_EXTERNAL_NODE_PARTITIONS.into(),
                "slurm-bridge".into(),
            );
        }
        o.nodes = vec![dra, plugin];
    })
    .await;
    setup_devices(&env).await;
    let controllers = Controllers::start(&env, |_| {}).await;
    let slurm = e2e::SlurmWrites::open();
    env.start_scheduler_with(e2e::Gated {
        inner: e2e::rest_client(&env.slurm),
        writes: slurm.clone(),
    })
    .await;
    (env, controllers, slurm)
}

pub fn scontrol(env: &Env, args: &[&str]) -> String {
    env.slurm.run(args).unwrap_or_default()
}

/// Waits until `scontrol show node <node>` contains every one of `want`.
pub async fn wait_node(env: &Env, node: &str, want: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = scontrol(env, &["scontrol", "show", "node", node]);
        if want.iter().all(|w| out.contains(w)) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "node {node}: want {want:?}; scontrol shows:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The CPU DRA and GPU DRA resources of the pods below.
pub const DRA_CPU: &str = "deviceclass.resource.kubernetes.io/dra.cpu";
pub const DRA_GPU: &str = "deviceclass.resource.kubernetes.io/gpu.example.com";

pub fn dra_pod(name: &str, resource: &str, n: &str, command: &[&str]) -> Value {
    e2e::pod(
        name,
        json!({}),
        json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": command,
            "resources": {"requests": {resource: n, "memory": "100Mi"}, "limits": {resource: n}}}]}),
    )
}

/// The GRES indices `scontrol show job -d` lists, e.g. `GRES=gpu:gpu.example.com:2(IDX:0-1)`.
pub fn job_gres_indices(detail: &str) -> Vec<u32> {
    let at = detail.find("(IDX:").expect("IDX in scontrol show job -d");
    let rest = &detail[at + 5..];
    let list = &rest[..rest.find(')').expect("closing parenthesis")];
    slurm_bridge::dra::parse_gres_index(list).unwrap()
}

/// Every ResourceClaim in the test namespace.
pub async fn all_claims(env: &Env) -> Vec<ResourceClaim> {
    Api::<ResourceClaim>::namespaced(env.kube.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}
