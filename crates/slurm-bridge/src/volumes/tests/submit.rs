//! Table tests: pods that cannot be submitted yet, and bound claims' PV node affinity.

use serde_json::{Value, json};

use super::*;

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
