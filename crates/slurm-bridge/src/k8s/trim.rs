//! What the shared reflectors drop from pods and nodes before their stores keep them, so memory
//! stays flat with many of them: only fields no component reads (checked by grep when a field is
//! added here, and by the table tests: `workload/trimmed_tests.rs` translates trimmed pods,
//! `tests` below keep what the pod controller, volumes, DRA and placement read).

use k8s_openapi::api::core::v1::{Node, Pod};
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

/// Drops from a pod: managed fields, the last-applied annotation; in its spec the volumes that
/// are not claims (the service account's projected token volume every pod gets is one of the
/// largest parts of a pod in memory; the volume rules read PVC and ephemeral volumes only) and
/// what the containers run with (command, args, env, ports, probes, lifecycle, mounts, security
/// context: translation, placement and DRA read names, resources and restart policies); in its
/// status the container statuses' image names, image ids, container ids and reported resources
/// (the pod controller reads their states only), and `hostIPs`/`podIPs`.
pub fn pod(pod: &mut Pod) {
    trim_metadata(&mut pod.metadata);
    if let Some(spec) = pod.spec.as_mut() {
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
        }
        if spec.volumes.as_ref().is_some_and(Vec::is_empty) {
            spec.volumes = None;
        }
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            c.command = None;
            c.args = None;
            c.env = None;
            c.env_from = None;
            c.ports = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.lifecycle = None;
            c.volume_mounts = None;
            c.volume_devices = None;
            c.security_context = None;
            c.working_dir = None;
        }
        spec.ephemeral_containers = None;
    }
    if let Some(status) = pod.status.as_mut() {
        status.host_ips = None;
        status.pod_ips = None;
        for list in [
            status.container_statuses.as_mut(),
            status.init_container_statuses.as_mut(),
            status.ephemeral_container_statuses.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            for c in list {
                c.image = String::new();
                c.image_id = String::new();
                c.container_id = None;
                c.allocated_resources = None;
                c.resources = None;
                c.volume_mounts = None;
                c.user = None;
            }
        }
    }
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
    fn a_trimmed_pod_keeps_what_the_components_read() {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {"a": "b"}, "annotations": {"x": "y",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "finalizers": ["f"], "ownerReferences": [{"apiVersion": "batch/v1",
                    "kind": "Job", "name": "j", "uid": "ju", "controller": true}],
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"schedulerName": "s", "nodeName": "n1",
                "containers": [{"name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "1"}}}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
            "status": {"phase": "Running", "hostIPs": [{"ip": "10.0.0.1"}],
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}],
                "containerStatuses": [{"name": "c", "image": "busybox", "imageID": "sha",
                    "containerID": "cri://1", "ready": true, "restartCount": 2,
                    "started": true, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
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
        assert_eq!(p.spec, before.spec, "the spec is kept whole");
        let (s, b) = (p.status.unwrap(), before.status.unwrap());
        assert_eq!(s.phase, b.phase);
        assert_eq!(s.conditions, b.conditions);
        assert_eq!(s.resource_claim_statuses, b.resource_claim_statuses);
        let (c, cb) = (
            &s.container_statuses.unwrap()[0],
            &b.container_statuses.unwrap()[0],
        );
        assert_eq!(
            (&c.name, &c.state, c.ready, c.restart_count, c.started),
            (&cb.name, &cb.state, cb.ready, cb.restart_count, cb.started)
        );
        assert!(c.image.is_empty() && c.container_id.is_none());
    }

    #[test]
    fn a_trimmed_pod_keeps_claim_volumes_and_container_resources_only() {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep"],
                    "args": ["1"], "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80}], "restartPolicy": "Always",
                    "readinessProbe": {"exec": {"command": ["true"]}},
                    "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run"}],
                    "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
                "initContainers": [{"name": "i", "image": "busybox", "command": ["true"],
                    "restartPolicy": "Always", "resources": {"limits": {"memory": "1Gi"}}}],
                "volumes": [
                    {"name": "kube-api-access", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token"}}]}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "cfg", "configMap": {"name": "m"}}]},
        }))
        .unwrap();
        let before = p.clone();
        pod(&mut p);
        let (s, b) = (p.spec.unwrap(), before.spec.unwrap());
        let names: Vec<&str> = s
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(names, ["data", "scratch"], "claim volumes only");
        for (c, cb) in s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .zip(
                b.containers
                    .iter()
                    .chain(b.init_containers.iter().flatten()),
            )
        {
            assert_eq!(
                (&c.name, &c.resources, &c.restart_policy),
                (&cb.name, &cb.resources, &cb.restart_policy)
            );
            assert!(c.command.is_none() && c.env.is_none() && c.volume_mounts.is_none());
            assert!(c.readiness_probe.is_none() && c.ports.is_none());
        }
        assert_eq!(
            crate::resources::pod_resources::pod_requests(&s).unwrap(),
            crate::resources::pod_resources::pod_requests(&b).unwrap(),
            "effective requests unchanged"
        );
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
