//! Facts about a Kubernetes node that more than one component reads: the Slurm node behind it,
//! and what of it placement depends on.

use crate::wellknown::LABEL_SLURM_NODENAME;
use k8s_openapi::api::core::v1::Node;

/// The Slurm NodeName of a Kubernetes node: the `slinky.slurm.net/slurm-nodename` label when
/// present (even empty), else the node's name.
pub fn slurm_node_name(node: &Node) -> String {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SLURM_NODENAME))
        .cloned()
        .unwrap_or_else(|| node.metadata.name.clone().unwrap_or_default())
}

/// What of a node placement reads (labels, taints, unschedulable, Ready, allocatable), hashed: a
/// change of anything else (status heartbeats) does not invalidate cached placements.
pub fn placement_fingerprint(node: &Node) -> u64 {
    use std::hash::{Hash, Hasher};
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    let spec = node.spec.as_ref();
    let text = serde_json::json!([
        node.metadata.labels,
        spec.and_then(|s| s.taints.as_ref()),
        spec.and_then(|s| s.unschedulable),
        ready,
        node.status.as_ref().and_then(|s| s.allocatable.as_ref()),
    ])
    .to_string();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(extra: serde_json::Value) -> Node {
        let mut v = json!({"metadata": {"name": "n1"}});
        if let Some(labels) = extra.pointer("/metadata/labels") {
            v["metadata"]["labels"] = labels.clone();
        }
        serde_json::from_value(v).expect("node")
    }

    #[test]
    fn slurm_name_from_label_even_empty() {
        assert_eq!(slurm_node_name(&node(json!({}))), "n1");
        let labelled = node(json!({"metadata": {"labels": {LABEL_SLURM_NODENAME: "slurm-1"}}}));
        assert_eq!(slurm_node_name(&labelled), "slurm-1");
        let empty = node(json!({"metadata": {"labels": {LABEL_SLURM_NODENAME: ""}}}));
        assert_eq!(slurm_node_name(&empty), "");
    }
}
