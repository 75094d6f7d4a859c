//! Table tests of the volume rules, from manifests written as JSON.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::*;

mod plan_tests;

const NS: &str = "ns";

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test manifest")
}

/// The test pod `ns/p` (uid `pod-uid`) with these `spec.volumes`.
fn pod_named(name: &str, volumes: Value) -> Pod {
    from(json!({
        "metadata": { "name": name, "namespace": NS, "uid": format!("{name}-uid") },
        "spec": { "containers": [{ "name": "c" }], "volumes": volumes },
    }))
}

fn pod(volumes: Value) -> Pod {
    pod_named("p", volumes)
}

fn claim_vol(claim: &str) -> Value {
    json!([{ "name": "v", "persistentVolumeClaim": { "claimName": claim } }])
}

/// Three nodes: n1 and n3 in zone a, n2 in zone b; n1 has 8 GPUs.
fn nodes() -> Vec<Node> {
    [
        json!({ "metadata": { "name": "n1", "labels": {
            "kubernetes.io/hostname": "n1", "zone": "a", "gpus": "8" } } }),
        json!({ "metadata": { "name": "n2", "labels": {
            "kubernetes.io/hostname": "n2", "zone": "b" } } }),
        json!({ "metadata": { "name": "n3", "labels": {
            "kubernetes.io/hostname": "n3", "zone": "a", "gpus": "2" } } }),
    ]
    .into_iter()
    .map(from)
    .collect()
}

fn classes() -> Vec<Value> {
    vec![
        json!({ "metadata": { "name": "local" }, "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer" }),
        json!({ "metadata": { "name": "fast" }, "provisioner": "example.com/lvm",
                "volumeBindingMode": "WaitForFirstConsumer" }),
        json!({ "metadata": { "name": "zonal" }, "provisioner": "example.com/disk",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{ "matchLabelExpressions": [
                    { "key": "zone", "values": ["a"] }] }] }),
        json!({ "metadata": { "name": "imm" }, "provisioner": "example.com/nfs" }),
    ]
}

/// A PVC `ns/<name>` of `class` (`Value::Null`: unset) asking for `size`, ReadWriteOnce.
fn pvc(name: &str, class: Value, size: &str) -> Value {
    let mut spec = json!({ "accessModes": ["ReadWriteOnce"],
                           "resources": { "requests": { "storage": size } } });
    if !class.is_null() {
        spec["storageClassName"] = class;
    }
    json!({ "metadata": { "name": name, "namespace": NS, "uid": format!("{name}-uid") },
            "spec": spec })
}

/// A PVC bound to `pv` by the PV controller.
fn bound_pvc(name: &str, pv: &str) -> Value {
    json!({ "metadata": { "name": name, "namespace": NS, "uid": format!("{name}-uid"),
                          "annotations": { "pv.kubernetes.io/bind-completed": "yes" } },
            "spec": { "volumeName": pv, "storageClassName": "local" },
            "status": { "phase": "Bound" } })
}

/// An available local PV `name` of `size` in class `local` on node `host`.
fn local_pv(name: &str, size: &str, host: &str) -> Value {
    json!({ "metadata": { "name": name },
            "spec": { "capacity": { "storage": size }, "accessModes": ["ReadWriteOnce"],
                      "storageClassName": "local",
                      "nodeAffinity": { "required": { "nodeSelectorTerms": [{
                          "matchExpressions": [{ "key": "kubernetes.io/hostname",
                                                 "operator": "In", "values": [host] }] }] } } },
            "status": { "phase": "Available" } })
}

