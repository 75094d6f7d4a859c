//! The fake nodes: their description ([`NodeSpec`], the nodes file), the Node objects and
//! statuses the agent writes, registration through the API, and the Lease of each node.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec as K8sNodeSpec,
    NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::Patch;
use serde::Deserialize;

use super::AgentError;
use super::util::{self, now, now_micro};

/// Namespace of the node Leases (made by the API server at start).
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// `nodeInfo.kubeletVersion` the agent reports.
pub const KUBELET_VERSION: &str = "v1.36.3";

/// Capacity of a standard node (and the default of missing resources): slurm-testenv's
/// external nodes have 8 CPUs and 16000 MB.
const STANDARD_CAPACITY: [(&str, &str); 3] = [("cpu", "8"), ("memory", "16000Mi"), ("pods", "110")];

/// The node conditions the agent reports: type, status, reason, message.
const CONDITIONS: [(&str, &str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    (
        "DiskPressure",
        "False",
        "KubeletHasNoDiskPressure",
        "kubelet has no disk pressure",
    ),
    (
        "PIDPressure",
        "False",
        "KubeletHasSufficientPID",
        "kubelet has sufficient PID available",
    ),
    (
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status (kube-testenv agent)",
    ),
];

/// One fake node: what the agent registers and then plays the kubelet of.
///
/// Missing `cpu`, `memory` and `pods` capacities default to [`NodeSpec::standard`]'s, and
/// missing allocatable resources to their capacity.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSpec {
    /// Node name (a DNS subdomain).
    pub name: String,
    /// Extra labels (`kubernetes.io/hostname`, `kubernetes.io/os` and `kubernetes.io/arch` are always set).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Capacity by resource name (quantities; plain numbers are accepted in YAML).
    #[serde(default, deserialize_with = "quantity_map")]
    pub capacity: BTreeMap<String, String>,
    /// Allocatable by resource name; each defaults to its capacity.
    #[serde(default, deserialize_with = "quantity_map")]
    pub allocatable: BTreeMap<String, String>,
    /// Taints set on the node when the agent creates it.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` when the agent creates the node.
    #[serde(default)]
    pub unschedulable: bool,
}

impl NodeSpec {
    /// A node like slurm-testenv's external ones: 8 CPUs, 16000Mi memory, 110 pods.
    pub fn standard(name: impl Into<String>) -> NodeSpec {
        let res: BTreeMap<String, String> = STANDARD_CAPACITY
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        NodeSpec {
            name: name.into(),
            capacity: res.clone(),
            allocatable: res,
            ..Default::default()
        }
    }

    /// The spec with the default capacities and allocatables filled in.
    pub(crate) fn normalized(&self) -> NodeSpec {
        let mut n = self.clone();
        for (res, q) in STANDARD_CAPACITY {
            n.capacity.entry(res.into()).or_insert_with(|| q.into());
        }
        for (res, q) in &n.capacity {
            n.allocatable
                .entry(res.clone())
                .or_insert_with(|| q.clone());
        }
        n
    }

    /// Check what the API server would otherwise reject less readably.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !is_dns_subdomain(&self.name) {
            return Err(format!(
                "node name {:?} is not a DNS subdomain (lower-case alphanumerics, '-' and '.', at most 253 characters)",
                self.name
            ));
        }
        for (what, map) in [
            ("capacity", &self.capacity),
            ("allocatable", &self.allocatable),
        ] {
            for (res, q) in map {
                if !is_quantity(q) {
                    return Err(format!(
                        "node {}: {what} {res}: {q:?} is not a non-negative quantity",
                        self.name
                    ));
                }
            }
        }
        for t in &self.taints {
            if !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            ) {
                return Err(format!(
                    "node {}: taint {}: effect {:?} is not NoSchedule, PreferNoSchedule or NoExecute",
                    self.name, t.key, t.effect
                ));
            }
        }
        Ok(())
    }
}

/// `node-1`..`node-N`, each [`NodeSpec::standard`]: the names of `slurm-testenv up --nodes N`.
pub fn standard_nodes(n: usize) -> Vec<NodeSpec> {
    (1..=n)
        .map(|i| NodeSpec::standard(format!("node-{i}")))
        .collect()
}

/// The nodes file: either `nodes: [...]` or a bare list of node entries.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodesFile {
    nodes: Vec<NodeSpec>,
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

/// Parse a nodes file (`nodes:` with a list of entries, or a bare list; see the module docs),
/// with default capacities filled in; names must be unique.
pub fn parse_nodes_yaml(text: &str) -> Result<Vec<NodeSpec>, AgentError> {
    let v: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|e| AgentError::NodesFile(e.to_string()))?;
    let r = if v.is_array() {
        serde_json::from_value::<Vec<NodeSpec>>(v)
    } else {
        serde_json::from_value::<NodesFile>(v).map(|f| f.nodes)
    };
    let nodes: Vec<NodeSpec> = r
        .map_err(|e| AgentError::NodesFile(format!("{e} (expected `nodes:` with a list of entries with name, labels, annotations, capacity, allocatable, taints, unschedulable)")))?
        .iter()
        .map(NodeSpec::normalized)
        .collect();
    check_nodes(&nodes).map_err(AgentError::NodesFile)?;
    Ok(nodes)
}

