//! The default scheduler's node filters, one node and one pod at a time: readiness, cordon,
//! taints against tolerations, nodeSelector, required node affinity, resource fit.

use super::Infeasible;
use super::Shortfall;
use crate::k8s::selector::term_matches;
use crate::k8s::slim_pod::Pod;
use crate::resources::Quantity;
use crate::resources::pod_resources::{ResourceList, pod_requests};
use crate::wellknown::DEVICECLASS_PREFIX;
use k8s_openapi::api::core::v1::{Node, Taint, Toleration};

/// What a node's allocatable must hold for a pod (NodeResourcesFit): every positive effective
/// request (containers, init containers and sidecars, overhead, pod-level resources; see
/// `pod_requests`). DRA extended resources (`deviceclass.resource.kubernetes.io/...`) are left
/// out: no node advertises them, Slurm accounts for them as GRES. The node's pod count is not
/// checked: it limits pods running at once, which is Slurm's side. `None` when a quantity does
/// not parse (translation reports that).
pub fn fit_requests(pod: &Pod) -> Option<ResourceList> {
    let mut requests = pod_requests(pod.spec.as_ref()?).ok()?;
    requests.retain(|name, q| *q > Quantity::ZERO && !name.starts_with(DEVICECLASS_PREFIX));
    Some(requests)
}

/// Whether a node's allocatable can hold `requests` at all (nothing else running on it). A
/// resource the node does not advertise counts as zero, as in kube-scheduler.
pub fn fits(requests: &ResourceList, node: &Node) -> Result<(), Infeasible> {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let short: Vec<Shortfall> = requests
        .iter()
        .filter_map(|(resource, &requested)| {
            let allocatable = allocatable
                .and_then(|a| a.get(resource))
                .and_then(|q| Quantity::from_k8s(q).ok())
                .unwrap_or(Quantity::ZERO);
            (requested > allocatable).then(|| Shortfall {
                resource: resource.clone(),
                requested,
                allocatable,
            })
        })
        .collect();
    if short.is_empty() {
        Ok(())
    } else {
        Err(Infeasible::Insufficient(short))
    }
}

/// Checks one node against one pod. `extra` tolerations count as the pod's own (the bridge
/// toleration, which the pod gets before it is bound).
pub fn check(pod: &Pod, node: &Node, extra: &[Toleration]) -> Result<(), Infeasible> {
    check_with(pod, fit_requests(pod).as_ref(), node, extra)
}

/// [`check`] with the pod's [`fit_requests`] computed once by the caller.
pub(super) fn check_with(
    pod: &Pod,
    requests: Option<&ResourceList>,
    node: &Node,
    extra: &[Toleration],
) -> Result<(), Infeasible> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if !ready {
        return Err(Infeasible::NotReady);
    }
    let pod_spec = pod.spec.as_ref();
    let own = pod_spec
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let tolerated = |taint: &Taint| own.iter().chain(extra).any(|tol| tolerates(tol, taint));
    let spec = node.spec.as_ref();
    if spec.and_then(|s| s.unschedulable) == Some(true) {
        let t = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerated(&t) {
            return Err(Infeasible::Unschedulable);
        }
    }
    for taint in spec.and_then(|s| s.taints.as_deref()).unwrap_or_default() {
        if taint.effect == "PreferNoSchedule" {
            continue;
        }
        if !tolerated(taint) {
            let value = taint.value.as_deref().unwrap_or("");
            return Err(Infeasible::UntoleratedTaint(format!(
                "{}={}:{}",
                taint.key, value, taint.effect
            )));
        }
    }
    let empty = std::collections::BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    if let Some(selector) = pod_spec.and_then(|s| s.node_selector.as_ref())
        && !selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return Err(Infeasible::NodeSelector);
    }
    let required = pod_spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(required) = required {
        let name = node.metadata.name.as_deref().unwrap_or("");
        if !required
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, labels, name))
        {
            return Err(Infeasible::NodeAffinity);
        }
    }
    match requests {
        Some(requests) => fits(requests, node),
        None => Ok(()),
    }
}

/// Kubernetes toleration matching (`Toleration.ToleratesTaint`).
pub fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = tol.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    let operator = tol.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        // An empty key with operator Exists matches every taint.
        return operator == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match operator {
        "Exists" => true,
        "Equal" | "" => tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}
