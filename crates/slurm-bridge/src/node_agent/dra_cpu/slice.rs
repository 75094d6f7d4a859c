//! The node's `dra.cpu` ResourceSlices: one device per machine CPU, built from the agent's
//! sysfs [`Topology`] ([`desired`], pure), and kept as built on the API server ([`sync`]).
//!
//! Devices are `cpu<N>` (N the machine CPU id) in pool `<node>`, with the integer attributes
//! `dra.cpu/cpuID`, `dra.cpu/coreID`, `dra.cpu/socketID`, `dra.cpu/coreType` (1 standard, 2
//! performance, 3 efficiency) and, on machines with NUMA nodes, `dra.cpu/numaNodeID`: what
//! `dra::NodeInventory` reads. A slice holds at most 128 devices, so a bigger machine gets
//! several (`<node>-dra.cpu-<i>`, one pool). Each slice is owned by the Node object, so it goes
//! with the node; when the agent stops, the slices are left: the kubelet wipes a driver's slices
//! 30 s after its plugin went away, and at its own start.

use super::DRIVER;
use crate::node_agent::Topology;
use crate::resources::cpumap::CORE_TYPE_EFFICIENCY;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use std::collections::BTreeMap;

/// Most devices one ResourceSlice may hold (`resource.k8s.io/v1`).
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// The field manager of the agent's server-side applies.
pub const FIELD_MANAGER: &str = "slurm-bridge-node-agent";
/// `dra.cpu/coreType` of a standard core (machines without efficiency cores).
pub const CORE_TYPE_STANDARD: i64 = 1;
/// `dra.cpu/coreType` of a performance core (machines with efficiency cores).
pub const CORE_TYPE_PERFORMANCE: i64 = 2;

/// The Node a slice belongs to (its owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    pub name: String,
    pub uid: String,
}

/// The name of slice `i` of `node`.
pub fn slice_name(node: &str, i: usize) -> String {
    format!("{node}-{DRIVER}-{i}")
}

/// The slices describing `topology` on `node`, pool generation `generation`.
pub fn desired(node: &NodeRef, topology: &Topology, generation: i64) -> Vec<ResourceSlice> {
    let hybrid = topology
        .cpus
        .cpus
        .values()
        .any(|c| c.core_type == CORE_TYPE_EFFICIENCY);
    let devices: Vec<serde_json::Value> = topology
        .cpus
        .cpus
        .values()
        .map(|c| {
            let core_type = if c.core_type == CORE_TYPE_EFFICIENCY {
                CORE_TYPE_EFFICIENCY
            } else if hybrid {
                CORE_TYPE_PERFORMANCE
            } else {
                CORE_TYPE_STANDARD
            };
            let mut attributes = json!({
                format!("{DRIVER}/cpuID"): {"int": c.cpu_id},
                format!("{DRIVER}/coreID"): {"int": c.core_id},
                format!("{DRIVER}/socketID"): {"int": c.socket_id},
                format!("{DRIVER}/coreType"): {"int": core_type},
            });
            if let Some(n) = topology.numa.get(&c.cpu_id) {
                attributes[format!("{DRIVER}/numaNodeID")] = json!({"int": n});
            }
            json!({"name": format!("cpu{}", c.cpu_id), "attributes": attributes})
        })
        .collect();
    let chunks: Vec<&[serde_json::Value]> = devices.chunks(MAX_DEVICES_PER_SLICE).collect();
    let count = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, devices)| {
            serde_json::from_value(json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {
                    "name": slice_name(&node.name, i),
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                         "name": node.name, "uid": node.uid}],
                },
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node.name,
                    "pool": {"name": node.name, "generation": generation,
                             "resourceSliceCount": count},
                    "devices": devices,
                },
            }))
            .expect("a ResourceSlice")
        })
        .collect()
}

/// What the API server holds differs from `want` in what a reader sees: names, devices, pool
/// size, owner.
fn same(have: &[ResourceSlice], want: &[ResourceSlice]) -> bool {
    let key = |s: &ResourceSlice| {
        (
            s.metadata.name.clone(),
            s.spec.devices.clone(),
            s.spec.pool.resource_slice_count,
            s.metadata
                .owner_references
                .iter()
                .flatten()
                .map(|o| o.uid.clone())
                .collect::<Vec<_>>(),
        )
    };
    let have: BTreeMap<_, _> = have
        .iter()
        .map(|s| (s.metadata.name.clone(), key(s)))
        .collect();
    let want: BTreeMap<_, _> = want
        .iter()
        .map(|s| (s.metadata.name.clone(), key(s)))
        .collect();
    have == want
}

/// Why the slices could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum SliceError {
    #[error("reading Node {node}: {source}")]
    Node { node: String, source: kube::Error },
    #[error("listing the {DRIVER} ResourceSlices of node {node}: {source}")]
    List { node: String, source: kube::Error },
    #[error("applying ResourceSlice {name}: {source}")]
    Apply { name: String, source: kube::Error },
    #[error("deleting ResourceSlice {name}: {source}")]
    Delete { name: String, source: kube::Error },
}

