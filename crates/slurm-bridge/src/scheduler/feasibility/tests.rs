//! Table tests of the node filters and of placement.

use super::infeasible::show;
use super::*;
use crate::k8s::node::placement_fingerprint;
use crate::k8s::slim_pod::Pod;
use crate::resources::Quantity;
use crate::wellknown::{TAINT_MANAGED_NODE, managed_node_toleration};
use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;

fn node(v: serde_json::Value) -> Node {
    let mut base = json!({
        "metadata": {"name": "n1", "labels": {}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    });
    merge(&mut base, v);
    serde_json::from_value(base).unwrap()
}

fn pod(spec: serde_json::Value) -> Pod {
    let mut base = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]}});
    merge(&mut base, json!({ "spec": spec }));
    serde_json::from_value(base).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (a.as_object_mut(), b.clone()) {
        for (k, v) in b {
            match a.get_mut(&k) {
                Some(x) if x.is_object() && v.is_object() => merge(x, v),
                _ => {
                    a.insert(k, v);
                }
            }
        }
    }
}

#[test]
fn not_ready_and_cordoned_nodes_are_rejected() {
    let p = pod(json!({}));
    let not_ready = node(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
    assert_eq!(check(&p, &not_ready, &[]), Err(Infeasible::NotReady));
    let cordoned = node(json!({"spec": {"unschedulable": true}}));
    assert_eq!(check(&p, &cordoned, &[]), Err(Infeasible::Unschedulable));
    let tolerant = pod(
        json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}),
    );
    assert_eq!(check(&tolerant, &cordoned, &[]), Ok(()));
}

#[test]
fn taints_need_tolerations_and_the_bridge_toleration_counts() {
    let managed = node(
        json!({"spec": {"taints": [{"key": TAINT_MANAGED_NODE, "value": "sb", "effect": "NoExecute"}]}}),
    );
    let p = pod(json!({}));
    assert!(matches!(
        check(&p, &managed, &[]),
        Err(Infeasible::UntoleratedTaint(t)) if t == format!("{TAINT_MANAGED_NODE}=sb:NoExecute")
    ));
    assert_eq!(
        check(&p, &managed, &[managed_node_toleration("sb")]),
        Ok(())
    );
    assert!(check(&p, &managed, &[managed_node_toleration("other")]).is_err());
    let soft = node(json!({"spec": {"taints": [{"key": "x", "effect": "PreferNoSchedule"}]}}));
    assert_eq!(check(&p, &soft, &[]), Ok(()));
    let everything = pod(json!({"tolerations": [{"operator": "Exists"}]}));
    let gpu =
        node(json!({"spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}}));
    assert_eq!(check(&everything, &gpu, &[]), Ok(()));
}

#[test]
fn toleration_matching_rules() {
    let taint = Taint {
        key: "k".into(),
        value: Some("v".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    let tol = |key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>| {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    };
    assert!(tolerates(&tol(Some("k"), None, Some("v"), None), &taint));
    assert!(tolerates(
        &tol(Some("k"), Some("Exists"), None, Some("NoSchedule")),
        &taint
    ));
    assert!(!tolerates(
        &tol(Some("k"), Some("Equal"), Some("w"), None),
        &taint
    ));
    assert!(!tolerates(
        &tol(Some("k"), Some("Exists"), None, Some("NoExecute")),
        &taint
    ));
    assert!(!tolerates(&tol(None, Some("Equal"), None, None), &taint));
    assert!(tolerates(&tol(None, Some("Exists"), None, None), &taint));
}

#[test]
fn node_selector_and_required_affinity() {
    let n = node(json!({"metadata": {"name": "n7", "labels": {"zone": "a", "rank": "5"}}}));
    assert_eq!(
        check(&pod(json!({"nodeSelector": {"zone": "a"}})), &n, &[]),
        Ok(())
    );
    assert_eq!(
        check(&pod(json!({"nodeSelector": {"zone": "b"}})), &n, &[]),
        Err(Infeasible::NodeSelector)
    );
    let affinity = |terms: serde_json::Value| {
        pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}),
        )
    };
    let ok = [
        json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]),
        json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]),
        json!([{"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["4"]}]}]),
        json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}]),
        json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}]),
        json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
               {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]),
    ];
    for terms in ok {
        assert_eq!(check(&affinity(terms.clone()), &n, &[]), Ok(()), "{terms}");
    }
    let bad = [
        json!([{"matchExpressions": [{"key": "rank", "operator": "Lt", "values": ["5"]}]}]),
        json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                     {"key": "gpu", "operator": "Exists"}]}]),
        json!([{}]),
        json!([]),
    ];
    for terms in bad {
        assert_eq!(
            check(&affinity(terms.clone()), &n, &[]),
            Err(Infeasible::NodeAffinity),
            "{terms}"
        );
    }
}

