//! Table tests of the webhooks: every row of reference §3.4, every message of §3.3, the quirk
//! fixes, malformed reviews, and the TLS server (bad input, certificate reload).

#![allow(clippy::type_complexity)]
use super::managed::{Namespaces, processed, selector_matches};
use super::review::{self, AdmissionRequest, Operation, ReviewError, Verdict};
use super::server::{AdmissionMetrics, Webhook, Webhooks};
use super::validate::*;
use super::{certs, mutate, tls};
use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const BRIDGE: &str = "slurm-bridge-scheduler";
const MANAGED: &str = "slinky";

fn pod(ns: &str, scheduler: Option<&str>, extra: Value) -> Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    });
    if let Some(s) = scheduler {
        v["spec"]["schedulerName"] = json!(s);
    }
    merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

fn create(p: Pod) -> AdmissionRequest<Pod> {
    review::request(Operation::Create, p)
}

fn update(p: Pod, old: Pod) -> AdmissionRequest<Pod> {
    let mut r = review::request(Operation::Update, p);
    r.old_object = Some(old);
    r
}

fn managed(ns: &str) -> bool {
    ns == MANAGED
}

/// A patch's operations as JSON, as the API server reads them.
fn ops(p: &Patch) -> Vec<Value> {
    p.0.iter()
        .map(|op| serde_json::to_value(op).unwrap())
        .collect()
}

fn mutate_req(r: &AdmissionRequest<Pod>) -> Vec<Value> {
    ops(&mutate::mutate(r, BRIDGE, managed(review::namespace(r))))
}

fn validate_req(r: &AdmissionRequest<Pod>) -> Result<(), String> {
    validate(r, BRIDGE, managed(review::namespace(r)))
}

fn sched(name: &str) -> Value {
    json!({"op": "add", "path": "/spec/schedulerName", "value": name})
}

fn clear_node() -> Value {
    json!({"op": "remove", "path": "/spec/nodeName"})
}

/// The bridge finalizer, added to a pod that has no finalizers.
fn add_finalizer() -> Value {
    json!({"op": "add", "path": "/metadata/finalizers", "value": [crate::wellknown::FINALIZER]})
}

/// The managed-node toleration, added to a pod that has no tolerations.
fn add_toleration() -> Value {
    let t = serde_json::to_value(crate::wellknown::managed_node_toleration(BRIDGE)).unwrap();
    json!({"op": "add", "path": "/spec/tolerations", "value": [t]})
}

/// Allowed with these operations.
fn allow(ops: Vec<Value>) -> Verdict {
    Verdict::Allow(serde_json::from_value(Value::Array(ops)).unwrap())
}

// ---- §3.4: mutation -------------------------------------------------------------------

