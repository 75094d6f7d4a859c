//! The Kubernetes reads translation needs, behind a small trait so the logic is tested
//! without a server (`ManifestReader`) and runs against the cluster (`KubeReader`).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use crate::k8s::slim_pod::Pod;
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;

/// One namespaced object: apiVersion, kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// `group/version`, or `v1` for the core group.
    pub api_version: String,
    /// Kind, e.g. `Job`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// Build a reference.
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The reference of a pod.
    pub fn pod(pod: &Pod) -> Self {
        ObjectRef::new(
            "v1",
            "Pod",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    /// True when apiVersion and kind are both equal to the given ones.
    pub fn is(&self, api_version: &str, kind: &str) -> bool {
        self.api_version == api_version && self.kind == kind
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{} ({})",
            self.kind, self.namespace, self.name, self.api_version
        )
    }
}

/// Why a read failed; translation decides on NotFound and Forbidden (reference §4.3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The object does not exist.
    #[error("{0} not found")]
    NotFound(ObjectRef),
    /// The bridge may not read the object (RBAC).
    #[error("reading {object} is forbidden: {message}")]
    Forbidden {
        /// What was read.
        object: ObjectRef,
        /// Server message.
        message: String,
    },
    /// The API server does not serve this apiVersion/kind.
    #[error("kind {kind} of apiVersion {api_version} is not served by the cluster")]
    NoKind {
        /// apiVersion asked for.
        api_version: String,
        /// Kind asked for.
        kind: String,
    },
    /// Any other failure (transport, 5xx, a body that does not decode).
    #[error("reading {object}: {message}")]
    Other {
        /// What was read.
        object: String,
        /// What went wrong.
        message: String,
    },
}

/// Reads of Kubernetes objects the translation needs.
pub trait WorkloadReader: Sync {
    /// The DRA drivers whose devices the translation turns into GRES (the config's
    /// `draDeviceDrivers` with the built-in GPU drivers); by default the built-ins only.
    fn gres_drivers(&self) -> crate::resources::gres_drivers::GresDrivers {
        crate::resources::gres_drivers::GresDrivers::builtin()
    }

    /// GET one object (any apiVersion/kind) in the namespace of `object`.
    fn get(
        &self,
        object: &ObjectRef,
    ) -> impl Future<Output = Result<DynamicObject, ReadError>> + Send;

    /// LIST the pods of a namespace whose labels include every pair of `labels`
    /// (an empty map lists every pod of the namespace).
    fn list_pods(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<Pod>, ReadError>> + Send;

    /// The pods of a namespace that name the built-in PodGroup `group` in
    /// `spec.schedulingGroup.podGroupName` (no label selects them). By default every pod of the
    /// namespace is listed and filtered; a cached reader answers from an index.
    fn list_scheduling_group(
        &self,
        namespace: &str,
        group: &str,
    ) -> impl Future<Output = Result<Vec<Pod>, ReadError>> + Send {
        async move {
            let listed = self.list_pods(namespace, &BTreeMap::new()).await?;
            Ok(listed
                .into_iter()
                .filter(|p| crate::workload::kinds::podgroup::pod_group_name(p) == Some(group))
                .collect())
        }
    }
}

/// GET an object and decode it into a typed struct.
pub async fn get_typed<R: WorkloadReader, T: DeserializeOwned>(
    reader: &R,
    object: &ObjectRef,
) -> Result<T, ReadError> {
    let dynamic = reader.get(object).await?;
    decode(&dynamic, object)
}

/// Decode a dynamic object into a typed struct.
pub fn decode<T: DeserializeOwned>(
    dynamic: &DynamicObject,
    object: &ObjectRef,
) -> Result<T, ReadError> {
    let value = serde_json::to_value(dynamic).map_err(|e| ReadError::Other {
        object: object.to_string(),
        message: e.to_string(),
    })?;
    serde_json::from_value(value).map_err(|e| ReadError::Other {
        object: object.to_string(),
        message: format!("object does not decode as {}: {e}", object.kind),
    })
}

/// True when all of `want` appear in `labels`.
pub fn labels_match(
    labels: Option<&BTreeMap<String, String>>,
    want: &BTreeMap<String, String>,
) -> bool {
    want.iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}
