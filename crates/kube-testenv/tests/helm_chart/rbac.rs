//! Least-privilege RBAC: every rule the chart renders must be in an allow-list that mirrors the
//! Kubernetes calls each component's code makes (`calls`), and every call in the list must be
//! granted (`check`); the checker itself catches a tampered render.

mod calls;
mod check;

use crate::support::{NAMESPACE, PREFIX, documents, kinds, render};
use check::check_rbac;
use serde_json::Value;

#[test]
fn rbac_grants_no_more_than_the_components_use() {
    // (values, managedNamespaceSelector set, self-managed certificates, admission, leader election)
    let cases: &[(&[&str], bool, bool, bool, bool)] = &[
        (&[], false, false, true, true),
        (&["mode=run"], false, false, true, true),
        (
            &["admission.certManager.enabled=false"],
            false,
            true,
            true,
            true,
        ),
        (
            &["admission.managedNamespaceSelector.matchLabels.a=b"],
            true,
            false,
            true,
            true,
        ),
        (
            &[
                "mode=run",
                "admission.certManager.enabled=false",
                "admission.managedNamespaceSelector.matchLabels.a=b",
            ],
            true,
            true,
            true,
            true,
        ),
        (&["admission.enabled=false"], false, false, false, true),
        (&["nodeAgent.enabled=true"], false, false, true, true),
        (
            &["nodeAgent.enabled=true", "nodeAgent.draCpu=true"],
            false,
            false,
            true,
            true,
        ),
        (
            &[
                "scheduler.leaderElect=false",
                "controllers.leaderElect=false",
            ],
            false,
            false,
            true,
            false,
        ),
    ];
    for (sets, selector, self_managed, admission, leader) in cases {
        let docs = documents(&render(sets));
        let errors = check_rbac(&docs, *selector, *self_managed, *admission, *leader);
        assert!(
            errors.is_empty(),
            "RBAC of {sets:?}:\n{}",
            errors.join("\n")
        );
        if !leader {
            assert!(
                !docs.iter().any(|d| d["kind"] == "Role"),
                "{sets:?}: a lease Role without leader election"
            );
        }
    }
    // With cert-manager and a namespace list, admission needs no permission at all.
    let docs = documents(&render(&[]));
    assert!(
        !kinds(&docs).contains(&format!("ClusterRole/{PREFIX}-admission")),
        "admission has a ClusterRole it does not need"
    );
}

/// The checker itself: a rendered chart with one extra verb, a wildcard, a lease grant
/// cluster-wide, an unnamed webhook grant, or a binding to cluster-admin is caught.
#[test]
fn rbac_check_catches_excess_grants() {
    let base = documents(&render(&["admission.certManager.enabled=false"]));
    assert!(check_rbac(&base, false, true, true, true).is_empty());
    fn role(docs: &mut [Value], name: &str) -> usize {
        docs.iter()
            .position(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
            .unwrap()
    }
    type Tamper = Box<dyn Fn(&mut Vec<Value>)>;
    let tamper: Vec<(&str, Tamper)> = vec![
        (
            "delete on pods",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-scheduler"));
                d[i]["rules"][0]["verbs"]
                    .as_array_mut()
                    .unwrap()
                    .push("delete".into());
            }),
        ),
        (
            "wildcard",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-controllers"));
                d[i]["rules"].as_array_mut().unwrap().push(serde_json::json!({"apiGroups": ["apps"], "resources": ["*"], "verbs": ["get"]}));
            }),
        ),
        (
            "cluster-wide leases",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-controllers"));
                d[i]["rules"].as_array_mut().unwrap().push(serde_json::json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}));
            }),
        ),
        (
            "secrets",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-admission"));
                d[i]["rules"].as_array_mut().unwrap().push(serde_json::json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}));
            }),
        ),
        (
            "unnamed webhook configurations",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-admission"));
                let rules = d[i]["rules"].as_array_mut().unwrap();
                for r in rules.iter_mut() {
                    r.as_object_mut().unwrap().remove("resourceNames");
                }
            }),
        ),
        (
            "a CA Secret grant not limited to its name",
            Box::new(|d: &mut Vec<Value>| {
                let i = d
                    .iter()
                    .position(|d| {
                        d["kind"] == "Role"
                            && d["metadata"]["name"] == format!("{PREFIX}-admission-ca")
                    })
                    .unwrap();
                for r in d[i]["rules"].as_array_mut().unwrap().iter_mut() {
                    r.as_object_mut().unwrap().remove("resourceNames");
                }
            }),
        ),
        (
            "cluster-admin",
            Box::new(|d: &mut Vec<Value>| {
                d.push(serde_json::json!({"kind": "ClusterRoleBinding", "metadata": {"name": "x"},
                "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": format!("{PREFIX}-scheduler"), "namespace": NAMESPACE}]}));
            }),
        ),
        (
            "a missing call",
            Box::new(|d: &mut Vec<Value>| {
                let i = role(d, &format!("{PREFIX}-scheduler"));
                d[i]["rules"].as_array_mut().unwrap().remove(1); // pods/binding
            }),
        ),
    ];
    for (what, f) in tamper {
        let mut docs = base.clone();
        f(&mut docs);
        let errors = check_rbac(&docs, false, true, true, true);
        assert!(!errors.is_empty(), "{what}: not caught");
    }
}
