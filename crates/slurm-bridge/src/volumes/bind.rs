//! The Kubernetes writes of a [`VolumePlan`]: reserve PVs (claimRef) and select nodes for
//! dynamic claims, undo them on failure, and watch the claims become Bound. The PV controller
//! (kube-controller-manager) completes each binding; we never write a PVC's volumeName.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::error::VolumeError;
use super::matching::claim_ref_is;
use super::plan::{ClaimAction, VolumePlan};
use super::snapshot::{ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE, VolumeSnapshot};

/// What a pass wrote, so that [`undo`] can take exactly that back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The pod's namespace.
    pub namespace: String,
    /// PVs whose claimRef we set: (PV, claim).
    pub pvs: Vec<(String, String)>,
    /// Claims we annotated with the selected node.
    pub selected: Vec<String>,
}

fn api_err(action: String) -> impl FnOnce(kube::Error) -> VolumeError {
    move |source| VolumeError::Api { action, source }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Writes the plan's actions in order, recording each in `applied` as soon as it is written;
/// on error, call [`undo`] with `applied`. [`VolumeError::PvTaken`] means: plan again.
pub async fn apply(
    client: &kube::Client,
    snap: &VolumeSnapshot,
    plan: &VolumePlan,
    applied: &mut Applied,
) -> Result<(), VolumeError> {
    applied.namespace = plan.namespace.clone();
    for a in &plan.actions {
        match a {
            ClaimAction::Bound { .. } | ClaimAction::SelectNode { already: true, .. } => {}
            ClaimAction::BindPv { claim, pv } => {
                let pvc = snap
                    .pvc(&plan.namespace, claim)
                    .ok_or_else(|| VolumeError::ClaimNotFound(claim.clone()))?;
                bind_pv(client, pvc, pv).await?;
                applied.pvs.push((pv.clone(), claim.clone()));
            }
            ClaimAction::SelectNode { claim, node, .. } => {
                select_node(client, &plan.namespace, claim, node).await?;
                applied.selected.push(claim.clone());
            }
        }
    }
    Ok(())
}

/// Reserves the PV for the claim: `spec.claimRef` and `pv.kubernetes.io/bound-by-controller`,
/// on the PV as read now and only if unchanged since (resourceVersion precondition). A PV
/// claimed by another claim, changed meanwhile or gone gives [`VolumeError::PvTaken`].
pub async fn bind_pv(
    client: &kube::Client,
    pvc: &PersistentVolumeClaim,
    pv_name: &str,
) -> Result<(), VolumeError> {
    let claim = pvc.metadata.name.clone().unwrap_or_default();
    let taken = |detail: String| VolumeError::PvTaken {
        pv: pv_name.to_string(),
        claim: claim.clone(),
        detail,
    };
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let pv = api
        .get_opt(pv_name)
        .await
        .map_err(api_err(format!("reading persistentvolume {pv_name}")))?
        .ok_or_else(|| taken("it was deleted".to_string()))?;
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if let Some(r) = claim_ref.filter(|_| !claim_ref_is(&pv, pvc)) {
        let other = format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default()
        );
        return Err(taken(format!("its claimRef names {other}")));
    }
    let patch = json!({
        "metadata": {
            "resourceVersion": pv.metadata.resource_version,
            "annotations": { ANN_BOUND_BY_CONTROLLER: "yes" },
        },
        "spec": { "claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": pvc.metadata.namespace,
            "name": pvc.metadata.name,
            "uid": pvc.metadata.uid,
        }},
    });
    match api
        .patch(pv_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Err(taken("it changed meanwhile".to_string())),
        Err(e) if is_status(&e, 404) => Err(taken("it was deleted".to_string())),
        Err(e) => Err(api_err(format!(
            "setting claimRef of persistentvolume {pv_name}"
        ))(e)),
    }
}

/// Asks a dynamic claim's provisioner for a volume on `node`.
pub async fn select_node(
    client: &kube::Client,
    namespace: &str,
    claim: &str,
    node: &str,
) -> Result<(), VolumeError> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let patch = json!({ "metadata": { "annotations": { ANN_SELECTED_NODE: node } } });
    api.patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(api_err(format!(
            "annotating persistentvolumeclaim {namespace}/{claim} with {ANN_SELECTED_NODE}"
        )))
}

fn pvc_is_bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
}

/// Attempts per undo write: a 409 (changed meanwhile) re-reads and decides again.
const UNDO_ATTEMPTS: usize = 3;

