//! Partition models (`v0.0.44_partition_info`).

use super::de::null_default;
use super::{NoVal, PartitionState};
use serde::{Deserialize, Serialize};

/// A partition (the fields the bridge uses and a few more).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Partition {
    /// Partition name.
    pub name: String,
    /// Node sets (`Nodes=` of slurm.conf).
    pub node_sets: Option<String>,
    /// Nodes.
    pub nodes: PartitionNodes,
    /// State.
    pub partition: PartitionStatus,
    /// CPUs.
    pub cpus: PartitionCpus,
    /// Maximums.
    pub maximums: PartitionMaximums,
    /// Cluster.
    pub cluster: Option<String>,
    /// Topology.
    pub topology: Option<String>,
    /// Alternate partition.
    pub alternate: Option<String>,
}

/// `nodes` of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PartitionNodes {
    /// Nodes jobs may be allocated.
    pub allowed_allocation: Option<String>,
    /// Configured nodes as a host list.
    pub configured: Option<String>,
    /// Node count.
    pub total: Option<i32>,
}

/// `partition` of a partition: its state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PartitionStatus {
    /// State, e.g. `[UP]`.
    #[serde(deserialize_with = "null_default")]
    pub state: Vec<PartitionState>,
}

/// `cpus` of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PartitionCpus {
    /// Task binding.
    pub task_binding: Option<i32>,
    /// Total CPUs.
    pub total: Option<i32>,
}

/// `maximums` of a partition (subset).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PartitionMaximums {
    /// Max nodes per job.
    pub nodes: NoVal<u32>,
    /// Max time in minutes.
    pub time: NoVal<u32>,
    /// Max CPUs per node.
    pub cpus_per_node: NoVal<u32>,
}

/// Response of GET /partitions/ and GET /partition/{name}.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub(crate) struct PartitionsResponse {
    #[serde(deserialize_with = "null_default")]
    pub partitions: Vec<Partition>,
}
