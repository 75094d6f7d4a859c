//! Table tests of the webhooks: every row of reference §3.4, every message of §3.3, the quirk
//! fixes, malformed reviews, and the TLS server (bad input, certificate reload).
//!
//! The objects, requests and shared answers are here; the tests by what they check: `mutation`
//! (§3.4), `validation` (§3.3), `reviews` (AdmissionReview decoding), `tls_server`.

#![allow(clippy::type_complexity)]
use super::managed::{Namespaces, processed};
use super::review::{self, AdmissionRequest, Operation, ReviewError, Verdict};
use super::server::{AdmissionMetrics, Webhook, Webhooks};
use super::validate::*;
use super::{certs, mutate, tls};
use crate::k8s::selector::label_selector_matches as selector_matches;
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
    validate(
        r,
        BRIDGE,
        managed(review::namespace(r)),
        &crate::dra::GresDrivers::builtin(),
    )
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

/// An AdmissionReview of `op` on `object` (and `old`) in the managed namespace, as JSON.
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

/// A default-scheduler pod of the managed namespace, as JSON.
fn pod_json() -> Value {
    serde_json::to_value(pod(MANAGED, Some("default-scheduler"), json!({}))).unwrap()
}

/// The webhooks of the bridge scheduler, managing the listed namespace.
fn webhooks() -> Arc<Webhooks> {
    Arc::new(Webhooks {
        scheduler_name: BRIDGE.into(),
        config: crate::config::Config::default(),
        tenancy: crate::tenancy::Tenancy::new(&crate::config::Config::default(), None),
        namespaces: Namespaces::listed(&[MANAGED.to_string()]),
        metrics: AdmissionMetrics::unregistered(),
    })
}

mod mutation;
mod reviews;
mod tenancy;
mod tls_server;
mod validation;
