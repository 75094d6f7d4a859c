//! Create/read/update/patch/delete for every registered kind, conflicts, validation, status
//! subresources and discovery, through the real kube-rs client.

mod common;

use common::{code, pod, reason, server};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Discovery;
use serde_json::json;

/// A valid object of each registered kind (empty spec where the sim does not validate).
fn sample(kind: &str, name: &str) -> serde_json::Value {
    match kind {
        "Pod" => common::pod_json(name),
        "Job" => {
            json!({"metadata": {"name": name}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
        }
        _ => json!({"metadata": {"name": name}, "spec": {"x": 1}}),
    }
}

#[tokio::test]
async fn crud_for_every_registered_kind() {
    let sim = server().await;
    let client = sim.client();
    let types: Vec<_> = sim.store().registry().types().to_vec();
    assert!(types.len() >= 26, "registered types: {}", types.len());
    for t in types {
        if t.kind == "Namespace" || t.kind == "CustomResourceDefinition" {
            continue;
        }
        let gvk = GroupVersionKind::gvk(&t.group, &t.version, &t.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &t.plural);
        let api: Api<DynamicObject> = if t.namespaced {
            Api::namespaced_with(client.clone(), "default", &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let name = format!("x-{}", t.singular);
        let mut obj: DynamicObject = serde_json::from_value(sample(&t.kind, &name)).unwrap();
        obj.types = Some(kube::core::TypeMeta {
            api_version: t.api_version(),
            kind: t.kind.clone(),
        });
        let created = api
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", t.plural));
        let rv1 = created.metadata.resource_version.clone().unwrap();
        assert!(created.metadata.uid.is_some(), "{} uid", t.plural);
        assert!(created.metadata.creation_timestamp.is_some());
        let got = api.get(&name).await.unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some(rv1.as_str()));
        let mut upd = got.clone();
        kube::ResourceExt::labels_mut(&mut upd).insert("a".into(), "b".into());
        let updated = api
            .replace(&name, &PostParams::default(), &upd)
            .await
            .unwrap();
        assert_ne!(
            updated.metadata.resource_version,
            got.metadata.resource_version
        );
        // A replace carrying the old resourceVersion conflicts.
        assert_eq!(
            code(api.replace(&name, &PostParams::default(), &upd).await),
            409,
            "{}",
            t.plural
        );
        let patched = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"k": "v"}}})),
            )
            .await
            .unwrap();
        assert_eq!(patched.metadata.annotations.unwrap()["k"], "v");
        assert_eq!(patched.metadata.labels.unwrap()["a"], "b");
        let list = api.list(&ListParams::default()).await.unwrap();
        assert!(
            list.items
                .iter()
                .any(|o| o.metadata.name.as_deref() == Some(name.as_str()))
        );
        api.delete(&name, &DeleteParams::default()).await.unwrap();
        assert_eq!(code(api.get(&name).await), 404, "{}", t.plural);
    }
}

#[tokio::test]
async fn create_conflicts_and_validation() {
    let sim = server().await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    pods.create(&PostParams::default(), &pod("p1"))
        .await
        .unwrap();
    let again = pods.create(&PostParams::default(), &pod("p1")).await;
    assert_eq!(reason(again), "AlreadyExists");
    assert_eq!(code(pods.get("missing").await), 404);
    let bad: Pod = serde_json::from_value(
        json!({"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}}),
    )
    .unwrap();
    let r = pods.create(&PostParams::default(), &bad).await;
    assert_eq!(reason(r), "Invalid");
    // generateName
    let gen_pod: Pod = serde_json::from_value(json!({"metadata": {"generateName": "gen-"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).unwrap();
    let g = pods.create(&PostParams::default(), &gen_pod).await.unwrap();
    let n = g.metadata.name.unwrap();
    assert!(n.starts_with("gen-") && n.len() == 9, "{n}");
    // namespace must exist
    let other: Api<Pod> = Api::namespaced(sim.client(), "nope");
    assert_eq!(
        code(other.create(&PostParams::default(), &pod("p")).await),
        404
    );
    // defaults
    let p = pods.get("p1").await.unwrap();
    let spec = p.spec.unwrap();
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(p.metadata.generation, Some(1));
}

#[tokio::test]
async fn resource_versions_are_global_and_generation_tracks_spec() {
    let sim = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let a = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap(),
        )
        .await
        .unwrap();
    let b = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "b"}})).unwrap(),
        )
        .await
        .unwrap();
    let ra: u64 = a.metadata.resource_version.unwrap().parse().unwrap();
    let rb: u64 = b.metadata.resource_version.unwrap().parse().unwrap();
    assert_eq!(rb, ra + 1);
    // A no-op patch changes nothing.
    let same = cms
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap();
    assert_eq!(same.metadata.resource_version.unwrap(), ra.to_string());

    let jobs: Api<DynamicObject> = Api::default_namespaced_with(
        sim.client(),
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs"),
    );
    let job: DynamicObject = serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}})).unwrap();
    let j = jobs.create(&PostParams::default(), &job).await.unwrap();
    assert_eq!(j.metadata.generation, Some(1));
    assert!(
        j.data["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"].is_string()
    );
    let j = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(j.metadata.generation, Some(1));
    let j = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(j.metadata.generation, Some(2));
}

