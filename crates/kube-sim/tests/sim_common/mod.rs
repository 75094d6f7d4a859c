//! Helpers shared by the simulated-cluster tests: start kube-sim, wait for a state, and act
//! as a scheduler (bind pending pods through `pods/binding`, as kube-scheduler and
//! slurm-bridge do).
#![allow(dead_code)]

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

/// Upper bound for any wait; a test that needs longer has a bug.
pub const WAIT: Duration = Duration::from_secs(30);

/// kube-sim with the simulated cluster on `nodes` nodes.
pub async fn start(nodes: usize) -> kube_sim::KubeSim {
    kube_sim::KubeSim::start(kube_sim::Options {
        nodes,
        simulate: true,
        ..Default::default()
    })
    .await
    .expect("kube-sim starts")
}

/// Poll `get` until `ok` holds for the object, or panic with the last state seen.
pub async fn wait_for<K, F>(api: &Api<K>, name: &str, what: &str, ok: F) -> K
where
    K: Resource + Clone + DeserializeOwned + Debug,
    F: Fn(&K) -> bool,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let cur = api.get_opt(name).await.expect("get");
        if let Some(o) = &cur
            && ok(o)
        {
            return o.clone();
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {name} to be {what}; last seen: {cur:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Poll until the object is gone.
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while api.get_opt(name).await.expect("get").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {name} to go away"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Poll a list until `ok` holds for it, or panic with the last list seen.
pub async fn wait_list<K, F>(api: &Api<K>, lp: &ListParams, what: &str, ok: F) -> Vec<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    F: Fn(&[K]) -> bool,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let items = api.list(lp).await.expect("list").items;
        if ok(&items) {
            return items;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for the list to be {what}; last seen: {items:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Bind `pod` to `node` through the `pods/binding` subresource.
pub async fn bind(client: &Client, ns: &str, pod: &str, node: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut b = Binding {
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    b.metadata.name = Some(pod.into());
    let _: serde_json::Value = api
        .create_subresource("binding", pod, &PostParams::default(), &b)
        .await
        .expect("bind");
}

/// A test scheduler: every 50 ms bind the namespace's unbound, live pods round-robin to
/// `node-1..node-<nodes>`. Stops when the returned handle is aborted or dropped with the
/// runtime.
pub fn scheduler(client: Client, ns: &str, nodes: usize) -> tokio::task::JoinHandle<()> {
    let ns = ns.to_string();
    tokio::spawn(async move {
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let mut next = 0usize;
        loop {
            if let Ok(list) = api.list(&ListParams::default()).await {
                for p in list.items {
                    let unbound = p.spec.as_ref().is_none_or(|s| s.node_name.is_none());
                    if unbound && p.metadata.deletion_timestamp.is_none() {
                        let node = format!("node-{}", next % nodes + 1);
                        next += 1;
                        let name = p.metadata.name.clone().unwrap_or_default();
                        let mut b = Binding {
                            target: ObjectReference {
                                kind: Some("Node".into()),
                                name: Some(node),
                                ..Default::default()
                            },
                            ..Default::default()
                        };
                        b.metadata.name = Some(name.clone());
                        let _ = api
                            .create_subresource::<_, serde_json::Value>(
                                "binding",
                                &name,
                                &PostParams::default(),
                                &b,
                            )
                            .await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Create a namespace for one test.
pub async fn namespace(client: &Client, name: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// Build a typed object from JSON (test manifests read best as JSON).
pub fn from_json<T: DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid manifest")
}

/// The controller owner reference of an object.
pub fn controller_ref<K: Resource>(
    o: &K,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    o.meta()
        .owner_references
        .as_ref()
        .and_then(|rs| rs.iter().find(|r| r.controller == Some(true)))
        .cloned()
        .expect("controller owner reference")
}

/// A pod's first container's terminated state, if any.
pub fn terminated(p: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .clone()
}

/// The pod's phase ("" when unset).
pub fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// True when the pod has condition `type_` with status True.
pub fn has_condition(p: &Pod, type_: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}
