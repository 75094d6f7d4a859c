//! The Helm chart installed and running in-cluster: the project's image (hack/build-image.sh,
//! from this test's own `slurm-bridge` binary) loaded onto kube-testenv's kubelet nodes, and
//! `helm install` with the chart's defaults, only the Slurm URL and token set (and no
//! cert-manager, which kube-testenv lacks: the bridge manages its own certificates). Slurm is
//! configured as a site would for the chart's default `mcsLabel: kubernetes`
//! (`MCSPlugin=mcs/label`, docs/hybrid.md).
//!
//! Three kubelet nodes: node-1 and node-2 are Slurm's (labelled external, tainted as the node
//! controller taints bridged nodes, so only the bridge's pods land there, and labelled
//! `slinky.slurm.net/hybrid=true` for the node agent); node-3 is an ordinary node where
//! kube-scheduler places the chart's own pods. Checked, each by what can be observed:
//! - every Deployment's pods run on node-3 and become Ready through their probes, their process
//!   runs as 65532 with a read-only root file system (read in /proc of the host);
//! - the node agent DaemonSet (`nodeAgent.enabled=true` and `nodeAgent.draCpu=true`, otherwise
//!   as shipped: containerd's NRI socket at `/var/run/nri/nri.sock`, the kubelet's plugin folders
//!   and `/var/run/cdi` through hostPaths, root without capabilities, a read-only root file
//!   system) runs one pod on each of node-1 and node-2, Ready through its readiness probe
//!   (registered with the node's containerd, its kubelet plugin registered, the node's `dra.cpu`
//!   slice published), its `/readyz` and `/metrics` answering through the pod IP; the chart's
//!   `dra.cpu` DeviceClass is there (the test creates none) and goes with `helm uninstall`; a bridge pod asking 1 of the node's CPUs
//!   (not exclusive) runs pinned from its first line to the machine CPUs of its Slurm job's
//!   `CPU_IDs`, through the agents' roll on `helm upgrade` and after `helm uninstall` removed
//!   them, never restarted; a pod asking one `dra.cpu` starts with its claim prepared by the
//!   agent (`DRA_CPUS`) and runs on its claim's CPUs, its job's;
//! - the webhook answers through its Service (kube-apiserver reaches the endpoints): a pod
//!   created in the managed namespace is mutated (scheduler name, toleration), scheduled through
//!   Slurm onto node-1 or node-2 and its container runs (its log) and completes;
//! - `helm upgrade` with a changed configuration rolls every Deployment: the scheduler's Lease
//!   changes holder to a new pod, pods created during the roll are each scheduled once and no
//!   pod has two Slurm jobs;
//! - `helm uninstall` runs the pre-delete hook Job as a pod on a kubelet node, which releases
//!   the bridge's finalizer from a pod still running;
//! - the e2e invariants hold at the end.
//!
//! A second test installs `mode=run` the same way (one pod of `slurm-bridge run`): Ready, the
//! Lease, a pod admitted, scheduled through Slurm and run, the uninstall hook. Both say how long
//! the webhook took to be trusted after the release was Ready (docs/helm.md, Tests).

mod e2e;

use e2e::{Env, SCHEDULER, create_retrying, helm, wait_some, wait_until};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams, PostParams};
use serde_json::json;
use slurm_bridge::wellknown::{LABEL_EXTERNAL_NODE, LABEL_SLURM_JOBID, managed_node_taint};
use slurm_bridge::workload::admin_comment::AdminComment;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const RELEASE: &str = "sb";
const RELEASE_NS: &str = "slinky";
const MANAGED_NS: &str = "slurm-bridge";
/// Slurm's nodes (node-1, node-2); node-3 is the kubelet node for the chart's own pods.
const SLURM_NODES: u32 = 2;
const KUBELET_NODES: usize = 3;
const BRIDGE_NODE: &str = "node-3";
const WAIT: Duration = Duration::from_secs(180);
/// The label the chart's node agent DaemonSet selects nodes by (`nodeAgent.nodeSelector`).
const HYBRID_LABEL: &str = "slinky.slurm.net/hybrid";
/// The node agent's component label.
const NODE_AGENT: &str = "node-agent";
/// The node agent's line once containerd registered it as an NRI plugin.
const AGENT_REGISTERED: &str = "NRI: registered with the runtime";
/// The node agent's line when containerd's synchronization reaches it (after registration).
const AGENT_SYNCHRONIZING: &str = "NRI: synchronizing";
/// What the agent logs when its /readyz turns 200.
const AGENT_READY: &str = "node agent ready";
/// The extended resource of the `dra.cpu` DeviceClass, served by the agent (`nodeAgent.draCpu`).
const DRA_CPU: &str = "deviceclass.resource.kubernetes.io/dra.cpu";

