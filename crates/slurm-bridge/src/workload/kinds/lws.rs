//! LeaderWorkerSet: the pods of one group (same `leaderworkerset.sigs.k8s.io/group-key`,
//! in the LWS's namespace; the reference searched all namespaces, quirk 4) make one job.

use std::collections::BTreeMap;

use crate::k8s::slim_pod::Pod;

use super::{
    KindOutput, annotations_of, group_pods, jobid_label, parse_job_id, pod_label, pod_namespace,
};
use crate::wellknown::{LABEL_LWS_GROUP_INDEX, LABEL_LWS_GROUP_KEY, LABEL_LWS_NAME};
use crate::workload::crd::LeaderWorkerSet;
use crate::workload::ir::{JobInfo, pod_key};
use crate::workload::reader::{ObjectRef, WorkloadReader, get_typed};
use crate::workload::{GangStatus, TranslateError};

fn need_label<'a>(pod: &'a Pod, label: &'static str) -> Result<&'a str, TranslateError> {
    pod_label(pod, label).ok_or_else(|| TranslateError::MissingLabel {
        pod: pod_key(pod),
        label,
        what: "LeaderWorkerSet group",
    })
}

/// Translate a pod of the LeaderWorkerSet `lws_ref`.
pub async fn translate<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
    lws_ref: &ObjectRef,
) -> Result<KindOutput, TranslateError> {
    let lws: LeaderWorkerSet = get_typed(reader, lws_ref).await?;
    let group_key = need_label(pod, LABEL_LWS_GROUP_KEY)?;
    let name = need_label(pod, LABEL_LWS_NAME)?;
    let index = need_label(pod, LABEL_LWS_GROUP_INDEX)?;
    let ns = pod_namespace(pod);
    let selector = BTreeMap::from([(LABEL_LWS_GROUP_KEY.to_string(), group_key.to_string())]);
    let pods = group_pods(reader.list_pods(ns, &selector).await?, pod);
    let size = lws.group_size();
    let gang = if pods.len() < size as usize {
        GangStatus::Incomplete {
            ready: pods.len(),
            required: size as usize,
            job_id: jobid_label(pod).and_then(parse_job_id),
        }
    } else {
        GangStatus::Complete
    };
    Ok(KindOutput {
        group_key: format!("lws/{ns}/{}/{index}", lws_ref.name),
        root: lws_ref.clone(),
        pods,
        job: JobInfo {
            job_name: Some(format!("{name}-{index}")),
            min_nodes: Some(size),
            max_nodes: Some(size),
            tasks_per_node: Some(1),
            ..Default::default()
        },
        annotations: annotations_of(&lws.metadata),
        annotation_source: lws_ref.to_string(),
        gang,
        gang_timeout: None,
    })
}
