//! Workload translation: from a pod and its owners to the one Slurm external job that
//! stands for its group (reference §4).
//!
//! Where is a pod group turned into a Slurm job? [`group::translate`] finds the group
//! (owner walk in [`owner`], then one translator per root kind in [`kinds`]), derives the
//! [`ir::SlurmJobIr`], and [`job_desc`] maps that to the slurmrestd job description.

pub mod admin_comment;
pub mod annotations;
pub mod crd;
pub mod group;
pub mod ir;
pub mod job_desc;
pub mod kinds;
pub mod kube_reader;
pub mod manifest_reader;
pub mod owner;
pub mod read_fields;
pub mod reader;

pub use group::translate;
pub use ir::{JobInfo, SlurmJobIr};
pub use reader::{ObjectRef, ReadError, WorkloadReader};

use annotations::AnnotationError;

/// apiVersion/kind pairs that can be a scheduling root (reference §4.2).
pub mod kind {
    /// Core Pod.
    pub const POD: (&str, &str) = ("v1", "Pod");
    /// batch/v1 Job.
    pub const JOB: (&str, &str) = ("batch/v1", "Job");
    /// JobSet.
    pub const JOBSET: (&str, &str) = ("jobset.x-k8s.io/v1alpha2", "JobSet");
    /// Built-in PodGroup (Kubernetes 1.36 GenericWorkload).
    pub const PODGROUP: (&str, &str) = ("scheduling.k8s.io/v1alpha2", "PodGroup");
    /// Built-in Workload.
    pub const WORKLOAD: (&str, &str) = ("scheduling.k8s.io/v1alpha2", "Workload");
    /// Coscheduling (scheduler-plugins) PodGroup.
    pub const COSCHEDULING_PODGROUP: (&str, &str) = ("scheduling.x-k8s.io/v1alpha1", "PodGroup");
    /// LeaderWorkerSet.
    pub const LWS: (&str, &str) = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet");
    /// A Kueue plain-pod group. Not an API object: the root of the pods that share the label
    /// `kueue.x-k8s.io/pod-group-name`, named after it (never read, so never a supported root).
    pub const KUEUE_POD_GROUP: (&str, &str) = ("kueue.x-k8s.io", "PodGroup");

    /// The supported root kinds.
    pub const SUPPORTED_ROOTS: [(&str, &str); 6] =
        [POD, JOB, JOBSET, PODGROUP, COSCHEDULING_PODGROUP, LWS];

    /// True for a supported scheduling root kind.
    pub fn is_supported_root(api_version: &str, kind: &str) -> bool {
        SUPPORTED_ROOTS
            .iter()
            .any(|(a, k)| *a == api_version && *k == kind)
    }
}

/// Whether a gang (PodGroup, coscheduling PodGroup, LeaderWorkerSet) has enough pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GangStatus {
    /// Not a gang, or enough pods are there.
    Complete,
    /// Too few pods. `ready` counts the group's pods that carry the same Slurm job id
    /// label as the translated pod (none: pods not yet submitted).
    Incomplete {
        /// Pods counted.
        ready: usize,
        /// Pods the gang needs (minCount, minMember or group size).
        required: usize,
        /// The translated pod's Slurm job id label, when it has one.
        job_id: Option<u32>,
    },
    /// A coscheduling PodGroup in a phase that admits no new job (Running, Finished, ...).
    Closed {
        /// The PodGroup's phase.
        phase: String,
    },
}

impl GangStatus {
    /// True when an external job may be submitted (or kept).
    pub fn is_complete(&self) -> bool {
        matches!(self, GangStatus::Complete)
    }

    /// The reference's status message for this state.
    pub fn message(&self) -> String {
        match self {
            GangStatus::Complete => "gang complete".to_string(),
            GangStatus::Incomplete { job_id: None, .. } => {
                "not enough pending pods to create external job".to_string()
            }
            GangStatus::Incomplete {
                job_id: Some(_), ..
            } => "not enough pending pods for created external job".to_string(),
            GangStatus::Closed { phase } => format!("PodGroup coscheduling status is {phase}"),
        }
    }
}

