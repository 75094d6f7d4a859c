//! Why a pod's volumes cannot be served: the pod cannot be submitted yet, no volume fits on
//! the node Slurm chose, or a Kubernetes write failed.

use crate::k8s::api_error::Brief;

/// Everything the volume logic can refuse or fail with. The messages of the not-submittable
/// cases are kube-scheduler's own, so users see the text they know.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The pod names a PVC that does not exist (yet).
    #[error("persistentvolumeclaim \"{0}\" not found")]
    ClaimNotFound(String),
    /// The PVC has a deletion timestamp; a pod cannot start on it.
    #[error("persistentvolumeclaim \"{0}\" is being deleted")]
    ClaimDeleting(String),
    /// A generic ephemeral volume's PVC exists but was not created for this pod.
    #[error("PVC {namespace}/{claim} was not created for pod {namespace}/{pod} (pod is not owner)")]
    NotOwner {
        namespace: String,
        claim: String,
        pod: String,
    },
    /// The PVC's `spec.volumeName` names a PV that does not exist.
    #[error("pvc {claim} bound to a missing PV {pv}")]
    MissingPv { claim: String, pv: String },
    /// The PVC's storage class does not exist.
    #[error("storageclass.storage.k8s.io \"{0}\" not found")]
    ClassNotFound(String),
    /// An unbound claim that the PV controller binds on its own (class `Immediate`, no class,
    /// or a PVC pre-bound by name); the pod is retried when the claim changes.
    #[error("pod has unbound immediate PersistentVolumeClaims")]
    UnboundImmediate,
    /// The pod has no name or namespace (not a pod read from the API).
    #[error("pod has no {0} (expected a pod read from the Kubernetes API)")]
    PodIncomplete(&'static str),
    /// A quantity in a PVC or PV is not a Kubernetes quantity.
    #[error("{what} {name}: storage {value:?} is not a quantity (expected e.g. 10Gi, 500M)")]
    BadQuantity {
        what: &'static str,
        name: String,
        value: String,
    },
    /// After allocation: no available PV matching the claim is on the chosen node; `wanted`
    /// describes what a PV must offer.
    #[error(
        "no available persistent volume for claim {claim} on node {node} (wanted {wanted}, \
         node affinity matching the node, not reserved by another pod)"
    )]
    NoVolumeOnNode {
        claim: String,
        node: String,
        wanted: String,
    },
    /// After allocation: the claim can only be served on another node (its PV's node affinity,
    /// the class's allowed topologies, or a `volume.kubernetes.io/selected-node` already set).
    #[error("claim {claim} cannot be served on node {node}: {reason}")]
    WrongNode {
        claim: String,
        node: String,
        reason: &'static str,
    },
    /// The PV was reserved or changed by someone else since the snapshot: retry with another.
    #[error("persistentvolume {pv} was taken for claim {claim} by someone else: {detail}")]
    PvTaken {
        pv: String,
        claim: String,
        detail: String,
    },
    /// Undoing a claim's reservation kept conflicting with other writers.
    #[error("undoing the volume reservation of claim {claim}: changed by others {attempts} times")]
    UndoRaced { claim: String, attempts: usize },
    /// A Kubernetes API call failed.
    #[error("{action}: {}", Brief(.source))]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
}

impl VolumeError {
    /// True when retrying the same plan with a fresh snapshot may succeed (a PV race).
    pub fn is_pv_taken(&self) -> bool {
        matches!(self, VolumeError::PvTaken { .. })
    }
}
