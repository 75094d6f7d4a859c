//! Which available PV can serve an unbound claim, as kube-scheduler's FindMatchingVolume:
//! class, capacity, access modes, volume mode, label selector, node affinity; the smallest
//! fitting PV wins, a PV already pre-bound to the claim first.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};

use super::error::VolumeError;
use super::selectors::{label_selector_matches, pv_node_affinity_matches};
use super::snapshot::VolumeSnapshot;
use crate::resources::quantity::Quantity;

/// The claim's `spec.resources.requests.storage` (zero when unset).
pub fn claim_request(pvc: &PersistentVolumeClaim) -> Result<Quantity, VolumeError> {
    let q = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    match q {
        None => Ok(Quantity::ZERO),
        Some(q) => Quantity::from_k8s(q).map_err(|_| VolumeError::BadQuantity {
            what: "persistentvolumeclaim",
            name: pvc.metadata.name.clone().unwrap_or_default(),
            value: q.0.clone(),
        }),
    }
}

/// The PV's `spec.capacity.storage`; `None` when unset or not a quantity (such a PV fits
/// nothing).
fn pv_capacity(pv: &PersistentVolume) -> Option<Quantity> {
    let q = pv.spec.as_ref()?.capacity.as_ref()?.get("storage")?;
    Quantity::from_k8s(q).ok()
}

/// The claim's access modes, sorted.
pub fn claim_modes(pvc: &PersistentVolumeClaim) -> Vec<String> {
    let mut m: Vec<String> = pvc
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.clone())
        .unwrap_or_default();
    m.sort();
    m.dedup();
    m
}

/// The claim's volume mode (`Filesystem` when unset).
pub fn claim_volume_mode(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem")
}

/// The PV's claimRef names exactly this PVC (namespace and name, and uid when the ref has one).
pub fn claim_ref_is(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    let uid_ok = match r.uid.as_deref() {
        None | Some("") => true,
        Some(u) => pvc.metadata.uid.as_deref() == Some(u),
    };
    r.namespace.is_some()
        && r.namespace == pvc.metadata.namespace
        && r.name.is_some()
        && r.name == pvc.metadata.name
        && uid_ok
}

/// The PV could serve the claim on some node (everything but node affinity and this pass's
/// reservations): free or pre-bound to it, available, same class, big enough, access modes
/// a superset, same volume mode, labels matching the claim's selector.
pub fn pv_fits(
    pv: &PersistentVolume,
    pvc: &PersistentVolumeClaim,
    class: &str,
    request: Quantity,
) -> bool {
    let Some(spec) = pv.spec.as_ref() else {
        return false;
    };
    let free = spec.claim_ref.is_none() || claim_ref_is(pv, pvc);
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let available = matches!(phase, None | Some("") | Some("Available"));
    let pv_modes = spec.access_modes.as_deref().unwrap_or_default();
    let modes_ok = claim_modes(pvc).iter().all(|m| pv_modes.contains(m));
    let pv_mode = spec.volume_mode.as_deref().unwrap_or("Filesystem");
    let selector = pvc.spec.as_ref().and_then(|s| s.selector.as_ref());
    free && available
        && pv.metadata.deletion_timestamp.is_none()
        && spec.storage_class_name.as_deref().unwrap_or_default() == class
        && pv_capacity(pv).is_some_and(|c| c >= request)
        && modes_ok
        && pv_mode == claim_volume_mode(pvc)
        && label_selector_matches(selector, pv.metadata.labels.as_ref())
}

/// The PVs that could serve the claim, in kube-scheduler's order of preference: one
/// pre-bound to the claim first, then the smallest, then by name. Computed once per claim,
/// so that checking many nodes only tests node affinity.
pub fn candidates<'a>(
    snap: &'a VolumeSnapshot,
    pvc: &PersistentVolumeClaim,
    class: &str,
) -> Result<Vec<&'a PersistentVolume>, VolumeError> {
    let request = claim_request(pvc)?;
    let mut pool: Vec<&PersistentVolume> = snap
        .pvs()
        .filter(|pv| pv_fits(pv, pvc, class, request))
        .collect();
    pool.sort_by(|a, b| {
        let pre = |p: &PersistentVolume| !claim_ref_is(p, pvc);
        pre(a)
            .cmp(&pre(b))
            .then_with(|| pv_capacity(a).cmp(&pv_capacity(b)))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    Ok(pool)
}

/// The PV kube-scheduler's FindMatchingVolume would pick on the node: the first candidate
/// whose node affinity admits the node, skipping PVs for which `taken` is true.
pub fn pick<'a>(
    candidates: &[&'a PersistentVolume],
    node: &Node,
    taken: &dyn Fn(&str) -> bool,
) -> Option<&'a PersistentVolume> {
    candidates.iter().copied().find(|pv| {
        !taken(pv.metadata.name.as_deref().unwrap_or_default())
            && pv_node_affinity_matches(pv, node)
    })
}
