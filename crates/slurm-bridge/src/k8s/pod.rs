//! Pod facts every component reads: its key, and whether and where it is bound.

use crate::k8s::slim_pod::Pod;
use kube::runtime::reflector::ObjectRef;

/// `ns/name` of a pod: the key every cache, lock, log line and admin_comment uses for it.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A reference to a pod by namespace and name only. `ObjectRef::from_obj` also copies the uid
/// and resourceVersion, which its equality and hash ignore: two strings more per reference,
/// and the scheduler's queue and indexes hold several references per waiting pod.
pub fn pod_ref(pod: &Pod) -> ObjectRef<Pod> {
    let r = ObjectRef::new(pod.metadata.name.as_deref().unwrap_or_default());
    match pod.metadata.namespace.as_deref() {
        Some(ns) => r.within(ns),
        None => r,
    }
}

/// The node a pod is bound to (`spec.nodeName`, when set and not empty).
pub fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// True when the pod is bound to a node.
pub fn is_bound(pod: &Pod) -> bool {
    bound_node(pod).is_some()
}
