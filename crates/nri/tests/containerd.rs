//! The plugin against real containerd v2.4.2 (NRI on), under a real kubelet: kube-testenv with
//! one kubelet node, the plugin on that node's NRI socket.
//!
//! - A pod created while the plugin is connected gets the cpuset the plugin chose: the container
//!   itself prints its `Cpus_allowed_list` (the pin reached runc).
//! - A container whose creation the plugin refuses fails with the plugin's message in the pod's
//!   status.
//! - A plugin connecting after a pod started is told of its container by Synchronize (running,
//!   with its pid; the pinned one with its cpuset), and an UpdateContainers re-pins it: the
//!   container's process shows the new list in /proc. An update runc cannot apply is refused.
//! - A handler answering after containerd's request timeout (2 s) gets the plugin dropped, and
//!   the container is created without the adjustment.
//! - When containerd goes away, `run` returns.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use nri_plugin::{
    Container, ContainerAdjustment, ContainerState, ContainerUpdate, Handler, PodSandbox, Runtime,
};
use serde_json::json;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(90);
const NS: &str = "default";
const REFUSAL: &str = "refused by the test plugin";

/// Pins the pods named in `pins` at creation, refuses pods named `refused`, answers too late
/// for pods named `slow`, and reports every Synchronize on `synced`.
struct TestPinner {
    pins: HashMap<&'static str, &'static str>,
    synced: mpsc::UnboundedSender<(Vec<PodSandbox>, Vec<Container>)>,
}

impl Handler for TestPinner {
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Vec<ContainerUpdate> {
        let _ = self.synced.send((pods, containers));
        Vec::new()
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        _container: Container,
    ) -> Result<ContainerAdjustment, String> {
        if pod.namespace != NS {
            return Ok(ContainerAdjustment::none());
        }
        if pod.name == "refused" {
            return Err(REFUSAL.to_string());
        }
        if pod.name == "slow" {
            // Past containerd's request timeout (2 s).
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        Ok(match self.pins.get(pod.name.as_str()) {
            Some(cpus) => ContainerAdjustment::cpuset(cpus),
            None => ContainerAdjustment::none(),
        })
    }
}

/// A running plugin: its task, its runtime handle, its Synchronize reports.
struct Plugin {
    task: tokio::task::JoinHandle<Result<(), nri_plugin::Error>>,
    runtime: Runtime,
    synced: mpsc::UnboundedReceiver<(Vec<PodSandbox>, Vec<Container>)>,
}

fn start_plugin(socket: PathBuf, pins: HashMap<&'static str, &'static str>) -> Plugin {
    let (tx, synced) = mpsc::unbounded_channel();
    let handler = Arc::new(TestPinner { pins, synced: tx });
    let runtime = Runtime::new();
    let task = tokio::spawn({
        let runtime = runtime.clone();
        async move { nri_plugin::run_with(&socket, "test-pinner", "50", handler, &runtime).await }
    });
    Plugin {
        task,
        runtime,
        synced,
    }
}

impl Plugin {
    /// The next Synchronize the runtime sent this plugin.
    async fn next_sync(&mut self) -> (Vec<PodSandbox>, Vec<Container>) {
        tokio::time::timeout(WAIT, self.synced.recv())
            .await
            .expect("the runtime synchronizes a connecting plugin")
            .expect("the plugin runs")
    }
}

/// Polls `f` until it yields a value; panics after `WAIT` naming `what`.
async fn wait_for<T, F: Future<Output = Option<T>>>(what: &str, mut f: impl FnMut() -> F) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A pod on `node` whose container prints its allowed CPUs, then sleeps.
fn pod(name: &str, node: &str, image: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "grep Cpus_allowed_list /proc/self/status; exec sleep 3600"],
            }],
        },
    }))
    .expect("a pod")
}

