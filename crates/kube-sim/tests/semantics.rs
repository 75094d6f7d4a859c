//! Finalizers, garbage collection, graceful pod deletion, binding, eviction, selectors,
//! pagination and every patch type, through the real kube-rs client.

mod common;

use common::{code, pod, server};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::core::ObjectList;
use serde_json::json;

fn cm(name: &str, extra: serde_json::Value) -> ConfigMap {
    let mut v = json!({"metadata": {"name": name}});
    json_patch::merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    cms.create(
        &PostParams::default(),
        &cm("f", json!({"metadata": {"finalizers": ["a/x", "b/y"]}})),
    )
    .await
    .unwrap();
    let r = cms.delete("f", &DeleteParams::default()).await.unwrap();
    let marked = r.left().expect("object returned while finalizers remain");
    assert!(marked.metadata.deletion_timestamp.is_some());
    // Adding a finalizer while deleting is refused.
    let add = cms
        .patch(
            "f",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "c/z"}]),
                )
                .unwrap(),
            ),
        )
        .await;
    assert_eq!(code(add), 422);
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["b/y"]}})),
    )
    .await
    .unwrap();
    assert!(cms.get("f").await.is_ok());
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(code(cms.get("f").await), 404);
}

async fn owner_and_children(cms: &Api<ConfigMap>) -> String {
    let owner = cms
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    let uid = owner.metadata.uid.unwrap();
    for c in ["c1", "c2"] {
        cms.create(
            &PostParams::default(),
            &cm(c, json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "blockOwnerDeletion": true}]}})),
        )
        .await
        .unwrap();
    }
    uid
}

#[tokio::test]
async fn garbage_collection_background_foreground_orphan() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    owner_and_children(&cms).await;
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert_eq!(code(cms.get("c1").await), 404);
    assert_eq!(code(cms.get("c2").await), 404);

    owner_and_children(&cms).await;
    cms.delete("owner", &DeleteParams::orphan()).await.unwrap();
    let c1 = cms.get("c1").await.unwrap();
    assert!(
        c1.metadata.owner_references.is_none(),
        "orphaned dependents lose the reference"
    );
    assert_eq!(code(cms.get("owner").await), 404);
    cms.delete("c1", &DeleteParams::default()).await.unwrap();
    cms.delete("c2", &DeleteParams::default()).await.unwrap();

    // Foreground: the owner waits for a dependent held by a finalizer.
    owner_and_children(&cms).await;
    cms.patch(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["hold/me"]}})),
    )
    .await
    .unwrap();
    cms.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let o = cms.get("owner").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(
        o.metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    assert_eq!(code(cms.get("c2").await), 404);
    cms.patch(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(code(cms.get("c1").await), 404);
    assert_eq!(code(cms.get("owner").await), 404);
    let _ = PropagationPolicy::Background;
}

#[tokio::test]
async fn binding_graceful_deletion_and_eviction() {
    let sim = server().await;
    let nodes: Api<Node> = Api::all(sim.client());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    pods.create(&PostParams::default(), &pod("b"))
        .await
        .unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    pods.create_subresource::<serde_json::Value, serde_json::Value>(
        "binding",
        "b",
        &PostParams::default(),
        &binding,
    )
    .await
    .unwrap();
    let p = pods.get("b").await.unwrap();
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    let conds = p.status.unwrap().conditions.unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    );
    let again = pods
        .create_subresource::<serde_json::Value, serde_json::Value>(
            "binding",
            "b",
            &PostParams::default(),
            &binding,
        )
        .await;
    assert_eq!(code(again), 409);
    // A bound pod waits for the kubelet: deletionTimestamp + grace period.
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    let p = pods.get("b").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    // The kubelet's final delete with grace 0 removes it.
    pods.delete(
        "b",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(code(pods.get("b").await), 404);
    // An unbound pod goes at once; eviction deletes.
    pods.create(&PostParams::default(), &pod("u"))
        .await
        .unwrap();
    pods.delete("u", &DeleteParams::default()).await.unwrap();
    assert_eq!(code(pods.get("u").await), 404);
    pods.create(&PostParams::default(), &pod("e"))
        .await
        .unwrap();
    pods.evict("e", &EvictParams::default()).await.unwrap();
    assert_eq!(code(pods.get("e").await), 404);
}

#[tokio::test]
async fn label_and_field_selectors() {
    let sim = server().await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    for (n, app, sched) in [("a", "web", "s1"), ("b", "db", "s1"), ("c", "web", "s2")] {
        let mut p = common::pod_json(n);
        p["metadata"]["labels"] = json!({"app": app, "tier": n});
        p["spec"]["schedulerName"] = json!(sched);
        pods.create(&PostParams::default(), &serde_json::from_value(p).unwrap())
            .await
            .unwrap();
    }
    let names = |l: ObjectList<Pod>| -> Vec<String> {
        l.items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect()
    };
    let l = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(names(l), ["a", "c"]);
    let l = pods
        .list(&ListParams::default().labels("app in (db),tier"))
        .await
        .unwrap();
    assert_eq!(names(l), ["b"]);
    let l = pods
        .list(&ListParams::default().labels("app!=web"))
        .await
        .unwrap();
    assert_eq!(names(l), ["b"]);
    let l = pods
        .list(&ListParams::default().fields("spec.schedulerName=s1,metadata.name!=a"))
        .await
        .unwrap();
    assert_eq!(names(l), ["b"]);
    let l = pods
        .list(&ListParams::default().fields("status.phase=Pending,spec.nodeName="))
        .await
        .unwrap();
    assert_eq!(names(l).len(), 3);
    let all: Api<Pod> = Api::all(sim.client());
    let l = all
        .list(&ListParams::default().fields("metadata.namespace=default"))
        .await
        .unwrap();
    assert_eq!(names(l).len(), 3);
    let evs: Api<Event> = Api::default_namespaced(sim.client());
    evs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "a", "namespace": "default"}, "reason": "R", "message": "m"})).unwrap(),
    )
    .await
    .unwrap();
    let l = evs
        .list(&ListParams::default().fields("involvedObject.name=a,involvedObject.kind=Pod"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    let l = evs
        .list(&ListParams::default().fields("involvedObject.name=b"))
        .await
        .unwrap();
    assert!(l.items.is_empty());
    assert_eq!(
        code(pods.list(&ListParams::default().labels("a b")).await),
        400
    );
}

#[tokio::test]
async fn pagination_and_list_resource_versions() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    for i in 0..25 {
        cms.create(
            &PostParams::default(),
            &cm(&format!("cm-{i:02}"), json!({})),
        )
        .await
        .unwrap();
    }
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(10);
    let mut pages = 0;
    loop {
        let page = cms.list(&lp).await.unwrap();
        pages += 1;
        seen.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => {
                if pages == 1 {
                    assert_eq!(page.metadata.remaining_item_count, Some(15));
                }
                lp = lp.continue_token(&c)
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 25);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted);
    let l = cms.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(l.items.len(), 25);
    let rv = l.metadata.resource_version.unwrap();
    let exact = cms
        .list(
            &ListParams::default()
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 25);
}