#[test]
fn placement_excludes_every_slurm_node_that_is_not_feasible_for_all_pods() {
    let nodes: Vec<Arc<Node>> = (1..=4)
        .map(|i| {
            Arc::new(node(json!({"metadata": {"name": format!("node-{i}"), "labels": {"rack": if i <= 2 { "r1" } else { "r2" }}}})))
        })
        .collect();
    let slurm: BTreeSet<String> = ["node-1", "node-2", "node-3", "node-4", "slurm-only"]
        .into_iter()
        .map(String::from)
        .collect();
    let pods = vec![pod(json!({"nodeSelector": {"rack": "r1"}})), pod(json!({}))];
    let p = place(&pods, &nodes, &slurm, &[]);
    assert_eq!(p.feasible.iter().collect::<Vec<_>>(), ["node-1", "node-2"]);
    assert_eq!(p.excluded, ["node-3", "node-4", "slurm-only"]);
    assert_eq!(
        p.rejections,
        [("node does not match the pod's nodeSelector".to_string(), 2)]
    );
}

fn sized_node(name: &str, allocatable: serde_json::Value) -> Arc<Node> {
    Arc::new(node(
        json!({"metadata": {"name": name}, "status": {"allocatable": allocatable}}),
    ))
}

fn requesting(requests: serde_json::Value) -> Pod {
    pod(json!({"containers": [{"name": "c", "resources": {"requests": requests}}]}))
}

fn short(resource: &str, requested: &str, allocatable: &str) -> Shortfall {
    Shortfall {
        resource: resource.into(),
        requested: Quantity::parse(requested).unwrap(),
        allocatable: Quantity::parse(allocatable).unwrap(),
    }
}

fn standard() -> Arc<Node> {
    sized_node(
        "n1",
        json!({"cpu": "8", "memory": "16000Mi", "pods": "110"}),
    )
}

#[test]
fn cpu_beyond_allocatable_does_not_fit() {
    let n = standard();
    assert_eq!(check(&requesting(json!({"cpu": "8"})), &n, &[]), Ok(()));
    assert_eq!(check(&requesting(json!({"cpu": "7500m"})), &n, &[]), Ok(()));
    assert_eq!(
        check(&requesting(json!({"cpu": "16"})), &n, &[]),
        Err(Infeasible::Insufficient(vec![short("cpu", "16", "8")]))
    );
    assert_eq!(
        check(&requesting(json!({"cpu": "8001m"})), &n, &[]),
        Err(Infeasible::Insufficient(vec![short("cpu", "8001m", "8")]))
    );
}

#[test]
fn memory_beyond_allocatable_does_not_fit_and_every_short_resource_is_named() {
    let n = standard();
    assert_eq!(
        check(&requesting(json!({"memory": "16000Mi"})), &n, &[]),
        Ok(())
    );
    assert_eq!(
        check(&requesting(json!({"memory": "20Gi"})), &n, &[]),
        Err(Infeasible::Insufficient(vec![short(
            "memory", "20Gi", "16000Mi"
        )]))
    );
    let both = check(&requesting(json!({"cpu": "9", "memory": "17G"})), &n, &[]);
    assert_eq!(
        both,
        Err(Infeasible::Insufficient(vec![
            short("cpu", "9", "8"),
            short("memory", "17G", "16000Mi")
        ]))
    );
    assert_eq!(
        both.unwrap_err().to_string(),
        "Insufficient cpu, Insufficient memory"
    );
}

