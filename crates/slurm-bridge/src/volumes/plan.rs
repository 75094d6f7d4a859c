//! After Slurm allocated: what each of one pod's claims gets on its chosen node. The same
//! per-node decision backs the pre-submit filter, so both always agree.

use std::collections::BTreeMap;

use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::core::v1::Node;

use super::error::VolumeError;
use super::matching::{claim_modes, claim_request, claim_volume_mode, pick};
use super::selectors::{allowed_topologies_match, pv_node_affinity_matches};
use super::snapshot::{ClaimNeed, Need, VolumeSnapshot, resolve};

/// Reason for a node whose labels conflict with a bound PV's node affinity.
pub const REASON_AFFINITY: &str = "node(s) had volume node affinity conflict";
/// Reason for a node without an available PV for a static claim.
pub const REASON_NO_PV: &str = "node(s) didn't find available persistent volumes to bind";
/// Reason for a node outside a dynamic class's `allowedTopologies`.
pub const REASON_TOPOLOGY: &str = "node(s) didn't match the storage class's allowed topologies";

/// What to do for one claim of the pod on the chosen node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimAction {
    /// Already bound to `pv`: nothing to write.
    Bound { claim: String, pv: String },
    /// Reserve the available PV for the claim (its `spec.claimRef`); the PV controller binds.
    BindPv { claim: String, pv: String },
    /// Ask the class's provisioner for a volume on `node` (`volume.kubernetes.io/selected-node`);
    /// `already` when the annotation is already there (nothing to write or undo).
    SelectNode {
        claim: String,
        node: String,
        already: bool,
    },
}

impl ClaimAction {
    /// The claim's name.
    pub fn claim(&self) -> &str {
        match self {
            ClaimAction::Bound { claim, .. }
            | ClaimAction::BindPv { claim, .. }
            | ClaimAction::SelectNode { claim, .. } => claim,
        }
    }
}

/// The volume actions of one pod on one node, in the pod's volume order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumePlan {
    /// The pod's namespace (every claim is in it).
    pub namespace: String,
    /// The Kubernetes name of the chosen node.
    pub node: String,
    /// One action per claim.
    pub actions: Vec<ClaimAction>,
}

impl VolumePlan {
    /// True when nothing has to be written or waited for.
    pub fn is_noop(&self) -> bool {
        self.actions
            .iter()
            .all(|a| matches!(a, ClaimAction::Bound { .. }))
    }

    /// The names of all the pod's claims (to wait on with `all_bound`).
    pub fn claims(&self) -> Vec<String> {
        self.actions.iter().map(|a| a.claim().to_string()).collect()
    }
}

/// What claims got earlier in this pass (other pods of the gang): a PV is never given to two
/// claims, and a claim shared by two pods keeps the PV or node it got first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reserved {
    pvs: BTreeMap<String, (String, String)>,
    claims: BTreeMap<(String, String), Given>,
}

/// What a claim got in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Given {
    Pv(String),
    Node(String),
}

impl Reserved {
    /// Records what a plan gives its claims.
    pub fn add(&mut self, plan: &VolumePlan) {
        for a in &plan.actions {
            let key = (plan.namespace.clone(), a.claim().to_string());
            match a {
                ClaimAction::BindPv { pv, .. } => {
                    self.pvs.insert(pv.clone(), key.clone());
                    self.claims.insert(key, Given::Pv(pv.clone()));
                }
                ClaimAction::SelectNode { node, .. } => {
                    self.claims.insert(key, Given::Node(node.clone()));
                }
                ClaimAction::Bound { .. } => {}
            }
        }
    }

    /// Keeps the PV out of this pass: after [`VolumeError::PvTaken`], before planning again
    /// with a snapshot that may not show the other writer's change yet.
    pub fn exclude(&mut self, pv: &str) {
        self.pvs.entry(pv.to_string()).or_default();
    }

    /// True when the PV was given to a claim in this pass (or excluded).
    pub fn contains(&self, pv: &str) -> bool {
        self.pvs.contains_key(pv)
    }

    fn given(&self, namespace: &str, claim: &str) -> Option<&Given> {
        self.claims.get(&(namespace.to_string(), claim.to_string()))
    }
}

/// Why a node cannot serve one claim.
pub(crate) struct Reject<'a> {
    pub need: &'a ClaimNeed<'a>,
    pub reason: &'static str,
}

