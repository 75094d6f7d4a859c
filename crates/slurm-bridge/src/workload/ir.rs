//! The intermediate representation: the pods one external job stands for and the Slurm
//! job parameters derived from the workload, its pods and its annotations (reference §4.1).

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use super::reader::ObjectRef;

/// Slurm job parameters; `None` means "not set" and is left out of the job description.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JobInfo {
    /// Slurm account.
    pub account: Option<String>,
    /// Node features (`--constraint`).
    pub constraints: Option<String>,
    /// CPUs per task.
    pub cpus_per_task: Option<u32>,
    /// Whole nodes (`Some(true)`, the default when unset) or shared nodes.
    pub exclusive: Option<bool>,
    /// GRES per node (`tres_per_node`).
    pub gres: Option<String>,
    /// Unix group id or name.
    pub group_id: Option<String>,
    /// Slurm job name.
    pub job_name: Option<String>,
    /// Slurm licenses.
    pub licenses: Option<String>,
    /// Maximum node count.
    pub max_nodes: Option<u32>,
    /// Memory per node, MiB.
    pub mem_per_node_mib: Option<u64>,
    /// Minimum node count.
    pub min_nodes: Option<u32>,
    /// Slurm partition (else the config's).
    pub partition: Option<String>,
    /// Slurm priority.
    pub priority: Option<u32>,
    /// Slurm QOS.
    pub qos: Option<String>,
    /// Slurm reservation.
    pub reservation: Option<String>,
    /// Tasks per node.
    pub tasks_per_node: Option<u32>,
    /// Time limit in minutes.
    pub time_limit_minutes: Option<u32>,
    /// Unix user id or name.
    pub user_id: Option<String>,
    /// Slurm wckey.
    pub wckey: Option<String>,
}

/// One external job's worth of pods and parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmJobIr {
    /// The scheduling root: the object that stands for the group (Job, JobSet, PodGroup, ...).
    pub root: ObjectRef,
    /// The pods the external job represents, sorted by namespace and name.
    pub pods: Vec<Pod>,
    /// Slurm job parameters.
    pub job: JobInfo,
}

impl SlurmJobIr {
    /// `ns/name` of every pod, in IR order.
    pub fn pod_names(&self) -> Vec<String> {
        self.pods.iter().map(pod_key).collect()
    }
}

/// `ns/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}