/// Validate each node and reject duplicate names.
pub(crate) fn check_nodes(nodes: &[NodeSpec]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for n in nodes {
        n.validate()?;
        if !seen.insert(n.name.as_str()) {
            return Err(format!("node {:?} is listed twice", n.name));
        }
    }
    Ok(())
}

/// RFC 1123 subdomain, as Node names must be.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// A non-negative quantity as `resource.ParseQuantity` accepts: `<number><suffix>` where the
/// suffix is a binary SI (`Ki`..`Ei`), decimal SI (`n u m k M G T P E`) or exponent (`e3`).
fn is_quantity(q: &str) -> bool {
    let s = q.strip_prefix('+').unwrap_or(q);
    let num_len = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_len);
    let digits = num.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 || num.matches('.').count() > 1 {
        return false;
    }
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        _ => {
            let Some(exp) = suffix.strip_prefix(['e', 'E']) else {
                return false;
            };
            let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit())
        }
    }
}

/// InternalIP of the node registered `index`-th (0-based): 172.18.x.y.
pub fn node_ip(index: usize) -> String {
    format!("172.18.{}.{}", (index / 250) % 256, index % 250 + 2)
}

/// First three octets of the `index`-th node's pod addresses: 10.<64+hi>.<lo>.0/24.
pub fn pod_cidr_prefix(index: usize) -> String {
    format!("10.{}.{}", 64 + (index / 256) % 128, index % 256)
}

fn quantities(m: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    m.iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

/// The labels the agent sets on a node: the kubelet's well-known ones plus the spec's.
fn node_labels(spec: &NodeSpec) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), spec.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), "amd64".to_string()),
    ]);
    labels.extend(spec.labels.clone());
    labels
}

/// The Node object for a (normalized) spec, with the status a freshly registered kubelet
/// reports. `spec.podCIDR` is left to the controller manager, as for a real kubelet.
pub fn build_node(spec: &NodeSpec, index: usize) -> Node {
    let mut node = Node {
        spec: Some(K8sNodeSpec {
            taints: (!spec.taints.is_empty()).then(|| spec.taints.clone()),
            unschedulable: spec.unschedulable.then_some(true),
            ..Default::default()
        }),
        status: Some(node_status(spec, index)),
        ..Default::default()
    };
    node.metadata.name = Some(spec.name.clone());
    node.metadata.labels = Some(node_labels(spec));
    node.metadata.annotations = (!spec.annotations.is_empty()).then(|| spec.annotations.clone());
    node
}