/// Decides every claim on one node; the pod's own claims never share a PV either.
pub(crate) fn place_on_node<'a>(
    needs: &'a [ClaimNeed<'a>],
    snap: &VolumeSnapshot,
    namespace: &str,
    node: &Node,
    reserved: &Reserved,
) -> Result<Vec<ClaimAction>, Reject<'a>> {
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let mut chosen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for n in needs {
        let reject = |reason| Err(Reject { need: n, reason });
        let action = match n.need {
            Need::Bound(pv) => {
                if !pv_node_affinity_matches(pv, node) {
                    return reject(REASON_AFFINITY);
                }
                let pv = pv.metadata.name.clone().unwrap_or_default();
                ClaimAction::Bound {
                    claim: n.name.clone(),
                    pv,
                }
            }
            Need::Selected(sel) => {
                if sel != node_name {
                    return reject(REASON_NO_PV);
                }
                ClaimAction::SelectNode {
                    claim: n.name.clone(),
                    node: node_name.to_string(),
                    already: true,
                }
            }
            Need::Static | Need::Dynamic(_) => {
                let pv = match reserved.given(namespace, &n.name) {
                    // Shared with a gang mate planned earlier: the same PV or node, if here.
                    Some(Given::Pv(pv)) => {
                        if !snap
                            .pv(pv)
                            .is_some_and(|p| pv_node_affinity_matches(p, node))
                        {
                            return reject(REASON_AFFINITY);
                        }
                        Some(pv.clone())
                    }
                    Some(Given::Node(sel)) if sel == node_name => {
                        out.push(ClaimAction::SelectNode {
                            claim: n.name.clone(),
                            node: node_name.to_string(),
                            already: true,
                        });
                        continue;
                    }
                    Some(Given::Node(_)) => return reject(REASON_NO_PV),
                    None => {
                        let taken = |p: &str| reserved.contains(p) || chosen.iter().any(|c| c == p);
                        pick(&n.pool, node, &taken).and_then(|p| p.metadata.name.clone())
                    }
                };
                match (pv, n.need) {
                    (Some(pv), _) => {
                        chosen.push(pv.clone());
                        ClaimAction::BindPv {
                            claim: n.name.clone(),
                            pv,
                        }
                    }
                    (None, Need::Dynamic(sc)) => {
                        if !allowed_topologies_match(sc.allowed_topologies.as_deref(), node) {
                            return reject(REASON_TOPOLOGY);
                        }
                        ClaimAction::SelectNode {
                            claim: n.name.clone(),
                            node: node_name.to_string(),
                            already: false,
                        }
                    }
                    (None, _) => return reject(REASON_NO_PV),
                }
            }
        };
        out.push(action);
    }
    Ok(out)
}

/// Plans the pod's volumes on the node Slurm chose. Call once per pod, in gang order, adding
/// each plan to `reserved` before planning the next pod. The error names the claim that
/// cannot be served there (or why the pod is not submittable any more).
pub fn plan_pod(
    pod: &Pod,
    snap: &VolumeSnapshot,
    node: &Node,
    reserved: &Reserved,
) -> Result<VolumePlan, VolumeError> {
    let needs = resolve(pod, snap)?;
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let node_name = node.metadata.name.clone().unwrap_or_default();
    match place_on_node(&needs, snap, &namespace, node, reserved) {
        Ok(actions) => Ok(VolumePlan {
            namespace,
            node: node_name,
            actions,
        }),
        Err(Reject { need, reason })
            if reason == REASON_NO_PV
                && matches!(need.need, Need::Static | Need::Dynamic(_))
                && reserved.given(&namespace, &need.name).is_none() =>
        {
            Err(VolumeError::NoVolumeOnNode {
                claim: need.name.clone(),
                node: node_name,
                wanted: format!(
                    "class {:?}, at least {} bytes, access modes {:?}, volume mode {}",
                    need.class,
                    claim_request(need.pvc)?.ceil_units(),
                    claim_modes(need.pvc),
                    claim_volume_mode(need.pvc),
                ),
            })
        }
        Err(Reject { need, reason }) => Err(VolumeError::WrongNode {
            claim: need.name.clone(),
            node: node_name,
            reason,
        }),
    }
}
