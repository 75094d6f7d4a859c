//! §3.4, mutation: the namespaces and selector tables, the finalizer and toleration added at
//! creation, and when the namespace is looked up.

use super::*;

#[test]
fn empty_pod_empty_config_is_unchanged() {
    let r = create(Pod::default());
    assert!(mutate::mutate(&r, "", false).0.is_empty());
    assert_eq!(
        validate(&r, "", false, &crate::dra::GresDrivers::builtin()),
        Ok(())
    );
}

#[test]
fn namespaces_table() {
    let no_node = json!({});
    let with_node = json!({"spec": {"nodeName": "node-1"}});
    // (name, operation, namespace, scheduler, extra, expected patch)
    let rows: Vec<(&str, Operation, &str, Option<&str>, &Value, Vec<Value>)> = vec![
        (
            "unmanaged ns, other scheduler: untouched",
            Operation::Create,
            "default",
            Some("other"),
            &no_node,
            vec![],
        ),
        (
            "managed ns, default-scheduler: bridge",
            Operation::Create,
            MANAGED,
            Some("default-scheduler"),
            &no_node,
            vec![sched(BRIDGE)],
        ),
        (
            "managed ns, unset scheduler: bridge",
            Operation::Create,
            MANAGED,
            None,
            &no_node,
            vec![sched(BRIDGE)],
        ),
        (
            "managed ns, custom scheduler: stays custom",
            Operation::Create,
            MANAGED,
            Some("custom-scheduler"),
            &no_node,
            vec![],
        ),
        (
            "unmanaged ns, bridge: stays",
            Operation::Create,
            "default",
            Some(BRIDGE),
            &no_node,
            vec![],
        ),
        (
            "unmanaged ns, default: stays default",
            Operation::Create,
            "default",
            Some("default-scheduler"),
            &no_node,
            vec![],
        ),
        (
            "CREATE in managed ns with nodeName: cleared",
            Operation::Create,
            MANAGED,
            Some("default-scheduler"),
            &with_node,
            vec![clear_node(), sched(BRIDGE)],
        ),
        (
            "CREATE of a bridge pod with nodeName anywhere: cleared",
            Operation::Create,
            "default",
            Some(BRIDGE),
            &with_node,
            vec![clear_node()],
        ),
        // Quirk #9 fixed: UPDATE never patches (schedulerName is immutable).
        (
            "UPDATE in managed ns: nodeName kept, schedulerName not patched",
            Operation::Update,
            MANAGED,
            Some("default-scheduler"),
            &with_node,
            vec![],
        ),
        (
            "UPDATE of a bridge pod: nodeName kept",
            Operation::Update,
            MANAGED,
            Some(BRIDGE),
            &with_node,
            vec![],
        ),
        // Quirk #10 fixed: another scheduler in a managed namespace is left alone.
        (
            "managed ns, custom scheduler with nodeName: untouched",
            Operation::Create,
            MANAGED,
            Some("custom-scheduler"),
            &with_node,
            vec![],
        ),
    ];
    for (name, op, ns, scheduler, extra, want) in rows {
        let p = pod(ns, scheduler, extra.clone());
        let r = match op {
            Operation::Update => update(p.clone(), p),
            _ => create(p),
        };
        assert_eq!(mutate_req(&r), want, "{name}");
    }
}

/// The whole mutating patch of a CREATE: the reference's placement ops, then the finalizer and
/// the toleration the scheduler would otherwise add at bind time; each only where missing.
#[test]
fn creation_adds_the_finalizer_and_the_toleration_once() {
    use crate::wellknown::{FINALIZER, managed_node_toleration};
    let t = serde_json::to_value(managed_node_toleration(BRIDGE)).unwrap();
    let not_ready = json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                           "effect": "NoExecute", "tolerationSeconds": 300});
    // (name, namespace, scheduler, extra, expected patch)
    let rows: Vec<(&str, &str, Option<&str>, Value, Vec<Value>)> = vec![
        (
            "managed ns, default scheduler",
            MANAGED,
            None,
            json!({}),
            vec![sched(BRIDGE), add_finalizer(), add_toleration()],
        ),
        (
            "bridge pod anywhere",
            "default",
            Some(BRIDGE),
            json!({}),
            vec![add_finalizer(), add_toleration()],
        ),
        (
            "lists the pod has are appended to",
            MANAGED,
            Some(BRIDGE),
            json!({"metadata": {"finalizers": ["batch.kubernetes.io/job-tracking"]},
                "spec": {"tolerations": [not_ready]}}),
            vec![
                json!({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}),
                json!({"op": "add", "path": "/spec/tolerations/-", "value": t}),
            ],
        ),
        (
            "both already there",
            MANAGED,
            Some(BRIDGE),
            json!({"metadata": {"finalizers": [FINALIZER]}, "spec": {"tolerations": [t]}}),
            vec![],
        ),
        (
            "another scheduler's pod",
            MANAGED,
            Some("custom-scheduler"),
            json!({}),
            vec![],
        ),
        (
            "unmanaged ns, default scheduler",
            "default",
            None,
            json!({}),
            vec![],
        ),
    ];
    for (name, ns, scheduler, extra, want) in rows {
        let r = create(pod(ns, scheduler, extra));
        let patch = mutate::patch(&r, BRIDGE, managed(ns));
        assert_eq!(ops(&patch), want, "{name}");
        // Applied as the API server applies it: each exactly once.
        let mut doc = serde_json::to_value(r.object.as_ref().unwrap()).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        let p: Pod = serde_json::from_value(doc).unwrap();
        if !want.is_empty() {
            let fins = p.metadata.finalizers.unwrap_or_default();
            assert_eq!(fins.iter().filter(|f| *f == FINALIZER).count(), 1, "{name}");
            let tols = p.spec.unwrap().tolerations.unwrap_or_default();
            assert_eq!(
                tols.iter()
                    .filter(|x| **x == managed_node_toleration(BRIDGE))
                    .count(),
                1,
                "{name}"
            );
        }
    }
    // UPDATE is never patched.
    let p = pod(MANAGED, Some(BRIDGE), json!({}));
    assert!(
        mutate::patch(&update(p.clone(), p), BRIDGE, true)
            .0
            .is_empty()
    );
}

