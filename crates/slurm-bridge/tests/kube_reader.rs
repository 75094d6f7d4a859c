//! `KubeReader` (the kube-rs client the scheduler uses) against a real kube-apiserver
//! (kube-testenv): the fixtures created in the server translate exactly as `translate`
//! translates them from the files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kube::api::{Api, PostParams};
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;
use slurm_bridge::config::Config;
use slurm_bridge::workload::kube_reader::KubeReader;
use slurm_bridge::workload::manifest_reader::ManifestReader;
use slurm_bridge::workload::owner::controller_of;
use slurm_bridge::workload::{ObjectRef, ReadError, WorkloadReader, translate};

fn fixture(name: &str) -> String {
    let p: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "fixtures",
        "translate",
        name,
    ]
    .iter()
    .collect();
    std::fs::read_to_string(p).unwrap()
}

/// Create every object of the reader in the server, owners (and Workloads) first, with owner uids
/// rewritten to the server's uids.
async fn create_all(client: &kube::Client, reader: &ManifestReader) {
    let ns_api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Namespace"),
            "namespaces",
        ),
    );
    let mut namespaces: BTreeSet<String> = reader
        .objects()
        .iter()
        .map(|r| r.namespace.clone())
        .collect();
    namespaces.remove("default");
    for ns in namespaces {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}
        }))
        .unwrap();
        ns_api.create(&PostParams::default(), &obj).await.unwrap();
    }
    let mut pending: Vec<ObjectRef> = reader.objects().into_iter().collect();
    // A PodGroup names its Workload, which kube-apiserver requires to exist first.
    pending.sort_by_key(|r| r.kind != "Workload");
    let mut uids: BTreeMap<(String, String, String), String> = BTreeMap::new();
    while !pending.is_empty() {
        let before = pending.len();
        let mut rest = Vec::new();
        for r in pending {
            let mut obj = reader.get(&r).await.unwrap();
            let ready = controller_of(&obj.metadata).is_none_or(|o| {
                uids.contains_key(&(o.kind.clone(), r.namespace.clone(), o.name.clone()))
            });
            if !ready {
                rest.push(r);
                continue;
            }
            for o in obj.metadata.owner_references.iter_mut().flatten() {
                if let Some(uid) = uids.get(&(o.kind.clone(), r.namespace.clone(), o.name.clone()))
                {
                    o.uid = uid.clone();
                }
            }
            obj.metadata.uid = None;
            obj.metadata.resource_version = None;
            let (group, version) = r
                .api_version
                .rsplit_once('/')
                .unwrap_or(("", &r.api_version));
            let (ar, _) = kube::discovery::pinned_kind(
                client,
                &GroupVersionKind::gvk(group, version, &r.kind),
            )
            .await
            .unwrap();
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &r.namespace, &ar);
            let created = api
                .create(&PostParams::default(), &obj)
                .await
                .unwrap_or_else(|e| panic!("create {r}: {e}"));
            uids.insert(
                (r.kind.clone(), r.namespace.clone(), r.name.clone()),
                created.metadata.uid.unwrap(),
            );
        }
        assert!(rest.len() < before, "owner cycle among {rest:?}");
        pending = rest;
    }
}

/// The job description as JSON without the pod uids (the server assigns its own).
fn comparable(desc: &slurm_rest::models::JobDescMsg) -> Value {
    let mut v = serde_json::to_value(desc).unwrap();
    let comment: Value = serde_json::from_str(v["admin_comment"].as_str().unwrap()).unwrap();
    v["admin_comment"] = serde_json::json!({"pods": comment["pods"], "group": comment["group"]});
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_reader_translates_like_the_manifest_reader() {
    // The fixtures include the pods of their Jobs, Deployments and ReplicaSets, so the
    // controllers that would make their own are off.
    let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions {
        controllers: Some(
            "*,-job-controller,-deployment-controller,-replicaset-controller,-statefulset-controller"
                .into(),
        ),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = env.client();
    let cfg = Config {
        partition: "slurm-bridge".into(),
        mcs_label: "kubernetes".into(),
        ..Default::default()
    };
    let mut manifests = ManifestReader::new();
    for f in [
        "bare-pod.yaml",
        "job-single.yaml",
        "coscheduling.yaml",
        "workload-podgroup.yaml",
        "gpu.yaml",
        "deployment.yaml",
    ] {
        manifests.load_yaml(f, &fixture(f)).unwrap();
    }
    let (_, errors) = manifests.generate_controller_pods();
    assert!(errors.is_empty(), "{errors:?}");
    create_all(&client, &manifests).await;

    let kube = KubeReader::new(client.clone());
    let pods = manifests.pods();
    assert_eq!(pods.len(), 11);
    let mut groups = BTreeSet::new();
    for pod in &pods {
        let ns = pod.metadata.namespace.as_deref().unwrap();
        let name = pod.metadata.name.as_deref().unwrap();
        let live: k8s_openapi::api::core::v1::Pod =
            Api::namespaced(client.clone(), ns).get(name).await.unwrap();
        let from_kube = translate(&kube, &(&live).into())
            .await
            .unwrap_or_else(|e| panic!("{ns}/{name}: {e}"));
        let from_files = translate(&manifests, pod).await.unwrap();
        assert_eq!(from_kube.group_key, from_files.group_key);
        assert_eq!(from_kube.ir.pod_names(), from_files.ir.pod_names());
        assert_eq!(from_kube.ir.root, from_files.ir.root);
        assert_eq!(from_kube.gang, from_files.gang);
        assert_eq!(
            comparable(&from_kube.to_job_desc(
                &cfg,
                &slurm_bridge::tenancy::Granted::as_asked(&from_kube.asked(&cfg)),
                &[]
            )),
            comparable(&from_files.to_job_desc(
                &cfg,
                &slurm_bridge::tenancy::Granted::as_asked(&from_files.asked(&cfg)),
                &[]
            ))
        );
        // The admin_comment carries the server's uids.
        let comment = slurm_bridge::workload::job_desc::admin_comment(
            &from_kube.ir,
            &from_kube.group_key,
            &cfg,
        );
        assert_eq!(comment.uids.len(), comment.pods.len());
        assert!(
            comment
                .uids
                .iter()
                .any(|u| Some(u) == live.metadata.uid.as_ref())
        );
        groups.insert(from_kube.group_key);
    }
    // 1 bare pod, 1 Job pod, 1 coscheduling group, 1 PodGroup gang, 2 GPU pods, 2 Deployment pods.
    assert_eq!(groups.len(), 8, "{groups:?}");

    // Read failures map to the kinds translation decides on.
    let missing = ObjectRef::new("batch/v1", "Job", "slurm-bridge", "missing");
    assert_eq!(
        kube.get(&missing).await,
        Err(ReadError::NotFound(missing.clone()))
    );
    let unknown = ObjectRef::new("example.com/v1", "Widget", "slurm-bridge", "w");
    assert!(matches!(
        kube.get(&unknown).await,
        Err(ReadError::NoKind { .. })
    ));
    // A kind outside the built-in table is found through discovery.
    let cm = ObjectRef::new("v1", "ConfigMap", "slurm-bridge", "absent");
    assert_eq!(kube.get(&cm).await, Err(ReadError::NotFound(cm.clone())));
    drop(env);
}
