//! Table tests of the volume rules, from manifests written as JSON.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use serde_json::{Value, json};

use super::*;

mod bind_tests;
mod plan_tests;
mod pools;
mod submit;

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
