//! Kueue plain-pod groups: pods labelled `kueue.x-k8s.io/pod-group-name=<name>` with the
//! annotation `kueue.x-k8s.io/pod-group-total-count=<n>` in one namespace make one external job.
//! Kueue admits the group as one Workload (its quota); the bridge then submits it to Slurm as
//! one gang of `n` pods (docs/kueue.md).

use std::collections::BTreeMap;

use crate::k8s::slim_pod::Pod;

use super::{KindOutput, annotations_of, gang_by_label, group_pods, pod_label, pod_namespace};
use crate::wellknown::{ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT, LABEL_KUEUE_POD_GROUP_NAME};
use crate::workload::ir::JobInfo;
use crate::workload::reader::{ObjectRef, WorkloadReader};
use crate::workload::{TranslateError, kind};

/// What a pod's total-count annotation must look like.
const EXPECT_TOTAL: &str = "a whole number of pods from 1 to 2147483647";

/// The Kueue pod group a pod names, if any (an empty label is no group).
pub fn group_name(pod: &Pod) -> Option<&str> {
    pod_label(pod, LABEL_KUEUE_POD_GROUP_NAME).filter(|n| !n.is_empty())
}

/// The group's size from a member's `kueue.x-k8s.io/pod-group-total-count`; an error names the
/// pod, the annotation, the value and what is accepted.
pub fn total_count(pod: &Pod) -> Result<usize, TranslateError> {
    let value = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT));
    let bad = |message: String| TranslateError::Object {
        object: ObjectRef::pod(pod),
        message,
    };
    let Some(value) = value else {
        return Err(bad(format!(
            "label {LABEL_KUEUE_POD_GROUP_NAME} needs the annotation \
             {ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT} ({EXPECT_TOTAL})"
        )));
    };
    match value.trim().parse::<u32>() {
        Ok(n) if (1..=i32::MAX as u32).contains(&n) => Ok(n as usize),
        _ => Err(bad(format!(
            "annotation {ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT}: {value:?} is not valid; \
             expected {EXPECT_TOTAL}"
        ))),
    }
}

/// The group's job: one pod per node, `total` nodes at least; the `slurmjob.*` annotations of
/// the first member in name order (Kueue groups have no object of their own, and taking a fixed
/// member keeps the result independent of which pod is translated).
pub fn from_pods(pods: Vec<Pod>, pod: &Pod, name: &str, total: usize) -> KindOutput {
    let ns = pod_namespace(pod).to_string();
    let first = pods.first().unwrap_or(pod);
    let n = u32::try_from(pods.len()).unwrap_or(u32::MAX);
    let min = u32::try_from(total).unwrap_or(u32::MAX);
    KindOutput {
        group_key: format!("kueue/{ns}/{name}"),
        root: ObjectRef::new(kind::KUEUE_POD_GROUP.0, kind::KUEUE_POD_GROUP.1, &ns, name),
        job: JobInfo {
            job_name: Some(name.to_string()),
            min_nodes: Some(min.min(n.max(1))),
            max_nodes: Some(n),
            tasks_per_node: Some(1),
            ..Default::default()
        },
        annotations: annotations_of(&first.metadata),
        annotation_source: ObjectRef::pod(first).to_string(),
        gang: gang_by_label(&pods, pod, total),
        gang_timeout: None,
        pods,
    }
}

/// Translate a pod of the Kueue pod group `name`.
pub async fn translate<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
    name: &str,
) -> Result<KindOutput, TranslateError> {
    let total = total_count(pod)?;
    let selector = BTreeMap::from([(LABEL_KUEUE_POD_GROUP_NAME.to_string(), name.to_string())]);
    let pods = group_pods(reader.list_pods(pod_namespace(pod), &selector).await?, pod);
    Ok(from_pods(pods, pod, name, total))
}
