//! Which Slurm nodes the bridge may change or remove: the ones it registered. Pure: no I/O.
//!
//! The bridge marks every external node it registers with the node comment
//! [`owner_comment`] (`slurm-bridge: registered for Kubernetes node <name>`), written by
//! `POST /node/{name}` right after `POST /new/node/` (Slurm 26.05 refuses `Comment=` and
//! `Extra=` in the `node_conf` line); slurmctld keeps the comment in its saved state, so it
//! survives restarts (tried with slurm-testenv's `restart slurmctld`).
//!
//! With `clusterName` set, the mark names the cluster (`... node <name> in cluster <c>`): a node
//! marked by another cluster's bridge is foreign; a mark without a cluster is anyone's (as
//! unstamped jobs are, [`crate::workload::admin_comment::AdminComment::belongs_to`]); a bridge
//! without a name leaves nodes marked with one alone.
//!
//! The Go original writes no mark. To take over its registrations during a cutover, an
//! external node with **no comment at all** whose Kubernetes node carries the external-node
//! label is adopted (marked): the original registers only labelled nodes, and labelling a node
//! asks the bridge to manage its Slurm node. Every other node (not external, a comment someone
//! else wrote, or unmarked without the label) is never drained, re-created or deleted.

use crate::controllers::node::drain::is_external;
use slurm_rest::models::Node as SlurmNode;

/// The start of every comment the bridge writes on a node it registered.
pub const COMMENT_MARK: &str = "slurm-bridge: registered for Kubernetes node ";

/// Between the Kubernetes node's name and the cluster's in a mark.
const CLUSTER_MARK: &str = " in cluster ";

/// The comment marking a Slurm node registered for Kubernetes node `kube_name` by the bridge
/// of cluster `cluster`.
pub fn owner_comment(kube_name: &str, cluster: Option<&str>) -> String {
    match cluster.filter(|c| !c.is_empty()) {
        Some(c) => format!("{COMMENT_MARK}{kube_name}{CLUSTER_MARK}{c}"),
        None => format!("{COMMENT_MARK}{kube_name}"),
    }
}

/// The Kubernetes node a marked Slurm node was registered for, and the cluster the mark names
/// (None: not marked).
pub fn marked(slurm: &SlurmNode) -> Option<(&str, Option<&str>)> {
    let rest = slurm.comment.as_deref()?.strip_prefix(COMMENT_MARK)?;
    Some(match rest.split_once(CLUSTER_MARK) {
        Some((node, cluster)) => (node, Some(cluster)),
        None => (rest, None),
    })
}

/// The Kubernetes node a Slurm node was registered for by the bridge of cluster `cluster`
/// (None: not marked, or marked by another cluster's bridge).
pub fn owner<'a>(slurm: &'a SlurmNode, cluster: Option<&str>) -> Option<&'a str> {
    let (node, theirs) = marked(slurm)?;
    let ours = cluster.filter(|c| !c.is_empty());
    match (theirs, ours) {
        (None, _) => Some(node),
        (Some(t), Some(o)) if t == o => Some(node),
        _ => None,
    }
}

/// What the bridge may do with an existing Slurm node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Registered (marked) by the bridge: managed.
    Ours,
    /// An unmarked external node behind a labelled Kubernetes node (the Go original's
    /// registration, or a crash between creation and marking): mark it, then manage it.
    Adopt,
    /// Run by slurmd (a hybrid node): never changed.
    NotExternal,
    /// External, but someone else's (an admin's node, or a comment the bridge did not write):
    /// left alone.
    Foreign,
}

/// The ownership of `slurm` for the bridge of cluster `cluster`; `labelled` is whether its
/// Kubernetes node has the external-node label.
pub fn ownership(slurm: &SlurmNode, labelled: bool, cluster: Option<&str>) -> Ownership {
    if !is_external(slurm) {
        return Ownership::NotExternal;
    }
    if owner(slurm, cluster).is_some() {
        return Ownership::Ours;
    }
    let unmarked = slurm.comment.as_deref().is_none_or(|c| c.trim().is_empty());
    if labelled && unmarked {
        Ownership::Adopt
    } else {
        Ownership::Foreign
    }
}

