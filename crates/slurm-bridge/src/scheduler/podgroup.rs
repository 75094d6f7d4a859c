//! Marks a built-in PodGroup (scheduling.k8s.io/v1alpha2) scheduled once all its pods are bound
//! (reference §5.8.6): condition `PodGroupScheduled=True`, reason `Scheduled`.
//!
//! The write is a server-side apply of the status subresource under the scheduler's field
//! manager, naming only that condition: `status.conditions` is a list keyed by `type`, so the
//! conditions other writers own are left as they are, and no read-modify-write can lose theirs.

use super::context::{Ctx, Slurm};
use super::reason;
use crate::k8s::is_bound;
use crate::k8s::slim_pod::Pod;
use crate::workload::Translation;
use crate::workload::ir::pod_key;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;
use std::time::Duration;

/// The condition type.
pub const PODGROUP_SCHEDULED: &str = "PodGroupScheduled";

/// Attempts of the write before the failure is reported; transient failures are retried.
const ATTEMPTS: u32 = 4;

/// Why the PodGroup could not be marked.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    #[error(
        "reading PodGroup {podgroup}: {}",
        crate::k8s::api_error::Brief(source)
    )]
    Read {
        podgroup: String,
        source: kube::Error,
    },
    #[error(
        "applying PodGroupScheduled to PodGroup {podgroup}: {}",
        crate::k8s::api_error::Brief(source)
    )]
    Apply {
        podgroup: String,
        source: kube::Error,
    },
}

/// The apply configuration: only the condition this scheduler owns.
pub fn scheduled_condition(
    name: &str,
    generation: Option<i64>,
    scheduler_name: &str,
    now: &str,
) -> serde_json::Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "status": {"conditions": [{
            "type": PODGROUP_SCHEDULED,
            "status": "True",
            "observedGeneration": generation,
            "lastTransitionTime": now,
            "reason": "Scheduled",
            "message": format!("Pod group admitted by {scheduler_name}"),
        }]},
    })
}

/// True for failures worth another attempt (conflicts, throttling, the API server briefly away).
fn retriable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 409 | 429 | 500 | 502 | 503 | 504),
        kube::Error::Auth(_) | kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        _ => true,
    }
}

/// Marks the group's PodGroup scheduled unless it is already; retries transient failures a few
/// times (about 1.5 s), then returns the error for the caller to report.
pub async fn mark_scheduled<S: Slurm>(ctx: &Ctx<S>, tr: &Translation) -> Result<(), MarkError> {
    let root = &tr.ir.root;
    let gvk = GroupVersionKind::gvk("scheduling.k8s.io", "v1alpha2", "PodGroup");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &root.namespace, &ar);
    let params = PatchParams::apply(&ctx.config.scheduler_name).force();
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        let result = async {
            let pg = api
                .get(&root.name)
                .await
                .map_err(|source| MarkError::Read {
                    podgroup: root.to_string(),
                    source,
                })?;
            let done = pg
                .data
                .pointer("/status/conditions")
                .and_then(|c| c.as_array())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == PODGROUP_SCHEDULED && c["status"] == "True")
                });
            if done {
                return Ok(());
            }
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = scheduled_condition(
                &root.name,
                pg.metadata.generation,
                &ctx.config.scheduler_name,
                &now,
            );
            ctx.metrics
                .kube_writes
                .inc(crate::k8s::writes::write_kind::PODGROUP);
            api.patch_status(&root.name, &params, &Patch::Apply(&patch))
                .await
                .map(|_| ())
                .map_err(|source| MarkError::Apply {
                    podgroup: root.to_string(),
                    source,
                })
        }
        .await;
        match result {
            Ok(()) => return Ok(()),
            Err(MarkError::Read { source, .. } | MarkError::Apply { source, .. }) if matches!(&source, kube::Error::Api(s) if s.code == 404) =>
            {
                // The PodGroup is gone: nothing to mark.
                return Ok(());
            }
            Err(e @ (MarkError::Read { .. } | MarkError::Apply { .. }))
                if attempt < ATTEMPTS
                    && match &e {
                        MarkError::Read { source, .. } | MarkError::Apply { source, .. } => {
                            retriable(source)
                        }
                    } =>
            {
                tracing::debug!(podgroup = %root, error = %e, attempt, "marking the PodGroup scheduled failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `PodGroupScheduled=True` once every pod of the group is bound: those bound before and those
/// this pass bound (reference §5.8.6). A failure is a warning and a Warning Event on the pod.
pub(super) async fn mark_if_all_bound<S: Slurm>(
    ctx: &Ctx<S>,
    pod: &Pod,
    tr: &Translation,
    bound_now: &[String],
) {
    if !all_bound(&tr.ir.pods, bound_now) {
        return;
    }
    if let Err(e) = mark_scheduled(ctx, tr).await {
        tracing::warn!(podgroup = %tr.ir.root, error = %e, "marking the PodGroup scheduled failed");
        let note = format!("marking {} PodGroupScheduled failed: {e}", tr.ir.root);
        ctx.writer
            .event(
                &ctx.metrics.kube_writes,
                pod,
                true,
                reason::POD_GROUP_UPDATE_FAILED,
                note,
            )
            .await;
    }
}

/// True when every pod of `pods` is bound, or among `bound_now`.
pub(super) fn all_bound(pods: &[Pod], bound_now: &[String]) -> bool {
    pods.iter()
        .all(|p| is_bound(p) || bound_now.contains(&pod_key(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apply_names_only_the_scheduled_condition() {
        let v = scheduled_condition("pg", Some(3), "sched", "2026-01-01T00:00:00Z");
        assert_eq!(v["kind"], "PodGroup");
        assert_eq!(v["apiVersion"], "scheduling.k8s.io/v1alpha2");
        let conditions = v["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0]["type"], PODGROUP_SCHEDULED);
        assert_eq!(conditions[0]["status"], "True");
        assert_eq!(conditions[0]["observedGeneration"], 3);
        assert_eq!(conditions[0]["message"], "Pod group admitted by sched");
        // Nothing but the name in metadata: no resourceVersion, no other field claimed.
        assert_eq!(v["metadata"], json!({"name": "pg"}));
        assert!(v["spec"].is_null());
    }
}
