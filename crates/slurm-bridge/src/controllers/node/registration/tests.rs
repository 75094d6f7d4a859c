//! Unit tests of [`super`].

use super::*;
use crate::wellknown::{LABEL_EXTERNAL_NODE, LABEL_SLURM_NODENAME};
use serde_json::json;

fn node(
    labels: serde_json::Value,
    annotations: serde_json::Value,
    capacity: serde_json::Value,
) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "worker-1", "labels": labels, "annotations": annotations},
        "status": {
            "capacity": capacity,
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "Hostname", "address": "worker-1"}],
        },
    }))
    .expect("node")
}

fn std_cap() -> serde_json::Value {
    json!({"cpu": "4", "memory": "8Gi", "pods": "110"})
}

fn desired_plain(n: &Node) -> Result<Desired, DesiredError> {
    desired(n, &NodeInventory::default())
}

#[test]
fn node_conf_table() {
    let ext = json!({LABEL_EXTERNAL_NODE: ""});
    let cases: Vec<(Node, &str)> = vec![
        (
            node(ext.clone(), json!({}), std_cap()),
            "NodeName=worker-1 NodeAddr=10.0.0.7 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 CPUs=4 RealMemory=8192 State=External Gres=\"\" GresConf=\"\"",
        ),
        (
            node(
                ext.clone(),
                json!({ANNOTATION_EXTERNAL_NODE_PARTITIONS: " slurm-bridge, gpu,,slurm-bridge ", ANNOTATION_TOPOLOGY_SPEC: "topo-switch:s1"}),
                std_cap(),
            ),
            "NodeName=worker-1 NodeAddr=10.0.0.7 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 CPUs=4 RealMemory=8192 State=External Feature=slurm-bridge,gpu Topology=topo-switch:s1 Gres=\"\" GresConf=\"\"",
        ),
        (
            node(
                json!({LABEL_EXTERNAL_NODE: "false", LABEL_SLURM_NODENAME: "slurm-7"}),
                json!({}),
                json!({"cpu": "3500m", "memory": "16000Mi", "nvidia.com/gpu": "2"}),
            ),
            "NodeName=slurm-7 NodeAddr=10.0.0.7 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 CPUs=4 RealMemory=16000 State=External Gres=\"gpu:nvidia.com:2\" GresConf=\"count=2,name=gpu,type=nvidia.com,file=gpu-0,file=gpu-1\"",
        ),
        (
            node(
                ext.clone(),
                json!({}),
                json!({"cpu": "1", "memory": "1500Mi", "amd.com/gpu": "1", "nvidia.com/gpu": "0"}),
            ),
            "NodeName=worker-1 NodeAddr=10.0.0.7 Sockets=1 CoresPerSocket=1 ThreadsPerCore=1 CPUs=1 RealMemory=1500 State=External Gres=\"gpu:amd.com:1\" GresConf=\"count=1,name=gpu,type=amd.com,file=gpu-0\"",
        ),
    ];
    for (n, want) in cases {
        assert_eq!(
            node_conf(&desired(&n, &NodeInventory::default()).expect("desired")),
            want
        );
    }
}

/// The kubelet admits pods within its allocatable: Slurm gets that, whole CPUs rounded down,
/// never the capacity (a Slurm node larger than the kubelet's allocatable gets pods placed that
/// the kubelet rejects with OutOfcpu or OutOfmemory).
#[test]
fn cpus_and_memory_come_from_the_kubelets_allocatable() {
    let with = |allocatable: serde_json::Value| -> Desired {
        let mut n = node(json!({}), json!({}), json!({"cpu": "8", "memory": "16Gi"}));
        let status = n.status.as_mut().unwrap();
        status.allocatable = serde_json::from_value(allocatable).unwrap();
        desired_plain(&n).unwrap()
    };
    let d = with(json!({"cpu": "6", "memory": "12Gi"}));
    assert_eq!((d.cpus, d.cores, d.memory_mib), (6, 6, 12 * 1024));
    // 7.9 CPUs admit no 8th whole CPU; 1 MiB and a half is 1 MiB.
    let d = with(json!({"cpu": "7900m", "memory": "1572864"}));
    assert_eq!((d.cpus, d.memory_mib), (7, 1));
    // Only one of them reported: the other from capacity.
    let d = with(json!({"memory": "2Gi"}));
    assert_eq!((d.cpus, d.memory_mib), (8, 2048));
    // Less than one whole CPU admitted: refused, as a node without CPUs is.
    let mut n = node(json!({}), json!({}), json!({"cpu": "8", "memory": "16Gi"}));
    n.status.as_mut().unwrap().allocatable =
        serde_json::from_value(json!({"cpu": "500m", "memory": "1Gi"})).unwrap();
    assert!(matches!(
        desired_plain(&n),
        Err(DesiredError::OutOfRange { ref resource, .. }) if resource == "cpu"
    ));
    // The re-creation check compares the same value: a Slurm node registered from the capacity
    // (8 CPUs) is re-created with the allocatable's 6.
    let d = with(json!({"cpu": "6", "memory": "16Gi"}));
    let slurm: SlurmNode = serde_json::from_value(json!({
        "cpus": 8, "cores": 8, "sockets": 1, "real_memory": 16384, "gres": ""
    }))
    .unwrap();
    assert_eq!(
        recreate_reasons(&d, &slurm),
        vec!["CPUs 8 -> 6", "cores 8 -> 6"]
    );
}

