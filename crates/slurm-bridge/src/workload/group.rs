//! Group selection (reference §4.4): which group a pod belongs to, and the external job
//! that stands for it. This is where a pod group is turned into a Slurm job description's
//! inputs; [`super::job_desc`] makes the slurmrestd request from the result.

use crate::k8s::slim_pod::Pod;

use super::annotations;
use super::ir::{JobInfo, SlurmJobIr, Unpacked, pod_key};
use super::kinds::{self, KindOutput, pod_label, pod_namespace};
use super::owner::root_owner;
use super::reader::{ObjectRef, ReadError, WorkloadReader};
use super::{TranslateError, Translation, kind};
use crate::resources::gres::{gres_for, gres_times};
use crate::resources::gres_drivers::GresDrivers;
use crate::resources::pod_resources::cpu_and_memory;
use crate::wellknown::{LABEL_COSCHEDULING_POD_GROUP, slurmjob};
use std::collections::BTreeMap;

/// Translate one pod: find its group and the external job for that group.
///
/// 1. Walk the controller chain ([`root_owner`]).
/// 2. A pod naming a built-in PodGroup in `spec.schedulingGroup` belongs to that group.
/// 3. Else a pod labelled `scheduling.x-k8s.io/pod-group` belongs to that coscheduling
///    PodGroup when it exists (NotFound or an unserved kind: the label is ignored, as in
///    the reference; any other read error is an error rather than a silent single-pod job).
/// 4. Else a pod labelled `kueue.x-k8s.io/pod-group-name` belongs to that Kueue pod group
///    (its size from `kueue.x-k8s.io/pod-group-total-count`).
/// 5. Else the root kind decides (Job, JobSet, LeaderWorkerSet, or one pod).
/// 6. CPU and memory from the pods, then GRES, then the annotations override, then
///    `pods-per-node` packs the pods.
pub async fn translate<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
) -> Result<Translation, TranslateError> {
    let walk = root_owner(reader, pod).await?;
    let out = if let Some(pg) = kinds::podgroup::pod_group_name(pod) {
        kinds::podgroup::translate(reader, pod, pg, &walk).await?
    } else if let Some(out) = coscheduling(reader, pod).await? {
        out
    } else if let Some(name) = kinds::kueue::group_name(pod) {
        kinds::kueue::translate(reader, pod, name).await?
    } else {
        let root = &walk.object;
        if root.is(kind::JOB.0, kind::JOB.1) {
            kinds::job::translate(reader, pod, &root.name).await?
        } else if root.is(kind::JOBSET.0, kind::JOBSET.1) {
            kinds::jobset::translate(reader, pod, root).await?
        } else if root.is(kind::LWS.0, kind::LWS.1) {
            kinds::lws::translate(reader, pod, root).await?
        } else if root.is(kind::PODGROUP.0, kind::PODGROUP.1) {
            kinds::podgroup::translate(reader, pod, &root.name, &walk).await?
        } else if root.is(kind::COSCHEDULING_PODGROUP.0, kind::COSCHEDULING_PODGROUP.1)
            && let Some(d) = &walk.dynamic
        {
            kinds::coscheduling::translate(reader, pod, root, d).await?
        } else {
            kinds::pod::translate(pod, &walk)
        }
    };
    finish(out, &reader.gres_drivers())
}