/// The full status of a node: capacity, allocatable, conditions, addresses, node info.
fn node_status(spec: &NodeSpec, index: usize) -> NodeStatus {
    let t = now();
    NodeStatus {
        capacity: Some(quantities(&spec.capacity)),
        allocatable: Some(quantities(&spec.allocatable)),
        conditions: Some(
            CONDITIONS
                .iter()
                .map(|(type_, status, reason, message)| NodeCondition {
                    type_: (*type_).into(),
                    status: (*status).into(),
                    reason: Some((*reason).into()),
                    message: Some((*message).into()),
                    last_heartbeat_time: Some(t.clone()),
                    last_transition_time: Some(t.clone()),
                })
                .collect(),
        ),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: node_ip(index),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: spec.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            boot_id: format!("6b7a3c1e-0000-4000-8000-{index:012}"),
            container_runtime_version: "containerd://2.1.0".into(),
            kernel_version: "6.1.0-kube-testenv".into(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: format!("{:032x}", index + 1),
            operating_system: "linux".into(),
            os_image: "kube-testenv agent".into(),
            system_uuid: format!("00000000-0000-0000-0000-{index:012}"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Strategic-merge patch for `nodes/status` writing the full status of a registering node.
/// Over an `existing` status, conditions that keep their status keep their
/// `lastTransitionTime`, and resources no longer in the spec are removed.
pub fn registration_status_patch(
    spec: &NodeSpec,
    index: usize,
    existing: Option<&NodeStatus>,
) -> serde_json::Value {
    let mut status = node_status(spec, index);
    let old_conditions = existing.and_then(|e| e.conditions.as_ref());
    for c in status.conditions.iter_mut().flatten() {
        let kept = old_conditions
            .and_then(|cs| {
                cs.iter()
                    .find(|o| o.type_ == c.type_ && o.status == c.status)
            })
            .and_then(|o| o.last_transition_time.clone());
        if kept.is_some() {
            c.last_transition_time = kept;
        }
    }
    let mut v = serde_json::to_value(&status).unwrap_or_default();
    let stale = [
        (
            "capacity",
            &spec.capacity,
            existing.and_then(|e| e.capacity.as_ref()),
        ),
        (
            "allocatable",
            &spec.allocatable,
            existing.and_then(|e| e.allocatable.as_ref()),
        ),
    ];
    for (field, wanted, old) in stale {
        for res in old.into_iter().flat_map(|m| m.keys()) {
            if !wanted.contains_key(res) {
                v[field][res] = serde_json::Value::Null;
            }
        }
    }
    serde_json::json!({ "status": v })
}

/// Strategic-merge patch for `nodes/status` refreshing the conditions' `lastHeartbeatTime`.
/// `current` are the node's conditions as last seen: a condition whose status changes (say
/// Ready Unknown → True after the node controller marked it) gets a new `lastTransitionTime`;
/// the others keep theirs (conditions merge by type).
pub fn heartbeat_patch(current: Option<&[NodeCondition]>) -> serde_json::Value {
    let t = serde_json::to_value(now()).unwrap_or_default();
    let conditions: Vec<serde_json::Value> = CONDITIONS
        .iter()
        .map(|(type_, status, reason, message)| {
            let mut c = serde_json::json!({
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": t,
            });
            let unchanged = current
                .and_then(|cs| cs.iter().find(|c| c.type_ == *type_))
                .is_some_and(|c| c.status == *status && c.last_transition_time.is_some());
            if !unchanged {
                c["lastTransitionTime"] = t.clone();
            }
            c
        })
        .collect();
    serde_json::json!({ "status": { "conditions": conditions } })
}

/// The owner reference a kubelet puts on its node's Lease.
fn node_owner(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.into(),
        uid: uid.into(),
        ..Default::default()
    }
}

/// The node's Lease as the kubelet keeps it: held by the node, renewed now.
pub fn build_lease(name: &str, uid: &str, duration_seconds: i32) -> Lease {
    let mut lease = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some(name.into()),
            lease_duration_seconds: Some(duration_seconds),
            renew_time: Some(now_micro()),
            ..Default::default()
        }),
        ..Default::default()
    };
    lease.metadata.name = Some(name.into());
    lease.metadata.namespace = Some(LEASE_NAMESPACE.into());
    lease.metadata.owner_references = Some(vec![node_owner(name, uid)]);
    lease
}

/// Merge patch renewing an existing Lease (and pointing its owner at the current Node).
pub fn lease_renew_patch(name: &str, uid: &str, duration_seconds: i32) -> serde_json::Value {
    serde_json::json!({
        "metadata": { "ownerReferences": [node_owner(name, uid)] },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": now_micro(),
        },
    })
}

/// A node the agent registered: its UID, and whether this registration created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The Node's UID.
    pub uid: String,
    /// True when the Node did not exist (so neither does its Lease, most likely).
    pub created: bool,
}

/// Create or refresh one node as a registering kubelet does: create it with its status (the
/// API server keeps a Node's status on create, as kubelet relies on: one write); or when it
/// exists update its labels and annotations (its spec is kept) and write its status through
/// `nodes/status`.
pub async fn register(
    client: &kube::Client,
    spec: &NodeSpec,
    index: usize,
) -> Result<Registration, AgentError> {
    let api: Api<Node> = Api::all(client.clone());
    let node = build_node(spec, index);
    let name = spec.name.as_str();
    let uid_of = |n: Node| {
        n.metadata
            .uid
            .ok_or_else(|| AgentError::Unexpected(format!("node {name} has no UID")))
    };
    let (existing, created) = match util::retry!(api.create(&util::post_params(), &node)) {
        Ok(created) if has_conditions(&created) => {
            return Ok(Registration {
                uid: uid_of(created)?,
                created: true,
            });
        }
        // An API server that dropped the status on create: written below.
        Ok(created) => (created, true),
        Err(e) if util::is_already_exists(&e) => {
            let patch = serde_json::json!({
                "metadata": { "labels": node_labels(spec), "annotations": spec.annotations },
            });
            let n = util::retry!(api.patch(name, &util::patch_params(), &Patch::Merge(&patch)))
                .map_err(|e| AgentError::Api(format!("updating existing node {name}"), e))?;
            (n, false)
        }
        Err(e) => return Err(AgentError::Api(format!("creating node {name}"), e)),
    };
    let patch = registration_status_patch(spec, index, existing.status.as_ref());
    let written =
        util::retry!(api.patch_status(name, &util::patch_params(), &Patch::Strategic(&patch)))
            .map_err(|e| AgentError::Api(format!("writing status of node {name}"), e))?;
    Ok(Registration {
        uid: uid_of(written)?,
        created,
    })
}

/// True when the node carries conditions (a status someone wrote).
fn has_conditions(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| !c.is_empty())
}

#[cfg(test)]
mod tests;
