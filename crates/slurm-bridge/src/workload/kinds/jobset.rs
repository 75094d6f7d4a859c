//! JobSet: each pod belongs to one of the JobSet's Jobs and gets its own external job, as
//! for a Job; the annotations come from the JobSet (reference §4.5, §4.6).

use crate::k8s::slim_pod::Pod;

use super::{KindOutput, annotations_of, pod_label};
use crate::wellknown::{LABEL_BATCH_JOB_NAME, LABEL_JOB_NAME};
use crate::workload::crd::JobSet;
use crate::workload::ir::pod_key;
use crate::workload::owner::controller_of;
use crate::workload::reader::{ObjectRef, WorkloadReader, get_typed};
use crate::workload::{TranslateError, kind};

/// The pod's Job: its controller owner when that is a Job, else the job-name labels.
pub fn job_name_of(pod: &Pod) -> Option<String> {
    if let Some(owner) = controller_of(&pod.metadata)
        && owner.api_version == kind::JOB.0
        && owner.kind == kind::JOB.1
    {
        return Some(owner.name.clone());
    }
    pod_label(pod, LABEL_BATCH_JOB_NAME)
        .or_else(|| pod_label(pod, LABEL_JOB_NAME))
        .map(str::to_string)
}

/// Translate a pod of the JobSet `jobset`.
pub async fn translate<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
    jobset: &ObjectRef,
) -> Result<KindOutput, TranslateError> {
    let js: JobSet = get_typed(reader, jobset).await?;
    let job_name = job_name_of(pod).ok_or_else(|| TranslateError::MissingLabel {
        pod: pod_key(pod),
        label: LABEL_JOB_NAME,
        what: "Job inside its JobSet",
    })?;
    let mut out = super::job::translate(reader, pod, &job_name).await?;
    out.root = jobset.clone();
    out.annotations = annotations_of(&js.metadata);
    out.annotation_source = jobset.to_string();
    Ok(out)
}