/// `helm ARGS` against the instance (as `Instance::helm`, without blocking the runtime, so the
/// test watches while helm waits for a rollout or a hook).
async fn helm(env: &Env, args: &[&str]) -> String {
    let home = env.kube_env.dir().join("helm");
    let out = tokio::process::Command::new(kube_testenv::binaries::helm().expect("helm"))
        .args(args)
        .env("KUBECONFIG", env.kube_env.kubeconfig())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The project's image, built by hack/build-image.sh from this test's binary (a debug build:
/// a release build takes many minutes on 2 cores); returns the archive.
fn build_image(dir: &Path) -> PathBuf {
    let archive = dir.join("slurm-bridge-image.tar");
    let started = Instant::now();
    let out = std::process::Command::new(helm::repo_path("../../hack/build-image.sh"))
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_slurm-bridge"))
        .arg("--output")
        .arg(&archive)
        .output()
        .expect("run hack/build-image.sh");
    assert!(
        out.status.success(),
        "hack/build-image.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "image built in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .next()
            .unwrap_or("")
    );
    archive
}

/// True once every Deployment of the release has rolled out: its current template's replicas
/// all updated, ready and available, and no pod of an older template left.
async fn rolled_out(env: &Env) -> bool {
    let deps = Api::<Deployment>::namespaced(env.kube.clone(), RELEASE_NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    !deps.is_empty()
        && deps.iter().all(|d| {
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let Some(s) = &d.status else { return false };
            s.observed_generation >= d.metadata.generation
                && s.updated_replicas == Some(want)
                && s.ready_replicas == Some(want)
                && s.available_replicas == Some(want)
                && s.replicas == Some(want)
        })
}

/// The release's Deployment pods that are not being deleted.
async fn bridge_pods(env: &Env) -> Vec<Pod> {
    Api::<Pod>::namespaced(env.kube.clone(), RELEASE_NS)
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component!={NODE_AGENT}"
        )))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !p.labels().contains_key("job-name"))
        .collect()
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The host PIDs of the container `container_id` (`containerd://<id>`): the processes whose
/// cgroup path names it.
fn container_pids(container_id: &str) -> Vec<i32> {
    let id = container_id.rsplit("://").next().unwrap_or(container_id);
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_to_string(e.path().join("cgroup")).is_ok_and(|c| c.contains(id)) {
            out.push(pid);
        }
    }
    out
}

/// A process's capability sets (`CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb` of
/// /proc/PID/status), as written there.
fn process_capabilities(pid: i32) -> Vec<(String, String)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .filter(|l| l.starts_with("Cap"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The user a process runs as (real, effective) and whether its root file system is mounted
/// read-only, from /proc.
fn process_identity(pid: i32) -> ((u32, u32), bool) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap()
        .split_whitespace()
        .map(|u| u.parse().unwrap())
        .collect();
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    // The last mount on "/" is the one the process sees; field 6 holds its options.
    let root_ro = mountinfo
        .lines()
        .rev()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(4) == Some(&"/"))
        .is_some_and(|f| f[5].split(',').any(|o| o == "ro"));
    ((uids[0], uids[1]), root_ro)
}

/// Checks one of the chart's pods as it runs: Ready, its container with the chart's liveness
/// and readiness probes and never restarted, every host process of it running as `uid` with a
/// read-only root file system; returns those processes.
fn check_running_container(p: &Pod, uid: u32) -> Vec<i32> {
    let name = p.name_any();
    assert!(is_ready(p), "{name} is not Ready");
    let c = &p.spec.as_ref().unwrap().containers[0];
    assert!(
        c.readiness_probe.is_some() && c.liveness_probe.is_some(),
        "{name}: the chart's probes"
    );
    let status = &p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(status.restart_count, 0, "{name} restarted");
    let pids = container_pids(status.container_id.as_deref().expect("a container id"));
    assert!(
        !pids.is_empty(),
        "{name}: no process of its container on the host"
    );
    for &pid in &pids {
        let (uids, root_ro) = process_identity(pid);
        assert_eq!(uids, (uid, uid), "{name}: process {pid}'s user");
        assert!(
            root_ro,
            "{name}: process {pid}'s root file system is writable"
        );
    }
    pids
}

/// The log of the release's pod `name`, checked to hold none of `bad`.
async fn log_without(env: &Env, name: &str, bad: &[&str]) -> String {
    let logs = Api::<Pod>::namespaced(env.kube.clone(), RELEASE_NS)
        .logs(name, &LogParams::default())
        .await
        .unwrap_or_else(|e| panic!("{name}'s logs: {e}"));
    for b in bad {
        assert!(!logs.contains(b), "{name} logged {b:?}:\n{logs}");
    }
    logs
}

/// Checks the chart's pods as they run: on node-3, Ready (the kubelet's readiness probe passed),
/// never restarted, as 65532 with a read-only root file system; returns their names.
async fn check_bridge_pods(env: &Env) -> BTreeSet<String> {
    let pods = bridge_pods(env).await;
    let mut names = BTreeSet::new();
    for p in &pods {
        let name = p.name_any();
        assert_eq!(e2e::node_of(p), BRIDGE_NODE, "{name}");
        check_running_container(p, 65532);
        // Every call the chart's RBAC allows, nothing failed on the way up.
        log_without(
            env,
            &name,
            &["forbidden", "Forbidden", " 403", "ERROR", "panicked"],
        )
        .await;
        names.insert(name);
    }
    names
}

/// The node agent's pods that are not being deleted.
async fn agent_pods(env: &Env) -> Vec<Pod> {
    Api::<Pod>::namespaced(env.kube.clone(), RELEASE_NS)
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={NODE_AGENT}"
        )))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// What an agent pod's state and Events say, for a failure message.
async fn describe_agents(env: &Env) -> String {
    let api = Api::<Pod>::namespaced(env.kube.clone(), RELEASE_NS);
    let events = Api::<Event>::namespaced(env.kube.clone(), RELEASE_NS)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut out = String::new();
    for p in agent_pods(env).await {
        let name = p.name_any();
        let logs = api
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_default();
        let said: Vec<String> = events
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name.as_str()))
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.as_deref().unwrap_or(""),
                    e.message.as_deref().unwrap_or("")
                )
            })
            .collect();
        out.push_str(&format!(
            "\n{name} on {}: {:?}\n  events {said:?}\n  logs:\n{logs}",
            e2e::node_of(&p),
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
        ));
    }
    out
}