/// A PV with these changes merged over `local_pv(name, size, host)`.
fn pv_with(name: &str, size: &str, host: &str, patch: Value) -> Value {
    let mut v = local_pv(name, size, host);
    merge(&mut v, patch);
    v
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn snapshot(pvcs: Vec<Value>, pvs: Vec<Value>, classes: Vec<Value>) -> VolumeSnapshot {
    VolumeSnapshot::new(
        pvcs.into_iter().map(|v| Arc::new(from(v))),
        pvs.into_iter().map(|v| Arc::new(from(v))),
        classes.into_iter().map(|v| Arc::new(from(v))),
    )
}

/// Expected outcome: `Err(message)`, or the nodes that fit with the reason for the others.
type Want = Result<(&'static [&'static str], Option<&'static str>), &'static str>;

const ALL: &[&str] = &["n1", "n2", "n3"];
const AFFINITY: Option<&str> = Some(plan::REASON_AFFINITY);
const NO_PV: Option<&str> = Some(plan::REASON_NO_PV);
const TOPOLOGY: Option<&str> = Some(plan::REASON_TOPOLOGY);

struct Case {
    name: &'static str,
    pod: Pod,
    pvcs: Vec<Value>,
    pvs: Vec<Value>,
    want: Want,
}

fn case(name: &'static str, pod: Pod, pvcs: Vec<Value>, pvs: Vec<Value>, want: Want) -> Case {
    Case {
        name,
        pod,
        pvcs,
        pvs,
        want,
    }
}

fn check(c: Case, classes: Vec<Value>) {
    let snap = snapshot(c.pvcs, c.pvs, classes);
    let got = fit(&c.pod, &snap, &nodes());
    match (c.want, got) {
        (Err(msg), Err(e)) => assert_eq!(e.to_string(), msg, "{}", c.name),
        (Ok((fit, reason)), Ok(f)) => {
            let want: BTreeMap<String, Option<&str>> = ALL
                .iter()
                .map(|n| {
                    (
                        n.to_string(),
                        (!fit.contains(n)).then_some(reason).flatten(),
                    )
                })
                .collect();
            assert_eq!(f.per_node, want, "{}", c.name);
            for n in ALL {
                assert_eq!(f.fits(n), fit.contains(n), "{}: fits({n})", c.name);
            }
        }
        (want, got) => panic!("{}: want {want:?}, got {got:?}", c.name),
    }
}

#[test]
fn not_submittable_pods_say_why() {
    let ephemeral = json!([{ "name": "scratch", "ephemeral": { "volumeClaimTemplate": {
        "spec": { "accessModes": ["ReadWriteOnce"] } } } }]);
    let mut deleting = pvc("data", json!("local"), "1Gi");
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut not_owned = pvc("p-scratch", json!("fast"), "1Gi");
    not_owned["metadata"]["ownerReferences"] = json!([{ "apiVersion": "v1", "kind": "Pod",
        "name": "p", "uid": "someone-else", "controller": true }]);
    let mut prebound = pvc("data", json!("local"), "1Gi");
    prebound["spec"]["volumeName"] = json!("pv1");
    let cases = vec![
        case(
            "missing claim",
            pod(claim_vol("data")),
            vec![],
            vec![],
            Err("persistentvolumeclaim \"data\" not found"),
        ),
        case(
            "claim being deleted",
            pod(claim_vol("data")),
            vec![deleting],
            vec![],
            Err("persistentvolumeclaim \"data\" is being deleted"),
        ),
        case(
            "ephemeral claim not created yet",
            pod(ephemeral.clone()),
            vec![],
            vec![],
            Err("persistentvolumeclaim \"p-scratch\" not found"),
        ),
        case(
            "ephemeral claim of someone else",
            pod(ephemeral),
            vec![not_owned],
            vec![],
            Err("PVC ns/p-scratch was not created for pod ns/p (pod is not owner)"),
        ),
        case(
            "bound to a missing PV",
            pod(claim_vol("data")),
            vec![bound_pvc("data", "gone")],
            vec![],
            Err("pvc data bound to a missing PV gone"),
        ),
        case(
            "missing class",
            pod(claim_vol("data")),
            vec![pvc("data", json!("nope"), "1Gi")],
            vec![],
            Err("storageclass.storage.k8s.io \"nope\" not found"),
        ),
        case(
            "immediate class",
            pod(claim_vol("data")),
            vec![pvc("data", json!("imm"), "1Gi")],
            vec![],
            Err("pod has unbound immediate PersistentVolumeClaims"),
        ),
        case(
            "no class: the PV controller binds it",
            pod(claim_vol("data")),
            vec![pvc("data", json!(""), "1Gi")],
            vec![],
            Err("pod has unbound immediate PersistentVolumeClaims"),
        ),
        case(
            "unset class and no default class",
            pod(claim_vol("data")),
            vec![pvc("data", Value::Null, "1Gi")],
            vec![],
            Err("pod has unbound immediate PersistentVolumeClaims"),
        ),
        case(
            "pre-bound by volumeName, not yet bound",
            pod(claim_vol("data")),
            vec![prebound],
            vec![local_pv("pv1", "1Gi", "n1")],
            Err("pod has unbound immediate PersistentVolumeClaims"),
        ),
    ];
    for c in cases {
        check(c, classes());
    }
}

#[test]
fn bound_claims_follow_their_pv_node_affinity() {
    let terms = |t: Value| {
        json!({ "metadata": { "name": "pv1" },
                "spec": { "capacity": { "storage": "1Gi" }, "storageClassName": "local",
                          "nodeAffinity": { "required": { "nodeSelectorTerms": t } } } })
    };
    let expr = |k: &str, op: &str, v: Value| json!({ "key": k, "operator": op, "values": v });
    let exists = |k: &str, op: &str| json!({ "key": k, "operator": op });
    let bound = || vec![bound_pvc("data", "pv1")];
    let p = || pod(claim_vol("data"));
    let cases = vec![
        case(
            "no node affinity",
            p(),
            bound(),
            vec![json!({ "metadata": { "name": "pv1" }, "spec": {} })],
            Ok((ALL, None)),
        ),
        case(
            "hostname In",
            p(),
            bound(),
            vec![local_pv("pv1", "1Gi", "n2")],
            Ok((&["n2"], AFFINITY)),
        ),
        case(
            "matchFields metadata.name",
            p(),
            bound(),
            vec![terms(
                json!([{ "matchFields": [expr("metadata.name", "In", json!(["n3"]))] }]),
            )],
            Ok((&["n3"], AFFINITY)),
        ),
        case(
            "NotIn",
            p(),
            bound(),
            vec![terms(
                json!([{ "matchExpressions": [expr("zone", "NotIn", json!(["a"]))] }]),
            )],
            Ok((&["n2"], AFFINITY)),
        ),
        case(
            "Exists",
            p(),
            bound(),
            vec![terms(
                json!([{ "matchExpressions": [exists("gpus", "Exists")] }]),
            )],
            Ok((&["n1", "n3"], AFFINITY)),
        ),
        case(
            "DoesNotExist",
            p(),
            bound(),
            vec![terms(
                json!([{ "matchExpressions": [exists("gpus", "DoesNotExist")] }]),
            )],
            Ok((&["n2"], AFFINITY)),
        ),
        case(
            "Gt",
            p(),
            bound(),
            vec![terms(
                json!([{ "matchExpressions": [expr("gpus", "Gt", json!(["4"]))] }]),
            )],
            Ok((&["n1"], AFFINITY)),
        ),
        case(
            "Lt",
            p(),
            bound(),
            vec![terms(
                json!([{ "matchExpressions": [expr("gpus", "Lt", json!(["4"]))] }]),
            )],
            Ok((&["n3"], AFFINITY)),
        ),
        case(
            "terms are ORed",
            p(),
            bound(),
            vec![terms(json!([
                 { "matchExpressions": [expr("zone", "In", json!(["b"]))] },
                 { "matchExpressions": [expr("gpus", "Gt", json!(["4"]))] }]))],
            Ok((&["n1", "n2"], AFFINITY)),
        ),
        case(
            "expressions in a term are ANDed",
            p(),
            bound(),
            vec![terms(json!([{ "matchExpressions": [
                 expr("zone", "In", json!(["a"])), expr("gpus", "Lt", json!(["4"]))] }]))],
            Ok((&["n3"], AFFINITY)),
        ),
        case(
            "no terms match no node",
            p(),
            bound(),
            vec![terms(json!([]))],
            Ok((&[], AFFINITY)),
        ),
    ];
    for c in cases {
        check(c, classes());
    }
}

#[test]
fn static_claims_need_an_available_matching_pv_on_the_node() {
    let p = || pod(claim_vol("data"));
    let want8 = || vec![pvc("data", json!("local"), "8Gi")];
    let taken = json!({ "spec": { "claimRef": { "namespace": NS, "name": "other" } } });
    let mine = json!({ "spec": { "claimRef": { "namespace": NS, "name": "data",
                                               "uid": "data-uid" } } });
    let mine_old = json!({ "spec": { "claimRef": { "namespace": NS, "name": "data",
                                                   "uid": "old-uid" } } });
    let mut rwx = pvc("data", json!("local"), "1Gi");
    rwx["spec"]["accessModes"] = json!(["ReadWriteOnce", "ReadWriteMany"]);
    let mut block = pvc("data", json!("local"), "1Gi");
    block["spec"]["volumeMode"] = json!("Block");
    let mut selecting = pvc("data", json!("local"), "1Gi");
    selecting["spec"]["selector"] = json!({ "matchLabels": { "tier": "gold" },
        "matchExpressions": [{ "key": "rack", "operator": "NotIn", "values": ["r9"] }] });
    let labels = |l: Value| json!({ "metadata": { "labels": l } });
    let cases = vec![
        case(
            "size, claimRef, phase and deletion",
            p(),
            want8(),
            vec![
                local_pv("ok", "10Gi", "n1"),
                local_pv("small", "5Gi", "n2"),
                pv_with("claimed", "10Gi", "n3", taken.clone()),
                pv_with(
                    "released",
                    "10Gi",
                    "n3",
                    json!({ "status": { "phase": "Released" } }),
                ),
                pv_with(
                    "deleting",
                    "10Gi",
                    "n2",
                    json!({ "metadata": { "deletionTimestamp": "2026-01-01T00:00:00Z" } }),
                ),
            ],
            Ok((&["n1"], NO_PV)),
        ),
        case(
            "phase not set yet",
            p(),
            want8(),
            vec![pv_with("new", "8Gi", "n2", json!({ "status": null }))],
            Ok((&["n2"], NO_PV)),
        ),
        case(
            "other class or no class",
            p(),
            want8(),
            vec![
                pv_with(
                    "other",
                    "10Gi",
                    "n1",
                    json!({ "spec": { "storageClassName": "fast" } }),
                ),
                pv_with(
                    "none",
                    "10Gi",
                    "n2",
                    json!({ "spec": { "storageClassName": null } }),
                ),
            ],
            Ok((&[], NO_PV)),
        ),
        case(
            "pre-bound to this claim",
            p(),
            want8(),
            vec![pv_with("mine", "8Gi", "n3", mine)],
            Ok((&["n3"], NO_PV)),
        ),
        case(
            "pre-bound to an older claim of the same name",
            p(),
            want8(),
            vec![pv_with("old", "8Gi", "n3", mine_old)],
            Ok((&[], NO_PV)),
        ),
        case(
            "access modes must be a superset",
            p(),
            vec![rwx],
            vec![
                local_pv("rwo", "1Gi", "n1"),
                pv_with(
                    "both",
                    "1Gi",
                    "n2",
                    json!({ "spec": { "accessModes": ["ReadWriteMany", "ReadWriteOnce"] } }),
                ),
            ],
            Ok((&["n2"], NO_PV)),
        ),
        case(
            "volume mode must be equal",
            p(),
            vec![block],
            vec![
                local_pv("fs", "1Gi", "n1"),
                pv_with(
                    "blk",
                    "1Gi",
                    "n3",
                    json!({ "spec": { "volumeMode": "Block" } }),
                ),
            ],
            Ok((&["n3"], NO_PV)),
        ),
        case(
            "label selector",
            p(),
            vec![selecting],
            vec![
                pv_with("gold", "1Gi", "n1", labels(json!({ "tier": "gold" }))),
                pv_with(
                    "gold-r9",
                    "1Gi",
                    "n2",
                    labels(json!({ "tier": "gold", "rack": "r9" })),
                ),
                pv_with("silver", "1Gi", "n3", labels(json!({ "tier": "silver" }))),
            ],
            Ok((&["n1"], NO_PV)),
        ),
        case(
            "unset class takes the default class",
            p(),
            vec![pvc("data", Value::Null, "1Gi")],
            vec![local_pv("a", "1Gi", "n2")],
            Ok((&["n2"], NO_PV)),
        ),
        case(
            "two claims of one pod need two PVs",
            pod(json!([
                 { "name": "a", "persistentVolumeClaim": { "claimName": "a" } },
                 { "name": "b", "persistentVolumeClaim": { "claimName": "b" } }])),
            vec![
                pvc("a", json!("local"), "1Gi"),
                pvc("b", json!("local"), "1Gi"),
            ],
            vec![
                local_pv("x", "1Gi", "n1"),
                local_pv("y", "1Gi", "n2"),
                local_pv("z", "1Gi", "n2"),
            ],
            Ok((&["n2"], NO_PV)),
        ),
    ];
    for c in cases {
        let mut cl = classes();
        if c.name.starts_with("unset class") {
            cl[0]["metadata"]["annotations"] =
                json!({ "storageclass.kubernetes.io/is-default-class": "true" });
        }
        check(c, cl);
    }
}

#[test]
fn dynamic_and_selected_claims() {
    let p = || pod(claim_vol("data"));
    let mut selected = pvc("data", json!("fast"), "1Gi");
    selected["metadata"]["annotations"] = json!({ "volume.kubernetes.io/selected-node": "n3" });
    let ephemeral = json!([{ "name": "scratch", "ephemeral": { "volumeClaimTemplate": {
        "spec": { "accessModes": ["ReadWriteOnce"] } } } }]);
    let mut owned = pvc("p-scratch", json!("fast"), "1Gi");
    owned["metadata"]["ownerReferences"] = json!([{ "apiVersion": "v1", "kind": "Pod",
        "name": "p", "uid": "p-uid", "controller": true }]);
    let cases = vec![
        case(
            "dynamic: every node",
            p(),
            vec![pvc("data", json!("fast"), "1Gi")],
            vec![],
            Ok((ALL, None)),
        ),
        case(
            "dynamic: allowed topologies",
            p(),
            vec![pvc("data", json!("zonal"), "1Gi")],
            vec![],
            Ok((&["n1", "n3"], TOPOLOGY)),
        ),
        case(
            "dynamic: a matching PV outside the topologies",
            p(),
            vec![pvc("data", json!("zonal"), "1Gi")],
            vec![pv_with(
                "pre",
                "1Gi",
                "n2",
                json!({ "spec": { "storageClassName": "zonal" } }),
            )],
            Ok((ALL, None)),
        ),
        case(
            "selected node already set",
            p(),
            vec![selected],
            vec![],
            Ok((&["n3"], NO_PV)),
        ),
        case(
            "ephemeral claim owned by the pod",
            pod(ephemeral),
            vec![owned],
            vec![],
            Ok((ALL, None)),
        ),
    ];
    for c in cases {
        check(c, classes());
    }
}

#[test]
fn keys_name_the_constraints_not_the_claims() {
    let snap = snapshot(
        vec![
            pvc("a", json!("local"), "1Gi"),
            pvc("b", json!("local"), "1Gi"),
            pvc("c", json!("local"), "2Gi"),
            bound_pvc("d", "free"),
            bound_pvc("e", "pinned"),
        ],
        vec![
            json!({ "metadata": { "name": "free" }, "spec": {} }),
            local_pv("pinned", "1Gi", "n1"),
            local_pv("x", "2Gi", "n1"),
        ],
        classes(),
    );
    let key = |claim: &str| fit(&pod(claim_vol(claim)), &snap, &nodes()).map(|f| f.key);
    let (a, b, c) = (key("a").ok(), key("b").ok(), key("c").ok());
    assert!(a.is_some() && a == b, "same shape, same key: {a:?} {b:?}");
    assert_ne!(a, c, "another size is another constraint");
    let free = fit(&pod(claim_vol("d")), &snap, &nodes()).expect("bound claim");
    assert!(free.is_unconstrained() && free.rejected().next().is_none());
    let pinned = fit(&pod(claim_vol("e")), &snap, &nodes()).expect("bound claim");
    assert!(!pinned.is_unconstrained());
    assert_eq!(pinned.reason("n2"), AFFINITY);
    let none = fit(&pod(json!([])), &snap, &nodes()).expect("no volumes");
    assert!(none.is_unconstrained() && none.fits("n1") && !none.fits("n9"));
}

#[test]
fn claims_of_a_pod() {
    let p = pod(json!([
        { "name": "a", "persistentVolumeClaim": { "claimName": "data" } },
        { "name": "b", "persistentVolumeClaim": { "claimName": "data" } },
        { "name": "tmp", "emptyDir": {} },
        { "name": "scratch", "ephemeral": {} }]));
    let got: Vec<(String, bool)> = pod_claims(&p)
        .into_iter()
        .map(|c| (c.claim, c.ephemeral))
        .collect();
    assert_eq!(
        got,
        vec![("data".into(), false), ("p-scratch".into(), true)]
    );
    assert!(has_claims(&p) && !has_claims(&pod(json!([{ "name": "t", "emptyDir": {} }]))));
}

#[test]
fn progress_counts_bound_claims() {
    let bound: PersistentVolumeClaim = from(bound_pvc("a", "pv1"));
    let mut half: PersistentVolumeClaim = from(bound_pvc("b", "pv2"));
    half.status = None;
    let claims = ["a", "b", "c"].map(String::from);
    let p = all_bound(&claims, &[&bound, &half]);
    assert_eq!(
        (p.bound, p.total, p.waiting.clone()),
        (1, 3, vec!["b".into(), "c".into()])
    );
    assert!(!p.done() && all_bound(&claims[..1], &[&bound]).done());
}