#[tokio::test]
async fn every_patch_type() {
    let sim = server().await;
    let deploys: Api<Deployment> = Api::default_namespaced(sim.client());
    let d = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"containers": [{"name": "a", "image": "x:1", "env": [{"name": "E1", "value": "1"}]}, {"name": "b", "image": "y:1"}],
                 "tolerations": [{"key": "k1", "operator": "Exists"}]}}}});
    deploys
        .create(&PostParams::default(), &serde_json::from_value(d).unwrap())
        .await
        .unwrap();
    // Strategic: containers merged by name, env by name, tolerations replaced.
    let out = deploys
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {
                "containers": [{"name": "b", "image": "y:2"}, {"name": "a", "env": [{"name": "E2", "value": "2"}]}],
                "tolerations": [{"key": "k2", "operator": "Exists"}]}}}})),
        )
        .await
        .unwrap();
    let spec = out.spec.unwrap().template.spec.unwrap();
    assert_eq!(spec.containers.len(), 2);
    assert_eq!(spec.containers[0].name, "a");
    assert_eq!(spec.containers[1].image.as_deref(), Some("y:2"));
    assert_eq!(spec.containers[0].env.as_ref().unwrap().len(), 2);
    assert_eq!(spec.tolerations.unwrap().len(), 1);

    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let mut p = common::pod_json("pt");
    p["metadata"]["finalizers"] = json!(["f/1"]);
    pods.create(&PostParams::default(), &serde_json::from_value(p).unwrap())
        .await
        .unwrap();
    // Finalizers merge as a set.
    let out = pods
        .patch(
            "pt",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"finalizers": ["f/2", "f/1"]}})),
        )
        .await
        .unwrap();
    assert_eq!(out.metadata.finalizers.unwrap(), ["f/1", "f/2"]);
    // Strategic on status: conditions merged by type.
    pods.patch_status(
        "pt",
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        ),
    )
    .await
    .unwrap();
    let st = pods
        .patch_status(
            "pt",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Initialized", "status": "True"}]}}),
            ),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(st.conditions.unwrap().len(), 2);
    // JSON patch, with a failing test op.
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "x:9"}]),
    )
    .unwrap();
    let out = pods
        .patch("pt", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    assert_eq!(
        out.spec.unwrap().containers[0].image.as_deref(),
        Some("x:9")
    );
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/spec/containers/0/image", "value": "nope"}]),
    )
    .unwrap();
    assert_eq!(
        code(
            pods.patch("pt", &PatchParams::default(), &Patch::Json::<()>(jp))
                .await
        ),
        422
    );
    // Merge patch with a stale resourceVersion conflicts.
    let stale = pods
        .patch(
            "pt",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}})),
        )
        .await;
    assert_eq!(code(stale), 409);
    // Missing object.
    assert_eq!(
        code(
            pods.patch("zz", &PatchParams::default(), &Patch::Merge(json!({})))
                .await
        ),
        404
    );
}