#[tokio::test]
async fn selector_table() {
    let labels: BTreeMap<String, BTreeMap<String, String>> = [
        (
            "hpc".to_string(),
            [("slurm".to_string(), "yes".to_string())].into(),
        ),
        (
            "web".to_string(),
            [("slurm".to_string(), "no".to_string())].into(),
        ),
    ]
    .into();
    let selector: LabelSelector =
        serde_json::from_value(json!({"matchLabels": {"slurm": "yes"}})).unwrap();
    let ns = Namespaces::Static {
        selector: Arc::new(selector),
        labels: Arc::new(labels.clone()),
    };
    let w = Webhooks {
        scheduler_name: BRIDGE.into(),
        config: crate::config::Config::default(),
        tenancy: crate::tenancy::Tenancy::new(&crate::config::Config::default(), None),
        namespaces: ns,
        metrics: AdmissionMetrics::unregistered(),
    };
    let r = create(pod("hpc", Some("default-scheduler"), json!({})));
    assert_eq!(
        w.decide(Webhook::Mutate, &r).await,
        allow(vec![sched(BRIDGE), add_finalizer(), add_toleration()]),
        "selector matches: mutated"
    );
    let r = create(pod("web", Some("default-scheduler"), json!({})));
    assert_eq!(
        w.decide(Webhook::Mutate, &r).await,
        allow(vec![]),
        "selector does not match: not mutated"
    );
    // Nil selector: managedNamespaces.
    let w = Webhooks {
        scheduler_name: BRIDGE.into(),
        config: crate::config::Config::default(),
        tenancy: crate::tenancy::Tenancy::new(&crate::config::Config::default(), None),
        namespaces: Namespaces::listed(&["web".to_string()]),
        metrics: AdmissionMetrics::unregistered(),
    };
    assert_eq!(
        w.decide(Webhook::Mutate, &r).await,
        allow(vec![sched(BRIDGE), add_finalizer(), add_toleration()]),
        "no selector: the list"
    );
    // The empty selector matches every namespace (reference §2.1).
    assert!(selector_matches(
        &LabelSelector::default(),
        &BTreeMap::new()
    ));
}

#[test]
fn selector_expressions() {
    let sel: LabelSelector = serde_json::from_value(json!({"matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["hpc", "ai"]},
        {"key": "legacy", "operator": "DoesNotExist"},
        {"key": "team", "operator": "Exists"},
        {"key": "env", "operator": "NotIn", "values": ["prod"]},
    ]}))
    .unwrap();
    let l = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert!(selector_matches(&sel, &l(&[("tier", "ai"), ("team", "x")])));
    assert!(!selector_matches(
        &sel,
        &l(&[("tier", "web"), ("team", "x")])
    ));
    assert!(!selector_matches(
        &sel,
        &l(&[("tier", "ai"), ("team", "x"), ("legacy", "")])
    ));
    assert!(!selector_matches(&sel, &l(&[("tier", "ai")])));
    assert!(!selector_matches(
        &sel,
        &l(&[("tier", "ai"), ("team", "x"), ("env", "prod")])
    ));
}

#[test]
fn namespace_is_looked_up_only_for_default_scheduler_creates() {
    let p = pod("anywhere", Some(BRIDGE), json!({}));
    assert!(processed(Operation::Create, &p, BRIDGE, false));
    assert!(!crate::admission::managed::needs_namespace(
        Operation::Create,
        &p,
        BRIDGE
    ));
    assert!(crate::admission::managed::needs_namespace(
        Operation::Create,
        &pod("x", None, json!({})),
        BRIDGE
    ));
    assert!(!crate::admission::managed::needs_namespace(
        Operation::Update,
        &pod("x", None, json!({})),
        BRIDGE
    ));
    assert!(!crate::admission::managed::needs_namespace(
        Operation::Create,
        &pod("x", Some("custom"), json!({})),
        BRIDGE
    ));
}

#[tokio::test]
async fn namespace_lookup_error_is_an_admission_error() {
    // A selector over a cluster that does not answer: the lookup fails and the request gets
    // an error (code 500), as in the reference; bridge pods need no lookup.
    let cfg = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    let client = kube::Client::try_from(cfg).unwrap();
    let selector: LabelSelector =
        serde_json::from_value(json!({"matchLabels": {"slurm": "yes"}})).unwrap();
    let (namespaces, _task) = Namespaces::start(&client, &[], Some(&selector));
    let w = Webhooks {
        scheduler_name: BRIDGE.into(),
        config: crate::config::Config::default(),
        tenancy: crate::tenancy::Tenancy::new(&crate::config::Config::default(), None),
        namespaces,
        metrics: AdmissionMetrics::unregistered(),
    };
    let r = create(pod("hpc", Some("default-scheduler"), json!({})));
    match w.decide(Webhook::Mutate, &r).await {
        Verdict::Error(m) => assert!(m.starts_with("looking up namespace hpc"), "{m}"),
        other => panic!("expected an error, got {other:?}"),
    }
    let r = create(pod("hpc", Some(BRIDGE), json!({})));
    assert_eq!(w.decide(Webhook::Validate, &r).await, allow(vec![]));
}
