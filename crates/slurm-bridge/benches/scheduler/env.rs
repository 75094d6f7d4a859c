//! The environment of a run: Slurm and Kubernetes instances, namespaces, pods and the watch
//! that times their binding.

use crate::{BRIDGE, JOB_LABEL};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::collections::HashMap;
use std::process::Child;
use std::time::{Duration, Instant};

pub(crate) fn start_slurm(nodes: u32) -> slurm_testenv::Instance {
    start_slurm_with(nodes, None)
}

/// slurm-testenv's `SchedulerParameters` (crates/slurm-testenv/src/conf.rs), which `extra`
/// extends.
const SCHED_PARAMS: &str =
    "sched_interval=1,bf_interval=1,default_queue_depth=1000,sched_min_interval=100000";

/// A Slurm with `nodes` external nodes; with `extra`, `SchedulerParameters` extended by it (a
/// second line, which slurmctld reads last).
pub(crate) fn start_slurm_with(nodes: u32, extra: Option<&str>) -> slurm_testenv::Instance {
    let mut policy = slurm_testenv::conf::Policy::default();
    if let Some(extra) = extra {
        policy
            .extra_lines
            .push(format!("SchedulerParameters={SCHED_PARAMS},{extra}"));
    }
    slurm_testenv::Instance::start(slurm_testenv::InstanceOptions {
        nodes,
        policy,
        ..Default::default()
    })
    .expect("start Slurm")
}

pub(crate) fn client(slurm: &slurm_testenv::Instance) -> slurm_rest::Client {
    slurm_rest::Client::builder(slurm.rest_url())
        .token(slurm_rest::TokenProvider::file(slurm.token_file()))
        .build()
        .unwrap()
}

/// A port for the bridge's probe server, reserved in slurm-testenv's pool (never one the kernel
/// may hand an outgoing connection before the bridge binds it).
pub(crate) fn free_port() -> u16 {
    slurm_testenv::ports::reserve_for_process(1).expect("reserve a port")[0]
}

/// GET `path` of the bridge's probe port (slurm-testenv's blocking client, off the runtime):
/// the status and body, `None` when the request failed.
pub(crate) async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let path = path.to_string();
    let r = tokio::task::spawn_blocking(move || {
        slurm_testenv::http::get(slurm_testenv::http::local(port), &path, &[])
    })
    .await
    .ok()?
    .ok()?;
    Some((r.status, r.text()))
}

