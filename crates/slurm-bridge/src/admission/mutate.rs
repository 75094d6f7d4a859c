//! The mutating webhook (`/mutate--v1-pod`, reference §3.2), as pure functions.
//!
//! For a pod the bridge takes (see [`super::managed::processed`]), on CREATE only:
//! - `spec.nodeName` is removed, so the pod is scheduled through Slurm;
//! - `spec.schedulerName` `default-scheduler` (or unset) becomes the bridge's ([`mutate`]);
//! - the bridge finalizer and the managed-node toleration are added ([`bind_ready`]), which the
//!   scheduler would otherwise add with a spec update at bind time (issue 22): with both
//!   present, its bind-time write is a metadata-only label patch.
//!
//! UPDATE is never patched: `spec.schedulerName` is immutable, and the Go original's rewrite of
//! it on UPDATE made the API server refuse every update of such a pod (reference §10.3 #9).

use super::managed::{is_default_scheduler, processed};
use super::review::{AdmissionRequest, Operation};
use crate::wellknown::{FINALIZER, managed_node_toleration, merge_toleration};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// The pod `req` creates, when the webhooks take it (CREATE of a pod with a spec).
fn taken<'a>(
    req: &'a AdmissionRequest<Pod>,
    scheduler_name: &str,
    in_managed_namespace: bool,
) -> Option<&'a Pod> {
    let pod = req.object.as_ref()?;
    pod.spec.as_ref()?;
    (req.operation == Operation::Create
        && processed(
            req.operation.clone(),
            pod,
            scheduler_name,
            in_managed_namespace,
        ))
    .then_some(pod)
}

fn add<const N: usize>(path: [&str; N], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path),
        value,
    })
}

/// The reference's patch for `req`: `spec.nodeName` removed, the scheduler name set (empty: the
/// pod's placement is left unchanged).
pub fn mutate(
    req: &AdmissionRequest<Pod>,
    scheduler_name: &str,
    in_managed_namespace: bool,
) -> Patch {
    let Some(spec) = taken(req, scheduler_name, in_managed_namespace).and_then(|p| p.spec.as_ref())
    else {
        return Patch(Vec::new());
    };
    let mut ops = Vec::new();
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        ops.push(PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(["spec", "nodeName"]),
        }));
    }
    if is_default_scheduler(spec.scheduler_name.as_deref()) {
        // `add` sets the member whether or not it exists.
        ops.push(add(["spec", "schedulerName"], Value::from(scheduler_name)));
    }
    Patch(ops)
}

/// What the scheduler's bind-time label patch would add to `pod` besides the label: the bridge
/// finalizer and the managed-node toleration, each unless already there. A list the pod lacks
/// is added whole; one it has is appended to (`/-`).
pub fn bind_ready(pod: &Pod, scheduler_name: &str) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    match pod.metadata.finalizers.as_ref() {
        None => ops.push(add(
            ["metadata", "finalizers"],
            serde_json::json!([FINALIZER]),
        )),
        Some(list) if !list.iter().any(|f| f == FINALIZER) => {
            ops.push(add(["metadata", "finalizers", "-"], Value::from(FINALIZER)))
        }
        Some(_) => {}
    }
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref());
    let mut merged = tolerations.cloned().unwrap_or_default();
    if merge_toleration(&mut merged, scheduler_name) {
        let t = serde_json::to_value(managed_node_toleration(scheduler_name)).unwrap_or_default();
        ops.push(match tolerations {
            None => add(["spec", "tolerations"], Value::Array(vec![t])),
            Some(_) => add(["spec", "tolerations", "-"], t),
        });
    }
    ops
}

/// The mutating webhook's whole patch for `req`: [`mutate`], then, for a pod it takes,
/// [`bind_ready`].
pub fn patch(
    req: &AdmissionRequest<Pod>,
    scheduler_name: &str,
    in_managed_namespace: bool,
) -> Patch {
    let mut out = mutate(req, scheduler_name, in_managed_namespace);
    if let Some(pod) = taken(req, scheduler_name, in_managed_namespace) {
        out.0.extend(bind_ready(pod, scheduler_name));
    }
    out
}