/// The result of translating one pod: its group and the external job for that group.
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    /// Stable key of the group, e.g. `job/ns/job/pod`, `podgroup/ns/pg`, `lws/ns/name/0`.
    pub group_key: String,
    /// Pods and Slurm job parameters.
    pub ir: SlurmJobIr,
    /// Gang completeness.
    pub gang: GangStatus,
    /// Non-fatal findings (unknown or obsolete annotation keys), for `translate` to show.
    pub warnings: Vec<String>,
    /// How long the gang may stay incomplete (a coscheduling PodGroup's
    /// `scheduleTimeoutSeconds`), when it has such a bound.
    pub gang_timeout: Option<GangTimeout>,
}

/// An incomplete gang's time limit: from `since` (the oldest member pod's creation, when the
/// gang started waiting), `seconds` long. Past it the scheduler marks the pods (reason
/// `GangTimeout`, a Warning Event); nothing is submitted while the gang is incomplete, before or
/// after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GangTimeout {
    /// `spec.scheduleTimeoutSeconds`.
    pub seconds: u32,
    /// Unix time (seconds) the wait started.
    pub since: i64,
}

impl GangTimeout {
    /// The bound from a PodGroup's `scheduleTimeoutSeconds` and its pods' creation times (unix
    /// seconds); none for a missing or non-positive timeout or when no pod has a creation time.
    pub fn from_spec(seconds: Option<i32>, created: impl IntoIterator<Item = i64>) -> Option<Self> {
        let seconds = u32::try_from(seconds?).ok().filter(|s| *s > 0)?;
        let since = created.into_iter().min()?;
        Some(GangTimeout { seconds, since })
    }

    /// Seconds left at unix time `now` (0 once expired).
    pub fn remaining(&self, now: i64) -> u64 {
        let end = self.since.saturating_add(i64::from(self.seconds));
        u64::try_from(end.saturating_sub(now)).unwrap_or(0)
    }

    /// True once the gang has waited `seconds` at unix time `now`.
    pub fn expired(&self, now: i64) -> bool {
        self.remaining(now) == 0
    }
}

impl Translation {
    /// The nodes the group's job needs at least: one per pod (per `pods-per-node` pods), or the
    /// job's minimum node count when that is lower (a coscheduling PodGroup's `minMember`). Slurm grants any count from
    /// `minimum_nodes` to `maximum_nodes`, whatever `nodes` says (tried on Slurm 26.05).
    pub fn nodes_needed(&self) -> usize {
        let nodes = self.ir.node_count();
        self.ir
            .job
            .min_nodes
            .and_then(|m| usize::try_from(m).ok())
            .filter(|m| *m > 0)
            .map_or(nodes, |m| m.min(nodes))
    }

    /// The group key of the job `pod` gets on its own when its group's allocation does not
    /// cover it: `<group key>/alone/<ns>/<name>`.
    pub fn alone_key(group_key: &str, pod: &crate::k8s::slim_pod::Pod) -> String {
        format!("{group_key}/alone/{}", ir::pod_key(pod))
    }

    /// This translation narrowed to `pod` alone, for the job it gets when its group's allocation
    /// does not cover it: the group's parameters and annotations, one node, no gang (and one
    /// pod's memory and GRES when the group packs several pods per node).
    pub fn alone(&self, pod: &crate::k8s::slim_pod::Pod) -> Translation {
        let current = ir::pod_key(pod);
        let pod = self
            .ir
            .pods
            .iter()
            .find(|p| ir::pod_key(p) == current)
            .unwrap_or(pod)
            .clone();
        Translation {
            group_key: Self::alone_key(&self.group_key, &pod),
            ir: SlurmJobIr {
                root: self.ir.root.clone(),
                pods: vec![pod],
                job: self.ir.job.one_pod(),
            },
            gang: GangStatus::Complete,
            warnings: Vec::new(),
            gang_timeout: None,
        }
    }
}

