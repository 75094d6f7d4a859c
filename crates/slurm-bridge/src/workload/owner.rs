//! Owner-chain walk (reference §4.3): follow controller owner references from a pod up to
//! the highest supported scheduling root, or the highest readable controller.

use std::collections::BTreeMap;

use crate::k8s::slim_pod::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::DynamicObject;

use super::TranslateError;
use super::kind::is_supported_root;
use super::reader::{ObjectRef, ReadError, WorkloadReader};

/// Longest controller chain followed; longer chains (or cycles) are an error.
pub const MAX_OWNER_DEPTH: usize = 32;

/// Where the walk ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RootOwner {
    /// The root object.
    pub object: ObjectRef,
    /// The root as read (`None` when the root is the pod itself).
    pub dynamic: Option<DynamicObject>,
}

impl RootOwner {
    /// True when the root is the pod (no controller).
    pub fn is_pod_itself(&self) -> bool {
        self.dynamic.is_none()
    }

    /// The root's annotations (the pod's when the root is the pod).
    pub fn annotations<'a>(&'a self, pod: &'a Pod) -> Option<&'a BTreeMap<String, String>> {
        match &self.dynamic {
            Some(d) => d.metadata.annotations.as_ref(),
            None => pod.metadata.annotations.as_ref(),
        }
    }
}

/// The controller owner reference (`controller: true`) of an object, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

fn ref_of(d: &DynamicObject, fallback: &ObjectRef) -> ObjectRef {
    let (api_version, kind) = d
        .types
        .as_ref()
        .map(|t| (t.api_version.clone(), t.kind.clone()))
        .unwrap_or_else(|| (fallback.api_version.clone(), fallback.kind.clone()));
    ObjectRef {
        api_version,
        kind,
        namespace: d
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| fallback.namespace.clone()),
        name: d
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| fallback.name.clone()),
    }
}

/// Walk the pod's controller chain.
///
/// The highest supported root kind reached through an owner reference wins (a `v1/Pod`
/// counts too: LeaderWorkerSet workers are owned through their leader pod). Without one,
/// the highest readable controller is the root. A Forbidden read above the pod's direct
/// owner ends the walk when the forbidden kind is not a supported root; any other read
/// failure is an error.
pub async fn root_owner<R: WorkloadReader>(
    reader: &R,
    pod: &Pod,
) -> Result<RootOwner, TranslateError> {
    let pod_ref = ObjectRef::pod(pod);
    let mut cur = RootOwner {
        object: pod_ref.clone(),
        dynamic: None,
    };
    let mut supported: Option<RootOwner> = None;
    let mut depth = 0usize;
    loop {
        if depth > 0 && is_supported_root(&cur.object.api_version, &cur.object.kind) {
            supported = Some(cur.clone());
        }
        let meta = cur.dynamic.as_ref().map_or(&pod.metadata, |d| &d.metadata);
        let Some(owner) = controller_of(meta) else {
            return Ok(supported.unwrap_or(cur));
        };
        if depth >= MAX_OWNER_DEPTH {
            return Err(TranslateError::OwnerDepth {
                max: MAX_OWNER_DEPTH,
                at: cur.object,
            });
        }
        let owner_ref = ObjectRef::new(
            &owner.api_version,
            &owner.kind,
            &cur.object.namespace,
            &owner.name,
        );
        match reader.get(&owner_ref).await {
            Ok(d) => {
                let object = ref_of(&d, &owner_ref);
                cur = RootOwner {
                    object,
                    dynamic: Some(d),
                };
                depth += 1;
            }
            Err(ReadError::Forbidden { .. })
                if depth > 0 && !is_supported_root(&owner_ref.api_version, &owner_ref.kind) =>
            {
                tracing::debug!(owner = %owner_ref, "owner not readable; using the highest readable controller");
                return Ok(supported.unwrap_or(cur));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
