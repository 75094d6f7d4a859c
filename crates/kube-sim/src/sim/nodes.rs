//! Simulated nodes: generated from flags (`node-1`..`node-N`) or described in a YAML file,
//! created through the API with a Ready=True condition as a kubelet registers its node.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde::Deserialize;

use super::util::{self, now};
use super::{SimConfig, SimError};

/// The nodes file: either `nodes: [...]` or a bare list of node entries.
///
/// ```yaml
/// nodes:
///   - name: gpu-1                       # required, unique
///     labels: {topology.kubernetes.io/zone: a}
///     annotations: {scheduler.slinky.slurm.net/external-node-partitions: gpu}
///     capacity: {cpu: "32", memory: 128Gi, pods: "110", nvidia.com/gpu: "4"}
///     allocatable: {cpu: "31"}          # per resource; missing ones default to capacity
///     taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
///     unschedulable: false
/// ```
/// Missing `cpu`, `memory` and `pods` capacities come from the flags (`--node-cpu`, ...).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodesFile {
    nodes: Vec<NodeEntry>,
}

/// One node in the nodes file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeEntry {
    /// Node name.
    pub name: String,
    /// Extra labels (`kubernetes.io/hostname` and friends are always set).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Capacity by resource name (quantities; plain numbers are accepted).
    #[serde(default, deserialize_with = "quantity_map")]
    pub capacity: BTreeMap<String, String>,
    /// Allocatable by resource name; defaults to capacity.
    #[serde(default, deserialize_with = "quantity_map")]
    pub allocatable: BTreeMap<String, String>,
    /// Taints on the node spec.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`.
    #[serde(default)]
    pub unschedulable: bool,
}

/// A map of quantities written as strings (`"16Gi"`) or numbers (`8`, `0.5`).
fn quantity_map<'de, D>(d: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let raw: BTreeMap<String, serde_json::Value> = Deserialize::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            serde_json::Value::Number(n) => Ok((k, n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "resource {k}: {other} is not a quantity"
            ))),
        })
        .collect()
}

/// The node entries the configuration asks for: the file's if given, else `node-1`..`node-N`.
pub fn node_entries(cfg: &SimConfig) -> Result<Vec<NodeEntry>, SimError> {
    let mut entries = match &cfg.nodes_file {
        Some(path) => read_nodes_file(path)?,
        None => (1..=cfg.nodes)
            .map(|i| NodeEntry {
                name: format!("{}{i}", cfg.node_prefix),
                ..Default::default()
            })
            .collect(),
    };
    let mut seen = std::collections::HashSet::new();
    for e in &mut entries {
        if e.name.is_empty() {
            return Err(SimError::NodesFile("a node has an empty name".into()));
        }
        if !seen.insert(e.name.clone()) {
            return Err(SimError::NodesFile(format!(
                "node {:?} is listed twice",
                e.name
            )));
        }
        for (res, default) in [
            ("cpu", &cfg.node_cpu),
            ("memory", &cfg.node_memory),
            ("pods", &cfg.node_pods),
        ] {
            e.capacity
                .entry(res.into())
                .or_insert_with(|| default.clone());
        }
        for (res, q) in &e.capacity {
            e.allocatable
                .entry(res.clone())
                .or_insert_with(|| q.clone());
        }
    }
    Ok(entries)
}

fn read_nodes_file(path: &Path) -> Result<Vec<NodeEntry>, SimError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SimError::NodesFile(format!("reading {}: {e}", path.display())))?;
    parse_nodes_yaml(&text).map_err(|e| SimError::NodesFile(format!("{}: {e}", path.display())))
}

/// Parse the nodes file format (see [`NodesFile`]).
pub fn parse_nodes_yaml(text: &str) -> Result<Vec<NodeEntry>, String> {
    let v: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    let r = if v.is_array() {
        serde_json::from_value::<Vec<NodeEntry>>(v)
    } else {
        serde_json::from_value::<NodesFile>(v).map(|f| f.nodes)
    };
    r.map_err(|e| format!("{e} (expected `nodes:` with a list of entries with name, labels, annotations, capacity, allocatable, taints, unschedulable)"))
}

/// InternalIP of the `index`-th (0-based) simulated node.
pub fn node_ip(index: usize) -> String {
    format!("172.18.{}.{}", (index / 250) % 256, index % 250 + 2)
}

/// Pod CIDR prefix (first three octets) of the `index`-th node: 10.<64+hi>.<lo>.0/24.
pub fn pod_cidr_prefix(index: usize) -> String {
    format!("10.{}.{}", 64 + (index / 256) % 128, index % 256)
}

fn quantities(m: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    m.iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

/// The Node object for an entry, with the status a freshly registered kubelet reports.
pub fn build_node(e: &NodeEntry, index: usize) -> Node {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), e.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), "amd64".to_string()),
    ]);
    labels.extend(e.labels.clone());
    let mut node = Node {
        spec: Some(NodeSpec {
            pod_cidr: Some(format!("{}.0/24", pod_cidr_prefix(index))),
            pod_cidrs: Some(vec![format!("{}.0/24", pod_cidr_prefix(index))]),
            taints: (!e.taints.is_empty()).then(|| e.taints.clone()),
            unschedulable: e.unschedulable.then_some(true),
            ..Default::default()
        }),
        status: Some(node_status(e, index)),
        ..Default::default()
    };
    node.metadata.name = Some(e.name.clone());
    node.metadata.labels = Some(labels);
    node.metadata.annotations = (!e.annotations.is_empty()).then(|| e.annotations.clone());
    node
}