/// Waits until the node agent DaemonSet has rolled out on node-1 and node-2: its current
/// template's pods scheduled, updated and Ready, Ready through the agent's readiness probe
/// (`/readyz`: registered with the node's containerd over NRI, the kubelet registered its
/// `dra.cpu` plugin, the node's ResourceSlices published); checks them ([`check_agent_pods`])
/// and returns their names by node.
async fn wait_node_agents(env: &Env) -> BTreeMap<String, String> {
    let daemonsets = Api::<DaemonSet>::namespaced(env.kube.clone(), RELEASE_NS);
    let deadline = Instant::now() + WAIT;
    loop {
        let ds = daemonsets.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(ds.len(), 1, "the chart's one DaemonSet");
        let rolled = ds[0].status.as_ref().is_some_and(|s| {
            s.observed_generation >= ds[0].metadata.generation
                && s.desired_number_scheduled == SLURM_NODES as i32
                && s.updated_number_scheduled == Some(SLURM_NODES as i32)
                && s.number_ready == SLURM_NODES as i32
                && s.number_available == Some(SLURM_NODES as i32)
        });
        let pods = agent_pods(env).await;
        if rolled && pods.len() == SLURM_NODES as usize && pods.iter().all(is_ready) {
            return check_agent_pods(env).await;
        }
        // An agent that exits says why at once rather than at the timeout.
        let crashed = pods.iter().any(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.restart_count > 0))
        });
        assert!(
            !crashed && Instant::now() < deadline,
            "the node agents: not rolled out and Ready within {WAIT:?}: {:?}{}",
            ds[0].status,
            describe_agents(env).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks the node agent's pods as they run: one on each of node-1 and node-2, Ready through
/// the chart's probes, never restarted, as root (the NRI socket is root's) with a read-only
/// root file system and no capability in any set, no error in their logs, their readiness
/// logged after registration with containerd; returns their names by node.
async fn check_agent_pods(env: &Env) -> BTreeMap<String, String> {
    let mut by_node = BTreeMap::new();
    for p in agent_pods(env).await {
        let name = p.name_any();
        for pid in check_running_container(&p, 0) {
            for (set, value) in process_capabilities(pid) {
                assert!(
                    value.chars().all(|c| c == '0'),
                    "{name}: process {pid}'s {set} is {value}"
                );
            }
        }
        let logs = log_without(
            env,
            &name,
            &["forbidden", "Forbidden", "ERROR", "WARN", "panicked"],
        )
        .await;
        // Ready came from the agent's own readiness (the kubelet saw /readyz answer 200), and
        // that only after containerd registered and synchronized it.
        let at = |text| logs.find(text);
        assert!(
            matches!(
                (at(AGENT_REGISTERED), at(AGENT_SYNCHRONIZING), at(AGENT_READY)),
                (Some(r), Some(s), Some(d)) if r < s && s < d
            ),
            "{name}: registered with containerd, synchronized, then ready:\n{logs}"
        );
        let node = e2e::node_of(&p);
        assert!(
            by_node.insert(node.clone(), name.clone()).is_none(),
            "two agents on {node}"
        );
    }
    let nodes: Vec<&str> = by_node.keys().map(String::as_str).collect();
    assert_eq!(
        nodes,
        ["node-1", "node-2"],
        "the agents' nodes: {by_node:?}"
    );
    by_node
}

/// A script line printing the CPUs its shell may run on, as `cpus=<list>`.
const PRINT_CPUS: &str = "echo cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)";

/// The CPU lists a pod printed with [`PRINT_CPUS`], in order.
async fn printed_cpus(env: &Env, name: &str) -> Vec<BTreeSet<u32>> {
    managed(env)
        .logs(name, &LogParams::default())
        .await
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("cpus="))
        .map(|l| slurm_bridge::resources::cpulist::parse_cpu_list(l).expect("a CPU list"))
        .collect()
}

/// The machine CPUs of Slurm job `id`'s `CPU_IDs` (`scontrol show -d job`) on its one node,
/// mapped with the host's topology as Slurm numbers it (slurm-testenv's reading of sysfs, not
/// the agent's); and all of the host's CPUs.
fn job_machine_cpus(env: &Env, id: u32) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let text = env
        .slurm
        .run(&["scontrol", "show", "-d", "job", &id.to_string()])
        .unwrap();
    let lists: Vec<&str> = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("CPU_IDs="))
        .collect();
    assert_eq!(lists.len(), 1, "job {id} on one node: {text}");
    let ids: Vec<u32> = slurm_bridge::resources::cpulist::parse_cpu_list(lists[0])
        .unwrap()
        .into_iter()
        .collect();
    let host = slurm_testenv::cpus::HostCpus::detect().expect("the host's CPUs");
    (
        host.to_machine(&ids).into_iter().collect(),
        host.machine.iter().copied().collect(),
    )
}

/// The pod's first container: its id and restart count.
async fn container_of(env: &Env, name: &str) -> (String, i32) {
    let p = managed(env).get(name).await.unwrap();
    let c = &p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .expect("container statuses")[0];
    (c.container_id.clone().unwrap_or_default(), c.restart_count)
}

/// Waits until `name` has printed `more` CPU lists beyond `seen`; the lists printed.
async fn wait_printed(env: &Env, name: &str, seen: usize, more: usize) -> Vec<BTreeSet<u32>> {
    wait_some(
        &format!("{name} prints {more} more CPU lists"),
        WAIT,
        async || {
            let printed = printed_cpus(env, name).await;
            (printed.len() >= seen + more).then_some(printed)
        },
    )
    .await
}

/// GET `path` on an agent pod's probe port through the API server's pod proxy.
async fn agent_http(env: &Env, pod: &str, path: &str) -> String {
    let req = http::Request::get(format!(
        "/api/v1/namespaces/{RELEASE_NS}/pods/{pod}:8081/proxy/{path}"
    ))
    .body(Vec::new())
    .unwrap();
    env.kube
        .request_text(req)
        .await
        .unwrap_or_else(|e| panic!("GET /{path} of {pod}: {e}"))
}