/// The warning for a foreign external node (shown once per node as an Event and a log line).
pub fn foreign_warning(slurm: &SlurmNode, labelled: bool) -> String {
    let comment = match slurm.comment.as_deref() {
        Some(c) if !c.trim().is_empty() => format!("its comment is {c:?}"),
        _ => "it has no comment".to_string(),
    };
    if labelled {
        format!(
            "Slurm external node {} was not registered by slurm-bridge ({comment}, not starting \
             with {COMMENT_MARK:?}): it is not updated, re-created or removed; clear its comment \
             (scontrol update nodename={} comment=) to hand it over",
            slurm.name, slurm.name
        )
    } else {
        format!(
            "Slurm external node {} was not registered by slurm-bridge ({comment}) and this node \
             lacks the external-node label: slurm-bridge leaves it alone",
            slurm.name
        )
    }
}

/// The Slurm nodes the bridge of cluster `cluster` registered whose Kubernetes node is gone:
/// marked by it, external, and named by no Kubernetes node in `kube_slurm_names` (the Slurm
/// names of the Kubernetes nodes).
pub fn orphans<'a>(
    slurm_nodes: impl IntoIterator<Item = &'a SlurmNode>,
    kube_slurm_names: &std::collections::BTreeSet<String>,
    cluster: Option<&str>,
) -> Vec<&'a SlurmNode> {
    slurm_nodes
        .into_iter()
        .filter(|n| is_external(n) && owner(n, cluster).is_some())
        .filter(|n| !kube_slurm_names.contains(&n.name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use slurm_rest::models::NodeState;
    use std::collections::BTreeSet;

    fn node(name: &str, external: bool, comment: Option<&str>) -> SlurmNode {
        let mut state = vec![NodeState::Idle];
        if external {
            state.push(NodeState::External);
        }
        SlurmNode {
            name: name.into(),
            state,
            comment: comment.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn ownership_table() {
        let ours = owner_comment("k1", None);
        let cases = [
            // (external, comment, labelled, expected)
            (true, Some(ours.as_str()), true, Ownership::Ours),
            (true, Some(ours.as_str()), false, Ownership::Ours),
            (true, None, true, Ownership::Adopt),
            (true, Some(""), true, Ownership::Adopt),
            (true, None, false, Ownership::Foreign),
            (true, Some("rack 4, admin"), true, Ownership::Foreign),
            (
                true,
                Some("slurm-bridge: something else"),
                true,
                Ownership::Foreign,
            ),
            (false, Some(ours.as_str()), true, Ownership::NotExternal),
            (false, None, false, Ownership::NotExternal),
        ];
        for (external, comment, labelled, want) in cases {
            let n = node("s1", external, comment);
            assert_eq!(
                ownership(&n, labelled, None),
                want,
                "external={external} comment={comment:?} labelled={labelled}"
            );
        }
    }

    #[test]
    fn owner_reads_back_the_kubernetes_name() {
        let n = node("s1", true, Some(&owner_comment("kube-a", None)));
        assert_eq!(owner(&n, None), Some("kube-a"));
        assert_eq!(owner(&node("s1", true, Some("x")), None), None);
    }

    #[test]
    fn a_node_marked_by_another_clusters_bridge_is_foreign() {
        let east = node("s1", true, Some(&owner_comment("kube-a", Some("east"))));
        assert_eq!(
            east.comment.as_deref(),
            Some("slurm-bridge: registered for Kubernetes node kube-a in cluster east")
        );
        assert_eq!(owner(&east, Some("east")), Some("kube-a"));
        assert_eq!(ownership(&east, true, Some("east")), Ownership::Ours);
        assert_eq!(owner(&east, Some("west")), None);
        assert_eq!(ownership(&east, true, Some("west")), Ownership::Foreign);
        assert_eq!(ownership(&east, true, None), Ownership::Foreign);
        // An unnamed mark (before clusters were named) is anyone's.
        let old = node("s2", true, Some(&owner_comment("kube-b", None)));
        assert_eq!(ownership(&old, true, Some("west")), Ownership::Ours);
        let kube = BTreeSet::new();
        let names: Vec<&str> = orphans([&east, &old], &kube, Some("west"))
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(
            names,
            ["s2"],
            "another cluster's node is never an orphan of ours"
        );
    }

    #[test]
    fn orphans_are_marked_external_nodes_without_a_kubernetes_node() {
        let nodes = [
            node("gone", true, Some(&owner_comment("gone", None))),
            node("here", true, Some(&owner_comment("here", None))),
            node("admin", true, None),
            node("hybrid", false, Some(&owner_comment("hybrid", None))),
        ];
        let kube: BTreeSet<String> = ["here".to_string()].into();
        let names: Vec<&str> = orphans(&nodes, &kube, None)
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(names, ["gone"]);
    }
}
