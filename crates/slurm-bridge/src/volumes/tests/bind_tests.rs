//! The Kubernetes writes against a real control plane (kube-apiserver and the PV controller
//! of kube-controller-manager), about 7 s: the one unit test here that needs kube-testenv.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::*;

async fn create<K>(api: &Api<K>, v: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &from(v))
        .await
        .expect("create")
}

async fn read_snapshot(client: &kube::Client) -> VolumeSnapshot {
    let lp = ListParams::default();
    let pvcs = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&lp)
        .await
        .expect("pvcs");
    let pvs = Api::<PersistentVolume>::all(client.clone())
        .list(&lp)
        .await
        .expect("pvs");
    let scs = Api::<StorageClass>::all(client.clone())
        .list(&lp)
        .await
        .expect("classes");
    VolumeSnapshot::new(
        pvcs.items.into_iter().map(Arc::new),
        pvs.items.into_iter().map(Arc::new),
        scs.items.into_iter().map(Arc::new),
    )
}

/// A local PV for the API server (a volume source is required there).
fn api_pv(name: &str, host: &str) -> serde_json::Value {
    pv_with(
        name,
        "1Gi",
        host,
        json!({ "spec": { "local": { "path": "/tmp" } }, "status": null }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_ref_is_completed_by_the_pv_controller_and_races_are_detected() {
    let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions::default())
        .await
        .expect("control plane");
    let client = env.client();
    let classes_api: Api<StorageClass> = Api::all(client.clone());
    for c in classes() {
        create(&classes_api, c).await;
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let in_default = |mut v: serde_json::Value| {
        v["metadata"]["namespace"] = json!("default");
        v["metadata"]["uid"] = serde_json::Value::Null;
        v
    };
    create(&pvs, api_pv("pv-a", "n1")).await;
    create(&pvs, api_pv("pv-b", "n1")).await;
    create(&pvcs, in_default(pvc("data", json!("local"), "1Gi"))).await;
    create(&pvcs, in_default(pvc("dyn", json!("fast"), "1Gi"))).await;

    // A new PV is Pending until the PV controller marks it Available (only then it is offered).
    for _ in 0..60 {
        let pv = pvs.get("pv-a").await.expect("pv-a");
        if pv.status.and_then(|s| s.phase).as_deref() == Some("Available") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Plan and apply for a pod on n1: one static PV, one selected node.
    let mut p = pod(json!([
        { "name": "a", "persistentVolumeClaim": { "claimName": "data" } },
        { "name": "b", "persistentVolumeClaim": { "claimName": "dyn" } }]));
    p.metadata.namespace = Some("default".into());
    let snap = read_snapshot(&client).await;
    let n1 = nodes().into_iter().next().expect("n1");
    let plan = plan_pod(&p, &snap, &n1, &Reserved::default()).expect("plan");
    assert_eq!(
        plan.actions,
        vec![
            ClaimAction::BindPv {
                claim: "data".into(),
                pv: "pv-a".into()
            },
            ClaimAction::SelectNode {
                claim: "dyn".into(),
                node: "n1".into(),
                already: false
            },
        ]
    );
    let mut applied = Applied::default();
    apply(&client, &snap, &plan, &mut applied)
        .await
        .expect("apply");
    let dyn_pvc = pvcs.get("dyn").await.expect("dyn");
    let ann = dyn_pvc.metadata.annotations.unwrap_or_default();
    assert_eq!(
        ann.get("volume.kubernetes.io/selected-node")
            .map(String::as_str),
        Some("n1")
    );

    // The PV controller completes the static binding on its own.
    let mut progress = Progress::default();
    for _ in 0..60 {
        progress = fetch_progress(&client, "default", &["data".to_string()])
            .await
            .expect("read");
        if progress.done() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(progress.done(), "data not bound: {progress:?}");
    let all = fetch_progress(&client, "default", &plan.claims())
        .await
        .expect("read");
    assert_eq!(
        (all.bound, all.total, all.waiting),
        (1, 2, vec!["dyn".to_string()])
    );

    // Undo leaves the bound claim alone and removes the selected node of the unbound one.
    assert!(undo(&client, &applied).await.is_empty());
    let pv_a = pvs.get("pv-a").await.expect("pv-a");
    assert!(
        pv_a.spec.and_then(|s| s.claim_ref).is_some(),
        "bound PV kept its claimRef"
    );
    let dyn_pvc = pvcs.get("dyn").await.expect("dyn");
    let ann = dyn_pvc.metadata.annotations.unwrap_or_default();
    assert!(
        !ann.contains_key("volume.kubernetes.io/selected-node"),
        "{ann:?}"
    );

    // The precondition bind_pv relies on: a stale resourceVersion is refused with 409.
    let stale = pvs.get("pv-b").await.expect("pv-b");
    let bump = json!({ "metadata": { "labels": { "touched": "yes" } } });
    pvs.patch("pv-b", &PatchParams::default(), &Patch::Merge(&bump))
        .await
        .expect("touch");
    let racy = json!({ "metadata": { "resourceVersion": stale.metadata.resource_version },
                       "spec": { "claimRef": { "namespace": "default", "name": "x" } } });
    let err = pvs
        .patch("pv-b", &PatchParams::default(), &Patch::Merge(&racy))
        .await
        .expect_err("stale write");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err:?}"
    );

    // A PV someone else claimed meanwhile is reported as taken.
    create(&pvcs, in_default(pvc("late", json!("local"), "1Gi"))).await;
    let other = json!({ "spec": { "claimRef": { "namespace": "default", "name": "other" } } });
    pvs.patch("pv-b", &PatchParams::default(), &Patch::Merge(&other))
        .await
        .expect("claim");
    let late = pvcs.get("late").await.expect("late");
    let err = bind::bind_pv(&client, &late, "pv-b")
        .await
        .expect_err("taken");
    assert!(err.is_pv_taken(), "{err}");
    let err = bind::bind_pv(&client, &late, "pv-gone")
        .await
        .expect_err("gone");
    assert!(err.is_pv_taken(), "{err}");
}