/// The chart's `dra.cpu` DeviceClass (`nodeAgent.draCpu`, `nodeAgent.deviceClass.create`):
/// every device of the `dra.cpu` driver, the release's.
async fn check_dra_cpu_class(env: &Env) {
    let dc = Api::<DeviceClass>::all(env.kube.clone())
        .get("dra.cpu")
        .await
        .expect("the chart's dra.cpu DeviceClass");
    let selectors = dc.spec.selectors.clone().unwrap_or_default();
    let cel: Vec<&str> = selectors
        .iter()
        .filter_map(|s| s.cel.as_ref().map(|c| c.expression.as_str()))
        .collect();
    assert_eq!(cel, [r#"device.driver == "dra.cpu""#], "{:?}", dc.metadata);
    assert_eq!(
        dc.labels()
            .get("app.kubernetes.io/instance")
            .map(String::as_str),
        Some(RELEASE),
        "made by the release"
    );
}

/// Waits until the agent of each hybrid node published the node's `dra.cpu` slice with every
/// CPU of the host (`every`), as the bridge's inventory reads it.
async fn wait_dra_cpu_slices(env: &Env, every: usize) {
    let slices: Api<ResourceSlice> = Api::all(env.kube.clone());
    for node in ["node-1", "node-2"] {
        wait_some(&format!("{node}'s dra.cpu slice"), WAIT, async || {
            let items = slices
                .list(
                    &ListParams::default()
                        .fields(&format!("spec.nodeName={node},spec.driver=dra.cpu")),
                )
                .await
                .ok()?
                .items;
            let inv = slurm_bridge::dra::NodeInventory::from_slices(node, &items);
            (inv.cpus.cpus.len() == every).then_some(())
        })
        .await;
    }
}

/// A pod asking one `dra.cpu` (not exclusive: its job holds one core) starts with its claim
/// prepared by the agent of its node (the kubelet called the agent's DRA socket in the pod):
/// it sees `DRA_CPUS` and runs on exactly its job's CPUs, the devices of its claim.
async fn a_dra_cpu_pod_runs_on_its_claims_cpus(env: &Env) {
    let mut pod = managed_pod(
        env,
        "dra-cpu",
        5,
        &format!("echo dra=$DRA_CPUS; {PRINT_CPUS}"),
    );
    pod.metadata.annotations = Some(BTreeMap::from([(
        "slurmjob.slinky.slurm.net/exclusive".to_string(),
        "false".to_string(),
    )]));
    pod.spec.as_mut().unwrap().containers[0].resources = Some(
        serde_json::from_value(json!({
            "requests": {DRA_CPU: "1", "memory": "32Mi"},
            "limits": {DRA_CPU: "1", "memory": "32Mi"},
        }))
        .unwrap(),
    );
    let created = Instant::now();
    create_retrying(&managed(env), &pod, WAIT).await;
    let p = wait_scheduled(env, "dra-cpu").await;
    let job = e2e::job_id_of(&p);
    let (want, every) = job_machine_cpus(env, job);
    assert!(
        !want.is_empty() && want.len() < every.len(),
        "job {job}: {want:?} of {every:?}"
    );
    let claim_name = e2e::claim_name(&p).expect("a claim for the dra.cpu pod");
    let claim = Api::<ResourceClaim>::namespaced(env.kube.clone(), MANAGED_NS)
        .get(&claim_name)
        .await
        .unwrap();
    let devices: BTreeSet<String> = e2e::allocated(&claim)
        .into_iter()
        .map(|(_, _, d)| d)
        .collect();
    let named: BTreeSet<String> = want.iter().map(|c| format!("cpu{c}")).collect();
    assert_eq!(devices, named, "the claim names the job's CPUs");
    e2e::wait_phase(&managed(env), "dra-cpu", "Succeeded", WAIT).await;
    let logs = managed(env)
        .logs("dra-cpu", &LogParams::default())
        .await
        .unwrap();
    let dra: BTreeSet<u32> = logs
        .lines()
        .find_map(|l| l.trim().strip_prefix("dra="))
        .map(|l| slurm_bridge::resources::cpulist::parse_cpu_list(l).expect("DRA_CPUS"))
        .unwrap_or_else(|| panic!("no DRA_CPUS line: {logs}"));
    assert_eq!(dra, want, "DRA_CPUS is the job's CPUs: {logs}");
    assert_eq!(
        printed_cpus(env, "dra-cpu").await,
        vec![want.clone()],
        "the container runs on its claim's CPUs"
    );
    eprintln!(
        "dra-cpu (job {job} on {}) ran on its claim's CPUs {want:?}, {:.1} s from creation to Succeeded",
        e2e::node_of(&p),
        created.elapsed().as_secs_f64()
    );
}

/// A pod for the managed namespace, names no scheduler (the webhook picks the bridge's): the
/// kubelet nodes' busybox image running `script`.
fn managed_pod(env: &Env, name: &str, grace: i64, script: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": MANAGED_NS},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": env.kube_env.image().unwrap(),
                "command": ["sh", "-c", script],
                "resources": {"requests": {"cpu": "1", "memory": "32Mi"}}}]},
    }))
    .unwrap()
}

fn managed(env: &Env) -> Api<Pod> {
    Api::namespaced(env.kube.clone(), MANAGED_NS)
}

/// Waits until `name` is bound to a node by the bridge (its job id label set); returns it.
async fn wait_scheduled(env: &Env, name: &str) -> Pod {
    let pods = managed(env);
    wait_some(
        &format!("{name} scheduled through Slurm"),
        WAIT,
        async || {
            let p = pods.get(name).await.ok()?;
            (!e2e::node_of(&p).is_empty() && p.labels().contains_key(LABEL_SLURM_JOBID))
                .then_some(p)
        },
    )
    .await
}

