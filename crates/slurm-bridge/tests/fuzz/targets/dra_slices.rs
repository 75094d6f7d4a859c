//! DRA ResourceSlices (what the `dra.cpu` and GPU drivers publish) -> a node's inventory and
//! its CPU map. The corpus is JSON lists of slices; the structured part generates CPU layouts
//! with random (also missing, negative, repeated) ids.

use crate::kit::{self, fuzz};
use k8s_openapi::api::resource::v1::ResourceSlice;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::json;
use slurm_bridge::dra::NodeInventory;
use std::collections::BTreeSet;

const NODE: &str = "n1";

fn invariants(inv: &NodeInventory) -> Result<(), TestCaseError> {
    let m = &inv.cpus;
    // Every mapped CPU is a known CPU, not an E-core, and sits in its abstract core's set.
    for (cpu, core) in &m.machine_to_abstract {
        let info = m.cpus.get(cpu);
        prop_assert!(
            info.is_some_and(|i| !i.is_efficiency()),
            "cpu {} unmapped",
            cpu
        );
        prop_assert!(m.abstract_to_machine[*core].contains(cpu));
    }
    // Abstract cores are disjoint, non-empty, and map back to themselves.
    let mut seen = BTreeSet::new();
    for (i, set) in m.abstract_to_machine.iter().enumerate() {
        prop_assert!(!set.is_empty(), "abstract core {} empty", i);
        for c in set {
            prop_assert!(seen.insert(*c), "cpu {} in two cores", c);
        }
    }
    let all: BTreeSet<usize> = (0..m.slurm_cores()).collect();
    prop_assert_eq!(m.to_abstract_cores(&m.to_machine_cpus(&all)), all);
    prop_assert_eq!(inv.cpu_pools.len(), m.cpus.len());
    // GPUs are sorted by index, one device per index.
    for devices in inv.gpus.values() {
        prop_assert!(devices.windows(2).all(|w| w[0].index < w[1].index));
    }
    let _ = inv.gres_and_conf();
    Ok(())
}

fn slices(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(list) = serde_json::from_slice::<Vec<ResourceSlice>>(bytes) {
        invariants(&NodeInventory::from_slices(NODE, &list))?;
    }
    Ok(())
}

const DICT: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    "\"int\":",
    "-1",
    "0",
    "3",
    "9223372036854775807",
    "\"dra.cpu/cpuID\":",
    "\"dra.cpu/coreID\":",
    "\"dra.cpu/socketID\":",
    "\"dra.cpu/coreType\":",
    "\"gpu-0\"",
    "\"gpu-\"",
    "\"index\":",
    "\"generation\":",
    "null",
    "\"gpu.nvidia.com\"",
    "\"gpu.example.com\"",
];

#[test]
fn resource_slices() {
    kit::fuzz_bytes("resource_slices", DICT, slices);
}

/// A generated `dra.cpu` device: cpuID, coreID, socketID, coreType (`None`: left out).
type CpuAttrs = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

/// One `dra.cpu` device; `None` attributes are left out.
fn cpu_device((cpu, core, socket, kind): CpuAttrs) -> serde_json::Value {
    let mut attrs = serde_json::Map::new();
    for (k, v) in [
        ("cpuID", cpu),
        ("coreID", core),
        ("socketID", socket),
        ("coreType", kind),
    ] {
        if let Some(v) = v {
            attrs.insert(format!("dra.cpu/{k}"), json!({"int": v}));
        }
    }
    json!({"name": format!("cpu{}", cpu.unwrap_or(-1)), "attributes": attrs})
}

fn cpu_layout() -> impl Strategy<Value = Vec<Vec<CpuAttrs>>> {
    let id = || proptest::option::weighted(0.95, -2i64..40);
    let kind = proptest::option::weighted(0.9, 0i64..4);
    let device = (id(), id(), id(), kind);
    proptest::collection::vec(proptest::collection::vec(device, 0..24), 1..4)
}

#[test]
fn cpu_maps() {
    let corpus = kit::read_dir(&kit::corpus_dir("resource_slices"));
    fuzz("cpu_map", &corpus, slices, cpu_layout(), |pools| {
        let list: Vec<ResourceSlice> = pools
            .into_iter()
            .enumerate()
            .map(|(i, devices)| {
                serde_json::from_value(json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": format!("s{i}")},
                    "spec": {"driver": "dra.cpu", "nodeName": NODE,
                             "pool": {"name": format!("p{i}"), "generation": i % 2, "resourceSliceCount": 1},
                             "devices": devices.into_iter().map(cpu_device).collect::<Vec<_>>()},
                }))
                .expect("a ResourceSlice")
            })
            .collect();
        invariants(&NodeInventory::from_slices(NODE, &list))
    });
}