#[test]
fn refused_nodes_say_why() {
    let cases: Vec<(Node, DesiredError)> = vec![
        (
            node(json!({}), json!({}), json!({"memory": "1Gi"})),
            DesiredError::MissingCapacity("cpu"),
        ),
        (
            node(json!({}), json!({}), json!({"cpu": "2"})),
            DesiredError::MissingCapacity("memory"),
        ),
        (
            node(
                json!({}),
                json!({}),
                json!({"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1", "amd.com/gpu": "1"}),
            ),
            DesiredError::MixedGpus,
        ),
        (
            node(json!({LABEL_SLURM_NODENAME: ""}), json!({}), std_cap()),
            DesiredError::SlurmName(String::new()),
        ),
        (
            node(json!({LABEL_SLURM_NODENAME: "a b"}), json!({}), std_cap()),
            DesiredError::SlurmName("a b".into()),
        ),
        (
            node(
                json!({}),
                json!({ANNOTATION_TOPOLOGY_SPEC: "a b"}),
                std_cap(),
            ),
            DesiredError::Topology("a b".into()),
        ),
        (
            node(json!({}), json!({}), json!({"cpu": "2", "memory": "100Ki"})),
            DesiredError::OutOfRange {
                resource: "memory".into(),
                value: "102400".into(),
                min: 1,
            },
        ),
    ];
    for (n, want) in cases {
        assert_eq!(desired(&n, &NodeInventory::default()), Err(want));
    }
}

fn slurm(cpus: i32, mem: i64, gres: &str) -> SlurmNode {
    SlurmNode {
        name: "worker-1".into(),
        cpus: Some(cpus),
        real_memory: Some(mem),
        gres: Some(gres.into()),
        features: vec!["b".into(), "a".into()],
        ..Default::default()
    }
}

#[test]
fn needs_recreate_table() {
    let d = desired_plain(&node(
        json!({}),
        json!({}),
        json!({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}),
    ))
    .unwrap();
    let cases: Vec<(SlurmNode, usize)> = vec![
        (slurm(4, 8192, "gpu:nvidia.com:2"), 0),
        (slurm(4, 8192, "gpu:nvidia.com:2(S:0-1)"), 0),
        (slurm(8, 8192, "gpu:nvidia.com:2"), 1),
        (slurm(4, 4096, "gpu:nvidia.com:2"), 1),
        (slurm(4, 8192, ""), 1),
        (slurm(4, 8192, "gpu:nvidia.com:4"), 1),
        (slurm(2, 1, "gpu:x:1"), 3),
    ];
    for (s, n) in cases {
        assert_eq!(recreate_reasons(&d, &s).len(), n, "{s:?}");
    }
    // Re-created without the partitions annotation: the features it had stay.
    let kept = keeping_features(d.clone(), &slurm(8, 8192, ""));
    assert_eq!(kept.partitions, vec!["b".to_string(), "a".to_string()]);
    assert!(
        node_conf(&kept).contains(" Feature=b,a "),
        "{}",
        node_conf(&kept)
    );
    // Same CPUs on other cores (SMT turned on in the dra.cpu slices): re-created.
    let cores = |sockets, cores| SlurmNode {
        sockets: Some(sockets),
        cores: Some(cores),
        ..slurm(4, 8192, "gpu:nvidia.com:2")
    };
    assert!(recreate_reasons(&d, &cores(1, 4)).is_empty());
    assert!(recreate_reasons(&d, &cores(2, 2)).is_empty());
    assert_eq!(
        recreate_reasons(&d, &cores(1, 2)),
        vec!["cores 2 -> 4".to_string()]
    );
    // Slurm has GRES, the node none (either spelling of "none" on Slurm's side matches).
    let plain = desired_plain(&node(json!({}), json!({}), std_cap())).unwrap();
    assert_eq!(
        recreate_reasons(&plain, &slurm(4, 8192, "gpu:x:1")).len(),
        1
    );
    assert!(recreate_reasons(&plain, &slurm(4, 8192, "")).is_empty());
    assert!(recreate_reasons(&plain, &slurm(4, 8192, "(null)")).is_empty());
}

