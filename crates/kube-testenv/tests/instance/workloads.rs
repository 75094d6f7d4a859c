//! The JobSet and LeaderWorkerSet controllers driving their workloads on the agent's nodes.

use crate::support::{eventually, has_condition, object, phase, start};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube_testenv::InstanceOptions;
use serde_json::json;

/// The JobSet and LeaderWorkerSet controllers (with their webhooks) drive their workloads to
/// completion and readiness on the agent's nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_controllers_run_jobsets_and_leaderworkersets() {
    let inst = start(InstanceOptions {
        workload_controllers: true,
        kube_scheduler: true,
        ..InstanceOptions::with_nodes(2)
    })
    .await;
    let client = inst.client();
    let pp = PostParams::default();
    let container = json!([{"name": "main", "image": "busybox:1.36", "command": ["sleep", "1"]}]);

    let jobset_ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
    ));
    let jobsets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &jobset_ar);
    let jobset: DynamicObject = object(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pair"},
        "spec": {"replicatedJobs": [{
            "name": "workers",
            "replicas": 2,
            "template": {"spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": container}},
            }},
        }]},
    }));
    jobsets.create(&pp, &jobset).await.expect("create JobSet");

    let lws_ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "leaderworkerset.x-k8s.io",
        "v1",
        "LeaderWorkerSet",
    ));
    let lwss: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &lws_ar);
    let lws: DynamicObject = object(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "server"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"spec": {"containers": [
                    {"name": "main", "image": "busybox:1.36", "command": ["sleep", "infinity"]},
                ]}},
            },
        },
    }));
    lwss.create(&pp, &lws)
        .await
        .expect("create LeaderWorkerSet");

    eventually("JobSet pair to complete", || {
        let jobsets = jobsets.clone();
        async move {
            let js = jobsets.get("pair").await.ok()?;
            has_condition(js.data["status"]["conditions"].as_array(), "Completed").then_some(())
        }
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let jobs = jobs
        .list(&ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=pair"))
        .await
        .expect("list the JobSet's Jobs");
    assert_eq!(jobs.items.len(), 2);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let running = eventually("the 2 pods of LeaderWorkerSet server to run", || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("leaderworkerset.sigs.k8s.io/name=server"))
                .await
                .ok()?;
            (list.items.len() == 2 && list.items.iter().all(|p| phase(p) == "Running"))
                .then_some(list.items)
        }
    })
    .await;
    let mut roles: Vec<String> = running
        .iter()
        .map(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("leaderworkerset.sigs.k8s.io/worker-index"))
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    roles.sort();
    assert_eq!(roles, ["0", "1"], "a leader and a worker");
    // Ready pods make the group, and so the LeaderWorkerSet, available.
    eventually("LeaderWorkerSet server to be Available", || {
        let lwss = lwss.clone();
        async move {
            let lws = lwss.get("server").await.ok()?;
            let status = &lws.data["status"];
            (has_condition(status["conditions"].as_array(), "Available")
                && status["readyReplicas"] == 1)
                .then_some(())
        }
    })
    .await;
}
