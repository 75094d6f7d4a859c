//! Node models: a node as GET /node(s)/ return it, the node update message, and node creation.

use super::de::{csv, null_default};
use super::{Meta, NoVal, NodeState, SlurmWarning};
use serde::{Deserialize, Serialize};

/// A node (`v0.0.44_node`, the fields the bridge uses and a few more for diagnostics).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Base state plus flag states, e.g. `[IDLE, EXTERNAL]` or `[IDLE, DRAIN]`.
    #[serde(deserialize_with = "null_default")]
    pub state: Vec<NodeState>,
    /// Reason for DRAIN/DOWN.
    pub reason: Option<String>,
    /// Who set the reason.
    pub reason_set_by_user: Option<String>,
    /// When the reason was set (Unix seconds).
    pub reason_changed_at: NoVal<u64>,
    /// Address (NodeAddr).
    pub address: Option<String>,
    /// Host name (NodeHostname).
    pub hostname: Option<String>,
    /// CPU count.
    pub cpus: Option<i32>,
    /// Allocated CPUs.
    pub alloc_cpus: Option<i32>,
    /// Idle CPUs.
    pub alloc_idle_cpus: Option<i32>,
    /// Sockets.
    pub sockets: Option<i32>,
    /// Cores per socket.
    pub cores: Option<i32>,
    /// Threads per core.
    pub threads: Option<i32>,
    /// Boards.
    pub boards: Option<i32>,
    /// Memory in MiB.
    pub real_memory: Option<i64>,
    /// Allocated memory in MiB.
    pub alloc_memory: Option<i64>,
    /// GRES, e.g. `gpu:gpu.example.com:4`.
    pub gres: Option<String>,
    /// GRES in use.
    pub gres_used: Option<String>,
    /// Available features.
    #[serde(deserialize_with = "csv")]
    pub features: Vec<String>,
    /// Active features.
    #[serde(deserialize_with = "csv")]
    pub active_features: Vec<String>,
    /// Partitions the node is in.
    #[serde(deserialize_with = "csv")]
    pub partitions: Vec<String>,
    /// Topology placement (`topology_str`), e.g. `default:s1`.
    pub topology: Option<String>,
    /// Comment.
    pub comment: Option<String>,
    /// Extra data.
    pub extra: Option<String>,
    /// Configured TRES.
    pub tres: Option<String>,
    /// TRES in use.
    pub tres_used: Option<String>,
    /// MCS label.
    pub mcs_label: Option<String>,
    /// Scheduling weight.
    pub weight: Option<i32>,
    /// Cluster name.
    pub cluster_name: Option<String>,
}

impl Node {
    /// True when `state` contains `s`.
    pub fn has_state(&self, s: &NodeState) -> bool {
        self.state.contains(s)
    }
}

/// What GET /nodes/?update_time=T answered ([`crate::Client::nodes_since`]).
#[derive(Debug, Clone, PartialEq)]
pub enum NodeListing {
    /// No node changed since T (slurmrestd's 304): keep the previous listing.
    Unchanged,
    /// Every node, and the time to ask about next (`last_update`, Unix seconds).
    Nodes {
        nodes: Vec<Node>,
        last_update: Option<u64>,
    },
}

/// Response of GET /nodes/ and GET /node/{name}.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub(crate) struct NodesResponse {
    #[serde(deserialize_with = "null_default")]
    pub nodes: Vec<Node>,
    pub last_update: NoVal<u64>,
    pub meta: Option<Meta>,
    #[serde(deserialize_with = "null_default")]
    pub warnings: Vec<SlurmWarning>,
}

/// Node update (`v0.0.44_update_node_msg`) for POST /node/{name}. Every field is optional and
/// omitted when `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateNodeMsg {
    /// New state, e.g. `[DRAIN]`, `[RESUME]`, `[UNDRAIN]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Vec<NodeState>>,
    /// Reason (required with DRAIN and DOWN).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// User the reason is recorded for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_uid: Option<String>,
    /// Available features.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
    /// Active features.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features_act: Option<Vec<String>>,
    /// GRES.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    /// Topology placement, e.g. `default:s1` (dynamic topology).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_str: Option<String>,
    /// Comment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Extra data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<String>,
    /// Addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Vec<String>>,
    /// Host names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<Vec<String>>,
    /// Scheduling weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<NoVal<u32>>,
    /// Resume after this many seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_after: Option<NoVal<u32>>,
}

impl UpdateNodeMsg {
    /// Set one state with a reason (DRAIN, RESUME, UNDRAIN, ...).
    pub fn state(state: NodeState, reason: Option<String>) -> Self {
        UpdateNodeMsg {
            state: Some(vec![state]),
            reason,
            ..Default::default()
        }
    }
}

/// Body of POST /new/node/ (`v0.0.44_openapi_create_node_req`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CreateNodeReq<'a> {
    pub node_conf: &'a str,
}
