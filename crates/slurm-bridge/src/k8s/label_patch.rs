//! The scheduler's bind-time patch of a pod (strategic merge): the job id label, and only what
//! the pod lacks of the bridge finalizer, the managed-node toleration and a clean node
//! annotation. A pod the admission webhook created carries the finalizer and the toleration
//! already, so its patch is metadata-only (the label), which the API server applies without
//! a spec update; pods created without the webhook get all of it here.

use crate::k8s::slim_pod::Pod;
use crate::wellknown::{ANNOTATION_SLURM_NODE, FINALIZER, LABEL_SLURM_JOBID, merge_toleration};
use kube::ResourceExt;
use serde_json::{Value, json};

/// The patch that labels `pod` with `job_id` and adds the finalizer and the toleration of the
/// bridge scheduler `scheduler_name` where missing; with `clear_node`, a node annotation left
/// from another job is removed. `None` when the pod has all of it already.
pub fn label_patch(
    pod: &Pod,
    job_id: u32,
    clear_node: bool,
    scheduler_name: &str,
) -> Option<Value> {
    let mut tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let add_toleration = merge_toleration(&mut tolerations, scheduler_name);
    let has_label = pod.labels().get(LABEL_SLURM_JOBID) == Some(&job_id.to_string());
    let has_finalizer = crate::wellknown::holds_finalizer(pod);
    let stale_node = clear_node && pod.annotations().contains_key(ANNOTATION_SLURM_NODE);
    if has_label && has_finalizer && !add_toleration && !stale_node {
        return None;
    }
    let mut patch = json!({"metadata": {"labels": {LABEL_SLURM_JOBID: job_id.to_string()}}});
    if !has_finalizer {
        // Strategic merge: finalizers merge as a set.
        patch["metadata"]["finalizers"] = json!([FINALIZER]);
    }
    if stale_node {
        patch["metadata"]["annotations"] = json!({ ANNOTATION_SLURM_NODE: null });
    }
    if add_toleration {
        // Tolerations have no merge key: send the whole list.
        patch["spec"] = json!({ "tolerations": tolerations });
    }
    Some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wellknown::managed_node_toleration;

    const S: &str = "slurm-bridge-scheduler";

    fn pod(extra: Value) -> Pod {
        let mut v = json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"schedulerName": S, "containers": [{"name": "c", "image": "busybox"}]},
        });
        for (k, x) in extra.as_object().unwrap() {
            for (k2, x2) in x.as_object().unwrap() {
                v[k][k2] = x2.clone();
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn toleration() -> Value {
        serde_json::to_value(managed_node_toleration(S)).unwrap()
    }

    #[test]
    fn a_pod_the_webhook_prepared_gets_the_label_only() {
        let p = pod(json!({
            "metadata": {"finalizers": ["other", FINALIZER]},
            "spec": {"tolerations": [toleration()]},
        }));
        assert_eq!(
            label_patch(&p, 7, true, S),
            Some(json!({"metadata": {"labels": {LABEL_SLURM_JOBID: "7"}}}))
        );
    }

    #[test]
    fn a_pod_created_without_the_webhook_gets_finalizer_and_toleration() {
        let other = json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                           "effect": "NoExecute", "tolerationSeconds": 300});
        let p = pod(json!({"spec": {"tolerations": [other.clone()]}}));
        assert_eq!(
            label_patch(&p, 7, false, S),
            Some(json!({
                "metadata": {"labels": {LABEL_SLURM_JOBID: "7"}, "finalizers": [FINALIZER]},
                "spec": {"tolerations": [other, toleration()]},
            }))
        );
        // Only the finalizer missing, or only the toleration: only that one is added.
        let p = pod(json!({"spec": {"tolerations": [toleration()]}}));
        assert_eq!(
            label_patch(&p, 7, false, S),
            Some(
                json!({"metadata": {"labels": {LABEL_SLURM_JOBID: "7"}, "finalizers": [FINALIZER]}})
            )
        );
        let p = pod(json!({"metadata": {"finalizers": [FINALIZER]}}));
        assert_eq!(
            label_patch(&p, 7, false, S),
            Some(json!({
                "metadata": {"labels": {LABEL_SLURM_JOBID: "7"}},
                "spec": {"tolerations": [toleration()]},
            }))
        );
    }

    #[test]
    fn nothing_to_write_or_a_stale_node_annotation() {
        let ready = json!({
            "metadata": {"finalizers": [FINALIZER], "labels": {LABEL_SLURM_JOBID: "7"},
                         "annotations": {ANNOTATION_SLURM_NODE: "n1"}},
            "spec": {"tolerations": [toleration()]},
        });
        assert_eq!(label_patch(&pod(ready.clone()), 7, false, S), None);
        assert_eq!(
            label_patch(&pod(ready.clone()), 7, true, S),
            Some(json!({"metadata": {"labels": {LABEL_SLURM_JOBID: "7"},
                                     "annotations": {ANNOTATION_SLURM_NODE: null}}}))
        );
        // Another job's label is replaced.
        assert_eq!(
            label_patch(&pod(ready), 8, false, S),
            Some(json!({"metadata": {"labels": {LABEL_SLURM_JOBID: "8"}}}))
        );
    }
}