/// The value of `Cpus_allowed_list:` in a /proc status text.
fn allowed_list(status: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// The allowed CPUs the pod's container printed, once it has.
async fn printed_cpus(pods: &Api<Pod>, name: &str) -> String {
    wait_for(&format!("{name}'s logs to show its CPUs"), || async {
        let logs = pods.logs(name, &LogParams::default()).await.ok()?;
        allowed_list(&logs)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_reach_runc_and_synchronize_then_update_repins() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("nri_plugin=debug,kube_testenv=info")
        .with_test_writer()
        .try_init();
    let inst = kube_testenv::Instance::start(kube_testenv::InstanceOptions {
        kubelet_nodes: 1,
        ..kube_testenv::InstanceOptions::with_nodes(1)
    })
    .await
    .unwrap_or_else(|e| panic!("start kube-testenv with a kubelet node: {e}"));
    let node = "node-1";
    let image = inst.image().expect("kubelet nodes have an image");
    let socket = inst.nri_socket(node).expect("node-1 is a kubelet node");
    assert!(inst.nri_socket("node-2").is_none());
    assert!(
        inst.env_lines().contains(&format!(
            "KUBE_TESTENV_NRI_DIR={}\n",
            socket.parent().unwrap().display()
        )),
        "{}",
        inst.env_lines()
    );
    let pods: Api<Pod> = Api::namespaced(inst.client(), NS);
    let unpinned = allowed_list(&std::fs::read_to_string("/proc/self/status").unwrap())
        .expect("this process's allowed CPUs");

    // 1. Connected before the pods: the pin is applied at creation; a refusal fails creation.
    let mut plugin = start_plugin(socket.clone(), HashMap::from([("pinned", "0")]));
    let (_, containers) = plugin.next_sync().await;
    assert!(plugin.runtime.is_connected());
    eprintln!("first sync: {} containers", containers.len());
    let pp = PostParams::default();
    pods.create(&pp, &pod("pinned", node, image)).await.unwrap();
    pods.create(&pp, &pod("refused", node, image))
        .await
        .unwrap();
    assert_eq!(
        printed_cpus(&pods, "pinned").await,
        "0",
        "the plugin's cpuset"
    );
    let message = wait_for("refused's container to fail creation", || async {
        let p = pods.get("refused").await.ok()?;
        let waiting = p
            .status?
            .container_statuses?
            .first()?
            .state
            .clone()?
            .waiting?;
        (waiting.reason.as_deref() == Some("CreateContainerError")).then_some(waiting.message?)
    })
    .await;
    assert!(message.contains(REFUSAL), "{message}");

    // 2. Without the plugin, a pod runs on every CPU.
    plugin.task.abort();
    let _ = plugin.task.await;
    assert!(!plugin.runtime.is_connected());
    pods.create(&pp, &pod("late", node, image)).await.unwrap();
    assert_eq!(printed_cpus(&pods, "late").await, unpinned);

    // 3. A plugin connecting now is told of both running containers.
    let mut plugin = start_plugin(socket.clone(), HashMap::new());
    let (sandboxes, containers) = plugin.next_sync().await;
    let find = |pod_name: &str| -> Container {
        let sandbox = sandboxes
            .iter()
            .find(|s| s.name == pod_name && s.namespace == NS)
            .unwrap_or_else(|| panic!("Synchronize has pod {pod_name}: {sandboxes:?}"));
        containers
            .iter()
            .find(|c| c.pod_sandbox_id == sandbox.id && c.name == "main")
            .unwrap_or_else(|| panic!("Synchronize has {pod_name}'s container"))
            .clone()
    };
    let late = find("late");
    assert_eq!(late.state, ContainerState::ContainerRunning as i32);
    assert!(late.pid > 0, "a running container has a pid");
    let pinned = find("pinned");
    assert_eq!(pinned.cpus(), "0", "the runtime kept the adjustment");
    let proc_cpus = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| allowed_list(&s))
    };
    assert_eq!(proc_cpus(late.pid).as_deref(), Some(unpinned.as_str()));

    // An update runc cannot apply (no such CPU) comes back as the runtime's refusal.
    let err = plugin
        .runtime
        .update_containers(vec![ContainerUpdate::cpuset(&late.id, "63")])
        .await
        .expect_err("CPU 63 does not exist");
    assert!(matches!(err, nri_plugin::Error::Refused { .. }), "{err}");

    // An unsolicited update re-pins the running one. Ids the runtime does not know are
    // skipped; 300 of them make the request about 15 kB, so it leaves in several multiplexer
    // frames, which containerd must reassemble.
    let mut updates: Vec<_> = (0..300)
        .map(|i| ContainerUpdate::cpuset(&format!("absent-{i:04}-{}", "x".repeat(20)), "1"))
        .collect();
    updates.push(ContainerUpdate::cpuset(&late.id, "1"));
    let failed = plugin
        .runtime
        .update_containers(updates)
        .await
        .expect("UpdateContainers");
    assert!(failed.is_empty(), "failed updates: {failed:?}");
    wait_for("late's process to run on CPU 1 only", || async {
        (proc_cpus(late.pid).as_deref() == Some("1")).then_some(())
    })
    .await;

    // 4. A handler slower than containerd's request timeout: containerd drops the plugin (run
    // returns, for the caller to reconnect) and creates the container without the adjustment.
    plugin.task.abort();
    let _ = plugin.task.await;
    let mut plugin = start_plugin(socket.clone(), HashMap::from([("slow", "0")]));
    plugin.next_sync().await;
    pods.create(&pp, &pod("slow", node, image)).await.unwrap();
    let ended = tokio::time::timeout(WAIT, &mut plugin.task)
        .await
        .expect("containerd drops a plugin that answers late")
        .expect("the plugin's task");
    assert!(ended.is_ok(), "{ended:?}");
    assert_eq!(printed_cpus(&pods, "slow").await, unpinned);

    // 5. The runtime goes away: the plugin's run returns (for its caller to reconnect).
    let mut plugin = start_plugin(socket.clone(), HashMap::new());
    plugin.next_sync().await;
    drop(inst);
    let ended = tokio::time::timeout(WAIT, plugin.task)
        .await
        .expect("run returns once containerd is gone")
        .expect("the plugin's task");
    eprintln!("run returned {ended:?}");
    assert!(
        matches!(ended, Ok(()) | Err(nri_plugin::Error::Io(_))),
        "{ended:?}"
    );
    assert!(!plugin.runtime.is_connected());
}
