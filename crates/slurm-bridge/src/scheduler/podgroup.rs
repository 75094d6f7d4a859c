//! Marks a built-in PodGroup (scheduling.k8s.io/v1alpha2) scheduled once all its pods are bound
//! (reference §5.8.6): condition `PodGroupScheduled=True`, reason `Scheduled`.

use super::context::{Ctx, Slurm};
use crate::workload::Translation;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;

pub async fn mark_scheduled<S: Slurm>(ctx: &Ctx<S>, tr: &Translation) {
    let root = &tr.ir.root;
    let gvk = GroupVersionKind::gvk("scheduling.k8s.io", "v1alpha2", "PodGroup");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &root.namespace, &ar);
    let pg = match api.get(&root.name).await {
        Ok(pg) => pg,
        Err(e) => {
            tracing::debug!(podgroup = %root, error = %e, "reading the PodGroup failed");
            return;
        }
    };
    let mut conditions: Vec<serde_json::Value> = pg
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .cloned()
        .unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c["type"] == "PodGroupScheduled" && c["status"] == "True")
    {
        return;
    }
    conditions.retain(|c| c["type"] != "PodGroupScheduled");
    conditions.push(json!({
        "type": "PodGroupScheduled",
        "status": "True",
        "observedGeneration": pg.metadata.generation,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "reason": "Scheduled",
        "message": format!("Pod group admitted by {}", ctx.config.scheduler_name),
    }));
    let patch = json!({"status": {"conditions": conditions}});
    ctx.metrics
        .kube_writes
        .inc(super::pod_ops::write_kind::PODGROUP);
    if let Err(e) = api
        .patch_status(&root.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(podgroup = %root, error = %e, "marking the PodGroup scheduled failed");
    }
}