#[test]
fn empty_pod_empty_config_is_unchanged() {
    let r = create(Pod::default());
    assert!(mutate::mutate(&r, "", false).0.is_empty());
    assert_eq!(validate(&r, "", false), Ok(()));
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
    assert!(!super::managed::needs_namespace(
        Operation::Create,
        &p,
        BRIDGE
    ));
    assert!(super::managed::needs_namespace(
        Operation::Create,
        &pod("x", None, json!({})),
        BRIDGE
    ));
    assert!(!super::managed::needs_namespace(
        Operation::Update,
        &pod("x", None, json!({})),
        BRIDGE
    ));
    assert!(!super::managed::needs_namespace(
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

// ---- §3.3: validation, every message ----------------------------------------------------

fn res(requests: Value, limits: Value) -> Value {
    json!({"requests": requests, "limits": limits})
}

fn containers(list: Value) -> Value {
    json!({"spec": {"containers": list}})
}

#[test]
fn validate_create_table() {
    let dra_cpu = RESOURCE_DRA_CPU_KEY;
    let rows: Vec<(&str, &str, Option<&str>, Value, Result<(), String>)> = vec![
        ("unmanaged ns, other scheduler, jobid: ignored", "default", Some("other"),
         json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}), Ok(())),
        ("jobid label", MANAGED, Some(BRIDGE), json!({"metadata": {"labels": {LABEL_JOBID: "12"}}}), Err(MSG_JOBID_LABEL.into())),
        ("empty jobid label is fine", MANAGED, Some(BRIDGE), json!({"metadata": {"labels": {LABEL_JOBID: ""}}}), Ok(())),
        ("node annotation", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {ANN_NODE: "n1"}}}), Err(MSG_NODE_ANNOTATION.into())),
        ("jobid first, then node", MANAGED, Some(BRIDGE), json!({"metadata": {"labels": {LABEL_JOBID: "1"}, "annotations": {ANN_NODE: "n1"}}}), Err(MSG_JOBID_LABEL.into())),
        ("resourceClaims", MANAGED, Some(BRIDGE), json!({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}}), Err(MSG_RESOURCE_CLAIM.into())),
        // Quirk #12 fixed.
        ("resourceClaims: [] is not a claim", MANAGED, Some(BRIDGE), json!({"spec": {"resourceClaims": []}}), Ok(())),
        ("topologySpreadConstraints", MANAGED, Some(BRIDGE), json!({"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}}), Err(MSG_TOPOLOGY_SPREAD.into())),
        ("empty topologySpreadConstraints", MANAGED, Some(BRIDGE), json!({"spec": {"topologySpreadConstraints": []}}), Ok(())),
        ("native cpu only", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({"cpu": "1"}), json!({}))}])), Ok(())),
        ("dra cpu only", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({dra_cpu: "2"}), json!({}))}])), Ok(())),
        ("both in one container", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({"cpu": "0", dra_cpu: "2"}), json!({}))}])), Err(MSG_CPU_BOTH.into())),
        ("native in init limits + DRA in app limits", MANAGED, Some(BRIDGE),
         json!({"spec": {"initContainers": [{"name": "i", "resources": res(json!({}), json!({"cpu": "1"}))}],
                         "containers": [{"name": "a", "resources": res(json!({}), json!({dra_cpu: "1"}))}]}}), Err(MSG_CPU_BOTH.into())),
        ("pod-level cpu + container DRA", MANAGED, Some(BRIDGE),
         json!({"spec": {"resources": {"requests": {"cpu": "1"}}, "containers": [{"name": "a", "resources": res(json!({dra_cpu: "1"}), json!({}))}]}}), Err(MSG_CPU_BOTH.into())),
        ("supported DRA classes", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({dra_cpu: "1", "deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1", "deviceclass.resource.kubernetes.io/gpu.example.com": "1"}), json!({}))}])), Ok(())),
        ("unsupported DRA class in a request", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/other.gpu.example.com": "1"}), json!({}))}])),
         Err("container \"a\" uses unsupported DRA device class \"other.gpu.example.com\"".into())),
        ("unsupported DRA class in init limits", MANAGED, Some(BRIDGE),
         json!({"spec": {"initContainers": [{"name": "init", "resources": res(json!({}), json!({"deviceclass.resource.kubernetes.io/fpga.example.com": "1"}))}]}}),
         Err(msg_unsupported_class("init", "fpga.example.com"))),
        ("non-DRA extended resource", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({"example.com/gpu": "1", "nvidia.com/gpu": "1"}), json!({}))}])), Ok(())),
        ("unsupported class, unmanaged ns, other scheduler", "default", Some("other"), containers(json!([{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/x": "1"}), json!({}))}])), Ok(())),
        ("plain pod", MANAGED, Some(BRIDGE), json!({}), Ok(())),
        ("bridge scheduler, unmanaged ns: clean", "default", Some(BRIDGE), json!({}), Ok(())),
        ("bridge scheduler, unmanaged ns: jobid", "default", Some(BRIDGE), json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}), Err(MSG_JOBID_LABEL.into())),
        ("bridge scheduler, unmanaged ns: resourceClaim", "default", Some(BRIDGE), json!({"spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "c"}]}}), Err(MSG_RESOURCE_CLAIM.into())),
        ("bridge scheduler, unmanaged ns: topology spread", "default", Some(BRIDGE), json!({"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]}}), Err(MSG_TOPOLOGY_SPREAD.into())),
        ("default scheduler in managed ns is validated", MANAGED, Some("default-scheduler"), json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}), Err(MSG_JOBID_LABEL.into())),
        // Quirk #10 fixed: another scheduler in a managed namespace is not validated.
        ("custom scheduler in managed ns: not validated", MANAGED, Some("custom-scheduler"), json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}), Ok(())),
        // Annotation conflicts.
        ("no conflict annotations", MANAGED, Some(BRIDGE), containers(json!([{"name": "a", "resources": res(json!({dra_cpu: "1"}), json!({}))}])), Ok(())),
        ("cpu-per-task without CPU DRA", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {CPT: "2"}}}), Ok(())),
        ("gres with nvidia.com/gpu", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {GRES: "gpu:1"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({"nvidia.com/gpu": "1"}), json!({}))}]}}), Ok(())),
        ("cpu-per-task + dra.cpu request", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {CPT: "2"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({dra_cpu: "1"}), json!({}))}]}}), Err(msg_cpu_per_task_conflict())),
        ("cpu-per-task + dra.cpu in init limits", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {CPT: "2"}}, "spec": {"initContainers": [{"name": "i", "resources": res(json!({}), json!({dra_cpu: "1"}))}]}}), Err(msg_cpu_per_task_conflict())),
        ("gres + gpu.nvidia.com DRA", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {GRES: "gpu:1"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}), json!({}))}]}}),
         Err("annotation \"slurmjob.slinky.slurm.net/gres\" conflicts with DRA resource \"deviceclass.resource.kubernetes.io/gpu.nvidia.com\": explicit DRA requests are authoritative".into())),
        ("cpu-per-task + GPU DRA", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {CPT: "2"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}), json!({}))}]}}), Ok(())),
        ("gres + CPU DRA", MANAGED, Some(BRIDGE), json!({"metadata": {"annotations": {GRES: "gpu:1"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({dra_cpu: "1"}), json!({}))}]}}), Ok(())),
    ];
    for (name, ns, scheduler, extra, want) in rows {
        let r = create(pod(ns, scheduler, extra));
        assert_eq!(validate_req(&r), want, "{name}");
    }
}