/// Takes back what `applied` records, best effort: a claimRef only while it still names our
/// PVC and the PVC is not bound yet, a selected-node annotation only while the PVC is not
/// bound. Returns the errors met (an absent object counts as undone).
pub async fn undo(client: &kube::Client, applied: &Applied) -> Vec<VolumeError> {
    let mut errors = Vec::new();
    for (pv, claim) in &applied.pvs {
        errors.extend(
            undo_one(client, &applied.namespace, claim, Some(pv))
                .await
                .err(),
        );
    }
    for claim in &applied.selected {
        errors.extend(
            undo_one(client, &applied.namespace, claim, None)
                .await
                .err(),
        );
    }
    errors
}

/// Clears our claimRef from `pv` (when given) or our selected-node annotation from the claim.
async fn undo_one(
    client: &kube::Client,
    ns: &str,
    claim: &str,
    pv_name: Option<&str>,
) -> Result<(), VolumeError> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for _ in 0..UNDO_ATTEMPTS {
        let read = format!("reading persistentvolumeclaim {ns}/{claim}");
        let Some(pvc) = pvcs.get_opt(claim).await.map_err(api_err(read))? else {
            return Ok(());
        };
        if pvc_is_bound(&pvc) {
            return Ok(());
        }
        let result = match pv_name {
            Some(pv_name) => {
                let read = format!("reading persistentvolume {pv_name}");
                let Some(pv) = pvs.get_opt(pv_name).await.map_err(api_err(read))? else {
                    return Ok(());
                };
                if !claim_ref_is(&pv, &pvc) {
                    return Ok(());
                }
                let patch = json!({
                    "metadata": {
                        "resourceVersion": pv.metadata.resource_version,
                        "annotations": { ANN_BOUND_BY_CONTROLLER: null },
                    },
                    "spec": { "claimRef": null },
                });
                let pp = PatchParams::default();
                pvs.patch(pv_name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            None => {
                let patch = json!({ "metadata": {
                    "resourceVersion": pvc.metadata.resource_version,
                    "annotations": { ANN_SELECTED_NODE: null },
                }});
                let pp = PatchParams::default();
                pvcs.patch(claim, &pp, &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => return Ok(()),
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) if is_status(&e, 409) => continue,
            Err(e) => {
                let what = match pv_name {
                    Some(pv) => format!("clearing claimRef of persistentvolume {pv}"),
                    None => format!("removing {ANN_SELECTED_NODE} from {ns}/{claim}"),
                };
                return Err(api_err(what)(e));
            }
        }
    }
    Err(VolumeError::UndoRaced {
        claim: format!("{ns}/{claim}"),
        attempts: UNDO_ATTEMPTS,
    })
}

/// How many of a pod's claims are Bound, for a bounded wait before binding the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Claims that are Bound.
    pub bound: usize,
    /// All the claims waited for.
    pub total: usize,
    /// The claims not Bound yet (missing ones included), in the given order.
    pub waiting: Vec<String>,
}

impl Progress {
    /// True when every claim is Bound: the pod can be bound to its node.
    pub fn done(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Counts the `claims` that are Bound (phase Bound and `spec.volumeName` set) among `pvcs`
/// (the pod's namespace); a claim absent from `pvcs` is waiting.
pub fn all_bound(claims: &[String], pvcs: &[&PersistentVolumeClaim]) -> Progress {
    let waiting: Vec<String> = claims
        .iter()
        .filter(|c| {
            !pvcs.iter().any(|p| {
                p.metadata.name.as_deref() == Some(c.as_str())
                    && pvc_is_bound(p)
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            })
        })
        .cloned()
        .collect();
    Progress {
        bound: claims.len() - waiting.len(),
        total: claims.len(),
        waiting,
    }
}

/// Reads the claims now and counts the Bound ones (see [`all_bound`]).
pub async fn fetch_progress(
    client: &kube::Client,
    namespace: &str,
    claims: &[String],
) -> Result<Progress, VolumeError> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let mut found = Vec::new();
    for c in claims {
        let read = format!("reading persistentvolumeclaim {namespace}/{c}");
        if let Some(p) = api.get_opt(c).await.map_err(api_err(read))? {
            found.push(p);
        }
    }
    let refs: Vec<&PersistentVolumeClaim> = found.iter().collect();
    Ok(all_bound(claims, &refs))
}