async fn coscheduling<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
) -> Result<Option<KindOutput>, TranslateError> {
    let Some(name) = pod_label(pod, LABEL_COSCHEDULING_POD_GROUP).filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let pg_ref = ObjectRef::new(
        kind::COSCHEDULING_PODGROUP.0,
        kind::COSCHEDULING_PODGROUP.1,
        pod_namespace(pod),
        name,
    );
    match reader.get(&pg_ref).await {
        Ok(d) => Ok(Some(
            kinds::coscheduling::translate(reader, pod, &pg_ref, &d).await?,
        )),
        Err(ReadError::NotFound(_) | ReadError::NoKind { .. }) => {
            tracing::debug!(pod = %pod_key(pod), podgroup = %pg_ref, "coscheduling PodGroup not found; label ignored");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// `pods-per-node` pods on each node: Slurm sees each pod as a task, so `tasks_per_node` is the
/// pod count per node (never more than the group has), the kind's node counts shrink by it, and
/// the per-node memory and GRES derived from one pod grow by it. Values the annotations set are
/// taken as given. The values before scaling are kept for a pod that gets a job of its own.
fn pack(job: &mut JobInfo, ann: &BTreeMap<String, String>, pods: usize) {
    let per_node = job.pods_per_node().min(pods);
    if per_node < 2 {
        return;
    }
    let n = u32::try_from(per_node).unwrap_or(u32::MAX);
    job.pods_per_node = Some(n);
    job.unpacked = Some(Box::new(Unpacked {
        tasks_per_node: job.tasks_per_node,
        mem_per_node_mib: job.mem_per_node_mib,
        gres: job.gres.clone(),
    }));
    job.tasks_per_node = Some(n);
    if !ann.contains_key(slurmjob::MIN_NODES) {
        job.min_nodes = job.min_nodes.map(|m| m.div_ceil(n));
    }
    if !ann.contains_key(slurmjob::MAX_NODES) {
        job.max_nodes = job.max_nodes.map(|m| m.div_ceil(n));
    }
    if !ann.contains_key(slurmjob::MEM_PER_NODE) {
        job.mem_per_node_mib = job.mem_per_node_mib.map(|m| m.saturating_mul(u64::from(n)));
    }
    if !ann.contains_key(slurmjob::GRES) {
        job.gres = job.gres.as_deref().map(|g| gres_times(g, n));
    }
}

/// Resources, GRES (of `drivers`' DRA classes) and annotations on top of the kind's result
/// (reference §4.4 step 6).
fn finish(out: KindOutput, drivers: &GresDrivers) -> Result<Translation, TranslateError> {
    let KindOutput {
        group_key,
        root,
        pods,
        mut job,
        annotations: ann,
        annotation_source,
        gang,
        gang_timeout,
    } = out;
    // Check each pod on its own first, so an error names the pod.
    for p in &pods {
        let spec = p.spec.clone().unwrap_or_default();
        cpu_and_memory([&spec]).map_err(|e| TranslateError::Resources {
            pod: pod_key(p),
            message: e.to_string(),
        })?;
        gres_for([&spec], drivers).map_err(|e| TranslateError::Resources {
            pod: pod_key(p),
            message: e.to_string(),
        })?;
    }
    let specs: Vec<_> = pods
        .iter()
        .map(|p| p.spec.clone().unwrap_or_default())
        .collect();
    let resources_err = |message: String| TranslateError::Resources {
        pod: pods.first().map(pod_key).unwrap_or_default(),
        message,
    };
    let cm = cpu_and_memory(&specs).map_err(|e| resources_err(e.to_string()))?;
    if cm.cpus_per_task.is_some() {
        job.cpus_per_task = cm.cpus_per_task;
    }
    if cm.mem_per_node_mib.is_some() {
        job.mem_per_node_mib = cm.mem_per_node_mib;
    }
    if let Some(g) = gres_for(&specs, drivers).map_err(|e| resources_err(e.to_string()))? {
        job.gres = Some(g);
    }
    annotations::apply(&ann, &mut job).map_err(|errors| TranslateError::Annotations {
        source_object: annotation_source.clone(),
        errors,
    })?;
    pack(&mut job, &ann, pods.len());
    let warnings = annotations::unknown_keys(&ann)
        .into_iter()
        .map(|k| format!("{annotation_source}: annotation {k} is not a slurm-bridge job annotation and is ignored"))
        .collect();
    Ok(Translation {
        group_key,
        ir: SlurmJobIr { root, pods, job },
        gang,
        warnings,
        gang_timeout,
    })
}