const LABEL_JOBID: &str = "scheduler.slinky.slurm.net/slurm-jobid";
const ANN_NODE: &str = "slinky.slurm.net/slurm-node";
const CPT: &str = "slurmjob.slinky.slurm.net/cpu-per-task";
const GRES: &str = "slurmjob.slinky.slurm.net/gres";
const RESOURCE_DRA_CPU_KEY: &str = "deviceclass.resource.kubernetes.io/dra.cpu";

#[test]
fn exact_reference_messages() {
    assert_eq!(
        MSG_JOBID_LABEL,
        "can't create a pod with a slurm external jobid label"
    );
    assert_eq!(
        MSG_NODE_ANNOTATION,
        "can't create a pod with a slurm external node annotation"
    );
    assert_eq!(
        MSG_RESOURCE_CLAIM,
        "can't schedule a pod with a resourceclaim, use the annotation slurmjob.slinky.slurm.net/gres to request devices instead"
    );
    assert_eq!(
        MSG_TOPOLOGY_SPREAD,
        "spec.topologySpreadConstraints is not supported by the slurm-bridge scheduler"
    );
    assert_eq!(
        MSG_CPU_BOTH,
        r#"can't specify both native "cpu" and CPU DRA resource "deviceclass.resource.kubernetes.io/dra.cpu""#
    );
    assert_eq!(
        msg_unsupported_class("c", "x.y"),
        r#"container "c" uses unsupported DRA device class "x.y""#
    );
    assert_eq!(
        msg_cpu_per_task_conflict(),
        r#"annotation "slurmjob.slinky.slurm.net/cpu-per-task" conflicts with CPU DRA resource "deviceclass.resource.kubernetes.io/dra.cpu": explicit DRA requests are authoritative"#
    );
    assert_eq!(
        msg_gres_conflict("deviceclass.resource.kubernetes.io/gpu.example.com"),
        r#"annotation "slurmjob.slinky.slurm.net/gres" conflicts with DRA resource "deviceclass.resource.kubernetes.io/gpu.example.com": explicit DRA requests are authoritative"#
    );
    assert_eq!(MSG_RESIZE, "can't resize a Slurm Bridge-managed pod");
    assert_eq!(
        MSG_RUNNING_JOBID,
        "can't update a running pod's external jobid label"
    );
    assert_eq!(
        MSG_RUNNING_NODE,
        "can't update a running pod's external node annotation"
    );
}

