//! What triggers a node pass: node changes that matter to it (heartbeats alone do not), and
//! the Kubernetes nodes behind the Slurm nodes a listing reports as changed.

use super::slurm_view;
use crate::k8s::slurm_node_name;
use crate::sync::MutexExt;
use crate::wellknown::{
    ANNOTATION_EXTERNAL_NODE_PARTITIONS, ANNOTATION_TOPOLOGY_SPEC, DEVICE_PLUGIN_GPUS,
    LABEL_EXTERNAL_NODE, LABEL_SLURM_NODENAME,
};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// What a pass reads from a node: a change to anything else (heartbeats, images) triggers no
/// pass.
pub(super) fn fingerprint(node: &Node) -> u64 {
    let labels = node.labels();
    let annotations = node.annotations();
    let spec = node.spec.as_ref();
    let status = node.status.as_ref();
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let watched = (
        node.uid(),
        labels.get(LABEL_EXTERNAL_NODE),
        labels.get(LABEL_SLURM_NODENAME),
        annotations.get(ANNOTATION_EXTERNAL_NODE_PARTITIONS),
        annotations.get(ANNOTATION_TOPOLOGY_SPEC),
        spec.and_then(|s| s.unschedulable),
        spec.and_then(|s| s.taints.as_ref()).map(|t| {
            t.iter()
                .map(|t| (&t.key, &t.value, &t.effect))
                .collect::<Vec<_>>()
        }),
        [
            "cpu",
            "memory",
            DEVICE_PLUGIN_GPUS[0],
            DEVICE_PLUGIN_GPUS[1],
        ]
        .map(|r| capacity.and_then(|c| c.get(r)).map(|q| &q.0)),
        ["cpu", "memory"].map(|r| allocatable.and_then(|a| a.get(r)).map(|q| &q.0)),
        status
            .and_then(|s| s.addresses.as_ref())
            .map(|a| a.iter().map(|a| (&a.type_, &a.address)).collect::<Vec<_>>()),
        slurm_view::current(node).map(|c| (&c.status, &c.reason, &c.message)),
    );
    let mut h = std::collections::hash_map::DefaultHasher::new();
    watched.hash(&mut h);
    h.finish()
}

/// Node changes that matter to a pass (see [`fingerprint`]); a node no longer cached (deleted)
/// is sent to `gone` instead (the orphan sweep removes its Slurm node).
pub(super) fn filter_node_changes(
    changes: impl Stream<Item = ObjectRef<Node>> + Send + 'static,
    nodes: Store<Node>,
    gone: tokio::sync::mpsc::UnboundedSender<()>,
) -> impl Stream<Item = ObjectRef<Node>> + Send + 'static {
    let seen: Arc<Mutex<HashMap<String, u64>>> = Default::default();
    changes.filter(move |r| {
        let pass = match nodes.get(r) {
            Some(node) => {
                let fp = fingerprint(&node);
                seen.locked().insert(r.name.clone(), fp) != Some(fp)
            }
            None => {
                seen.locked().remove(&r.name);
                let _ = gone.send(());
                false
            }
        };
        futures::future::ready(pass)
    })
}

/// The Kubernetes nodes behind the Slurm nodes each listing reports as changed.
pub(super) fn slurm_triggers(
    changes: tokio::sync::mpsc::UnboundedReceiver<Arc<Vec<String>>>,
    nodes: Store<Node>,
) -> impl Stream<Item = ObjectRef<Node>> + Send + 'static {
    futures::stream::unfold(
        changes,
        |mut rx| async move { rx.recv().await.map(|c| (c, rx)) },
    )
    .flat_map(move |changed| {
        let changed: BTreeSet<&String> = changed.iter().collect();
        let refs: Vec<ObjectRef<Node>> = nodes
            .state()
            .iter()
            .filter(|n| changed.contains(&slurm_node_name(n)))
            .map(|n| ObjectRef::from_obj(n.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(allocatable_cpu: &str, heartbeat: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "uid": "u1"},
            "status": {
                "capacity": {"cpu": "8", "memory": "16Gi"},
                "allocatable": {"cpu": allocatable_cpu, "memory": "15Gi"},
                "conditions": [{"type": "Ready", "status": "True",
                                "lastHeartbeatTime": heartbeat}],
            },
        }))
        .unwrap()
    }

    /// Registration reads the allocatable: a change of it is a pass; a heartbeat is not.
    #[test]
    fn allocatable_changes_trigger_a_pass_and_heartbeats_do_not() {
        let base = fingerprint(&node("8", "2026-12-05T00:00:00Z"));
        assert_eq!(base, fingerprint(&node("8", "2026-12-05T00:00:40Z")));
        assert_ne!(base, fingerprint(&node("7", "2026-12-05T00:00:00Z")));
    }
}
