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