#[test]
fn validate_update_table() {
    let running = json!({"status": {"phase": "Running"}});
    let pending = json!({"status": {"phase": "Pending"}});
    let with = |base: &Value, extra: Value| {
        let mut v = base.clone();
        merge(&mut v, &extra);
        v
    };
    // (name, ns, scheduler, new extra, old extra, subresource, want)
    let rows: Vec<(
        &str,
        &str,
        Option<&str>,
        Value,
        Value,
        &str,
        Result<(), String>,
    )> = vec![
        (
            "unmanaged ns, other scheduler, resize: ok",
            "default",
            Some("other"),
            running.clone(),
            running.clone(),
            "resize",
            Ok(()),
        ),
        (
            "pending pod may get a jobid",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                json!({"metadata": {"labels": {LABEL_JOBID: "7"}}}),
            ),
            pending.clone(),
            "",
            Ok(()),
        ),
        (
            "pending pod may get a node annotation",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                json!({"metadata": {"annotations": {ANN_NODE: "n"}}}),
            ),
            pending.clone(),
            "",
            Ok(()),
        ),
        (
            "managed resize",
            MANAGED,
            Some(BRIDGE),
            running.clone(),
            running.clone(),
            "resize",
            Err(MSG_RESIZE.into()),
        ),
        (
            "bridge scheduler resize, unmanaged ns",
            "default",
            Some(BRIDGE),
            pending.clone(),
            pending.clone(),
            "resize",
            Err(MSG_RESIZE.into()),
        ),
        (
            "other scheduler resize",
            MANAGED,
            Some("other"),
            running.clone(),
            running.clone(),
            "resize",
            Ok(()),
        ),
        // Not a bridge pod (it predates the namespace being managed): not checked on UPDATE.
        (
            "default scheduler resize in managed ns",
            MANAGED,
            Some("default-scheduler"),
            running.clone(),
            running.clone(),
            "resize",
            Ok(()),
        ),
        (
            "running pod jobid change",
            MANAGED,
            Some(BRIDGE),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "8"}}}),
            ),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "7"}}}),
            ),
            "",
            Err(MSG_RUNNING_JOBID.into()),
        ),
        (
            "running pod jobid removed",
            MANAGED,
            Some(BRIDGE),
            running.clone(),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "7"}}}),
            ),
            "",
            Err(MSG_RUNNING_JOBID.into()),
        ),
        (
            "running pod, same jobid",
            MANAGED,
            Some(BRIDGE),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "7", "x": "y"}}}),
            ),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "7"}}}),
            ),
            "",
            Ok(()),
        ),
        (
            "running pod node annotation change",
            MANAGED,
            Some(BRIDGE),
            with(
                &running,
                json!({"metadata": {"annotations": {ANN_NODE: "b"}}}),
            ),
            with(
                &running,
                json!({"metadata": {"annotations": {ANN_NODE: "a"}}}),
            ),
            "",
            Err(MSG_RUNNING_NODE.into()),
        ),
        (
            "running pod node annotation change, bridge pod in unmanaged ns",
            "default",
            Some(BRIDGE),
            with(
                &running,
                json!({"metadata": {"annotations": {ANN_NODE: "b"}}}),
            ),
            running.clone(),
            "",
            Err(MSG_RUNNING_NODE.into()),
        ),
        (
            "other scheduler, running, jobid change",
            MANAGED,
            Some("other"),
            with(
                &running,
                json!({"metadata": {"labels": {LABEL_JOBID: "8"}}}),
            ),
            running.clone(),
            "",
            Ok(()),
        ),
        (
            "UPDATE: unsupported DRA class",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                containers(
                    json!([{"name": "a", "resources": res(json!({"deviceclass.resource.kubernetes.io/x.y": "1"}), json!({}))}]),
                ),
            ),
            pending.clone(),
            "",
            Err(msg_unsupported_class("a", "x.y")),
        ),
        (
            "UPDATE: annotation conflict",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                json!({"metadata": {"annotations": {CPT: "1"}}, "spec": {"containers": [{"name": "a", "resources": res(json!({RESOURCE_DRA_CPU_KEY: "1"}), json!({}))}]}}),
            ),
            pending.clone(),
            "",
            Err(msg_cpu_per_task_conflict()),
        ),
        (
            "UPDATE: CREATE-only checks are not re-run",
            MANAGED,
            Some(BRIDGE),
            with(
                &pending,
                json!({"spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "c"}], "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]}}),
            ),
            pending.clone(),
            "",
            Ok(()),
        ),
    ];
    for (name, ns, scheduler, new, old, sub, want) in rows {
        let mut r = update(pod(ns, scheduler, new), pod(ns, scheduler, old));
        r.sub_resource = Some(sub.into());
        assert_eq!(validate_req(&r), want, "{name}");
    }
}

