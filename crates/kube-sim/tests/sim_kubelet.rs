//! The simulated kubelet, driven through the real kube-rs client against kube-sim.

mod sim_common;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sim_common::*;

fn pod(
    name: &str,
    node: Option<&str>,
    command: serde_json::Value,
    extra: serde_json::Value,
) -> Pod {
    let mut v = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": command}],
        },
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
    }
    if let Some(a) = extra.get("annotations") {
        v["metadata"]["annotations"] = a.clone();
    }
    if let Some(g) = extra.get("grace") {
        v["spec"]["terminationGracePeriodSeconds"] = g.clone();
    }
    from_json(v)
}

#[tokio::test]
async fn nodes_are_registered_ready() {
    let sim = start(3).await;
    let nodes: Api<Node> = Api::all(sim.client());
    let list = nodes.list(&ListParams::default()).await.unwrap().items;
    let mut names: Vec<String> = list
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["node-1", "node-2", "node-3"]);
    for n in &list {
        let labels = n.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels["kubernetes.io/hostname"],
            n.metadata.name.clone().unwrap()
        );
        let st = n.status.as_ref().unwrap();
        let ready = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(st.capacity.as_ref().unwrap()["cpu"].0, "8");
        assert_eq!(st.allocatable.as_ref().unwrap()["memory"].0, "16000Mi");
        assert!(st.capacity.as_ref().unwrap().contains_key("pods"));
    }
    sim.stop().await;
}

#[tokio::test]
async fn bound_pod_runs_then_succeeds_after_sleep() {
    let sim = start(2).await;
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // One pod created unbound and bound through pods/binding, as a scheduler does.
    pods.create(
        &PostParams::default(),
        &pod("sleeper", None, json!(["sleep", "1"]), json!({})),
    )
    .await
    .unwrap();
    // One pod that nobody binds: the kubelet must leave it alone.
    pods.create(
        &PostParams::default(),
        &pod("unbound", None, json!(["sleep", "1"]), json!({})),
    )
    .await
    .unwrap();
    bind(&client, "default", "sleeper", "node-2").await;

    let running = wait_for(&pods, "sleeper", "Running", |p| phase(p) == "Running").await;
    let st = running.status.clone().unwrap();
    assert!(st.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()));
    assert!(st.host_ip.is_some());
    assert!(st.start_time.is_some());
    assert!(has_condition(&running, "Ready"));
    assert!(has_condition(&running, "ContainersReady"));
    assert!(has_condition(&running, "PodScheduled"));
    let cs = &st.container_statuses.unwrap()[0];
    assert_eq!(cs.name, "main");
    assert!(cs.ready);
    assert!(cs.state.as_ref().unwrap().running.is_some());
    assert!(cs.container_id.is_some());

    let done = wait_for(&pods, "sleeper", "Succeeded", |p| phase(p) == "Succeeded").await;
    let t = terminated(&done).expect("terminated container state");
    assert_eq!(t.exit_code, 0);
    assert_eq!(t.reason.as_deref(), Some("Completed"));
    assert!(!has_condition(&done, "Ready"));

    // The unbound pod was never touched by the kubelet.
    let unbound = pods.get("unbound").await.unwrap();
    assert_ne!(phase(&unbound), "Running");
    assert!(
        unbound
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_none()
    );
    sim.stop().await;
}

#[tokio::test]
async fn exit_code_annotation_fails_the_pod() {
    let sim = start(1).await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let p = pod(
        "crasher",
        Some("node-1"),
        json!(["sleep", "infinity"]),
        json!({"annotations": {"kube-sim/duration": "0.2", "kube-sim/exit-code": "3"}}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    let failed = wait_for(&pods, "crasher", "Failed", |p| phase(p) == "Failed").await;
    let t = terminated(&failed).unwrap();
    assert_eq!(t.exit_code, 3);
    assert_eq!(t.reason.as_deref(), Some("Error"));
    sim.stop().await;
}

#[tokio::test]
async fn shell_script_exit_code_is_honoured() {
    let sim = start(1).await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let p = pod(
        "script",
        Some("node-1"),
        json!(["sh", "-c", "sleep 0.2; exit 4"]),
        json!({}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    let failed = wait_for(&pods, "script", "Failed", |p| phase(p) == "Failed").await;
    assert_eq!(terminated(&failed).unwrap().exit_code, 4);
    sim.stop().await;
}

/// Watch one pod until it is deleted; return every version seen.
async fn history(pods: Api<Pod>, name: &str) -> tokio::task::JoinHandle<Vec<Pod>> {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut stream = std::pin::pin!(watcher(pods, cfg).default_backoff());
        let mut tx = Some(tx);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => seen.push(p),
                Ok(watcher::Event::Delete(p)) => {
                    seen.push(p);
                    break;
                }
                _ => {}
            }
        }
        seen
    });
    let _ = rx.await;
    handle
}