#[tokio::test]
async fn delete_collection_with_selector() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    for (n, l) in [("x1", "x"), ("x2", "x"), ("y1", "y")] {
        cms.create(
            &PostParams::default(),
            &cm(n, json!({"metadata": {"labels": {"g": l}}})),
        )
        .await
        .unwrap();
    }
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("g=x"),
    )
    .await
    .unwrap();
    let left = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(left.items.len(), 1);
    assert_eq!(left.items[0].metadata.name.as_deref(), Some("y1"));
}

#[tokio::test]
async fn server_side_apply_tracks_field_owners() {
    let sim = server().await;
    let leases: Api<Lease> = Api::default_namespaced(sim.client());
    let cfg = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "lock"},
                                   "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    };
    // Apply creates.
    let l = leases
        .patch(
            "lock",
            &PatchParams::apply("mgr-a"),
            &Patch::Apply(cfg("a")),
        )
        .await
        .unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("a"));
    let mf = l.metadata.managed_fields.unwrap();
    assert_eq!(mf[0].manager.as_deref(), Some("mgr-a"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    // Another manager setting the field to another value conflicts.
    let r = leases
        .patch(
            "lock",
            &PatchParams::apply("mgr-b"),
            &Patch::Apply(cfg("b")),
        )
        .await;
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(
                s.message.contains("conflict with \"mgr-a\"")
                    && s.message.contains(".spec.holderIdentity"),
                "{}",
                s.message
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // The holder releases with a strategic merge patch (an Update), then b can apply.
    leases
        .patch(
            "lock",
            &PatchParams {
                field_manager: Some("mgr-a".into()),
                ..Default::default()
            },
            &Patch::Strategic(json!({"spec": {"holderIdentity": null}})),
        )
        .await
        .unwrap();
    let l = leases
        .patch(
            "lock",
            &PatchParams::apply("mgr-b"),
            &Patch::Apply(cfg("b")),
        )
        .await
        .unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("b"));
    // Force takes a field over.
    let l = leases
        .patch(
            "lock",
            &PatchParams::apply("mgr-c").force(),
            &Patch::Apply(cfg("c")),
        )
        .await
        .unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("c"));
    // fieldManager is required.
    let r = leases
        .patch("lock", &PatchParams::default(), &Patch::Apply(cfg("d")))
        .await;
    assert_eq!(code(r), 422);
}

/// kube-apiserver checks the name of the merged object: an apply body without metadata.name
/// changes the live object named in the URL (as kube-lease-manager sends it), but cannot create
/// one.
#[tokio::test]
async fn server_side_apply_without_a_name_uses_the_live_object() {
    let sim = server().await;
    let leases: Api<Lease> = Api::default_namespaced(sim.client());
    let nameless = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    };
    let r = leases
        .patch(
            "fresh",
            &PatchParams::apply("m"),
            &Patch::Apply(nameless("a")),
        )
        .await;
    assert_eq!(code(r), 400, "creating through a nameless apply is refused");
    leases
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "fresh"}, "spec": {}})).unwrap(),
        )
        .await
        .unwrap();
    let l = leases
        .patch(
            "fresh",
            &PatchParams::apply("m"),
            &Patch::Apply(nameless("a")),
        )
        .await
        .unwrap();
    assert_eq!(l.metadata.name.as_deref(), Some("fresh"));
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("a"));
}