#[test]
fn delete_is_a_noop() {
    let r = review::request(
        Operation::Delete,
        pod(
            MANAGED,
            Some(BRIDGE),
            json!({"metadata": {"labels": {LABEL_JOBID: "1"}}}),
        ),
    );
    assert_eq!(validate_req(&r), Ok(()));
    assert!(mutate_req(&r).is_empty());
}

// ---- AdmissionReview decoding -----------------------------------------------------------

fn review_json(op: &str, object: Value, old: Option<Value>) -> Value {
    let mut req = json!({
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": MANAGED,
        "operation": op,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "object": object,
    });
    if let Some(o) = old {
        req["oldObject"] = o;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

fn pod_json() -> Value {
    serde_json::to_value(pod(MANAGED, Some("default-scheduler"), json!({}))).unwrap()
}

#[test]
fn malformed_reviews_are_errors() {
    let ok = review_json("CREATE", pod_json(), None);
    assert!(review::decode(ok.to_string().as_bytes()).is_ok());
    let mut wrong_kind = ok.clone();
    wrong_kind["kind"] = json!("ConversionReview");
    let mut v1beta1 = ok.clone();
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut no_request = ok.clone();
    no_request.as_object_mut().unwrap().remove("request");
    let mut null_request = ok.clone();
    null_request["request"] = Value::Null;
    let mut no_object = ok.clone();
    no_object["request"]
        .as_object_mut()
        .unwrap()
        .remove("object");
    let mut bad_object = ok.clone();
    bad_object["request"]["object"] = json!({"spec": {"containers": "nope"}});
    let mut string_object = ok.clone();
    string_object["request"]["object"] = json!("pod");
    let mut deployment = ok.clone();
    deployment["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let update_without_old = review_json("UPDATE", pod_json(), None);
    let mut no_uid = ok.clone();
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    let mut bad_op = ok.clone();
    bad_op["request"]["operation"] = json!("PATCH");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty body", vec![]),
        ("not JSON", b"{not json".to_vec()),
        ("a JSON list", b"[1,2]".to_vec()),
        ("wrong kind", wrong_kind.to_string().into_bytes()),
        ("v1beta1", v1beta1.to_string().into_bytes()),
        ("no request", no_request.to_string().into_bytes()),
        ("null request", null_request.to_string().into_bytes()),
        ("no object", no_object.to_string().into_bytes()),
        ("object is not a pod", bad_object.to_string().into_bytes()),
        ("object is a string", string_object.to_string().into_bytes()),
        ("a Deployment", deployment.to_string().into_bytes()),
        (
            "UPDATE without oldObject",
            update_without_old.to_string().into_bytes(),
        ),
        ("no uid", no_uid.to_string().into_bytes()),
        ("bad operation", bad_op.to_string().into_bytes()),
    ];
    // What each error names (kube-core's decoder, then the webhook's own checks).
    let named: BTreeMap<&str, &str> = [
        ("no object", "has no object"),
        ("object is not a pod", "request.object is not a v1 Pod"),
        ("object is a string", "expected Pod"),
        ("a Deployment", "not apps/v1 Deployment"),
        ("UPDATE without oldObject", "has no oldObject"),
        ("no uid", "missing field `uid`"),
        ("bad operation", "unknown variant `PATCH`"),
    ]
    .into();
    for (name, body) in cases {
        assert!(review::decode(&body).is_err(), "{name}");
        let text = review::decode(&body).unwrap_err().to_string();
        if let Some(want) = named.get(name) {
            assert!(text.contains(want), "{name}: {text}");
        }
    }
    assert_eq!(
        review::decode(no_request.to_string().as_bytes()).unwrap_err(),
        ReviewError::MissingRequest
    );
}

#[test]
fn responses() {
    let mut req = create(pod(MANAGED, None, json!({})));
    req.uid = "u".into();
    let answer = |v: &Verdict| serde_json::to_value(review::response(&req, v)).unwrap();
    let allow = answer(&Verdict::allow());
    // kube-core writes an empty `status` beside `allowed: true` (the API server reads it as
    // no status); otherwise the answer is exactly this.
    assert_eq!(
        allow,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u", "allowed": true, "status": {}}})
    );
    let patch: Patch = serde_json::from_value(json!([sched(BRIDGE)])).unwrap();
    let patched = answer(&Verdict::Allow(patch));
    assert_eq!(patched["response"]["patchType"], "JSONPatch");
    // kube-core writes the patch bytes as a JSON array of numbers, not base64 text; the API
    // server's decoder reads both into its []byte (admission_e2e shows it applied).
    let patch: Vec<u8> = serde_json::from_value(patched["response"]["patch"].clone()).unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(patch, json!([sched(BRIDGE)]));
    let denied = answer(&Verdict::Deny(MSG_RESIZE.into()));
    assert_eq!(denied["response"]["allowed"], false);
    assert_eq!(denied["response"]["status"]["code"], 403);
    assert_eq!(denied["response"]["status"]["message"], MSG_RESIZE);
}

fn webhooks() -> Arc<Webhooks> {
    Arc::new(Webhooks {
        scheduler_name: BRIDGE.into(),
        namespaces: Namespaces::listed(&[MANAGED.to_string()]),
        metrics: AdmissionMetrics::unregistered(),
    })
}

#[tokio::test]
async fn handler_answers_400_to_bad_input_and_reviews_otherwise() {
    let w = webhooks();
    for body in [&b""[..], b"{", b"{\"kind\":\"AdmissionReview\"}", b"null"] {
        let r = w.handle(Webhook::Validate, body).await;
        assert_eq!(r.status(), 400);
    }
    let r = w
        .handle(
            Webhook::Mutate,
            review_json("CREATE", pod_json(), None)
                .to_string()
                .as_bytes(),
        )
        .await;
    assert_eq!(r.status(), 200);
    let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["response"]["uid"], "u-1");
    assert_eq!(v["response"]["allowed"], true);
    assert_eq!(v["response"]["patchType"], "JSONPatch");
}

// ---- TLS server and certificates --------------------------------------------------------

/// A CA and a serving certificate for 127.0.0.1 in `dir`; returns the CA PEM.
pub(crate) fn write_certs(dir: &std::path::Path) -> String {
    let sm = certs::SelfManaged::new(dir.to_path_buf(), vec!["127.0.0.1".into()], vec![]);
    sm.ensure_files(SystemTime::now()).unwrap();
    sm.ca_bundle().unwrap()
}

/// One HTTPS request over a fresh connection: (status, body, leaf certificate DER).
/// A TLS connection to the test server at `addr`, trusting `ca_pem`.
async fn tls_connect(
    addr: std::net::SocketAddr,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(addr.ip().to_string()).unwrap();
    connector.connect(name, tcp).await.unwrap()
}

pub(crate) async fn https_post(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    path: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tls_connect(addr, ca_pem).await;
    let leaf = s.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body, leaf)
}

