//! One translator per scheduling root kind (reference §4.5). Each returns the group's
//! pods, the job parameters derived from the workload, the annotation source (§4.6) and
//! the gang status (§4.9).

pub mod coscheduling;
pub mod job;
pub mod jobset;
pub mod kueue;
pub mod lws;
pub mod pod;
pub mod podgroup;

use std::collections::BTreeMap;

use crate::k8s::slim_pod::Pod;

use super::GangStatus;
use super::ir::{JobInfo, pod_key};
use super::reader::ObjectRef;
use crate::wellknown::{LABEL_SLURM_JOBID, SLURMJOB_PREFIX};

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
    /// The gang's time limit while incomplete, if the kind has one.
    pub gang_timeout: Option<super::GangTimeout>,
}

/// True when `annotations` has at least one `slurmjob.slinky.slurm.net/*` key.
pub fn has_slurmjob_keys(annotations: &BTreeMap<String, String>) -> bool {
    annotations.keys().any(|k| k.starts_with(SLURMJOB_PREFIX))
}

/// The annotations of a group object that may fall back to its controller owner's (a
/// coscheduling PodGroup's TrainJob): the group's own when they have any
/// `slurmjob.slinky.slurm.net/*` key, else the group's with the owner's `slurmjob.*` keys added.
/// The two are never mixed key by key, so what applies is always one object's full set. Returns
/// the annotations and where they came from.
pub fn with_owner_fallback(
    own: BTreeMap<String, String>,
    own_source: String,
    owner: Option<(&BTreeMap<String, String>, String)>,
) -> (BTreeMap<String, String>, String) {
    if has_slurmjob_keys(&own) {
        return (own, own_source);
    }
    match owner {
        Some((theirs, source)) if has_slurmjob_keys(theirs) => {
            let mut out = own;
            out.extend(
                theirs
                    .iter()
                    .filter(|(k, _)| k.starts_with(SLURMJOB_PREFIX))
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            (
                out,
                format!("{own_source} (annotations of its owner {source})"),
            )
        }
        _ => (own, own_source),
    }
}

/// Creation time of a pod, unix seconds.
pub fn created_unix(pod: &Pod) -> Option<i64> {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
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
