//! Before submit: which of the candidate nodes can serve the pod's volumes, or why the pod
//! cannot be submitted yet (kube-scheduler's VolumeBinding PreFilter and Filter).

use std::collections::BTreeMap;

use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::core::v1::Node;

use super::error::VolumeError;
use super::matching::{claim_modes, claim_ref_is, claim_request, claim_volume_mode};
use super::plan::{Reserved, place_on_node};
use super::snapshot::{ClaimNeed, Need, VolumeSnapshot, resolve};

/// The nodes that can serve a pod's volumes, with the reason for each node that cannot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeFit {
    /// Every candidate node by Kubernetes name: `None` when it fits, else the reason.
    pub per_node: BTreeMap<String, Option<&'static str>>,
    /// What shaped the answer; equal keys give equal answers within one snapshot.
    pub key: FitKey,
}

impl VolumeFit {
    /// True when the node was a candidate and can serve the pod's volumes.
    pub fn fits(&self, node: &str) -> bool {
        matches!(self.per_node.get(node), Some(None))
    }

    /// Why the node cannot serve the pod's volumes (`None` when it can, or was no candidate).
    pub fn reason(&self, node: &str) -> Option<&'static str> {
        self.per_node.get(node).copied().flatten()
    }

    /// The nodes to exclude, with their reasons.
    pub fn rejected(&self) -> impl Iterator<Item = (&str, &'static str)> {
        self.per_node
            .iter()
            .filter_map(|(n, r)| r.map(|r| (n.as_str(), r)))
    }

    /// True when the volumes rule out no node at all (no claims, or none constrains).
    pub fn is_unconstrained(&self) -> bool {
        self.key.0.is_empty()
    }
}

/// A sorted list of the constraints that shaped a [`VolumeFit`]: a bound PV's node affinity,
/// an unbound claim's class and shape (size, modes, volume mode, selector), a selected node.
/// Pods of a gang whose claims have the same shape share a key; empty when nothing constrains.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FitKey(pub Vec<String>);

fn key_part(snap: &VolumeSnapshot, namespace: &str, n: &ClaimNeed<'_>) -> Option<String> {
    let shape = |kind: &str| -> String {
        let selector = n.pvc.spec.as_ref().and_then(|s| s.selector.as_ref());
        let request = claim_request(n.pvc).map(|q| q.nanos()).unwrap_or_default();
        let mut s = format!(
            "{kind} class={} request={request} modes={} mode={} selector={}",
            n.class,
            claim_modes(n.pvc).join(","),
            claim_volume_mode(n.pvc),
            serde_json::to_string(&selector).unwrap_or_default(),
        );
        // A PV pre-bound to this very claim makes the answer the claim's own.
        if snap.pvs().any(|pv| claim_ref_is(pv, n.pvc)) {
            s.push_str(&format!(" claim={namespace}/{}", n.name));
        }
        s
    };
    match n.need {
        Need::Bound(pv) => {
            let req = pv
                .spec
                .as_ref()
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref())?;
            Some(format!(
                "affinity={}",
                serde_json::to_string(req).unwrap_or_default()
            ))
        }
        Need::Selected(node) => Some(format!("selected-node={node}")),
        Need::Static => Some(shape("static")),
        Need::Dynamic(sc) => {
            let topo = serde_json::to_string(&sc.allowed_topologies).unwrap_or_default();
            Some(format!("{} topologies={topo}", shape("dynamic")))
        }
    }
}

/// Decides, for each candidate node, whether it can serve the pod's volumes. `Err` means the
/// pod cannot be submitted yet (claim or class missing, unbound immediate claim, ...): show
/// the message and retry when a PVC, PV or StorageClass changes. Counts each node alone: two
/// pods of a gang on one node may still want the same static PV ([`plan_pod`](super::plan_pod) then says so).
pub fn fit<'n>(
    pod: &Pod,
    snap: &VolumeSnapshot,
    nodes: impl IntoIterator<Item = &'n Node>,
) -> Result<VolumeFit, VolumeError> {
    let needs = resolve(pod, snap)?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut key: Vec<String> = needs
        .iter()
        .filter_map(|n| key_part(snap, namespace, n))
        .collect();
    key.sort();
    key.dedup();
    let none = Reserved::default();
    let mut per_node = BTreeMap::new();
    for node in nodes {
        let Some(name) = node.metadata.name.clone() else {
            continue;
        };
        let verdict = match place_on_node(&needs, snap, namespace, node, &none) {
            Ok(_) => None,
            Err(r) => Some(r.reason),
        };
        per_node.insert(name, verdict);
    }
    Ok(VolumeFit {
        per_node,
        key: FitKey(key),
    })
}