#[tokio::test]
async fn status_subresource_is_separate() {
    let sim = server().await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    pods.create(&PostParams::default(), &pod("s"))
        .await
        .unwrap();
    // Main resource writes do not change status.
    let p = pods
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"l": "1"}}, "status": {"phase": "Running"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(p.metadata.labels.unwrap()["l"], "1");
    // Status writes change only status.
    let p = pods
        .patch_status(
            "s",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"l": "2"}}, "status": {"phase": "Running"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(p.metadata.labels.as_ref().unwrap()["l"], "1");
    let mut p2 = p.clone();
    p2.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let p3 = pods
        .replace_status("s", &PostParams::default(), &p2)
        .await
        .unwrap();
    assert_eq!(p3.status.unwrap().phase.as_deref(), Some("Succeeded"));
    // Stale resourceVersion on status replace conflicts.
    assert_eq!(
        code(pods.replace_status("s", &PostParams::default(), &p2).await),
        409
    );
    // Pod spec is immutable except images and a few fields.
    let r = pods
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeSelector": {"a": "b"}}})),
        )
        .await;
    assert_eq!(code(r), 422);
}

#[tokio::test]
async fn discovery_finds_every_group() {
    let sim = server().await;
    let d = Discovery::new(sim.client()).run().await.unwrap();
    let groups: Vec<String> = d.groups().map(|g| g.name().to_string()).collect();
    for g in [
        "",
        "apps",
        "batch",
        "coordination.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "jobset.x-k8s.io",
        "leaderworkerset.x-k8s.io",
        "admissionregistration.k8s.io",
        "events.k8s.io",
    ] {
        assert!(
            groups.iter().any(|x| x == g),
            "group {g:?} missing from {groups:?}"
        );
    }
    let (ar, caps) = d
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
        .unwrap();
    assert_eq!(ar.plural, "pods");
    assert!(
        caps.subresources
            .iter()
            .any(|(s, _)| s.plural == "status" || s.plural == "pods/status"),
        "{:?}",
        caps.subresources
    );
    let v = sim.client().apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
}

#[tokio::test]
async fn namespaces_exist_and_deletion_empties_them() {
    let sim = server().await;
    let nss: Api<Namespace> = Api::all(sim.client());
    for n in ["default", "kube-system"] {
        nss.get(n).await.unwrap();
    }
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(sim.client(), "team");
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "team");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
    )
    .await
    .unwrap();
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    assert_eq!(code(pods.get("a").await), 404);
    assert_eq!(code(cms.get("c").await), 404);
    assert_eq!(code(nss.get("team").await), 404);
}

#[tokio::test]
async fn custom_resource_definitions_add_kinds() {
    let sim = server().await;
    let crds: Api<DynamicObject> = Api::all_with(
        sim.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}
    }))
    .unwrap();
    let c = crds.create(&PostParams::default(), &crd).await.unwrap();
    assert_eq!(c.data["status"]["conditions"][1]["type"], "Established");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::default_namespaced_with(sim.client(), &ar);
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 2}})).unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(widgets.get("w").await.unwrap().data["spec"]["size"], 2);
    // Custom resources do not take strategic merge patches, as in the real server.
    let r = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 3}})),
        )
        .await;
    assert_eq!(code(r), 415);
}
