//! Which pod goes to which node of a Slurm allocation.
//!
//! Deterministic, and stable: a pod already annotated with a node of the allocation keeps it (the
//! original re-assigned arbitrary nodes on every pass, quirk 15, which the webhook then rejected
//! for running pods).

use std::collections::{BTreeMap, BTreeSet};

/// Why an allocation cannot be mapped onto Kubernetes nodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    #[error(
        "Slurm node {0} matches no Kubernetes node (no node of that name or slinky.slurm.net/slurm-nodename label)"
    )]
    UnknownSlurmNode(String),
    #[error("Slurm allocated {nodes} node(s) for {pods} pod(s)")]
    TooFewNodes { nodes: usize, pods: usize },
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

/// Assigns one distinct node to each pod. `pods` are `(pod key, current node annotation)`.
/// Returns `pod key -> node`.
pub fn assign(
    pods: &[(String, Option<String>)],
    nodes: &[String],
) -> Result<BTreeMap<String, String>, AssignError> {
    let mut free: BTreeSet<&String> = nodes.iter().collect();
    if free.len() < pods.len() {
        return Err(AssignError::TooFewNodes {
            nodes: free.len(),
            pods: pods.len(),
        });
    }
    let mut out = BTreeMap::new();
    let mut rest = Vec::new();
    for (pod, current) in pods {
        match current.as_ref().filter(|n| free.contains(n)) {
            Some(node) => {
                free.remove(node);
                out.insert(pod.clone(), node.clone());
            }
            None => rest.push(pod),
        }
    }
    let mut sorted_rest: Vec<&String> = rest;
    sorted_rest.sort();
    for (pod, node) in sorted_rest.into_iter().zip(free) {
        out.insert(pod.clone(), node.clone());
    }
    Ok(out)
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
        let got = assign(&pods, &s(&["n1", "n2", "n3"])).unwrap();
        assert_eq!(got["ns/b"], "n3");
        assert_eq!(got["ns/a"], "n1");
        assert_eq!(got["ns/c"], "n2");
    }

    #[test]
    fn too_few_nodes_is_an_error() {
        let pods = vec![("ns/a".to_string(), None), ("ns/b".to_string(), None)];
        assert_eq!(
            assign(&pods, &s(&["n1"])),
            Err(AssignError::TooFewNodes { nodes: 1, pods: 2 })
        );
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
