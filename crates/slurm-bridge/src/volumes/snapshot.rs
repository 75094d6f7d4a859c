//! One consistent view of the PVCs, PVs and StorageClasses a scheduling pass reads, and what
//! each of a pod's claims needs from the node (the classification kube-scheduler's
//! VolumeBinding makes in PreFilter).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::claims::{check_owner, pod_claims};
use super::error::VolumeError;
use super::matching::candidates;

/// The annotation kube-scheduler (and we) set on a dynamic claim to ask its provisioner for
/// a volume on that node.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set by the PV controller on a PVC whose binding is complete.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a PV whose claimRef was written by a controller (the scheduler), not by a user.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The provisioner of a static pool: no dynamic provisioning, only pre-created PVs.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
const ANN_DEFAULT_CLASS_BETA: &str = "storageclass.beta.kubernetes.io/is-default-class";
const ANN_CLASS_BETA: &str = "volume.beta.kubernetes.io/storage-class";

/// PVCs (by namespace and name), PVs and StorageClasses (by name), as of one moment: build
/// it once per pass from the caches (`Store::state()`), then ask it about every pod.
#[derive(Debug, Clone, Default)]
pub struct VolumeSnapshot {
    pvcs: BTreeMap<(String, String), Arc<PersistentVolumeClaim>>,
    pvs: BTreeMap<String, Arc<PersistentVolume>>,
    classes: BTreeMap<String, Arc<StorageClass>>,
}

impl VolumeSnapshot {
    /// Indexes the objects; ones without a name are ignored.
    pub fn new(
        pvcs: impl IntoIterator<Item = Arc<PersistentVolumeClaim>>,
        pvs: impl IntoIterator<Item = Arc<PersistentVolume>>,
        classes: impl IntoIterator<Item = Arc<StorageClass>>,
    ) -> Self {
        let pvcs = pvcs
            .into_iter()
            .filter_map(|c| {
                let ns = c.metadata.namespace.clone()?;
                let name = c.metadata.name.clone()?;
                Some(((ns, name), c))
            })
            .collect();
        let pvs = pvs
            .into_iter()
            .filter_map(|v| Some((v.metadata.name.clone()?, v)))
            .collect();
        let classes = classes
            .into_iter()
            .filter_map(|c| Some((c.metadata.name.clone()?, c)))
            .collect();
        VolumeSnapshot { pvcs, pvs, classes }
    }

    /// The PVC `name` in `namespace`.
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<&PersistentVolumeClaim> {
        self.pvcs
            .get(&(namespace.to_string(), name.to_string()))
            .map(|c| c.as_ref())
    }

    /// The PV `name`.
    pub fn pv(&self, name: &str) -> Option<&PersistentVolume> {
        self.pvs.get(name).map(|v| v.as_ref())
    }

    /// All PVs, by name.
    pub fn pvs(&self) -> impl Iterator<Item = &PersistentVolume> {
        self.pvs.values().map(|v| v.as_ref())
    }

    /// The StorageClass `name`.
    pub fn class(&self, name: &str) -> Option<&StorageClass> {
        self.classes.get(name).map(|c| c.as_ref())
    }

    /// The default class: annotated `is-default-class: "true"`; of several, the newest, then
    /// the first by name (as Kubernetes' DefaultStorageClass admission).
    pub fn default_class(&self) -> Option<&StorageClass> {
        self.classes
            .values()
            .filter(|c| {
                let ann = c.metadata.annotations.as_ref();
                [ANN_DEFAULT_CLASS, ANN_DEFAULT_CLASS_BETA]
                    .iter()
                    .any(|k| ann.and_then(|a| a.get(*k)).is_some_and(|v| v == "true"))
            })
            .max_by(|a, b| {
                let ta = a.metadata.creation_timestamp.as_ref().map(|t| &t.0);
                let tb = b.metadata.creation_timestamp.as_ref().map(|t| &t.0);
                ta.cmp(&tb)
                    .then_with(|| b.metadata.name.cmp(&a.metadata.name))
            })
            .map(|c| c.as_ref())
    }