/// The managed namespace's side of the e2e invariants (tests/e2e/invariants.rs, there for the
/// default namespace): every bound pod runs on a node of its Slurm job, each external job Slurm
/// lists (any state) belongs to labelled pods and its admin_comment lists exactly them, so no
/// pod was ever given two jobs.
async fn assert_one_job_per_pod(env: &Env) {
    let pods = managed(env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let slurm_names = env.slurm_names().await;
    let mut by_job: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for p in &pods {
        if let Some(id) = p.labels().get(LABEL_SLURM_JOBID) {
            let id: u32 = id.parse().unwrap();
            by_job
                .entry(id)
                .or_default()
                .insert(format!("{MANAGED_NS}/{}", p.name_any()));
            let node = e2e::node_of(p);
            if !node.is_empty() {
                env.assert_on_its_job(&p.name_any(), &node, id, &slurm_names)
                    .await;
            }
        }
    }
    for id in env.slurm_job_ids() {
        assert!(
            by_job.contains_key(&id),
            "Slurm job {id} belongs to no pod: {}",
            env.scontrol_job(id)
        );
    }
    for (id, labelled) in by_job {
        let job = env.rest.job(id).await.expect("labelled job exists");
        let comment = AdminComment::decode(job.admin_comment.as_deref().unwrap_or("")).unwrap();
        let listed: BTreeSet<String> = comment.pods.into_iter().collect();
        assert_eq!(listed, labelled, "job {id}: admin_comment vs labelled pods");
    }
}

async fn lease(env: &Env) -> Option<(String, i32)> {
    let l = Api::<Lease>::namespaced(env.kube.clone(), RELEASE_NS)
        .get_opt(SCHEDULER)
        .await
        .ok()??;
    let spec = l.spec?;
    Some((spec.holder_identity?, spec.lease_transitions.unwrap_or(0)))
}

/// Slurm (MCS labels on) and a control plane of three kubelet nodes with kube-scheduler, the
/// image loaded on the nodes, slurmrestd exposed to the pods, the namespaces and the token
/// Secret; returns the environment and the `--set` of the Slurm URL.
async fn setup(started: Instant) -> (Env, String) {
    let slurm_opts = slurm_testenv::InstanceOptions {
        nodes: SLURM_NODES,
        policy: slurm_testenv::conf::Policy {
            extra_lines: vec![
                "MCSPlugin=mcs/label".into(),
                "MCSParameters=ondemand,ondemandselect".into(),
            ],
            ..Default::default()
        },
        ..Default::default()
    };
    let mut kube_opts = kube_testenv::InstanceOptions::with_nodes(KUBELET_NODES);
    kube_opts.kubelet_nodes = KUBELET_NODES;
    kube_opts.kube_scheduler = true;
    for n in kube_opts.nodes.iter_mut().take(SLURM_NODES as usize) {
        n.labels.insert(LABEL_EXTERNAL_NODE.into(), "true".into());
        n.labels.insert(HYBRID_LABEL.into(), "true".into());
        n.taints.push(managed_node_taint(SCHEDULER));
    }
    let mut env = Env::start_with(slurm_opts, kube_opts).await;
    eprintln!("environment up in {:.1} s", started.elapsed().as_secs_f64());

    let dir = e2e::temp_dir("chart-in-cluster");
    let archive = build_image(&dir);
    let loading = Instant::now();
    env.kube_env
        .load_image(&archive)
        .expect("load the image onto the kubelet nodes");
    eprintln!("image loaded in {:.1} s", loading.elapsed().as_secs_f64());

    // slurmrestd listens on the host's loopback: pods reach it through the instance's bridge.
    let rest_port: u16 = env
        .slurm
        .rest_url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let slurm_addr = env
        .kube_env
        .expose_host_port(rest_port)
        .await
        .expect("expose slurmrestd to the pods");
    helm::create_namespaces(&env, &[RELEASE_NS, MANAGED_NS]).await;
    let token = std::fs::read_to_string(env.slurm.token_file()).unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "slurm-bridge-token"},
        "stringData": {"auth-token": token.trim()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.kube.clone(), RELEASE_NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    (
        env,
        format!("sharedConfig.slurmRestApi=http://{slurm_addr}"),
    )
}

/// `helm install` with the Slurm URL, no cert-manager and `extra` values; waits until every
/// Deployment rolled out and checks their pods ([`check_bridge_pods`]); returns their names.
async fn install(env: &Env, slurm_url: &str, extra: &[&str]) -> BTreeSet<String> {
    let chart = helm::chart();
    let installing = Instant::now();
    let mut args = vec![
        "install",
        RELEASE,
        &chart,
        "--namespace",
        RELEASE_NS,
        "--set",
        slurm_url,
        "--set",
        "admission.certManager.enabled=false",
    ];
    for v in extra {
        args.extend(["--set", v]);
    }
    helm(env, &args).await;
    let release_pods = Api::<Pod>::namespaced(env.kube.clone(), RELEASE_NS);
    wait_some("the release's Deployments rolled out", WAIT, async || {
        if rolled_out(env).await {
            return Some(());
        }
        // A pod that cannot start says why at once rather than at the timeout.
        for p in release_pods.list(&ListParams::default()).await.ok()?.items {
            for s in p
                .status
                .and_then(|s| s.container_statuses)
                .unwrap_or_default()
            {
                let waiting = s.state.and_then(|s| s.waiting);
                if let Some(w) = waiting
                    && matches!(
                        w.reason.as_deref(),
                        Some("ErrImageNeverPull" | "ErrImagePull" | "CreateContainerConfigError")
                    )
                {
                    panic!(
                        "{}: {:?} {:?}",
                        p.metadata.name.unwrap_or_default(),
                        w.reason,
                        w.message
                    );
                }
            }
        }
        None
    })
    .await;
    eprintln!(
        "installed and Ready in {:.1} s",
        installing.elapsed().as_secs_f64()
    );
    check_bridge_pods(env).await
}

/// The webhook through its Service, scheduling through Slurm, the container runs: a pod
/// created in the managed namespace is mutated, bound to a Slurm node by its job (with the
/// default MCS label), prints its line and completes, and its job ends.
async fn a_pod_is_admitted_scheduled_and_runs(env: &Env, name: &str) {
    // The chart's default: the webhook configurations name the Service (no URL), which
    // kube-apiserver resolves to the admission pods' endpoints.
    let webhooks = Api::<MutatingWebhookConfiguration>::all(env.kube.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let configured: Vec<_> = webhooks
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten())
        .collect();
    assert!(!configured.is_empty(), "the chart's mutating webhooks");
    for w in configured {
        let service = w.client_config.service.as_ref();
        assert!(
            w.client_config.url.is_none() && service.is_some_and(|s| s.namespace == RELEASE_NS),
            "{} calls its Service: {:?}",
            w.name,
            w.client_config
        );
    }
    let pods = managed(env);
    // Until the webhook configurations trust the bridge's CA (it fills their caBundle), the API
    // server refuses the pod: retried quietly, and how long it took is said.
    let asked = Instant::now();
    let mut refusals = Vec::new();
    let hello = loop {
        let pod = managed_pod(env, name, 30, "echo hello-from-the-chart; id -u");
        match pods.create(&PostParams::default(), &pod).await {
            Ok(p) => break p,
            Err(e) => {
                assert!(
                    asked.elapsed() < WAIT,
                    "create {name}: still refused after {WAIT:?}: {e}"
                );
                refusals.push(e.to_string());
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    eprintln!(
        "{name} admitted {:.1} s after the release was Ready ({} refusals{})",
        asked.elapsed().as_secs_f64(),
        refusals.len(),
        refusals
            .first()
            .map(|e| format!(", the first: {}", e.chars().take(240).collect::<String>()))
            .unwrap_or_default()
    );
    // The replica that wins the Lease fills the caBundle at once; before that fix, in mode
    // `run` the next pass of the self-managed certificates (a minute later) did.
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "{name} admitted only {:.1} s after the release was Ready: the caBundle waited for the certificates' periodic pass",
        asked.elapsed().as_secs_f64()
    );
    let spec = hello.spec.as_ref().unwrap();
    assert_eq!(
        spec.scheduler_name.as_deref(),
        Some(SCHEDULER),
        "the webhook set the bridge's scheduler"
    );
    let hello = wait_scheduled(env, name).await;
    let node = e2e::node_of(&hello);
    assert!(node == "node-1" || node == "node-2", "{name} on {node}");
    let job = e2e::job_id_of(&hello);
    assert_eq!(
        e2e::job_field(env, job, "MCS_label"),
        "kubernetes",
        "the job carries the chart's default mcsLabel: {}",
        env.scontrol_job(job)
    );
    e2e::wait_phase(&pods, name, "Succeeded", WAIT).await;
    let logs = pods.logs(name, &LogParams::default()).await.unwrap();
    assert!(logs.contains("hello-from-the-chart"), "{logs}");
    wait_until(&format!("job {job} ended"), WAIT, async || {
        !env.active_job_ids().contains(&job)
    })
    .await;
}

/// `helm uninstall`: the pre-delete hook's Job runs as a pod on node-3 and releases the
/// finalizer of `running`, a bridge pod still running; the release's pods all go, and the
/// invariants hold.
async fn uninstall_runs_the_hook(env: &Env, running: &str) {
    let release_pods = Api::<Pod>::namespaced(env.kube.clone(), RELEASE_NS);
    let uninstall = helm(env, &["uninstall", RELEASE, "--namespace", RELEASE_NS]);
    tokio::pin!(uninstall);
    let mut hook: Option<(String, String, Option<i32>, String)> = None;
    loop {
        tokio::select! {
            _ = &mut uninstall => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let jobs = release_pods
            .list(&ListParams::default().labels("job-name"))
            .await
            .unwrap()
            .items;
        for p in jobs {
            let name = p.name_any();
            let exit = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code);
            let logs = release_pods
                .logs(&name, &LogParams::default())
                .await
                .unwrap_or_default();
            let previous = hook.take();
            let logs = match previous {
                Some((n, _, _, l)) if n == name && logs.is_empty() => l,
                _ => logs,
            };
            hook = Some((name, e2e::node_of(&p), exit, logs));
        }
    }
    let (hook_pod, hook_node, hook_exit, hook_logs) =
        hook.expect("the pre-delete hook's Job ran a pod");
    eprintln!("hook pod {hook_pod} on {hook_node}, exit {hook_exit:?}:\n{hook_logs}");
    assert_eq!(
        hook_node, BRIDGE_NODE,
        "the hook's pod ran on a kubelet node"
    );
    // Helm deletes the Job the moment it completes, so the pod's last state may not have been
    // seen; the events stay: the kubelet of node-3 started the container, the Job completed.
    let events = Api::<Event>::namespaced(env.kube.clone(), RELEASE_NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let started_by_kubelet = events.iter().any(|e| {
        e.involved_object.name.as_deref() == Some(hook_pod.as_str())
            && e.reason.as_deref() == Some("Started")
            && e.source.as_ref().and_then(|s| s.host.as_deref()) == Some(BRIDGE_NODE)
    });
    assert!(
        started_by_kubelet,
        "node-3's kubelet started {hook_pod}'s container"
    );
    let job_completed = events.iter().any(|e| {
        e.involved_object.kind.as_deref() == Some("Job") && e.reason.as_deref() == Some("Completed")
    });
    assert!(job_completed, "the hook's Job completed");
    assert!(
        matches!(hook_exit, None | Some(0)),
        "the hook's container exited {hook_exit:?}"
    );
    let steady = managed(env).get(running).await.unwrap();
    assert!(
        !slurm_bridge::wellknown::holds_finalizer(&steady),
        "the hook released {running}'s finalizer"
    );
    wait_until("the release's pods gone", WAIT, async || {
        release_pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
    env.assert_invariants().await;
    assert_one_job_per_pod(env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_in_cluster_on_kubelet_nodes() {
    let started = Instant::now();
    let (env, slurm_url) = setup(started).await;

    // --- helm install: the Deployments' pods run and become Ready -------------------------
    let first = install(
        &env,
        &slurm_url,
        &["nodeAgent.enabled=true", "nodeAgent.draCpu=true"],
    )
    .await;
    assert!(
        first.len() >= 4,
        "scheduler, controllers and two admission replicas: {first:?}"
    );
    // --- the node agent DaemonSet: one pod on each hybrid node, Ready through its probe -----
    // What the node agent's checks add to the test, said at the end.
    let mut agent_checks = Duration::ZERO;
    let agents_ready = Instant::now();
    let first_agents = wait_node_agents(&env).await;
    eprintln!(
        "node agents Ready {:.1} s after the Deployments were Ready: {first_agents:?}",
        agents_ready.elapsed().as_secs_f64()
    );
    check_dra_cpu_class(&env).await;
    let host_cpus = slurm_testenv::cpus::HostCpus::detect().unwrap().count() as usize;
    wait_dra_cpu_slices(&env, host_cpus).await;
    agent_checks += agents_ready.elapsed();

    // --- the webhook through its Service; scheduling through Slurm; the container runs ----
    a_pod_is_admitted_scheduled_and_runs(&env, "hello").await;
    let pods = managed(&env);
    let chart = helm::chart();

    // --- a pod sharing its node runs pinned to its job's cores by the node agent -----------
    // It asks 1 CPU of a node Slurm knows with the kubelet's allocatable (the host's CPUs) and
    // is not exclusive, so its job holds a strict part of the node.
    let mut steady = managed_pod(
        &env,
        "steady",
        5,
        &format!("echo steady; while :; do {PRINT_CPUS}; sleep 1; done"),
    );
    steady.metadata.annotations = Some(BTreeMap::from([(
        "slurmjob.slinky.slurm.net/exclusive".to_string(),
        "false".to_string(),
    )]));
    create_retrying(&pods, &steady, WAIT).await;
    let steady = wait_scheduled(&env, "steady").await;
    let steady_job = e2e::job_id_of(&steady);
    let steady_node = e2e::node_of(&steady);
    e2e::wait_phase(&pods, "steady", "Running", WAIT).await;
    let checking = Instant::now();
    let (pinned, every) = job_machine_cpus(&env, steady_job);
    assert_eq!(
        e2e::job_field(&env, steady_job, "NodeList"),
        steady_node,
        "{}",
        env.scontrol_job(steady_job)
    );
    let cpu_tot = env
        .slurm
        .run(&["scontrol", "show", "node", &steady_node])
        .unwrap()
        .split_whitespace()
        .find_map(|w| w.strip_prefix("CPUTot=").map(str::to_string))
        .unwrap_or_default();
    assert_eq!(
        cpu_tot,
        every.len().to_string(),
        "{steady_node} is described to Slurm with the host's CPUs"
    );
    assert!(
        !pinned.is_empty() && pinned.len() < every.len(),
        "job {steady_job} holds a strict part of {steady_node}'s CPUs {every:?}: {pinned:?}"
    );
    let printed = wait_printed(&env, "steady", 0, 2).await;
    assert!(
        printed.iter().all(|c| *c == pinned),
        "steady runs on its job's CPUs {pinned:?} from its first line (the agent on \
         {steady_node} pinned the container as containerd created it): {printed:?}{}",
        describe_agents(&env).await
    );
    // The agent of that node says so, naming the pod it checked with Slurm.
    let agent_logs = Api::<Pod>::namespaced(env.kube.clone(), RELEASE_NS)
        .logs(&first_agents[&steady_node], &LogParams::default())
        .await
        .unwrap();
    assert!(
        agent_logs
            .lines()
            .any(|l| l.contains(" pinned ") && l.contains(&format!("pod={MANAGED_NS}/steady"))),
        "the agent on {steady_node} pinned steady:\n{agent_logs}"
    );
    // Its probe port, through the API server's pod proxy (the pod IP, as the kubelet probes
    // it): ready, and the pin counted in its metrics.
    let agent = &first_agents[&steady_node];
    assert_eq!(agent_http(&env, agent, "readyz").await, "ok");
    let metrics = agent_http(&env, agent, "metrics").await;
    let pinned_total = metrics
        .lines()
        .find_map(|l| l.strip_prefix("slurm_bridge_node_agent_containers_pinned_total "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(
        pinned_total.is_some_and(|n| n >= 1),
        "the agent on {steady_node} counts steady's pin:\n{metrics}"
    );
    assert!(
        metrics.contains("slurm_bridge_node_agent_nri_registered 1"),
        "{metrics}"
    );
    let steady_container = container_of(&env, "steady").await;
    eprintln!("steady (job {steady_job} on {steady_node}) runs on CPUs {pinned:?} of {every:?}");

    // --- the agents as the nodes' dra.cpu DRA driver (nodeAgent.draCpu) --------------------
    a_dra_cpu_pod_runs_on_its_claims_cpus(&env).await;
    agent_checks += checking.elapsed();

    // --- helm upgrade: every Deployment rolls; one scheduler at a time ---------------------
    let (old_holder, old_transitions) = wait_some("the scheduler's Lease held", WAIT, async || {
        lease(&env).await
    })
    .await;
    assert!(
        first.contains(&old_holder),
        "Lease holder {old_holder} is no pod of the release: {first:?}"
    );

    helm(
        &env,
        &[
            "upgrade",
            RELEASE,
            &chart,
            "--namespace",
            RELEASE_NS,
            "--reuse-values",
            "--set",
            "schedulerConfig.priorityClasses.upgrade-test.priority=1",
        ],
    )
    .await;
    // While the Deployments roll: pods keep coming, and the Lease is watched.
    let mut holders = vec![old_holder.clone()];
    const MAX_DURING: usize = 20;
    let mut during = Vec::new();
    let rolling = Instant::now();
    let mut last_created = rolling - Duration::from_secs(1);
    loop {
        if let Some((h, _)) = lease(&env).await
            && holders.last() != Some(&h)
        {
            holders.push(h);
        }
        // A pod a second for as long as the roll lasts (the scheduler's handover included),
        // and at least three.
        if during.len() < MAX_DURING && last_created.elapsed() >= Duration::from_secs(1) {
            let name = format!("during-{}", during.len());
            create_retrying(&pods, &managed_pod(&env, &name, 5, "echo during"), WAIT).await;
            during.push(name);
            last_created = Instant::now();
        }
        let old_gone = bridge_pods(&env)
            .await
            .iter()
            .all(|p| !first.contains(&p.name_any()));
        let new_leader = lease(&env).await.is_some_and(|(h, _)| !first.contains(&h));
        if during.len() >= 3 && old_gone && new_leader && rolled_out(&env).await {
            break;
        }
        assert!(
            rolling.elapsed() < WAIT,
            "the upgrade's roll: not within {WAIT:?}; Lease holders {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (new_holder, new_transitions) = lease(&env).await.unwrap();
    if holders.last() != Some(&new_holder) {
        holders.push(new_holder.clone());
    }
    eprintln!(
        "upgrade rolled in {:.1} s, {} pods created meanwhile; Lease holders {holders:?}",
        rolling.elapsed().as_secs_f64(),
        during.len()
    );
    let second = check_bridge_pods(&env).await;
    assert!(
        first.is_disjoint(&second),
        "every pod replaced: {first:?} {second:?}"
    );
    assert!(
        second.contains(&new_holder),
        "{new_holder} not in {second:?}"
    );
    assert!(new_transitions > old_transitions, "the Lease changed hands");
    assert!(
        holders
            .iter()
            .filter(|h| !first.contains(*h) && !second.contains(*h))
            .count()
            == 0,
        "only the release's pods held the Lease: {holders:?}"
    );
    for name in &during {
        wait_scheduled(&env, name).await;
        e2e::wait_phase(&pods, name, "Succeeded", WAIT).await;
    }
    assert_eq!(
        e2e::job_id_of(&pods.get("steady").await.unwrap()),
        steady_job,
        "steady kept its job"
    );
    assert_one_job_per_pod(&env).await;
    // The config checksum rolled the node agents too: the new ones registered, and left the
    // pinned container as it was.
    let checking = Instant::now();
    let second_agents = wait_node_agents(&env).await;
    assert!(
        first_agents
            .values()
            .all(|a| !second_agents.values().any(|b| a == b)),
        "the upgrade replaced the node agents: {first_agents:?} {second_agents:?}"
    );
    let seen = printed_cpus(&env, "steady").await.len();
    let printed = wait_printed(&env, "steady", seen, 1).await;
    assert!(
        printed.iter().all(|c| *c == pinned),
        "steady stays on {pinned:?} through the agents' roll: {printed:?}"
    );
    assert_eq!(
        container_of(&env, "steady").await,
        steady_container,
        "steady's container was neither replaced nor restarted"
    );
    agent_checks += checking.elapsed();

    // --- helm uninstall: the pre-delete hook Job runs as a pod -----------------------------
    uninstall_runs_the_hook(&env, "steady").await;
    let checking = Instant::now();
    // The DaemonSet is gone with its pods; the agents' exit killed nothing: steady's container
    // runs on, still pinned.
    assert!(
        Api::<DaemonSet>::namespaced(env.kube.clone(), RELEASE_NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "helm uninstall removed the node agent DaemonSet"
    );
    assert!(
        Api::<DeviceClass>::all(env.kube.clone())
            .get_opt("dra.cpu")
            .await
            .unwrap()
            .is_none(),
        "helm uninstall removed the chart's dra.cpu DeviceClass"
    );
    let seen = printed_cpus(&env, "steady").await.len();
    let printed = wait_printed(&env, "steady", seen, 1).await;
    assert!(
        printed.iter().all(|c| *c == pinned),
        "steady stays on {pinned:?} after the agents went: {printed:?}"
    );
    let p = pods.get("steady").await.unwrap();
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert_eq!(
        container_of(&env, "steady").await,
        steady_container,
        "steady's container was neither replaced nor restarted"
    );
    assert!(
        env.active_job_ids().contains(&steady_job),
        "job {steady_job} runs on"
    );
    agent_checks += checking.elapsed();
    eprintln!(
        "total {:.1} s, of which the node agent's checks {:.1} s",
        started.elapsed().as_secs_f64(),
        agent_checks.as_secs_f64()
    );
}

/// `mode: run`, the one Deployment of `slurm-bridge run` (scheduler, controllers and webhooks in
/// one pod), as shipped otherwise: Ready, its webhook admits a pod that Slurm schedules and that
/// runs, and `helm uninstall` runs the hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_in_run_mode_runs_in_cluster() {
    let started = Instant::now();
    let (env, slurm_url) = setup(started).await;
    let pods = install(&env, &slurm_url, &["mode=run"]).await;
    assert_eq!(pods.len(), 1, "one pod of slurm-bridge run: {pods:?}");
    let holder = wait_some("the scheduler's Lease held", WAIT, async || {
        lease(&env).await
    })
    .await
    .0;
    assert!(pods.contains(&holder), "Lease holder {holder}: {pods:?}");
    a_pod_is_admitted_scheduled_and_runs(&env, "hello").await;
    let steady = managed_pod(&env, "steady", 5, "echo steady; sleep 3600 & wait");
    create_retrying(&managed(&env), &steady, WAIT).await;
    wait_scheduled(&env, "steady").await;
    e2e::wait_phase(&managed(&env), "steady", "Running", WAIT).await;
    assert_one_job_per_pod(&env).await;
    uninstall_runs_the_hook(&env, "steady").await;
    eprintln!("total {:.1} s", started.elapsed().as_secs_f64());
}
