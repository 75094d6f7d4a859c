//! Built-in PodGroup (`scheduling.k8s.io/v1alpha2`, Kubernetes 1.36 GenericWorkload): all
//! pods of the namespace that name the PodGroup in `spec.schedulingGroup` make one job.

use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::scheduling::v1alpha2::{PodGroup, Workload};

use super::{KindOutput, annotations_of, gang_by_label, group_pods, pod_namespace};
use crate::workload::ir::JobInfo;
use crate::workload::owner::RootOwner;
use crate::workload::reader::{ObjectRef, ReadError, WorkloadReader, get_typed};
use crate::workload::{GangStatus, TranslateError, kind};

/// The PodGroup a pod names in `spec.schedulingGroup.podGroupName`, if any.
pub fn pod_group_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_group.as_ref())
        .and_then(|g| g.pod_group_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Translate a pod of the built-in PodGroup `name` (namespace of the pod).
///
/// Annotations are merged PodGroup → controller root → Workload (later wins). The
/// controller layer is the full Job when the owner walk ended at a Job, the root's own
/// annotations for other controllers, and nothing for a pod without controller (the
/// reference read that pod's annotations, which made the result depend on which pod of the
/// group was translated).
pub async fn translate<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
    name: &str,
    walk: &RootOwner,
) -> Result<KindOutput, TranslateError> {
    let ns = pod_namespace(pod);
    let pg_ref = ObjectRef::new(kind::PODGROUP.0, kind::PODGROUP.1, ns, name);
    let pg: PodGroup = get_typed(reader, &pg_ref).await?;

    let members = reader.list_scheduling_group(ns, name).await?;
    let pods = group_pods(members, pod);
    let n = u32::try_from(pods.len()).unwrap_or(u32::MAX);

    let mut annotations = annotations_of(&pg.metadata);
    let mut sources = vec![pg_ref.to_string()];
    if !walk.is_pod_itself() {
        let layer = if walk.object.is(kind::JOB.0, kind::JOB.1) {
            match get_typed::<R, Job>(reader, &walk.object).await {
                Ok(job) => annotations_of(&job.metadata),
                Err(_) => walk.annotations(pod).cloned().unwrap_or_default(),
            }
        } else {
            walk.annotations(pod).cloned().unwrap_or_default()
        };
        annotations.extend(layer);
        sources.push(walk.object.to_string());
    }
    let workload_name = pg
        .spec
        .pod_group_template_ref
        .as_ref()
        .and_then(|r| r.workload.as_ref())
        .map(|w| w.workload_name.as_str())
        .filter(|n| !n.is_empty());
    if let Some(wl) = workload_name {
        let wl_ref = ObjectRef::new(kind::WORKLOAD.0, kind::WORKLOAD.1, ns, wl);
        match get_typed::<R, Workload>(reader, &wl_ref).await {
            Ok(w) => {
                annotations.extend(annotations_of(&w.metadata));
                sources.push(wl_ref.to_string());
            }
            Err(ReadError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }

    let gang = match &pg.spec.scheduling_policy.gang {
        Some(g) => gang_by_label(&pods, pod, usize::try_from(g.min_count).unwrap_or(0)),
        None => GangStatus::Complete,
    };
    Ok(KindOutput {
        group_key: format!("podgroup/{ns}/{name}"),
        root: pg_ref,
        job: JobInfo {
            job_name: Some(name.to_string()),
            min_nodes: Some(n),
            max_nodes: Some(n),
            tasks_per_node: Some(1),
            ..Default::default()
        },
        pods,
        annotations,
        annotation_source: sources.join(" + "),
        gang,
        gang_timeout: None,
    })
}