#[test]
fn an_extended_resource_must_be_advertised_by_the_node() {
    let plain = standard();
    let gpus = sized_node("g1", json!({"cpu": "8", "nvidia.com/gpu": "4"}));
    let two = requesting(json!({"nvidia.com/gpu": "2"}));
    assert_eq!(
        check(&two, &plain, &[]),
        Err(Infeasible::Insufficient(vec![short(
            "nvidia.com/gpu",
            "2",
            "0"
        )]))
    );
    assert_eq!(check(&two, &gpus, &[]), Ok(()));
    // A limit alone is the request too (API defaulting).
    let eight = pod(
        json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}),
    );
    assert_eq!(
        check(&eight, &gpus, &[]),
        Err(Infeasible::Insufficient(vec![short(
            "nvidia.com/gpu",
            "8",
            "4"
        )]))
    );
    // DRA extended resources are Slurm's (GRES): no node advertises them.
    let dra = requesting(json!({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}));
    assert_eq!(check(&dra, &plain, &[]), Ok(()));
    // Zero requests ask for nothing; a pod without requests fits a node without allocatable.
    assert_eq!(
        check(&requesting(json!({"example.com/foo": "0"})), &plain, &[]),
        Ok(())
    );
    assert_eq!(check(&pod(json!({})), &node(json!({})), &[]), Ok(()));
    assert_eq!(
        check(&requesting(json!({"cpu": "1"})), &node(json!({})), &[]),
        Err(Infeasible::Insufficient(vec![short("cpu", "1", "0")]))
    );
}

#[test]
fn init_containers_sidecars_and_overhead_count() {
    let n = standard();
    // A large init container runs alone, but the node must still hold it.
    let init = pod(json!({
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "12"}}}],
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
    }));
    assert_eq!(
        check(&init, &n, &[]),
        Err(Infeasible::Insufficient(vec![short("cpu", "12", "8")]))
    );
    // A sidecar (restartable init container) runs beside the containers: 5 + 4 > 8.
    let sidecar = pod(json!({
        "initContainers": [{"name": "s", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "4"}}}],
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "5"}}}]
    }));
    assert_eq!(
        check(&sidecar, &n, &[]),
        Err(Infeasible::Insufficient(vec![short("cpu", "9", "8")]))
    );
    // Pod overhead (RuntimeClass) is added to the requests.
    let overhead = pod(json!({
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "8"}}}],
        "overhead": {"cpu": "250m"}
    }));
    assert_eq!(
        check(&overhead, &n, &[]),
        Err(Infeasible::Insufficient(vec![short("cpu", "8250m", "8")]))
    );
}

#[test]
fn other_reasons_come_before_resource_fit() {
    let tainted = node(json!({
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "8"}}
    }));
    assert!(matches!(
        check(&requesting(json!({"cpu": "16"})), &tainted, &[]),
        Err(Infeasible::UntoleratedTaint(_))
    ));
}

#[test]
fn placement_names_the_short_resource_and_the_largest_allocatable() {
    let nodes = vec![
        sized_node("small", json!({"cpu": "4", "memory": "8Gi"})),
        sized_node("big", json!({"cpu": "8", "memory": "16000Mi"})),
        Arc::new(node(json!({
            "metadata": {"name": "huge"},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}
        }))),
    ];
    let slurm: BTreeSet<String> = ["small", "big", "huge"].map(String::from).into();
    let p = place(
        &[requesting(json!({"cpu": "16", "memory": "20Gi"}))],
        &nodes,
        &slurm,
        &[],
    );
    assert!(p.feasible.is_empty());
    assert_eq!(p.excluded, ["big", "huge", "small"]);
    assert_eq!(
        p.rejections,
        [
            (
                "Insufficient cpu (requested 16, largest node allocatable 8)".to_string(),
                2
            ),
            (
                "Insufficient memory (requested 20Gi, largest node allocatable 16000Mi)"
                    .to_string(),
                2
            ),
            ("untolerated taint k=:NoSchedule".to_string(), 1),
        ]
    );
    // A pod that fits the big node only: the small one is excluded.
    let p = place(&[requesting(json!({"cpu": "6"}))], &nodes, &slurm, &[]);
    assert_eq!(p.feasible.iter().collect::<Vec<_>>(), ["big"]);
    assert_eq!(
        p.rejections[0],
        (
            "Insufficient cpu (requested 6, largest node allocatable 4)".to_string(),
            1
        )
    );
}

