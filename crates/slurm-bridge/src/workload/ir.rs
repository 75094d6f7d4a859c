//! The intermediate representation: the pods one external job stands for and the Slurm
//! job parameters derived from the workload, its pods and its annotations (reference §4.1).

use crate::k8s::slim_pod::Pod;
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
    /// Pods that share one node (the `pods-per-node` annotation); one when unset.
    pub pods_per_node: Option<u32>,
    /// The per-pod values `pods-per-node` scaled, for a pod that gets a job of its own.
    #[serde(skip)]
    pub unpacked: Option<Box<Unpacked>>,
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

/// What [`JobInfo`] held for one pod per node, before `pods-per-node` scaled it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unpacked {
    pub tasks_per_node: Option<u32>,
    pub mem_per_node_mib: Option<u64>,
    pub gres: Option<String>,
}

impl JobInfo {
    /// This job's parameters for one pod on one node: the values before `pods-per-node`.
    pub fn one_pod(&self) -> JobInfo {
        let mut job = JobInfo {
            min_nodes: Some(1),
            max_nodes: Some(1),
            pods_per_node: None,
            unpacked: None,
            ..self.clone()
        };
        if let Some(u) = &self.unpacked {
            job.tasks_per_node = u.tasks_per_node;
            job.mem_per_node_mib = u.mem_per_node_mib;
            job.gres = u.gres.clone();
        }
        job
    }

    /// Pods one node takes: the `pods-per-node` annotation, else one.
    pub fn pods_per_node(&self) -> usize {
        self.pods_per_node
            .and_then(|n| usize::try_from(n).ok())
            .map_or(1, |n| n.max(1))
    }
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

    /// The node count the job asks for (`nodes`): one per [`JobInfo::pods_per_node`] pods.
    pub fn node_count(&self) -> usize {
        self.pods.len().div_ceil(self.job.pods_per_node())
    }
}

/// `ns/name` of a pod (defined with the other Kubernetes helpers, [`crate::k8s::pod_key`]).
pub use crate::k8s::pod_key;