#[test]
fn features_and_topology_updates() {
    let with = |ann: serde_json::Value| desired_plain(&node(json!({}), ann, std_cap())).unwrap();
    let s = slurm(4, 8192, "");
    // No annotation: features left alone.
    assert!(recreate_reasons(&with(json!({})), &s).is_empty());
    // Same set in another order: nothing.
    assert!(
        recreate_reasons(
            &with(json!({ANNOTATION_EXTERNAL_NODE_PARTITIONS: "b,a"})),
            &s
        )
        .is_empty(),
        "{s:?}"
    );
    // Another partition: re-created (Slurm places a node in a node set only at creation).
    let why = recreate_reasons(
        &with(json!({ANNOTATION_EXTERNAL_NODE_PARTITIONS: "a,c"})),
        &s,
    );
    assert_eq!(why.len(), 1);
    assert!(why[0].contains("features"), "{why:?}");

    assert_eq!(topology_update(&with(json!({})), &s), None);
    let u = topology_update(
        &with(json!({ANNOTATION_TOPOLOGY_SPEC: "topo-switch:s2"})),
        &s,
    )
    .unwrap();
    assert_eq!(u.topology_str.as_deref(), Some("topo-switch:s2"));
    let mut s1 = s.clone();
    s1.topology = Some("topo-switch:s1".into());
    // Annotation removed: cleared.
    assert_eq!(
        topology_update(&with(json!({})), &s1)
            .unwrap()
            .topology_str
            .as_deref(),
        Some("")
    );
}

/// A node with a dra.cpu slice (2 sockets, SMT pairs, 2 E-cores) and 4 example GPUs:
/// registered with the slices' CPUs, cores and GRES, and the re-creation check compares the
/// same numbers (quirk 7: no perpetual re-creation).
#[test]
fn dra_slices_drive_registration() {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let mut cpus = Vec::new();
    for socket in 0..2i64 {
        for core in 0..2i64 {
            for t in 0..2i64 {
                let id = socket * 4 + core + t * 8;
                cpus.push(json!({"name": format!("cpu{id}"), "attributes": {
                    "dra.cpu/cpuID": {"int": id}, "dra.cpu/coreID": {"int": core},
                    "dra.cpu/socketID": {"int": socket}, "dra.cpu/coreType": {"int": 1}}}));
            }
        }
    }
    for id in [16i64, 17] {
        cpus.push(json!({"name": format!("cpu{id}"), "attributes": {
            "dra.cpu/cpuID": {"int": id}, "dra.cpu/coreID": {"int": id},
            "dra.cpu/socketID": {"int": 0}, "dra.cpu/coreType": {"int": 3}}}));
    }
    let slice = |name: &str, driver: &str, devices: serde_json::Value| -> ResourceSlice {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
            "driver": driver, "nodeName": "worker-1",
            "pool": {"name": "worker-1", "generation": 1, "resourceSliceCount": 1},
            "devices": devices}}))
        .unwrap()
    };
    let gpus: Vec<_> = (0..4)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"index": {"int": i}}}))
        .collect();
    let slices = [
        slice("c", "dra.cpu", json!(cpus)),
        slice("g", "gpu.example.com", json!(gpus)),
    ];
    let inv = NodeInventory::from_slices("worker-1", &slices);
    let n = node(json!({}), json!({}), json!({"cpu": "10", "memory": "8Gi"}));
    let d = desired(&n, &inv).unwrap();
    assert_eq!(
        node_conf(&d),
        "NodeName=worker-1 NodeAddr=10.0.0.7 Sockets=1 CoresPerSocket=4 ThreadsPerCore=2 CPUs=8 RealMemory=8192 State=External Gres=\"gpu:gpu.example.com:4\" GresConf=\"count=4,name=gpu,type=gpu.example.com,file=gpu-0,file=gpu-1,file=gpu-2,file=gpu-3\""
    );
    let registered = slurm(8, 8192, "gpu:gpu.example.com:4(S:0)");
    assert!(recreate_reasons(&d, &registered).is_empty());
    // A GPU slice gone: re-created.
    let fewer = NodeInventory::from_slices("worker-1", &slices[..1]);
    assert_eq!(
        recreate_reasons(&desired(&n, &fewer).unwrap(), &registered).len(),
        1
    );
    // Device-plugin GPUs and GPU slices together: refused.
    let both = node(
        json!({}),
        json!({}),
        json!({"cpu": "10", "memory": "8Gi", "nvidia.com/gpu": "1"}),
    );
    assert_eq!(desired(&both, &inv), Err(DesiredError::MixedGpus));
}

#[test]
fn missing_partitions_are_named() {
    let wanted = vec!["a".to_string(), "b".to_string(), "c".to_string()];
    let existing = vec!["b".to_string(), "debug".to_string()];
    assert_eq!(missing_partitions(&wanted, &existing), ["a", "c"]);
    assert!(missing_partitions(&[], &existing).is_empty());
}
