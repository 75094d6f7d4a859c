//! One translator per scheduling root kind (reference §4.5). Each returns the group's
//! pods, the job parameters derived from the workload, the annotation source (§4.6) and
//! the gang status (§4.9).

pub mod coscheduling;
pub mod job;
pub mod jobset;
pub mod lws;
pub mod pod;
pub mod podgroup;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::GangStatus;
use super::ir::{JobInfo, pod_key};
use super::reader::ObjectRef;
use crate::wellknown::LABEL_SLURM_JOBID;

/// What a kind translator found.
#[derive(Debug, Clone)]
pub struct KindOutput {
    /// Group key.
    pub group_key: String,
    /// Scheduling root.
    pub root: ObjectRef,
    /// The group's pods, sorted.
    pub pods: Vec<Pod>,
    /// Parameters derived from the workload.
    pub job: JobInfo,
    /// Merged annotations to apply (§4.6).
    pub annotations: BTreeMap<String, String>,
    /// Description of where the annotations came from, for error messages.
    pub annotation_source: String,
    /// Gang status.
    pub gang: GangStatus,
}

/// True for a pod that has finished (Succeeded or Failed).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The group's pods: listed pods that are neither terminal nor being deleted, plus the
/// translated pod itself (even if the listing has not seen it yet), sorted by `ns/name`, without
/// duplicates. A pod being deleted is no member: it cannot complete a gang, and it cannot be
/// labelled (Kubernetes refuses a new finalizer on it).
pub fn group_pods(listed: Vec<Pod>, current: &Pod) -> Vec<Pod> {
    let mut by_key: BTreeMap<String, Pod> = listed
        .into_iter()
        .filter(|p| !is_terminal(p) && p.metadata.deletion_timestamp.is_none())
        .map(|p| (pod_key(&p), p))
        .collect();
    by_key
        .entry(pod_key(current))
        .or_insert_with(|| current.clone());
    by_key.into_values().collect()
}

/// The pod's Slurm job id label, verbatim.
pub fn jobid_label(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SLURM_JOBID))
        .map(String::as_str)
}

/// A Slurm job id label value as a job id (u32, no wrap-around: fixes quirk 16).
pub fn parse_job_id(value: &str) -> Option<u32> {
    value.trim().parse::<u32>().ok().filter(|id| *id != 0)
}

/// Gang check: count the pods whose job id label equals the current pod's.
pub fn gang_by_label(pods: &[Pod], current: &Pod, required: usize) -> GangStatus {
    let mine = jobid_label(current).unwrap_or_default();
    let ready = pods
        .iter()
        .filter(|p| jobid_label(p).unwrap_or_default() == mine)
        .count();
    if ready < required {
        GangStatus::Incomplete {
            ready,
            required,
            job_id: jobid_label(current).and_then(parse_job_id),
        }
    } else {
        GangStatus::Complete
    }
}

/// Annotations of an object's metadata, or an empty map.
pub fn annotations_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> BTreeMap<String, String> {
    meta.annotations.clone().unwrap_or_default()
}

/// Namespace of a pod.
pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or_default()
}

/// A label of a pod.
pub fn pod_label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}