    /// The class name a PVC asks for: the beta annotation, then `spec.storageClassName`;
    /// unset means the default class (or no class when there is none); `""` means no class.
    pub fn claim_class_name(&self, pvc: &PersistentVolumeClaim) -> String {
        let beta = pvc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_CLASS_BETA));
        if let Some(c) = beta {
            return c.clone();
        }
        match pvc
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_ref())
        {
            Some(c) => c.clone(),
            None => self
                .default_class()
                .and_then(|c| c.metadata.name.clone())
                .unwrap_or_default(),
        }
    }
}

/// What one claim needs from the node the pod lands on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Need<'a> {
    /// Bound: the node must satisfy the PV's node affinity.
    Bound(&'a PersistentVolume),
    /// Unbound WFFC with a static pool: an available matching PV must be on the node.
    Static,
    /// Unbound WFFC with a provisioner: a matching PV on the node, or provisioning there.
    Dynamic(&'a StorageClass),
    /// Unbound WFFC already given a node (`volume.kubernetes.io/selected-node`): only that node.
    Selected(&'a str),
}

/// One claim of the pod with its PVC, class name and need.
#[derive(Debug, Clone)]
pub(crate) struct ClaimNeed<'a> {
    pub name: String,
    pub pvc: &'a PersistentVolumeClaim,
    pub class: String,
    pub need: Need<'a>,
    /// For unbound claims: the PVs that could serve it, best first (see `candidates`).
    pub pool: Vec<&'a PersistentVolume>,
}

/// True when the PVC is bound for good: `spec.volumeName` set and the PV controller has
/// completed the binding (annotation or phase Bound).
pub(crate) fn fully_bound(pvc: &PersistentVolumeClaim) -> bool {
    let volume = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    let completed = pvc
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED));
    let phase_bound = pvc
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Bound");
    volume.is_some_and(|v| !v.is_empty()) && (completed || phase_bound)
}

/// Classifies every claim of the pod; the first claim that makes the pod not submittable
/// (missing, being deleted, not owned, missing PV or class, unbound immediate) is the error.
pub(crate) fn resolve<'a>(
    pod: &Pod,
    snap: &'a VolumeSnapshot,
) -> Result<Vec<ClaimNeed<'a>>, VolumeError> {
    let ns = pod
        .metadata
        .namespace
        .as_deref()
        .ok_or(VolumeError::PodIncomplete("namespace"))?;
    let mut out = Vec::new();
    let mut immediate = false;
    for claim in pod_claims(pod) {
        let pvc = snap
            .pvc(ns, &claim.claim)
            .ok_or_else(|| VolumeError::ClaimNotFound(claim.claim.clone()))?;
        if pvc.metadata.deletion_timestamp.is_some() {
            return Err(VolumeError::ClaimDeleting(claim.claim.clone()));
        }
        check_owner(pod, &claim, pvc)?;
        let class = snap.claim_class_name(pvc);
        let volume_name = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref());
        let need = if fully_bound(pvc) {
            let pv_name = volume_name.unwrap_or_default();
            let pv = snap.pv(pv_name).ok_or_else(|| VolumeError::MissingPv {
                claim: claim.claim.clone(),
                pv: pv_name.to_string(),
            })?;
            Need::Bound(pv)
        } else {
            if class.is_empty() {
                // No class: the PV controller binds it (immediate binding).
                immediate = true;
                continue;
            }
            let sc = snap
                .class(&class)
                .ok_or_else(|| VolumeError::ClassNotFound(class.clone()))?;
            let wffc = sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
            // A claim pre-bound by name is completed by the PV controller, as immediate ones.
            if !wffc || volume_name.is_some_and(|v| !v.is_empty()) {
                immediate = true;
                continue;
            }
            let selected = pvc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_SELECTED_NODE));
            match selected {
                Some(node) => Need::Selected(node.as_str()),
                None if sc.provisioner.is_empty() || sc.provisioner == NO_PROVISIONER => {
                    Need::Static
                }
                None => Need::Dynamic(sc),
            }
        };
        let pool = match need {
            Need::Static | Need::Dynamic(_) => candidates(snap, pvc, &class)?,
            Need::Bound(_) | Need::Selected(_) => Vec::new(),
        };
        out.push(ClaimNeed {
            name: claim.claim,
            pvc,
            class,
            need,
            pool,
        });
    }
    if immediate {
        return Err(VolumeError::UnboundImmediate);
    }
    Ok(out)
}
