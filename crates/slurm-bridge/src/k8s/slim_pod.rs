//! The pod as the bridge keeps and reads it: the fields translation, placement, volumes, DRA
//! and the pod controller read, under k8s-openapi's names and types, and nothing else.
//!
//! k8s-openapi's `Pod` holds every field of the API inline, `None` or not: about 2.3 KiB per
//! pod and as much again per container before any content, which made the pod store most of
//! the scheduler's memory at 10,000 pods (docs/performance.md, "Memory"). A watch decodes
//! straight into these types (serde skips what they lack), so nothing dropped is ever
//! allocated. Pods that are created or admitted stay k8s-openapi's (the webhook's review, the
//! manifest reader's generated pods: a slim pod would lose the fields it lacks if written);
//! [`Pod::from`] converts a full pod for reading (a test's live pod).

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{
    Affinity, ContainerState, EphemeralVolumeSource, PersistentVolumeClaimVolumeSource,
    PodCondition, PodExtendedResourceClaimStatus, PodResourceClaim, PodResourceClaimStatus,
    PodSchedulingGate, PodSchedulingGroup, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A v1 Pod with only what the bridge reads; see the module doc.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pod {
    /// Without managed fields and last-applied annotation ([`super::slim_meta`]).
    #[serde(deserialize_with = "super::slim_meta::deserialize")]
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// The spec fields the bridge reads: scheduling inputs, resources, claims, restart policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Boxed, as `resources` and `extendedResourceClaimStatus`: rarely set, and 144 bytes in
    /// every cached pod when inline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Box<Affinity>>,
    pub containers: Vec<Container>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<PodResourceClaim>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<ResourceRequirements>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Vec<PodSchedulingGate>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling_group: Option<PodSchedulingGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// The claim volumes only (PVC and ephemeral); the volume rules read no other kind.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "claim_volumes"
    )]
    pub volumes: Option<Vec<Volume>>,
}

/// A container's name, resources and restart policy (a sidecar is an init container with
/// `restartPolicy: Always`): what translation and placement read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// A claim volume: a PersistentVolumeClaim or a generic ephemeral volume.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<EphemeralVolumeSource>,
}

/// The status fields the pod controller, DRA and the scheduler read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extended_resource_claim_status: Option<Box<PodExtendedResourceClaimStatus>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
}

/// A container's state: the pod controller reads whether it is running.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
}

/// Keeps a pod's claim volumes only; the others decode to nothing.
fn claim_volumes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<Volume>>, D::Error> {
    let volumes: Option<Vec<Volume>> = Option::deserialize(d)?;
    Ok(volumes
        .map(|v| {
            v.into_iter()
                .filter(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
                .collect::<Vec<_>>()
        })
        .filter(|v| !v.is_empty()))
}

impl kube::Resource for Pod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<&k8s_openapi::api::core::v1::Pod> for Pod {
    /// The fields of a full pod the bridge reads (through JSON, as a watch would decode it).
    fn from(pod: &k8s_openapi::api::core::v1::Pod) -> Self {
        serde_json::to_value(pod)
            .and_then(serde_json::from_value)
            .unwrap_or_else(|e| {
                // Every field kept has k8s-openapi's own type, so its JSON always decodes.
                unreachable!("a k8s-openapi Pod re-decodes as the bridge's pod: {e}")
            })
    }
}

impl From<k8s_openapi::api::core::v1::Pod> for Pod {
    fn from(pod: k8s_openapi::api::core::v1::Pod) -> Self {
        Pod::from(&pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {"a": "b"}, "finalizers": ["f"]},
            "spec": {"schedulerName": "s", "nodeName": "n1", "priority": 5,
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep"],
                    "env": [{"name": "X", "value": "1"}],
                    "resources": {"requests": {"cpu": "1"}}}],
                "initContainers": [{"name": "side", "image": "x", "restartPolicy": "Always"}],
                "volumes": [{"name": "token", "projected": {"sources": []}},
                    {"name": "v", "persistentVolumeClaim": {"claimName": "c"}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
            "status": {"phase": "Running", "hostIPs": [{"ip": "10.0.0.1"}],
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "c", "image": "busybox", "imageID": "sha",
                    "ready": true, "restartCount": 2,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
        })
    }

    #[test]
    fn a_watch_event_decodes_to_what_the_bridge_reads() {
        let p: Pod = serde_json::from_value(full()).unwrap();
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.scheduler_name.as_deref(), Some("s"));
        assert_eq!(spec.priority, Some(5));
        assert_eq!(spec.containers[0].name, "c");
        assert!(spec.containers[0].resources.is_some());
        let sidecar = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
        let volumes = spec.volumes.as_ref().unwrap();
        assert_eq!(
            volumes.len(),
            1,
            "only the claim volume is kept: {volumes:?}"
        );
        assert_eq!(volumes[0].name, "v");
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let c = &status.container_statuses.as_ref().unwrap()[0];
        assert!(
            c.state.as_ref().is_some_and(|s| s.running.is_some()),
            "{c:?}"
        );
    }

    #[test]
    fn a_full_pod_converts_as_a_watch_would_decode_it() {
        let full: k8s_openapi::api::core::v1::Pod = serde_json::from_value(full()).unwrap();
        let decoded: Pod = serde_json::from_value(self::full()).unwrap();
        assert_eq!(Pod::from(&full), decoded);
    }

    #[test]
    fn a_pod_without_volumes_or_claim_volumes_has_none() {
        let mut v = full();
        v["spec"]["volumes"] = json!([{"name": "token", "projected": {"sources": []}}]);
        let p: Pod = serde_json::from_value(v).unwrap();
        assert_eq!(p.spec.unwrap().volumes, None);
    }

    #[test]
    fn the_effective_requests_come_from_the_kept_containers() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep"],
                    "readinessProbe": {"exec": {"command": ["true"]}},
                    "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
                "initContainers": [{"name": "i", "restartPolicy": "Always",
                    "resources": {"requests": {"memory": "1Gi"}}}]},
        }))
        .unwrap();
        let spec = p.spec.unwrap();
        let requests = crate::resources::pod_resources::pod_requests(&spec).unwrap();
        assert_eq!(
            requests.get("cpu").map(|q| q.ceil_units()),
            Some(1),
            "{requests:?}"
        );
        assert!(
            requests.contains_key("memory"),
            "the sidecar's memory: {requests:?}"
        );
        let claims = spec.containers[0]
            .resources
            .as_ref()
            .unwrap()
            .claims
            .as_ref();
        assert_eq!(claims.map(Vec::len), Some(1));
    }

    #[test]
    fn the_slim_pod_is_a_fraction_of_the_full_one() {
        use std::mem::size_of;
        let slim = size_of::<Pod>() + size_of::<Container>();
        let full = size_of::<k8s_openapi::api::core::v1::Pod>()
            + size_of::<k8s_openapi::api::core::v1::Container>();
        println!("a pod with one container, inline: {slim} bytes (k8s-openapi: {full})");
        assert!(slim * 3 < full, "{slim} bytes against {full}");
    }
}