#[test]
fn every_pod_of_a_group_must_fit() {
    let nodes = vec![
        sized_node("n1", json!({"cpu": "8"})),
        sized_node("n2", json!({"cpu": "8", "nvidia.com/gpu": "1"})),
    ];
    let slurm: BTreeSet<String> = ["n1", "n2"].map(String::from).into();
    let group = [
        requesting(json!({"cpu": "2"})),
        requesting(json!({"cpu": "2", "nvidia.com/gpu": "1"})),
    ];
    let p = place(&group, &nodes, &slurm, &[]);
    assert_eq!(p.feasible.iter().collect::<Vec<_>>(), ["n2"]);
    assert_eq!(p.excluded, ["n1"]);
    assert_eq!(
        p.rejections,
        [(
            "Insufficient nvidia.com/gpu (requested 1, largest node allocatable 0)".to_string(),
            1
        )]
    );
}

#[test]
fn requests_are_part_of_the_cache_key() {
    let key = |r: serde_json::Value| constraints_key(&[requesting(r)]);
    assert_ne!(key(json!({"cpu": "2"})), key(json!({"cpu": "16"})));
    assert_ne!(
        key(json!({"cpu": "2"})),
        key(json!({"cpu": "2", "memory": "1Gi"}))
    );
    assert_ne!(
        key(json!({"cpu": "2"})),
        key(json!({"cpu": "2", "nvidia.com/gpu": "1"}))
    );
    assert_ne!(
        constraints_key(&[requesting(json!({"cpu": "2"}))]),
        constraints_key(&[
            requesting(json!({"cpu": "2"})),
            requesting(json!({"cpu": "16"}))
        ])
    );
    // The same effective request, however written, shares the cached placement.
    assert_eq!(key(json!({"cpu": "1"})), key(json!({"cpu": "1000m"})));
    let split = pod(json!({"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "1"}}},
        {"name": "b", "resources": {"requests": {"cpu": "1"}}}
    ]}));
    assert_eq!(constraints_key(&[split]), key(json!({"cpu": "2"})));
    assert_eq!(key(json!({"cpu": "0"})), constraints_key(&[pod(json!({}))]));
}

#[test]
fn an_allocatable_change_invalidates_cached_placements() {
    let a = standard();
    let b = sized_node(
        "n1",
        json!({"cpu": "4", "memory": "16000Mi", "pods": "110"}),
    );
    assert_ne!(placement_fingerprint(&a), placement_fingerprint(&b));
    let mut heartbeat = (*a).clone();
    heartbeat
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .last_heartbeat_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Default::default(),
    ));
    assert_eq!(placement_fingerprint(&a), placement_fingerprint(&heartbeat));
}

#[test]
fn byte_quantities_are_shown_with_the_shortest_exact_suffix() {
    let q = |s: &str| Quantity::parse(s).unwrap();
    assert_eq!(show("memory", q("16000Mi")), "16000Mi");
    assert_eq!(show("memory", q("20Gi")), "20Gi");
    assert_eq!(show("memory", q("100M")), "100M");
    assert_eq!(show("memory", q("1001")), "1001");
    assert_eq!(show("hugepages-2Mi", q("4Mi")), "4Mi");
    assert_eq!(show("cpu", q("1500m")), "1500m");
    assert_eq!(show("cpu", q("1024")), "1024");
    assert_eq!(show("memory", q("0")), "0");
}