fn node_status(e: &NodeEntry, index: usize) -> NodeStatus {
    let t = now();
    let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(t.clone()),
        last_transition_time: Some(t.clone()),
    };
    NodeStatus {
        capacity: Some(quantities(&e.capacity)),
        allocatable: Some(quantities(&e.allocatable)),
        conditions: Some(vec![
            cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            cond(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            cond(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            cond(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status (kube-sim)",
            ),
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: node_ip(index),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: e.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            boot_id: format!("kube-sim-boot-{index}"),
            container_runtime_version: "containerd://2.0.0-kube-sim".into(),
            kernel_version: "6.1.0-kube-sim".into(),
            kube_proxy_version: String::new(),
            kubelet_version: "v1.36.0-kube-sim".into(),
            machine_id: format!("kube-sim-{index:08}"),
            operating_system: "linux".into(),
            os_image: "kube-sim".into(),
            system_uuid: format!("00000000-0000-0000-0000-{index:012}"),
            ..Default::default()
        }),
        phase: None,
        ..Default::default()
    }
}

/// Create (or refresh) the nodes and write their status through `nodes/status`, as a kubelet
/// registering itself does. An existing node keeps its spec; its status is rewritten.
pub async fn register(client: &kube::Client, entries: &[NodeEntry]) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, e) in entries.iter().enumerate() {
        let node = build_node(e, i);
        let api = api.clone();
        let sem = sem.clone();
        tasks.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let name = node.metadata.name.clone().unwrap_or_default();
            match util::retry!(api.create(&PostParams::default(), &node)) {
                Ok(_) => {}
                Err(e) if util::is_already_exists(&e) => {}
                Err(e) => return Err(SimError::Api(format!("creating node {name}"), e)),
            }
            let patch = serde_json::json!({ "status": node.status });
            util::retry!(api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)))
                .map_err(|e| SimError::Api(format!("writing status of node {name}"), e))?;
            Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(r) => r?,
            Err(e) => return Err(SimError::Task(e.to_string())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_nodes_match_slurm_testenv_names() {
        let cfg = SimConfig {
            nodes: 3,
            ..Default::default()
        };
        let e = node_entries(&cfg).unwrap();
        let names: Vec<_> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["node-1", "node-2", "node-3"]);
        assert_eq!(e[0].capacity["cpu"], "8");
        assert_eq!(e[0].allocatable["memory"], "16000Mi");
        let n = build_node(&e[1], 1);
        assert_eq!(
            n.metadata.labels.as_ref().unwrap()["kubernetes.io/hostname"],
            "node-2"
        );
        let st = n.status.unwrap();
        let ready = st
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(st.capacity.unwrap()["pods"].0, "110");
    }

    #[test]
    fn nodes_file_forms() {
        let yaml = r#"
nodes:
  - name: gpu-1
    labels: {zone: a}
    capacity: {cpu: "32", nvidia.com/gpu: 4, pods: 110}
    allocatable: {cpu: "31"}
    taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
  - name: cpu-1
"#;
        let entries = parse_nodes_yaml(yaml).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].taints[0].effect, "NoSchedule");
        let list = parse_nodes_yaml("- name: a\n- name: b\n").unwrap();
        assert_eq!(list.len(), 2);
        let err = parse_nodes_yaml("nodes:\n  - name: a\n    colour: red\n").unwrap_err();
        assert!(err.contains("colour"), "{err}");

        let dir = std::env::temp_dir().join(format!("kube-sim-nodes-{}", std::process::id()));
        std::fs::write(&dir, yaml).unwrap();
        let cfg = SimConfig {
            nodes_file: Some(dir.clone()),
            ..Default::default()
        };
        let e = node_entries(&cfg).unwrap();
        std::fs::remove_file(&dir).ok();
        assert_eq!(e[0].allocatable["cpu"], "31");
        assert_eq!(e[0].allocatable["nvidia.com/gpu"], "4");
        assert_eq!(e[0].capacity["pods"], "110");
        assert_eq!(e[0].capacity["memory"], "16000Mi");
        assert_eq!(e[1].capacity["cpu"], "8");
    }

    #[test]
    fn duplicate_names_are_rejected() {
        let dir = std::env::temp_dir().join(format!("kube-sim-dup-{}", std::process::id()));
        std::fs::write(&dir, "- name: a\n- name: a\n").unwrap();
        let cfg = SimConfig {
            nodes_file: Some(dir.clone()),
            ..Default::default()
        };
        let r = node_entries(&cfg);
        std::fs::remove_file(&dir).ok();
        assert!(r.unwrap_err().to_string().contains("twice"));
    }
}
