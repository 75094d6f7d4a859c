//! Coscheduling PodGroup (`scheduling.x-k8s.io/v1alpha1`, scheduler-plugins): pods with
//! label `scheduling.x-k8s.io/pod-group=<name>` in the PodGroup's namespace make one job.
//! The reference listed such pods across all namespaces (quirk 4); we do not.
//!
//! Beyond the reference: the PodGroup's controller owner (a TrainJob) lends its `slurmjob.*`
//! annotations when the PodGroup has none ([`super::with_owner_fallback`]), and
//! `scheduleTimeoutSeconds` bounds how long an incomplete gang waits unmarked
//! ([`crate::workload::GangTimeout`]).

use std::collections::BTreeMap;

use crate::k8s::slim_pod::Pod;

use super::{
    KindOutput, annotations_of, created_unix, gang_by_label, group_pods, pod_namespace,
    with_owner_fallback,
};
use crate::resources::pod_resources::bytes_to_mib_ceil;
use crate::resources::quantity::Quantity;
use crate::wellknown::LABEL_COSCHEDULING_POD_GROUP;
use crate::workload::crd::CoschedulingPodGroup;
use crate::workload::ir::JobInfo;
use crate::workload::owner::controller_of;
use crate::workload::reader::{ObjectRef, ReadError, WorkloadReader, decode};
use crate::workload::{GangStatus, GangTimeout, TranslateError};
use kube::core::DynamicObject;

/// Phases in which the PodGroup takes no new external job.
const CLOSED_PHASES: [&str; 4] = ["Running", "Unknown", "Failed", "Finished"];

/// Translate a pod of the coscheduling PodGroup `pg` (already read).
pub async fn translate<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
    pg_ref: &ObjectRef,
    pg: &DynamicObject,
) -> Result<KindOutput, TranslateError> {
    let pg: CoschedulingPodGroup = decode(pg, pg_ref)?;
    let ns = pod_namespace(pod);
    let selector = BTreeMap::from([(
        LABEL_COSCHEDULING_POD_GROUP.to_string(),
        pg_ref.name.clone(),
    )]);
    let pods = group_pods(reader.list_pods(ns, &selector).await?, pod);

    let mut job = JobInfo {
        max_nodes: Some(u32::try_from(pods.len()).unwrap_or(u32::MAX)),
        tasks_per_node: Some(1),
        ..Default::default()
    };
    let min_member = pg.spec.min_member.unwrap_or(0);
    if min_member > 0 {
        job.min_nodes = Some(min_member as u32);
    }
    for (name, q) in pg.spec.min_resources.iter().flatten() {
        let bad = |e: String| TranslateError::Object {
            object: pg_ref.clone(),
            message: format!("spec.minResources.{name}: {e}"),
        };
        match name.as_str() {
            "cpu" => {
                let n = Quantity::from_k8s(q)
                    .map_err(|e| bad(e.to_string()))?
                    .ceil_units();
                if n > 0 {
                    job.cpus_per_task = Some(u32::try_from(n).unwrap_or(u32::MAX));
                }
            }
            "memory" => {
                let mib =
                    bytes_to_mib_ceil(&Quantity::from_k8s(q).map_err(|e| bad(e.to_string()))?);
                if mib > 0 {
                    job.mem_per_node_mib = Some(mib);
                }
            }
            _ => {}
        }
    }

    let phase = pg
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let gang = if CLOSED_PHASES.contains(&phase.as_str()) {
        GangStatus::Closed { phase }
    } else {
        gang_by_label(&pods, pod, usize::try_from(min_member).unwrap_or(0))
    };
    let gang_timeout = GangTimeout::from_spec(
        pg.spec.schedule_timeout_seconds,
        pods.iter().filter_map(created_unix),
    );
    let owner = owner_annotations(reader, &pg, pg_ref).await?;
    let (annotations, annotation_source) = with_owner_fallback(
        annotations_of(&pg.metadata),
        pg_ref.to_string(),
        owner.as_ref().map(|(a, r)| (a, r.to_string())),
    );
    Ok(KindOutput {
        group_key: format!("coscheduling/{ns}/{}", pg_ref.name),
        root: pg_ref.clone(),
        pods,
        job,
        annotations,
        annotation_source,
        gang,
        gang_timeout,
    })
}

/// The annotations of the PodGroup's controller owner (Trainer's TrainJob), when it has one the
/// bridge may read. An owner that is gone, forbidden or of an unserved kind lends nothing.
async fn owner_annotations<R: WorkloadReader>(
    reader: &R,
    pg: &CoschedulingPodGroup,
    pg_ref: &ObjectRef,
) -> Result<Option<(BTreeMap<String, String>, ObjectRef)>, TranslateError> {
    let Some(owner) = controller_of(&pg.metadata) else {
        return Ok(None);
    };
    let owner_ref = ObjectRef::new(
        &owner.api_version,
        &owner.kind,
        &pg_ref.namespace,
        &owner.name,
    );
    match reader.get(&owner_ref).await {
        Ok(d) => Ok(Some((annotations_of(&d.metadata), owner_ref))),
        Err(e @ (ReadError::NotFound(_) | ReadError::NoKind { .. })) => {
            tracing::debug!(podgroup = %pg_ref, owner = %owner_ref, error = %e, "PodGroup owner not readable; its annotations do not apply");
            Ok(None)
        }
        // The RBAC misses a grant: the owner's slurmjob.* annotations are lost, say so.
        Err(e @ ReadError::Forbidden { .. }) => {
            tracing::warn!(podgroup = %pg_ref, owner = %owner_ref, error = %e, "PodGroup owner forbidden to the bridge (grant it get on that kind); its slurmjob.* annotations do not apply");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}
