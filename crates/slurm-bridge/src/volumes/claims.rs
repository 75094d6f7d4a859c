//! The PersistentVolumeClaims a pod needs: named claims and generic ephemeral volumes.

use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::error::VolumeError;

/// One PVC a pod's volume refers to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodClaim {
    /// The pod's volume name (`spec.volumes[].name`).
    pub volume: String,
    /// The PVC's name in the pod's namespace.
    pub claim: String,
    /// True for a generic ephemeral volume: the PVC is `<pod>-<volume>` and must be owned by
    /// the pod.
    pub ephemeral: bool,
}

/// The PVCs the pod's volumes need, in volume order, each claim once.
pub fn pod_claims(pod: &Pod) -> Vec<PodClaim> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let mut out: Vec<PodClaim> = Vec::new();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    for v in volumes.unwrap_or_default() {
        let claim = if let Some(pvc) = &v.persistent_volume_claim {
            PodClaim {
                volume: v.name.clone(),
                claim: pvc.claim_name.clone(),
                ephemeral: false,
            }
        } else if v.ephemeral.is_some() {
            PodClaim {
                volume: v.name.clone(),
                claim: format!("{pod_name}-{}", v.name),
                ephemeral: true,
            }
        } else {
            continue;
        };
        if !out.iter().any(|c| c.claim == claim.claim) {
            out.push(claim);
        }
    }
    out
}

/// True when the pod has at least one PVC-backed volume (the scheduler can skip volume work
/// for every other pod).
pub fn has_claims(pod: &Pod) -> bool {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    volumes
        .unwrap_or_default()
        .iter()
        .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

/// An ephemeral volume's PVC must have a controller ownerReference to the pod's uid, else it
/// belongs to someone else (kube-scheduler's check, same message).
pub fn check_owner(
    pod: &Pod,
    claim: &PodClaim,
    pvc: &PersistentVolumeClaim,
) -> Result<(), VolumeError> {
    if !claim.ephemeral {
        return Ok(());
    }
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let owned = pvc
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && !uid.is_empty() && o.uid == uid);
    if owned {
        Ok(())
    } else {
        Err(VolumeError::NotOwner {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            claim: claim.claim.clone(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
        })
    }
}
