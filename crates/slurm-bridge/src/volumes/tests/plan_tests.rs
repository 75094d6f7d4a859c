//! Table tests of `plan`: the PV or node each claim gets on the node Slurm chose.

use serde_json::{Value, json};

use super::*;

fn node(name: &str) -> Node {
    nodes()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
        .expect("test node")
}

fn bind(claim: &str, pv: &str) -> ClaimAction {
    ClaimAction::BindPv {
        claim: claim.into(),
        pv: pv.into(),
    }
}

fn select(claim: &str, node: &str, already: bool) -> ClaimAction {
    ClaimAction::SelectNode {
        claim: claim.into(),
        node: node.into(),
        already,
    }
}

/// The actions for each pod in turn on `on`, each plan reserving its PVs for the next.
fn plan_gang(
    pods: &[Pod],
    on: &str,
    pvcs: Vec<Value>,
    pvs: Vec<Value>,
) -> Vec<Result<Vec<ClaimAction>, String>> {
    let snap = snapshot(pvcs, pvs, classes());
    let mut reserved = Reserved::default();
    pods.iter()
        .map(|p| {
            let plan = plan_pod(p, &snap, &node(on), &reserved).map_err(|e| e.to_string())?;
            reserved.add(&plan);
            Ok(plan.actions)
        })
        .collect()
}

#[test]
fn plans() {
    let one = |c: &str| vec![pod(claim_vol(c))];
    let gang = |claims: &[&str]| -> Vec<Pod> {
        claims
            .iter()
            .enumerate()
            .map(|(i, c)| pod_named(&format!("p{i}"), claim_vol(c)))
            .collect()
    };
    let mut selected = pvc("data", json!("fast"), "1Gi");
    selected["metadata"]["annotations"] = json!({ "volume.kubernetes.io/selected-node": "n1" });
    type Row = (
        &'static str,
        Vec<Pod>,
        &'static str,
        Vec<Value>,
        Vec<Value>,
        Vec<Result<Vec<ClaimAction>, String>>,
    );
    let rows: Vec<Row> = vec![
        (
            "the smallest fitting PV",
            one("data"),
            "n1",
            vec![pvc("data", json!("local"), "8Gi")],
            vec![
                local_pv("big", "20Gi", "n1"),
                local_pv("ok", "10Gi", "n1"),
                local_pv("tiny", "1Gi", "n1"),
                local_pv("elsewhere", "8Gi", "n2"),
            ],
            vec![Ok(vec![bind("data", "ok")])],
        ),
        (
            "a PV pre-bound to the claim before a smaller one",
            one("data"),
            "n1",
            vec![pvc("data", json!("local"), "1Gi")],
            vec![
                local_pv("small", "1Gi", "n1"),
                pv_with(
                    "mine",
                    "5Gi",
                    "n1",
                    json!({ "spec": { "claimRef": {
                  "namespace": NS, "name": "data" } } }),
                ),
            ],
            vec![Ok(vec![bind("data", "mine")])],
        ),
        (
            "a gang never shares a PV; the third pod finds none",
            gang(&["a", "b", "c"]),
            "n1",
            vec![
                pvc("a", json!("local"), "1Gi"),
                pvc("b", json!("local"), "1Gi"),
                pvc("c", json!("local"), "1Gi"),
            ],
            vec![local_pv("x", "1Gi", "n1"), local_pv("y", "2Gi", "n1")],
            vec![
                Ok(vec![bind("a", "x")]),
                Ok(vec![bind("b", "y")]),
                Err(
                    "no available persistent volume for claim c on node n1 (wanted class \
                   \"local\", at least 1073741824 bytes, access modes [\"ReadWriteOnce\"], \
                   volume mode Filesystem, node affinity matching the node, not reserved \
                   by another pod)"
                        .into(),
                ),
            ],
        ),
        (
            "a claim shared by two pods keeps its PV",
            gang(&["s", "s"]),
            "n1",
            vec![pvc("s", json!("local"), "1Gi")],
            vec![local_pv("x", "1Gi", "n1"), local_pv("y", "1Gi", "n1")],
            vec![Ok(vec![bind("s", "x")]), Ok(vec![bind("s", "x")])],
        ),
        (
            "dynamic: select the node",
            one("data"),
            "n2",
            vec![pvc("data", json!("fast"), "1Gi")],
            vec![],
            vec![Ok(vec![select("data", "n2", false)])],
        ),
        (
            "dynamic: a matching pre-created PV is bound instead",
            one("data"),
            "n2",
            vec![pvc("data", json!("fast"), "1Gi")],
            vec![pv_with(
                "pre",
                "1Gi",
                "n2",
                json!({ "spec": { "storageClassName": "fast" } }),
            )],
            vec![Ok(vec![bind("data", "pre")])],
        ),
        (
            "dynamic: outside the allowed topologies",
            one("data"),
            "n2",
            vec![pvc("data", json!("zonal"), "1Gi")],
            vec![],
            vec![Err(
                "claim data cannot be served on node n2: node(s) didn't match the storage \
                   class's allowed topologies"
                    .into(),
            )],
        ),
        (
            "selected node already set",
            one("data"),
            "n1",
            vec![selected.clone()],
            vec![],
            vec![Ok(vec![select("data", "n1", true)])],
        ),
        (
            "selected node set to another node",
            one("data"),
            "n2",
            vec![selected],
            vec![],
            vec![Err(
                "claim data cannot be served on node n2: node(s) didn't find available \
                   persistent volumes to bind"
                    .into(),
            )],
        ),
        (
            "bound: nothing to do",
            one("data"),
            "n1",
            vec![bound_pvc("data", "pv1")],
            vec![local_pv("pv1", "1Gi", "n1")],
            vec![Ok(vec![ClaimAction::Bound {
                claim: "data".into(),
                pv: "pv1".into(),
            }])],
        ),
        (
            "bound elsewhere",
            one("data"),
            "n2",
            vec![bound_pvc("data", "pv1")],
            vec![local_pv("pv1", "1Gi", "n1")],
            vec![Err(
                "claim data cannot be served on node n2: node(s) had volume node \
                   affinity conflict"
                    .into(),
            )],
        ),
        (
            "not submittable any more",
            one("data"),
            "n1",
            vec![],
            vec![],
            vec![Err("persistentvolumeclaim \"data\" not found".into())],
        ),
    ];
    for (name, pods, on, pvcs, pvs, want) in rows {
        assert_eq!(plan_gang(&pods, on, pvcs, pvs), want, "{name}");
    }
}

