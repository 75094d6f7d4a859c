//! Table tests: unbound WaitForFirstConsumer claims of static pools and provisioners.

use serde_json::{Value, json};

use super::*;

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
