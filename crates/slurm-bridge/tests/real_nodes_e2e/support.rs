//! What the real-node tests share: environments with kubelet nodes, pods running the busybox
//! image, their logs and exit codes, and Slurm's view of nodes and jobs.

use crate::e2e::controllers::Controllers;
use crate::e2e::{self, Env, wait_some};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, LogParams};
use serde_json::{Value, json};
use slurm_bridge::wellknown::holds_finalizer;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(90);

/// Real Slurm with `nodes` external nodes (slurm-testenv's: 8 CPUs, 16000 MB) and a control
/// plane whose first `kubelet` nodes run a real kubelet (2 CPUs, the host's memory); the node
/// controller re-registers those from their kubelet. Returns once Slurm's nodes match their
/// kubelets, with the scheduler and the controllers running.
pub async fn start_external(
    nodes: u32,
    kubelet: usize,
    configure: impl FnOnce(&mut kube_testenv::InstanceOptions),
) -> (Env, Controllers) {
    let mut env = Env::start_configured(nodes, |o| {
        o.kubelet_nodes = kubelet;
        configure(o);
    })
    .await;
    env.start_scheduler().await;
    let controllers = Controllers::start(&env, |_| {}).await;
    for node in env.kube_env.kubelet_nodes() {
        let (cpus, mib) = kubelet_allocatable(&env, &node).await;
        wait_slurm_node(&env, &node, cpus, mib).await;
    }
    (env, controllers)
}

/// Hybrid nodes: `nodes` Slurm nodes run by slurmd (8 CPUs in slurm.conf) whose Kubernetes
/// nodes of the same names run a real kubelet (2 CPUs); the scheduler and the controllers run.
pub async fn start_hybrid(nodes: u32) -> (Env, Controllers) {
    let mut env = Env::start_hybrid(nodes, Default::default(), |o| {
        o.kubelet_nodes = nodes as usize;
    })
    .await;
    env.start_scheduler().await;
    let controllers = Controllers::start(&env, |_| {}).await;
    (env, controllers)
}

/// A bridge pod running `script` with `sh -c` in the kubelet nodes' busybox image, asking `cpu`
/// and 32Mi, never restarted, killed `grace` seconds after its deletion (SIGTERM first).
pub fn real_pod(
    env: &Env,
    name: &str,
    annotations: Value,
    cpu: &str,
    grace: i64,
    script: &str,
) -> Value {
    let image = env.kube_env.image().expect("kubelet nodes");
    e2e::pod(
        name,
        annotations,
        json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script],
                            "resources": {"requests": {"cpu": cpu, "memory": "32Mi"}}}],
        }),
    )
}

/// Not exclusive: the pod's job shares its node with other jobs.
pub fn shared() -> Value {
    json!({"slurmjob.slinky.slurm.net/exclusive": "false"})
}

pub fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

pub use crate::e2e::terminated;

/// True once the first container has started and not yet stopped.
pub fn container_running(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// The pod's logs through the API server and the kubelet; None while they cannot be read.
pub async fn logs(env: &Env, pod: &str) -> Option<String> {
    env.pods().logs(pod, &LogParams::default()).await.ok()
}

/// Waits until the pod's logs contain `text`; returns them.
pub async fn wait_logs(env: &Env, pod: &str, text: &str) -> String {
    wait_some(&format!("{pod}'s logs show {text:?}"), WAIT, async || {
        logs(env, pod).await.filter(|l| l.contains(text))
    })
    .await
}

/// Waits until the pod reaches `want` (Running, Succeeded, Failed); returns it.
pub async fn wait_phase(env: &Env, pod: &str, want: &str) -> Pod {
    env.wait_pod(pod, want, WAIT, |p| {
        p.is_some_and(|p| phase(p) == Some(want))
    })
    .await
    .expect("pod exists")
}

/// Waits until the pod no longer holds the bridge finalizer (or is gone).
pub async fn wait_released(env: &Env, pod: &str) {
    env.wait_pod(pod, "finalizer released", WAIT, |p| {
        p.is_none_or(|p| !holds_finalizer(p))
    })
    .await;
}

/// The kubelet's allocatable CPUs (whole, rounded down) and memory (MiB) of `node`.
pub async fn kubelet_allocatable(env: &Env, node: &str) -> (u32, u64) {
    let n = Api::<Node>::all(env.kube.clone()).get(node).await.unwrap();
    let alloc = n.status.and_then(|s| s.allocatable).expect("allocatable");
    let q = |r: &str| {
        slurm_bridge::resources::quantity::Quantity::from_k8s(&alloc[r])
            .unwrap()
            .nanos()
    };
    (
        (q("cpu") / 1_000_000_000) as u32,
        (q("memory") / 1_000_000_000 / (1024 * 1024)) as u64,
    )
}

/// A field of `scontrol show node NODE` (`CPUTot`, `RealMemory`, `State`...); empty while Slurm
/// has no such node (the node controller re-creates it).
pub fn node_field(env: &Env, node: &str, key: &str) -> String {
    env.slurm
        .run(&["scontrol", "show", "node", node])
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_string()
}

/// Waits until Slurm's `node` has `cpus` CPUs and `mib` MiB and is usable (not draining).
pub async fn wait_slurm_node(env: &Env, node: &str, cpus: u32, mib: u64) {
    let what = format!("Slurm node {node} with CPUTot={cpus} RealMemory={mib}, not drained");
    wait_some(&what, WAIT, async || {
        let state = node_field(env, node, "State");
        (node_field(env, node, "CPUTot") == cpus.to_string()
            && node_field(env, node, "RealMemory") == mib.to_string()
            && !state.contains("DRAIN")
            && !state.contains("DOWN"))
        .then_some(())
    })
    .await;
}

/// Waits until Slurm runs no external job.
pub async fn wait_no_external_job(env: &Env) {
    wait_some("no live external job", WAIT, async || {
        env.active_job_ids().is_empty().then_some(())
    })
    .await;
}