#[tokio::test]
async fn tls_server_survives_bad_input_and_reloads_certificates() {
    let dir = std::env::temp_dir().join(format!("sb-adm-unit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ca = write_certs(&dir);
    let certs = Arc::new(tls::CertReloader::load(&dir).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(super::server::serve_tls(
        listener,
        super::server::router(webhooks()),
        certs.clone(),
        super::server::ServeOptions {
            header_read_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(1),
            ..super::server::ServeOptions::new(false)
        },
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    ));
    // Bad input: 400 with a message, and the server keeps serving.
    for body in [
        &b"garbage"[..],
        b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}",
        b"",
    ] {
        let (status, msg, _) = https_post(addr, &ca, "/validate--v1-pod", body).await;
        assert_eq!(status, 400, "{msg}");
        assert!(!msg.trim().is_empty());
    }
    let good = review_json("CREATE", pod_json(), None).to_string();
    let (status, body, leaf1) = https_post(addr, &ca, "/mutate--v1-pod", good.as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("JSONPatch"));
    // A plain-HTTP client gets no answer, and the server goes on.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
        plain.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = Vec::new();
        let _ = plain.read_to_end(&mut buf).await;
        assert!(!String::from_utf8_lossy(&buf).contains("200 OK"));
    }
    // A kept-alive connection idle for longer than the header limit still serves its next
    // request (the API server reuses idle connections for up to 90 s and does not retry a POST
    // the server closed under it).
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tls_connect(addr, &ca).await;
        let request =
            b"POST /validate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\ngarbage";
        for round in 0..2 {
            if round == 1 {
                // The client pausing: three header limits.
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
            conn.write_all(request).await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            // One whole response: headers, then Content-Length bytes of body.
            let complete = |got: &[u8]| {
                let text = String::from_utf8_lossy(got);
                let Some((head, body)) = text.split_once("\r\n\r\n") else {
                    return false;
                };
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                body.len() >= len
            };
            while !complete(&got) {
                let n = conn.read(&mut buf).await.unwrap();
                assert!(
                    n > 0,
                    "round {round}: the server closed the kept-alive connection"
                );
                got.extend_from_slice(&buf[..n]);
            }
            assert!(
                got.starts_with(b"HTTP/1.1 400"),
                "{}",
                String::from_utf8_lossy(&got)
            );
        }
    }
    // A client that stops in the middle of its headers is disconnected, and the server goes on.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut slow = tls_connect(addr, &ca).await;
        slow.write_all(b"POST /validate--v1-pod HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut buf)).await;
        assert!(
            closed.is_ok(),
            "a client with half-sent headers still holds its connection after 20 s"
        );
        // One that sends its headers but not all of its body gets 408.
        let mut slow = tls_connect(addr, &ca).await;
        slow.write_all(
            b"POST /validate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\"",
        )
        .await
        .unwrap();
        let mut buf = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut buf)).await;
        assert!(
            closed.is_ok(),
            "a client with a half-sent body still holds its connection after 20 s"
        );
        let text = String::from_utf8_lossy(&buf);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    }
    // Rotation: a new pair in the dir (same CA) is served to new connections.
    let sm = certs::SelfManaged::new(dir.clone(), vec!["127.0.0.1".into()], vec![]);
    std::fs::remove_file(dir.join("tls.crt")).unwrap();
    sm.ensure_files(SystemTime::now()).unwrap();
    assert!(certs.reload().unwrap());
    let (status, _, leaf2) = https_post(addr, &ca, "/validate--v1-pod", good.as_bytes()).await;
    assert_eq!(status, 200);
    assert_ne!(leaf1, leaf2);
    // A half-written pair (a certificate without its key) keeps the previous one.
    let other = std::env::temp_dir().join(format!("sb-adm-unit-other-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&other);
    write_certs(&other);
    std::fs::copy(other.join("tls.crt"), dir.join("tls.crt")).unwrap();
    assert!(matches!(
        certs.reload(),
        Err(tls::TlsError::Mismatch { .. })
    ));
    let (status, _, leaf3) = https_post(addr, &ca, "/validate--v1-pod", good.as_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(leaf2, leaf3);
    stop_tx.send_replace(true);
    server.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&other);
}

#[test]
fn self_managed_files_and_rotation() {
    let dir = std::env::temp_dir().join(format!("sb-adm-certs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let names = vec!["127.0.0.1".to_string(), "webhook.ns.svc".to_string()];
    let mut sm = certs::SelfManaged::new(dir.clone(), names, vec![]);
    sm.validity = Duration::from_secs(3600);
    sm.ca_validity = Duration::from_secs(4 * 3600);
    sm.renew_before = Duration::from_secs(600);
    let now = SystemTime::now();
    let first = sm.ensure_files(now).unwrap();
    assert!(first.ca_rotated && first.serving_rotated);
    let key_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.join("tls.key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(key_mode & 0o777, 0o600);
    // Nothing due: nothing changes.
    assert_eq!(sm.ensure_files(now).unwrap(), certs::PassOutcome::default());
    let ca1 = sm.ca_bundle().unwrap();
    let leaf = std::fs::read(dir.join("tls.crt")).unwrap();
    // The certificate's notAfter is read back (within the validity asked).
    let der: Vec<u8> = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_slice(&leaf)
            .unwrap()
            .to_vec()
    };
    let until = certs::not_after(&der).unwrap();
    let left = until.duration_since(now).unwrap();
    assert!(
        left <= Duration::from_secs(3600) && left > Duration::from_secs(3500),
        "{left:?}"
    );
    // 55 minutes later the serving certificate is within its renewal margin.
    let later = now + Duration::from_secs(55 * 60);
    let o = sm.ensure_files(later).unwrap();
    assert!(o.serving_rotated && !o.ca_rotated);
    assert_ne!(std::fs::read(dir.join("tls.crt")).unwrap(), leaf);
    // 3 hours later the CA is too close to its end: a new one, and the old one stays in the bundle.
    let o = sm
        .ensure_files(now + Duration::from_secs(3 * 3600))
        .unwrap();
    assert!(o.ca_rotated && o.serving_rotated);
    let ca2 = sm.ca_bundle().unwrap();
    assert_eq!(ca2.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(ca2.ends_with(&ca1));
    // Once the old CA has expired it leaves the bundle.
    let o = sm
        .ensure_files(now + Duration::from_secs(4 * 3600 + 60))
        .unwrap();
    assert!(o.ca_rotated);
    assert_eq!(
        sm.ca_bundle().unwrap().matches("BEGIN CERTIFICATE").count(),
        1
    );
    // Names change: reissued.
    sm.names.push("other.ns.svc".into());
    assert!(
        sm.ensure_files(now + Duration::from_secs(4 * 3600 + 60))
            .unwrap()
            .serving_rotated
    );
    // Bad names are refused.
    sm.names = vec!["not a name!".into()];
    assert!(sm.validate().is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
