//! Which pod goes to which node of a Slurm allocation.
//!
//! Deterministic, and stable: a pod already annotated with a node of the allocation keeps it (the
//! original re-assigned arbitrary nodes on every pass, quirk 15, which the webhook then rejected
//! for running pods).
//!
//! Pods share a node when the group asks for it (`pods-per-node`, Slurm's tasks per node).
//!
//! An allocation may have fewer nodes than the job has pods: a coscheduling PodGroup asks Slurm
//! for `minMember..group size` nodes, and Slurm grants any count in that range (tried on Slurm
//! 26.05: `nodes=3, minimum_nodes=2, maximum_nodes=3` with 2 nodes free runs on 2). Then the pods
//! that fit are assigned, as the original does, and the others are left out of the plan; the
//! scheduler gives each of them a job of its own (docs/scheduler.md, "Pods the allocation does
//! not cover").

use std::collections::BTreeMap;

/// Why an allocation cannot be mapped onto Kubernetes nodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    #[error(
        "Slurm node {0} matches no Kubernetes node (no node of that name or slinky.slurm.net/slurm-nodename label)"
    )]
    UnknownSlurmNode(String),
}

/// Maps allocated Slurm node names to Kubernetes node names with `slurm_to_kube`.
pub fn kube_nodes(
    allocated: &[String],
    slurm_to_kube: &BTreeMap<String, String>,
) -> Result<Vec<String>, AssignError> {
    allocated
        .iter()
        .map(|s| {
            slurm_to_kube
                .get(s)
                .cloned()
                .ok_or_else(|| AssignError::UnknownSlurmNode(s.clone()))
        })
        .collect()
}

/// Assigns nodes to pods, at most `per_node` pods (the job's `pods-per-node`, at least one) on
/// each node. `pods` are `(pod key, current node)`: the node a bound pod is on, or an unbound
/// pod's node annotation. A pod keeps its current node when the allocation has it and it has
/// room; the others fill the remaining room in the order of their keys, node by node in name
/// order. Returns `pod key -> node`; pods beyond the room are not in it.
pub fn assign(
    pods: &[(String, Option<String>)],
    nodes: &[String],
    per_node: usize,
) -> BTreeMap<String, String> {
    let per_node = per_node.max(1);
    let mut room: BTreeMap<&String, usize> = nodes.iter().map(|n| (n, per_node)).collect();
    let mut out = BTreeMap::new();
    let mut rest = Vec::new();
    for (pod, current) in pods {
        match current
            .as_ref()
            .and_then(|n| room.get_mut(n).filter(|r| **r > 0).map(|r| (n, r)))
        {
            Some((node, r)) => {
                *r -= 1;
                out.insert(pod.clone(), node.clone());
            }
            None => rest.push(pod),
        }
    }
    rest.sort();
    let free = room
        .into_iter()
        .flat_map(|(n, r)| std::iter::repeat_n(n, r));
    for (pod, node) in rest.into_iter().zip(free) {
        out.insert(pod.clone(), node.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn keeps_existing_valid_annotations_and_fills_the_rest_in_order() {
        let pods = vec![
            ("ns/a".to_string(), None),
            ("ns/b".to_string(), Some("n3".to_string())),
            ("ns/c".to_string(), Some("gone".to_string())),
        ];
        let got = assign(&pods, &s(&["n1", "n2", "n3"]), 1);
        assert_eq!(got["ns/b"], "n3");
        assert_eq!(got["ns/a"], "n1");
        assert_eq!(got["ns/c"], "n2");
    }

    #[test]
    fn fewer_nodes_than_pods_assigns_what_fits() {
        // Slurm granted 2 nodes to a job of 3 pods (minimum_nodes 2): two are placed, the pod
        // already on a node of the allocation among them, and the last by key is left out.
        let pods = vec![
            ("ns/a".to_string(), None),
            ("ns/b".to_string(), None),
            ("ns/c".to_string(), Some("n2".to_string())),
        ];
        let got = assign(&pods, &s(&["n1", "n2"]), 1);
        assert_eq!(got.len(), 2);
        assert_eq!(got["ns/c"], "n2");
        assert_eq!(got["ns/a"], "n1");
        assert!(!got.contains_key("ns/b"));
        // No node at all: nobody is placed, nothing fails.
        assert!(assign(&pods, &[], 1).is_empty());
    }

    #[test]
    fn pods_per_node_share_nodes() {
        // 3 pods, 2 per node, on 2 nodes: the bound pod keeps n2, the others fill n1 first.
        let pods = vec![
            ("ns/a".to_string(), None),
            ("ns/b".to_string(), None),
            ("ns/c".to_string(), Some("n2".to_string())),
        ];
        let got = assign(&pods, &s(&["n1", "n2"]), 2);
        assert_eq!(got["ns/c"], "n2");
        assert_eq!(got["ns/a"], "n1");
        assert_eq!(got["ns/b"], "n1");
        // One node of room 2: the third pod is left out.
        let got = assign(&pods, &s(&["n1"]), 2);
        assert_eq!(got.len(), 2);
        assert!(!got.contains_key("ns/c"));
        // Two pods claiming one node of room 1: the first keeps it, the second moves.
        let both = vec![
            ("ns/a".to_string(), Some("n1".to_string())),
            ("ns/b".to_string(), Some("n1".to_string())),
        ];
        let got = assign(&both, &s(&["n1", "n2"]), 1);
        assert_eq!((got["ns/a"].as_str(), got["ns/b"].as_str()), ("n1", "n2"));
    }

    #[test]
    fn slurm_names_map_to_kube_names() {
        let map: BTreeMap<String, String> = [("slurm-1".to_string(), "kube-1".to_string())]
            .into_iter()
            .collect();
        assert_eq!(kube_nodes(&s(&["slurm-1"]), &map).unwrap(), s(&["kube-1"]));
        assert_eq!(
            kube_nodes(&s(&["slurm-2"]), &map),
            Err(AssignError::UnknownSlurmNode("slurm-2".into()))
        );
    }
}
