//! Whether a ResourceClaim the kubelet asks to prepare is one this node's `dra.cpu` driver can
//! serve, and which CPUs it names. Pure: the claim is read by the caller.

use super::DRIVER;
use crate::node_agent::Topology;
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::collections::{BTreeMap, BTreeSet};

/// A claim prepared on this node: who it is, which pods may use it and which CPUs it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedClaim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `status.reservedFor` pods, by uid.
    pub pod_uids: BTreeSet<String>,
    /// The machine CPUs of its `dra.cpu` devices.
    pub cpus: BTreeSet<i64>,
    /// Its `dra.cpu` devices, in allocation order.
    pub devices: Vec<PreparedDevice>,
}

/// One allocated `dra.cpu` device of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedDevice {
    pub request: String,
    pub pool: String,
    pub device: String,
}

/// Why a claim cannot be prepared here (the kubelet shows it on the pod and retries).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("ResourceClaim {key} has uid {found}, the kubelet asked for uid {asked}")]
    OtherUid {
        key: String,
        asked: String,
        found: String,
    },
    #[error("ResourceClaim {key} is not allocated")]
    NotAllocated { key: String },
    #[error("ResourceClaim {key} is allocated to node(s) {nodes}, not to {node}")]
    OtherNode {
        key: String,
        node: String,
        nodes: String,
    },
    #[error("ResourceClaim {key} has no {DRIVER} device")]
    NoDevice { key: String },
    #[error(
        "ResourceClaim {key}: device {device} of pool {pool} is not a CPU of node {node} (pool {node}, devices cpu<N>)"
    )]
    UnknownDevice {
        key: String,
        node: String,
        pool: String,
        device: String,
    },
}

/// Checks `claim` (read from the API server for the kubelet's `namespace/name`, uid `uid`): it
/// must be that very claim, allocated, its node selector (if any) naming `node`, with `dra.cpu`
/// devices all in pool `node` and all CPUs of `topology`.
pub fn prepare(
    claim: &ResourceClaim,
    uid: &str,
    node: &str,
    topology: &Topology,
) -> Result<PreparedClaim, ClaimError> {
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let name = claim.metadata.name.clone().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    let found = claim.metadata.uid.clone().unwrap_or_default();
    if found != uid {
        return Err(ClaimError::OtherUid {
            key,
            asked: uid.to_string(),
            found,
        });
    }
    let status = claim.status.as_ref();
    let Some(allocation) = status.and_then(|s| s.allocation.as_ref()) else {
        return Err(ClaimError::NotAllocated { key });
    };
    // A selector naming nodes by `metadata.name` (the bridge's) must name this one.
    let named: Vec<String> = allocation
        .node_selector
        .iter()
        .flat_map(|s| &s.node_selector_terms)
        .flat_map(|t| t.match_fields.iter().flatten())
        .filter(|f| f.key == "metadata.name" && f.operator == "In")
        .flat_map(|f| f.values.iter().flatten().cloned())
        .collect();
    if !named.is_empty() && !named.iter().any(|n| n == node) {
        return Err(ClaimError::OtherNode {
            key,
            node: node.to_string(),
            nodes: named.join(", "),
        });
    }
    let by_name: BTreeMap<&str, i64> = topology
        .cpus
        .cpus
        .values()
        .map(|c| (c.name.as_str(), c.cpu_id))
        .collect();
    let mut cpus = BTreeSet::new();
    let mut devices = Vec::new();
    for r in allocation
        .devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .filter(|r| r.driver == DRIVER)
    {
        let cpu = (r.pool == node)
            .then(|| by_name.get(r.device.as_str()))
            .flatten()
            .ok_or_else(|| ClaimError::UnknownDevice {
                key: key.clone(),
                node: node.to_string(),
                pool: r.pool.clone(),
                device: r.device.clone(),
            })?;
        cpus.insert(*cpu);
        devices.push(PreparedDevice {
            request: r.request.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
        });
    }
    if devices.is_empty() {
        return Err(ClaimError::NoDevice { key });
    }
    let pod_uids = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or("").is_empty())
        .map(|r| r.uid.clone())
        .collect();
    Ok(PreparedClaim {
        namespace,
        name,
        uid: uid.to_string(),
        pod_uids,
        cpus,
        devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(results: serde_json::Value, node: &str) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "p-extended-resources-x", "namespace": "ns", "uid": "c1"},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {
                    "devices": {"results": results},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
            },
        }))
        .unwrap()
    }

    fn result(device: &str, pool: &str, driver: &str) -> serde_json::Value {
        json!({"request": "cpu", "driver": driver, "pool": pool, "device": device})
    }

    #[test]
    fn a_claim_of_this_nodes_cpus_names_them_and_its_pod() {
        let c = claim(
            json!([
                result("cpu1", "node-1", "dra.cpu"),
                result("cpu3", "node-1", "dra.cpu"),
                result("gpu-0", "pool", "gpu.example.com"),
            ]),
            "node-1",
        );
        let p = prepare(&c, "c1", "node-1", &Topology::flat(4)).unwrap();
        assert_eq!(p.cpus, BTreeSet::from([1, 3]));
        assert_eq!(p.pod_uids, BTreeSet::from(["pod-uid".to_string()]));
        assert_eq!(p.devices.len(), 2);
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str()),
            ("ns", "p-extended-resources-x")
        );
    }

    #[test]
    fn a_claim_that_is_not_this_nodes_is_refused() {
        let t = Topology::flat(4);
        let ok = json!([result("cpu1", "node-1", "dra.cpu")]);
        let cases = [
            (claim(ok.clone(), "node-1"), "c2", "uid c1"),
            (claim(ok.clone(), "node-2"), "c1", "not to node-1"),
            (
                claim(json!([result("cpu9", "node-1", "dra.cpu")]), "node-1"),
                "c1",
                "cpu9",
            ),
            (
                claim(json!([result("cpu1", "node-2", "dra.cpu")]), "node-1"),
                "c1",
                "pool node-2",
            ),
            (
                claim(json!([result("gpu-0", "p", "gpu.example.com")]), "node-1"),
                "c1",
                "no dra.cpu device",
            ),
        ];
        for (c, uid, says) in cases {
            let e = prepare(&c, uid, "node-1", &t).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        let mut c = claim(ok, "node-1");
        c.status = None;
        let e = prepare(&c, "c1", "node-1", &t).unwrap_err();
        assert!(matches!(e, ClaimError::NotAllocated { .. }), "{e}");
    }
}