/// The Node `name`, with its uid (the slices' owner).
pub async fn node_ref(client: &kube::Client, name: &str) -> Result<NodeRef, SliceError> {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .map_err(|source| SliceError::Node {
            node: name.to_string(),
            source,
        })?;
    Ok(NodeRef {
        name: name.to_string(),
        uid: node.metadata.uid.unwrap_or_default(),
    })
}

/// Makes the node's `dra.cpu` slices what `topology` says: nothing is written when they are
/// already (one list); otherwise each is applied with the pool generation raised, and slices
/// of ours beyond the count are deleted. Returns true when it wrote.
pub async fn sync(
    client: &kube::Client,
    node: &NodeRef,
    topology: &Topology,
) -> Result<bool, SliceError> {
    let api = Api::<ResourceSlice>::all(client.clone());
    let fields = format!("spec.nodeName={},spec.driver={DRIVER}", node.name);
    let have = api
        .list(&ListParams::default().fields(&fields))
        .await
        .map_err(|source| SliceError::List {
            node: node.name.clone(),
            source,
        })?
        .items;
    let generation = have
        .iter()
        .map(|s| s.spec.pool.generation)
        .max()
        .unwrap_or(0);
    if !have.is_empty() && same(&have, &desired(node, topology, generation)) {
        return Ok(false);
    }
    let want = desired(node, topology, generation + 1);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for s in &want {
        let name = s.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(s))
            .await
            .map_err(|source| SliceError::Apply {
                name: name.clone(),
                source,
            })?;
    }
    for s in &have {
        let name = s.metadata.name.clone().unwrap_or_default();
        if want
            .iter()
            .any(|w| w.metadata.name.as_deref() == Some(&name))
        {
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(SliceError::Delete { name, source }),
        }
    }
    tracing::info!(node = %node.name, slices = want.len(), devices = topology.cpus.cpus.len(), generation = generation + 1, "published the dra.cpu ResourceSlices");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::NodeInventory;
    use crate::resources::cpumap::{CpuInfo, CpuMap};
    use std::collections::BTreeSet;

    fn topology(n: i64, efficiency: &[i64]) -> Topology {
        Topology {
            cpus: CpuMap::new((0..n).map(|c| CpuInfo {
                name: format!("cpu{c}"),
                cpu_id: c,
                // Two threads per core: CPU c and c + n/2 are siblings.
                core_id: c % (n / 2),
                socket_id: 0,
                core_type: if efficiency.contains(&c) {
                    CORE_TYPE_EFFICIENCY
                } else {
                    0
                },
            })),
            numa: (0..n).map(|c| (c, 0)).collect(),
        }
    }

    fn node() -> NodeRef {
        NodeRef {
            name: "node-1".into(),
            uid: "n-uid".into(),
        }
    }

    #[test]
    fn the_bridges_inventory_reads_the_slice_as_the_machine() {
        let t = topology(8, &[]);
        let slices = desired(&node(), &t, 1);
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        assert_eq!(s.metadata.name.as_deref(), Some("node-1-dra.cpu-0"));
        assert_eq!(s.spec.driver, "dra.cpu");
        assert_eq!(s.spec.pool.name, "node-1");
        assert_eq!(
            s.metadata.owner_references.as_ref().unwrap()[0].uid,
            "n-uid"
        );
        let inv = NodeInventory::from_slices("node-1", &slices);
        assert_eq!(inv.cpus.abstract_to_machine, t.cpus.abstract_to_machine);
        assert_eq!(inv.cpu_pools.values().collect::<BTreeSet<_>>().len(), 1);
        let d = &s.spec.devices.as_ref().unwrap()[0];
        assert_eq!(d.name, "cpu0");
        let a = d.attributes.as_ref().unwrap();
        assert_eq!(a["dra.cpu/coreType"].int, Some(CORE_TYPE_STANDARD));
        assert_eq!(a["dra.cpu/numaNodeID"].int, Some(0));
    }

    #[test]
    fn a_big_machine_gets_several_slices_of_one_pool_and_e_cores_are_marked() {
        let t = topology(300, &[299]);
        let slices = desired(&node(), &t, 4);
        assert_eq!(slices.len(), 3);
        for s in &slices {
            assert_eq!(s.spec.pool.resource_slice_count, 3);
            assert_eq!(s.spec.pool.generation, 4);
            assert!(s.spec.devices.as_ref().unwrap().len() <= MAX_DEVICES_PER_SLICE);
        }
        let inv = NodeInventory::from_slices("node-1", &slices);
        assert_eq!(inv.cpus.cpus.len(), 300);
        assert_eq!(inv.cpus.slurm_cpus(), 299);
        assert_eq!(inv.cpus.cpus[&0].core_type, CORE_TYPE_PERFORMANCE);
        assert_eq!(inv.cpus.cpus[&299].core_type, CORE_TYPE_EFFICIENCY);
    }

    #[test]
    fn only_a_change_readers_see_differs() {
        let t = topology(4, &[]);
        let a = desired(&node(), &t, 1);
        assert!(same(&a, &desired(&node(), &t, 7)));
        assert!(!same(&a, &desired(&node(), &topology(6, &[]), 1)));
        assert!(!same(&a, &[]));
    }
}
