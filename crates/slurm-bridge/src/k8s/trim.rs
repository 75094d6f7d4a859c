//! What the shared reflectors drop from nodes and objects before their stores keep them, so
//! memory stays flat with many of them: only fields no component reads (checked by grep when a
//! field is added here, and by the table tests: `workload/trimmed_tests.rs` translates trimmed
//! pods, `tests` below keep what placement and registration read). Pods need no trimming pass:
//! the cached pod type ([`crate::k8s::slim_pod`]) decodes only the fields read, its metadata
//! without the ones dropped here ([`crate::k8s::slim_meta`]).

use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// kubectl's copy of the last applied object: an annotation as large as the object itself.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops the managed fields and the last-applied annotation (no component reads them).
pub fn trim_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// Drops from a pod its managed fields and the last-applied annotation: a pod decoded from a
/// watch has neither already ([`crate::k8s::slim_meta`]), one converted from a full pod may.
/// The spec and status need nothing more: the cached pod ([`crate::k8s::slim_pod::Pod`])
/// decodes only the fields the bridge reads.
pub fn pod(pod: &mut Pod) {
    trim_metadata(&mut pod.metadata);
}

/// Drops from a node: managed fields, the last-applied annotation, the container images it
/// holds (often most of a node's size), `nodeInfo` and `daemonEndpoints`. Placement reads
/// labels, taints, `unschedulable`, the Ready condition and capacity/allocatable; node
/// registration reads those and the addresses.
pub fn node(node: &mut Node) {
    trim_metadata(&mut node.metadata);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.node_info = None;
        status.daemon_endpoints = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_trimmed_pod_keeps_everything_but_managed_fields_and_last_applied() {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {"a": "b"}, "annotations": {"x": "y",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "finalizers": ["f"], "ownerReferences": [{"apiVersion": "batch/v1",
                    "kind": "Job", "name": "j", "uid": "ju", "controller": true}],
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"schedulerName": "s", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        let before = p.clone();
        pod(&mut p);
        assert!(p.metadata.managed_fields.is_none());
        assert_eq!(p.metadata.annotations.as_ref().unwrap().len(), 1);
        let mut meta = before.metadata.clone();
        meta.managed_fields = None;
        meta.annotations = p.metadata.annotations.clone();
        assert_eq!(
            p.metadata, meta,
            "labels, finalizers, owners, uid, version kept"
        );
        assert_eq!((p.spec, p.status), (before.spec, before.status));
    }

    #[test]
    fn a_trimmed_node_keeps_what_placement_and_registration_read() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"zone": "a"}, "managedFields": [{}]},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["busybox"], "sizeBytes": 1}],
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                    "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                    "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}},
        }))
        .unwrap();
        let before = n.clone();
        node(&mut n);
        assert_eq!(n.spec, before.spec);
        assert_eq!(n.metadata.labels, before.metadata.labels);
        // What placement reads of the node is unchanged.
        assert_eq!(
            crate::k8s::node::placement_fingerprint(&n),
            crate::k8s::node::placement_fingerprint(&before)
        );
        let (s, b) = (n.status.unwrap(), before.status.unwrap());
        assert_eq!(
            (&s.capacity, &s.allocatable, &s.addresses, &s.conditions),
            (&b.capacity, &b.allocatable, &b.addresses, &b.conditions)
        );
        assert!(s.images.is_none() && s.node_info.is_none());
    }
}
