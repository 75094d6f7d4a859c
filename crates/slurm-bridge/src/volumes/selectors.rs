//! Selector matching on labels: PV node affinity (node selector terms), a PVC's label
//! selector on PV labels, and a storage class's allowed topologies.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelector, PersistentVolume, TopologySelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::k8s::selector::term_matches;

type Labels = BTreeMap<String, String>;

fn node_labels(node: &Node) -> &Labels {
    static EMPTY: Labels = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// The PV's `spec.nodeAffinity.required` admits the node (no affinity admits every node).
pub fn pv_node_affinity_matches(pv: &PersistentVolume, node: &Node) -> bool {
    let required = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    match required {
        None => true,
        Some(sel) => node_selector_matches(sel, node),
    }
}

/// Terms are ORed; an empty list of terms matches no node (as Kubernetes).
pub fn node_selector_matches(sel: &NodeSelector, node: &Node) -> bool {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    sel.node_selector_terms
        .iter()
        .any(|t| term_matches(t, node_labels(node), name))
}

/// A PVC's `spec.selector` on a PV's labels: no selector or an empty one matches all;
/// an unknown operator matches nothing (Kubernetes rejects such a selector).
pub fn label_selector_matches(sel: Option<&LabelSelector>, labels: Option<&Labels>) -> bool {
    static EMPTY: Labels = BTreeMap::new();
    sel.is_none_or(|sel| {
        crate::k8s::selector::label_selector_matches(sel, labels.unwrap_or(&EMPTY))
    })
}

/// A storage class's `allowedTopologies`: terms ORed, each term's expressions ANDed (the
/// node's label value must be one of the listed values); none listed admits every node.
pub fn allowed_topologies_match(terms: Option<&[TopologySelectorTerm]>, node: &Node) -> bool {
    let terms = terms.unwrap_or_default();
    if terms.is_empty() {
        return true;
    }
    let labels = node_labels(node);
    terms.iter().any(|t| {
        t.match_label_expressions
            .iter()
            .flatten()
            .all(|r| labels.get(&r.key).is_some_and(|v| r.values.contains(v)))
    })
}