#[tokio::test]
async fn runs_until_deleted_and_deletion_honours_grace_period() {
    let sim = start(1).await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let p = pod(
        "forever",
        Some("node-1"),
        json!(["sleep", "infinity"]),
        json!({"grace": 30}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    wait_for(&pods, "forever", "Running", |p| phase(p) == "Running").await;
    let watch = history(pods.clone(), "forever").await;

    let started = tokio::time::Instant::now();
    let dp = DeleteParams {
        grace_period_seconds: Some(2),
        ..Default::default()
    };
    pods.delete("forever", &dp).await.unwrap();
    // Within the grace period the pod is still there, terminating but running.
    let terminating = pods.get("forever").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(2));
    assert_eq!(phase(&terminating), "Running");

    let seen = tokio::time::timeout(WAIT, watch)
        .await
        .expect("pod deleted")
        .unwrap();
    // Removal waited for the grace period (a lower bound only).
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "removed after {:?}",
        started.elapsed()
    );
    // Before removal the kubelet reported the kill: Failed, exit code 137.
    let killed = seen
        .iter()
        .find(|p| phase(p) == "Failed")
        .unwrap_or_else(|| panic!("no Failed status seen: {seen:#?}"));
    let t = terminated(killed).unwrap();
    assert_eq!(t.exit_code, 137);
    assert_eq!(t.reason.as_deref(), Some("Error"));
    assert!(pods.get_opt("forever").await.unwrap().is_none());
    sim.stop().await;
}

#[tokio::test]
async fn deleted_pod_that_finishes_within_grace_succeeds() {
    let sim = start(1).await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let p = pod(
        "short",
        Some("node-1"),
        json!(["sleep", "1"]),
        json!({"grace": 30}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    wait_for(&pods, "short", "Running", |p| phase(p) == "Running").await;
    let watch = history(pods.clone(), "short").await;
    pods.delete("short", &DeleteParams::default())
        .await
        .unwrap();
    let seen = tokio::time::timeout(WAIT, watch)
        .await
        .expect("pod deleted")
        .unwrap();
    // min(grace 30 s, remaining ~1 s): it ended on its own, exit 0, then was removed.
    let last_terminal = seen
        .iter()
        .rev()
        .find(|p| matches!(phase(p).as_str(), "Succeeded" | "Failed"))
        .unwrap();
    assert_eq!(phase(last_terminal), "Succeeded");
    assert_eq!(terminated(last_terminal).unwrap().exit_code, 0);
    sim.stop().await;
}

#[tokio::test]
async fn unknown_command_runs_until_deleted() {
    let sim = start(1).await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let mut p = pod("server", Some("node-1"), json!(null), json!({}));
    p.spec.as_mut().unwrap().containers[0].command = None;
    pods.create(&PostParams::default(), &p).await.unwrap();
    // A second, short pod on the same node: once it has succeeded, the first (created
    // earlier, no command) must still be running.
    pods.create(
        &PostParams::default(),
        &pod("probe", Some("node-1"), json!(["sleep", "0.5"]), json!({})),
    )
    .await
    .unwrap();
    wait_for(&pods, "probe", "Succeeded", |p| phase(p) == "Succeeded").await;
    assert_eq!(phase(&pods.get("server").await.unwrap()), "Running");
    // Deleting with grace 0 removes it at once.
    pods.delete(
        "server",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_gone(&pods, "server").await;
    sim.stop().await;
}

#[tokio::test]
async fn pod_active_deadline_kills_the_pod() {
    let sim = start(1).await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let mut p = pod(
        "late",
        Some("node-1"),
        json!(["sleep", "infinity"]),
        json!({}),
    );
    p.spec.as_mut().unwrap().active_deadline_seconds = Some(1);
    pods.create(&PostParams::default(), &p).await.unwrap();
    let failed = wait_for(&pods, "late", "Failed", |p| phase(p) == "Failed").await;
    let st = failed.status.clone().unwrap();
    assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(terminated(&failed).unwrap().exit_code, 137);
    sim.stop().await;
}
