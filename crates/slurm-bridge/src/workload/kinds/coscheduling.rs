//! Coscheduling PodGroup (`scheduling.x-k8s.io/v1alpha1`, scheduler-plugins): pods with
//! label `scheduling.x-k8s.io/pod-group=<name>` in the PodGroup's namespace make one job.
//! The reference listed such pods across all namespaces (quirk 4); we do not.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::{KindOutput, annotations_of, gang_by_label, group_pods, pod_namespace};
use crate::resources::pod_resources::bytes_to_mib_ceil;
use crate::resources::quantity::Quantity;
use crate::wellknown::LABEL_COSCHEDULING_POD_GROUP;
use crate::workload::crd::CoschedulingPodGroup;
use crate::workload::ir::JobInfo;
use crate::workload::reader::{ObjectRef, WorkloadReader, decode};
use crate::workload::{GangStatus, TranslateError};
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
    Ok(KindOutput {
        group_key: format!("coscheduling/{ns}/{}", pg_ref.name),
        root: pg_ref.clone(),
        pods,
        job,
        annotations: annotations_of(&pg.metadata),
        annotation_source: pg_ref.to_string(),
        gang,
    })
}