/// A child process killed (and reaped) when dropped. `wrapped`: the child is heaptrack's
/// wrapper script, started in a process group of its own, whose child is the bridge.
pub(crate) struct Killed {
    pub(crate) child: Child,
    pub(crate) wrapped: bool,
}
impl Drop for Killed {
    fn drop(&mut self) {
        if self.wrapped {
            // The bridge gets SIGTERM, so it ends (killing the wrapper alone left it running)
            // and heaptrack writes its profile.
            let _ = std::process::Command::new("pkill")
                .args([
                    "-TERM",
                    "-g",
                    &self.child.id().to_string(),
                    "-x",
                    "slurm-bridge",
                ])
                .status();
        } else {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

pub(crate) fn pod_object(name: &str, scheduler: &str) -> Pod {
    pod_object_with(name, scheduler, None)
}

/// Whether the bridge's pods are created bare (`--bare-pods`), not as admitted.
pub(crate) static BARE_PODS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A pod for `scheduler`, with a one-label nodeSelector when `selector` is set. The bridge's
/// pods are created as its admission webhook admits them (as under the chart): with the
/// finalizer and the managed-node toleration, so the bind-time label patch is metadata-only;
/// bare with `--bare-pods`.
pub(crate) fn pod_object_with(name: &str, scheduler: &str, selector: Option<(&str, &str)>) -> Pod {
    let mut spec = json!({"schedulerName": scheduler,
             "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}]});
    if let Some((k, v)) = selector {
        spec["nodeSelector"] = json!({ k: v });
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    if scheduler != BRIDGE || BARE_PODS.load(std::sync::atomic::Ordering::Relaxed) {
        return pod;
    }
    let ops = slurm_bridge::admission::mutate::bind_ready(&pod, scheduler);
    let mut admitted = serde_json::to_value(&pod).unwrap();
    json_patch::patch(&mut admitted, &ops).expect("the webhook's patch applies");
    serde_json::from_value(admitted).unwrap()
}

/// A namespace with its default ServiceAccount (which the controller manager creates).
pub(crate) async fn namespace(kube: &kube_testenv::Instance, ns: &str) -> Api<Pod> {
    if ns != "default" {
        kube.kubectl(&["create", "namespace", ns])
            .expect("create namespace");
    }
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(kube.client(), ns);
    while sas.get_opt("default").await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Api::namespaced(kube.client(), ns)
}

/// Creates `n` pods named `{prefix}-{i}` for `scheduler`, 16 creations in flight.
pub(crate) async fn create_pods(pods: &Api<Pod>, prefix: &str, n: u32, scheduler: &str) {
    create_pods_with(pods, prefix, n, scheduler, None).await
}

/// [`create_pods`], each pod with the nodeSelector `selector` when set.
pub(crate) async fn create_pods_with(
    pods: &Api<Pod>,
    prefix: &str,
    n: u32,
    scheduler: &str,
    selector: Option<(&str, &str)>,
) {
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            let pod = pod_object_with(&format!("{prefix}-{i}"), scheduler, selector);
            async move {
                pods.create(&PostParams::default(), &pod)
                    .await
                    .expect("create pod")
            }
        })
        .buffer_unordered(16)
        .count()
        .await;
    println!(
        "        {n} pods created in {:.2} s (16 in flight)",
        started.elapsed().as_secs_f64()
    );
}

/// When each pod of `pods` was first seen bound (and, with `labelled`, when all `total` carry
/// the job id label too), from a watch started now; ends once `bindable` are bound.
pub(crate) fn watch_bound(
    pods: &Api<Pod>,
    bindable: usize,
    labelled_total: Option<usize>,
) -> tokio::task::JoinHandle<HashMap<String, Instant>> {
    let pods = pods.clone();
    tokio::spawn(async move {
        let mut bound = HashMap::new();
        let mut labelled = std::collections::HashSet::new();
        let stream = watcher(pods, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(p)) = stream.next().await {
            let name = p.metadata.name.clone().unwrap_or_default();
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                bound.entry(name.clone()).or_insert_with(Instant::now);
            }
            if p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(JOB_LABEL))
            {
                labelled.insert(name);
            }
            if bound.len() >= bindable && labelled_total.is_none_or(|t| labelled.len() >= t) {
                break;
            }
        }
        bound
    })
}

/// Ends once `n` pods of `pods` report phase Running: the node agent's status write after each
/// bind, the end of a line's Kubernetes work (a watch started now).
pub(crate) fn watch_running(pods: &Api<Pod>, n: usize) -> tokio::task::JoinHandle<()> {
    let pods = pods.clone();
    tokio::spawn(async move {
        let mut running = std::collections::HashSet::new();
        let stream = watcher(pods, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(p)) = stream.next().await {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                running.insert(p.metadata.name.clone().unwrap_or_default());
                if running.len() >= n {
                    break;
                }
            }
        }
    })
}

/// The latest instant of a map (when the last pod was bound).
pub(crate) fn last(bound: &HashMap<String, Instant>) -> Instant {
    *bound.values().max().expect("pods bound")
}

/// The control plane: `nodes` nodes, kube-scheduler with these client limits.
pub(crate) async fn control_plane(nodes: u32, qps: f64, burst: u32) -> kube_testenv::Instance {
    let mut opts = kube_testenv::InstanceOptions::with_nodes(nodes as usize);
    opts.kube_scheduler = true;
    opts.profiling = crate::apiserver_pprof::wanted();
    opts.kube_scheduler_args = vec![
        format!("--kube-api-qps={qps}"),
        format!("--kube-api-burst={burst}"),
    ];
    let kube = kube_testenv::Instance::start(opts)
        .await
        .expect("start the Kubernetes control plane");
    report!(
        "control plane: kube-testenv with {nodes} nodes ready in {:.1} s",
        kube.startup().as_secs_f64()
    );
    kube
}

pub(crate) fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("slurm-bridge-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
