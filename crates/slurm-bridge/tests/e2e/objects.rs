//! Pods the tests create and what they read off pods and claims.

use super::{NS, SCHEDULER};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};
use slurm_bridge::wellknown::LABEL_SLURM_JOBID;

pub fn node_name_is_set(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

pub fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

pub fn describe(p: &Pod) -> String {
    format!(
        "{} node={:?} labels={:?} condition={:?}",
        p.name_any(),
        p.spec.as_ref().and_then(|s| s.node_name.clone()),
        p.labels(),
        scheduled_condition(p)
    )
}

/// A pod for the bridge scheduler that runs until deleted.
pub fn pod(name: &str, annotations: Value, spec_extra: Value) -> Value {
    let mut spec = json!({
        "schedulerName": SCHEDULER,
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                         "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": spec,
    })
}

/// The node a pod is bound to; empty while it is not.
pub fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// True once the pod has Succeeded or Failed.
pub fn is_terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// A bridge pod whose one container runs `sleep <secs>` and is killed `grace` seconds after
/// deletion.
pub fn sleeper(name: &str, secs: &str, grace: i64) -> Value {
    pod(
        name,
        json!({}),
        json!({
            "terminationGracePeriodSeconds": grace,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", secs],
                            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
        }),
    )
}

pub fn job_id_of(p: &Pod) -> u32 {
    p.labels()
        .get(LABEL_SLURM_JOBID)
        .expect("job id label")
        .parse()
        .unwrap()
}

/// The ResourceClaim a pod's `extendedResourceClaimStatus` names.
pub fn claim_name(p: &Pod) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .map(|s| s.resource_claim_name.clone())
}

/// A claim's allocated (driver, pool, device) triples.
pub fn allocated(
    c: &k8s_openapi::api::resource::v1::ResourceClaim,
) -> Vec<(String, String, String)> {
    c.status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.driver, r.pool, r.device))
        .collect()
}

/// The first container's terminated state: (exit code, reason).
pub fn terminated(p: &Pod) -> Option<(i32, String)> {
    let s = kube_testenv::pod_state::first_termination(p)?;
    Some((s.exit_code, s.reason.clone().unwrap_or_default()))
}