#[test]
fn plan_helpers() {
    let snap = snapshot(
        vec![bound_pvc("a", "pv1"), pvc("b", json!("fast"), "1Gi")],
        vec![local_pv("pv1", "1Gi", "n1")],
        classes(),
    );
    let p = pod(json!([
        { "name": "a", "persistentVolumeClaim": { "claimName": "a" } },
        { "name": "b", "persistentVolumeClaim": { "claimName": "b" } }]));
    let plan = plan_pod(&p, &snap, &node("n1"), &Reserved::default()).expect("plan");
    assert_eq!(plan.claims(), vec!["a".to_string(), "b".to_string()]);
    assert!(!plan.is_noop());
    assert_eq!((plan.namespace.as_str(), plan.node.as_str()), (NS, "n1"));
    let bad = snapshot(vec![pvc("b", json!("fast"), "lots")], vec![], classes());
    let err = plan_pod(
        &pod(claim_vol("b")),
        &bad,
        &node("n1"),
        &Reserved::default(),
    );
    assert!(
        matches!(err, Err(VolumeError::BadQuantity { .. })),
        "{err:?}"
    );
}

#[test]
fn a_claim_shared_by_a_gang_keeps_what_it_got_first() {
    let snap = snapshot(
        vec![
            pvc("s", json!("local"), "1Gi"),
            pvc("d", json!("fast"), "1Gi"),
        ],
        vec![local_pv("x", "1Gi", "n1"), local_pv("y", "1Gi", "n2")],
        classes(),
    );
    let both = || {
        json!([
            { "name": "s", "persistentVolumeClaim": { "claimName": "s" } },
            { "name": "d", "persistentVolumeClaim": { "claimName": "d" } }])
    };
    let (p0, p1) = (pod_named("p0", both()), pod_named("p1", both()));
    let mut reserved = Reserved::default();
    let first = plan_pod(&p0, &snap, &node("n1"), &reserved).expect("first pod");
    assert_eq!(
        first.actions,
        vec![bind("s", "x"), select("d", "n1", false)]
    );
    reserved.add(&first);
    assert!(reserved.contains("x") && !reserved.contains("y"));
    let mut lost = reserved.clone();
    lost.exclude("x");
    let solo = plan_pod(
        &pod(claim_vol("t")),
        &snapshot(
            vec![pvc("t", json!("local"), "1Gi")],
            vec![local_pv("x", "1Gi", "n1"), local_pv("x2", "1Gi", "n1")],
            classes(),
        ),
        &node("n1"),
        &lost,
    );
    let solo = solo.map(|p| p.actions).map_err(|e| e.to_string());
    assert_eq!(
        solo,
        Ok(vec![bind("t", "x2")]),
        "an excluded PV is not offered again"
    );
    let same = plan_pod(&p1, &snap, &node("n1"), &reserved).expect("same node");
    assert_eq!(same.actions, vec![bind("s", "x"), select("d", "n1", true)]);
    let other = plan_pod(&p1, &snap, &node("n2"), &reserved).map_err(|e| e.to_string());
    assert_eq!(
        other,
        Err(
            "claim s cannot be served on node n2: node(s) had volume node affinity conflict"
                .to_string()
        )
    );
}
