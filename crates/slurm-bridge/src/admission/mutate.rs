//! The mutating webhook (`/mutate--v1-pod`, reference §3.2), as a pure function.
//!
//! For a pod the bridge takes (see [`super::managed::processed`]), on CREATE only:
//! - `spec.nodeName` is removed, so the pod is scheduled through Slurm;
//! - `spec.schedulerName` `default-scheduler` (or unset) becomes the bridge's.
//!
//! UPDATE is never patched: `spec.schedulerName` is immutable, and the Go original's rewrite of
//! it on UPDATE made the API server refuse every update of such a pod (reference §10.3 #9).

use super::managed::{is_default_scheduler, processed};
use super::review::{AdmissionRequest, Operation};
use serde_json::{Value, json};

/// The JSON-patch operations for `req` (empty: the pod is left unchanged).
pub fn mutate(
    req: &AdmissionRequest,
    scheduler_name: &str,
    in_managed_namespace: bool,
) -> Vec<Value> {
    let pod = &req.object;
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    if req.operation != Operation::Create
        || !processed(req.operation, pod, scheduler_name, in_managed_namespace)
    {
        return Vec::new();
    }
    let mut ops = Vec::new();
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        ops.push(json!({"op": "remove", "path": "/spec/nodeName"}));
    }
    if is_default_scheduler(spec.scheduler_name.as_deref()) {
        // `add` sets the member whether or not it exists.
        ops.push(json!({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name}));
    }
    ops
}