/// Why a pod could not be translated. The text names the object and the problem.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TranslateError {
    /// A Kubernetes read failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The controller owner chain is too long (or a cycle).
    #[error("controller owner chain exceeds maximum depth of {max} at {at}")]
    OwnerDepth {
        /// The limit.
        max: usize,
        /// The object reached.
        at: ObjectRef,
    },
    /// A label the translation needs is missing.
    #[error("pod {pod} has no label {label}, needed to find its {what}")]
    MissingLabel {
        /// `ns/name`.
        pod: String,
        /// Label key.
        label: &'static str,
        /// What the label leads to.
        what: &'static str,
    },
    /// A group without pods.
    #[error("no pods found for {group}")]
    NoPods {
        /// The group.
        group: String,
    },
    /// A pod's resources are malformed or cannot be mapped to Slurm.
    #[error("pod {pod}: {message}")]
    Resources {
        /// `ns/name`.
        pod: String,
        /// What is wrong.
        message: String,
    },
    /// A workload object's resources are malformed.
    #[error("{object}: {message}")]
    Object {
        /// The object.
        object: ObjectRef,
        /// What is wrong.
        message: String,
    },
    /// Bad `slurmjob.slinky.slurm.net/*` annotations.
    #[error("{source_object}: {}", join(errors))]
    Annotations {
        /// The object the annotations were read from.
        source_object: String,
        /// Every bad annotation.
        errors: Vec<AnnotationError>,
    },
}

fn join(errors: &[AnnotationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod trimmed_tests;

#[cfg(test)]
mod translation_tests {
    use super::*;
    use crate::k8s::slim_pod::Pod;

    fn pod(name: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
        }))
        .expect("pod")
    }

    fn group(pods: usize, min_nodes: Option<u32>) -> Translation {
        Translation {
            group_key: "coscheduling/ns/g".into(),
            ir: SlurmJobIr {
                root: ObjectRef::new(
                    kind::COSCHEDULING_PODGROUP.0,
                    kind::COSCHEDULING_PODGROUP.1,
                    "ns",
                    "g",
                ),
                pods: (0..pods).map(|i| pod(&format!("p{i}"))).collect(),
                job: JobInfo {
                    min_nodes,
                    max_nodes: Some(u32::try_from(pods).unwrap()),
                    cpus_per_task: Some(2),
                    ..Default::default()
                },
            },
            gang: GangStatus::Complete,
            warnings: vec![],
            gang_timeout: None,
        }
    }

    /// Issue 10 item 3: a coscheduling PodGroup with minMember 2 and 3 pods needs 2 nodes.
    #[test]
    fn a_group_needs_its_minimum_node_count_not_one_per_pod() {
        assert_eq!(group(3, Some(2)).nodes_needed(), 2);
        assert_eq!(group(3, None).nodes_needed(), 3);
        assert_eq!(group(3, Some(0)).nodes_needed(), 3);
        // A minimum above the pod count (a gang still forming) is capped by the pods.
        assert_eq!(group(2, Some(4)).nodes_needed(), 2);
    }

    #[test]
    fn a_pod_alone_keeps_the_groups_parameters_on_one_node() {
        let tr = group(3, Some(2));
        let alone = tr.alone(&pod("p2"));
        assert_eq!(alone.group_key, "coscheduling/ns/g/alone/ns/p2");
        assert_eq!(alone.ir.pod_names(), ["ns/p2"]);
        assert_eq!(alone.ir.job.min_nodes, Some(1));
        assert_eq!(alone.ir.job.max_nodes, Some(1));
        assert_eq!(alone.ir.job.cpus_per_task, Some(2));
        assert_eq!(alone.ir.root, tr.ir.root);
        assert_eq!(alone.gang, GangStatus::Complete);
        assert_eq!(alone.nodes_needed(), 1);
        let desc = alone.to_job_desc(&Default::default(), &Default::default(), &[]);
        assert_eq!(desc.nodes.as_deref(), Some("1"));
    }
}
