//! Which Kubernetes nodes a pod may run on, by the default scheduler's rules (nodeSelector,
//! required node affinity, taints against tolerations, unschedulable, NotReady, resource fit),
//! and which Slurm nodes must therefore be excluded from the pod's external job.
//!
//! The original left this to kube-scheduler's filter plugins and sent the survivors as
//! `required_nodes`; that asks Slurm for *all* of them (reference §10). Here the bridge sends
//! the others as `excluded_nodes`, and Slurm picks among the rest.
//!
//! Resource fit (the original profile's `NodeResourcesFit`, reference §2.6) compares the pod's
//! effective requests with the node's *allocatable* alone: a node that could never hold the pod
//! is excluded. What other pods use is not subtracted; Slurm owns placement and capacity
//! accounting, and its allocation decides whether there is room now.

mod filters;
mod infeasible;
mod key;
#[cfg(test)]
mod tests;

use filters::check_with;
pub use filters::{check, fit_requests, fits, tolerates};
use infeasible::show;
pub use infeasible::{Infeasible, Shortfall};
pub use key::constraints_key;

use crate::k8s::node::slurm_node_name;
use crate::k8s::slim_pod::Pod;
use crate::resources::Quantity;
use crate::resources::pod_resources::ResourceList;
use k8s_openapi::api::core::v1::{Node, Toleration};
use std::collections::BTreeSet;

/// The outcome of filtering the cluster's nodes for a group of pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Slurm names of nodes every pod of the group may use.
    pub feasible: BTreeSet<String>,
    /// Slurm nodes to exclude: every known Slurm node that is not feasible.
    pub excluded: Vec<String>,
    /// For users: why nodes were rejected, most common reasons first (reason, count).
    pub rejections: Vec<(String, usize)>,
}

/// Filters `nodes` for every pod in `pods` (a node must suit all of them: one external job, one
/// node set) and computes the Slurm nodes to exclude among `slurm_nodes`.
pub fn place(
    pods: &[Pod],
    nodes: &[std::sync::Arc<Node>],
    slurm_nodes: &BTreeSet<String>,
    extra: &[Toleration],
) -> Placement {
    let mut feasible = BTreeSet::new();
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    // Per resource short: nodes, the largest request, the largest allocatable among those nodes.
    let mut short: std::collections::BTreeMap<String, (usize, Quantity, Quantity)> =
        Default::default();
    let requests: Vec<Option<ResourceList>> = pods.iter().map(fit_requests).collect();
    for node in nodes {
        let verdict = pods
            .iter()
            .zip(&requests)
            .map(|(p, r)| check_with(p, r.as_ref(), node, extra))
            .find(Result::is_err)
            .unwrap_or(Ok(()));
        match verdict {
            Ok(()) => {
                feasible.insert(slurm_node_name(node));
            }
            Err(Infeasible::Insufficient(list)) => {
                for s in list {
                    let e = short.entry(s.resource).or_default();
                    e.0 += 1;
                    e.1 = e.1.max(s.requested);
                    e.2 = e.2.max(s.allocatable);
                }
            }
            Err(why) => *reasons.entry(why.to_string()).or_default() += 1,
        }
    }
    for (resource, (n, requested, allocatable)) in short {
        let reason = format!(
            "Insufficient {resource} (requested {}, largest node allocatable {})",
            show(&resource, requested),
            show(&resource, allocatable)
        );
        *reasons.entry(reason).or_default() += n;
    }
    let excluded = slurm_nodes
        .iter()
        .filter(|n| !feasible.contains(*n))
        .cloned()
        .collect();
    let feasible: BTreeSet<String> = feasible
        .into_iter()
        .filter(|n| slurm_nodes.contains(n))
        .collect();
    let mut rejections: Vec<(String, usize)> = reasons.into_iter().collect();
    rejections.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Placement {
        feasible,
        excluded,
        rejections,
    }
}
