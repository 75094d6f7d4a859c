//! The simulated LeaderWorkerSet controller, through the real kube-rs client against kube-sim.

mod sim_common;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use sim_common::*;

fn lws_api(client: kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "leaderworkerset.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    };
    Api::namespaced_with(client, ns, &ar)
}

fn lws(name: &str, replicas: i32, size: i32) -> DynamicObject {
    from_json(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": {
                    "metadata": {"labels": {"role": "leader"}},
                    "spec": {"containers": [{"name": "main", "image": "vllm:latest"}]},
                },
                "workerTemplate": {
                    "metadata": {"labels": {"role": "worker"}},
                    "spec": {"containers": [{"name": "main", "image": "vllm:latest"}]},
                },
            },
        },
    }))
}

#[tokio::test]
async fn lws_with_2_replicas_of_size_3_creates_leaders_and_workers() {
    let sim = start(3).await;
    let client = sim.client();
    let sets = lws_api(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = sets
        .create(&PostParams::default(), &lws("llm", 2, 3))
        .await
        .unwrap();
    let lws_uid = created.uid().unwrap();

    // Leaders first; workers follow once their leader exists (startupPolicy LeaderCreated).
    let lp = ListParams::default().labels("leaderworkerset.sigs.k8s.io/name=llm");
    let ps = wait_list(&pods, &lp, "6 pods", |ps| ps.len() == 6).await;
    let by_name: BTreeMap<String, &Pod> = ps.iter().map(|p| (p.name_any(), p)).collect();
    let names: Vec<&str> = by_name.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["llm-0", "llm-0-1", "llm-0-2", "llm-1", "llm-1-1", "llm-1-2"]
    );

    let mut keys = BTreeSet::new();
    for g in 0..2 {
        let leader = by_name[&format!("llm-{g}")];
        let ll = leader.labels();
        assert_eq!(ll["leaderworkerset.sigs.k8s.io/name"], "llm");
        assert_eq!(ll["leaderworkerset.sigs.k8s.io/group-index"], g.to_string());
        assert_eq!(ll["leaderworkerset.sigs.k8s.io/worker-index"], "0");
        assert_eq!(ll["role"], "leader");
        let key = ll["leaderworkerset.sigs.k8s.io/group-key"].clone();
        assert_eq!(key.len(), 40);
        keys.insert(key.clone());
        assert_eq!(
            leader.annotations()["leaderworkerset.sigs.k8s.io/size"],
            "3"
        );
        let owner = controller_ref(leader);
        assert_eq!(owner.api_version, "leaderworkerset.x-k8s.io/v1");
        assert_eq!(owner.kind, "LeaderWorkerSet");
        assert_eq!(owner.uid, lws_uid);
        for w in 1..3 {
            let worker = by_name[&format!("llm-{g}-{w}")];
            let wl = worker.labels();
            assert_eq!(wl["leaderworkerset.sigs.k8s.io/name"], "llm");
            assert_eq!(wl["leaderworkerset.sigs.k8s.io/group-index"], g.to_string());
            assert_eq!(
                wl["leaderworkerset.sigs.k8s.io/worker-index"],
                w.to_string()
            );
            assert_eq!(wl["leaderworkerset.sigs.k8s.io/group-key"], key);
            assert_eq!(wl["role"], "worker");
            assert_eq!(
                worker.annotations()["leaderworkerset.sigs.k8s.io/leader-name"],
                format!("llm-{g}")
            );
            // Owner chain: worker -> leader Pod -> LeaderWorkerSet.
            let owner = controller_ref(worker);
            assert_eq!(
                (owner.api_version.as_str(), owner.kind.as_str()),
                ("v1", "Pod")
            );
            assert_eq!(owner.name, format!("llm-{g}"));
            assert_eq!(Some(owner.uid), leader.uid());
        }
    }
    assert_eq!(keys.len(), 2, "each group has its own key");

    // Scheduled, all pods run (no command: until deleted) and the LWS reports ready groups.
    let sched = scheduler(client.clone(), "default", 3);
    let ready = wait_for(&sets, "llm", "2 ready groups", |o| {
        o.data["status"]["readyReplicas"] == 2
    })
    .await;
    sched.abort();
    let conds = ready.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Available" && c["status"] == "True")
    );

    // Deleting the LWS deletes every pod (grace 30 s is cut short: the pods get their
    // deletion timestamp; the kubelet kills them once the grace period is over).
    sets.delete("llm", &DeleteParams::default()).await.unwrap();
    wait_list(&pods, &lp, "all pods terminating", |ps| {
        ps.iter().all(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
    sim.stop().await;
}

#[tokio::test]
async fn deleted_worker_recreates_its_group() {
    let sim = start(2).await;
    let client = sim.client();
    let sets = lws_api(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut obj = lws("grp", 1, 2);
    for t in ["leaderTemplate", "workerTemplate"] {
        obj.data["spec"]["leaderWorkerTemplate"][t]["spec"]["terminationGracePeriodSeconds"] =
            json!(1);
    }
    sets.create(&PostParams::default(), &obj).await.unwrap();
    let sched = scheduler(client.clone(), "default", 2);
    let lp = ListParams::default().labels("leaderworkerset.sigs.k8s.io/name=grp");
    let ps = wait_list(&pods, &lp, "2 running pods", |ps| {
        ps.len() == 2 && ps.iter().all(|p| phase(p) == "Running")
    })
    .await;
    let old_leader_uid = ps
        .iter()
        .find(|p| p.name_any() == "grp-0")
        .unwrap()
        .uid()
        .unwrap();
    // A worker deleted by someone else: the default restart policy
    // (RecreateGroupOnPodRestart) deletes and recreates the whole group.
    pods.delete("grp-0-1", &DeleteParams::default())
        .await
        .unwrap();
    let ps = wait_list(&pods, &lp, "a new running group", |ps| {
        ps.len() == 2
            && ps
                .iter()
                .all(|p| phase(p) == "Running" && p.metadata.deletion_timestamp.is_none())
            && ps
                .iter()
                .any(|p| p.name_any() == "grp-0" && p.uid().as_deref() != Some(&old_leader_uid))
    })
    .await;
    sched.abort();
    let leader = ps.iter().find(|p| p.name_any() == "grp-0").unwrap();
    let worker = ps.iter().find(|p| p.name_any() == "grp-0-1").unwrap();
    assert_eq!(controller_ref(worker).uid, leader.uid().unwrap());
    sim.stop().await;
}
