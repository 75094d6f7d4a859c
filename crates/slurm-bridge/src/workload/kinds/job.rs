//! batch/v1 Job: one external job per pod (reference §4.5).

use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::batch::v1::Job;

use super::{KindOutput, annotations_of};
use crate::resources::pod_resources::bytes_to_mib_ceil;
use crate::resources::quantity::Quantity;
use crate::workload::ir::JobInfo;
use crate::workload::reader::{ObjectRef, WorkloadReader, get_typed};
use crate::workload::{GangStatus, TranslateError, kind};

/// Translate a pod of the Job `job_name` (in the pod's namespace).
pub async fn translate<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
    job_name: &str,
) -> Result<KindOutput, TranslateError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let job_ref = ObjectRef::new(kind::JOB.0, kind::JOB.1, ns, job_name);
    let job: Job = get_typed(reader, &job_ref).await?;
    let info = job_info(&job, &job_ref)?;
    Ok(KindOutput {
        group_key: format!(
            "job/{ns}/{job_name}/{}",
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
        root: job_ref.clone(),
        pods: vec![pod.clone()],
        job: info,
        annotations: annotations_of(&job.metadata),
        annotation_source: job_ref.to_string(),
        gang: GangStatus::Complete,
        gang_timeout: None,
    })
}

/// Parameters from the Job: one node at least, the deadline as time limit, and the
/// template's pod-level CPU and memory limits when present and non-zero (the reference
/// set them to 0 when the limit was absent: quirk 14, fixed).
pub fn job_info(job: &Job, job_ref: &ObjectRef) -> Result<JobInfo, TranslateError> {
    let mut info = JobInfo {
        min_nodes: Some(1),
        ..Default::default()
    };
    let spec = job.spec.as_ref();
    if let Some(secs) = spec
        .and_then(|s| s.active_deadline_seconds)
        .filter(|s| *s > 0)
    {
        info.time_limit_minutes = Some(
            u32::try_from(secs / 60 + i64::from(secs % 60 != 0))
                .unwrap_or(u32::MAX)
                .min(i32::MAX as u32),
        );
    }
    let limits = spec
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.resources.as_ref())
        .and_then(|r| r.limits.as_ref());
    if let Some(limits) = limits {
        let parse = |name: &str| -> Result<Option<Quantity>, TranslateError> {
            limits
                .get(name)
                .map(|q| {
                    Quantity::from_k8s(q).map_err(|e| TranslateError::Object {
                        object: job_ref.clone(),
                        message: format!("pod template resources.limits.{name}: {e}"),
                    })
                })
                .transpose()
        };
        if let Some(cpu) = parse("cpu")? {
            let n = cpu.ceil_units();
            if n > 0 {
                info.cpus_per_task = Some(u32::try_from(n).unwrap_or(u32::MAX));
            }
        }
        if let Some(mem) = parse("memory")? {
            let mib = bytes_to_mib_ceil(&mem);
            if mib > 0 {
                info.mem_per_node_mib = Some(mib);
            }
        }
    }
    Ok(info)
}
