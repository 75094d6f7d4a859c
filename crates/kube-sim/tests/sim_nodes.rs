//! Simulated nodes from a YAML file, through the real kube-rs client against kube-sim.

mod sim_common;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use sim_common::*;

#[tokio::test]
async fn nodes_file_gives_names_labels_taints_and_resources() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodes.yaml");
    std::fs::write(
        &path,
        r#"
nodes:
  - name: gpu-1
    labels: {topology.kubernetes.io/zone: a}
    annotations: {scheduler.slinky.slurm.net/external-node-partitions: gpu}
    capacity: {cpu: "32", memory: 128Gi, nvidia.com/gpu: "4"}
    allocatable: {cpu: "31"}
    taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
  - name: cpu-1
"#,
    )
    .unwrap();
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        simulate: true,
        nodes_file: Some(path),
        ..Default::default()
    })
    .await
    .unwrap();
    let nodes: Api<Node> = Api::all(sim.client());
    let mut list = nodes.list(&ListParams::default()).await.unwrap().items;
    list.sort_by_key(|n| n.metadata.name.clone());
    let names: Vec<_> = list
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["cpu-1", "gpu-1"]);
    let gpu = &list[1];
    assert_eq!(
        gpu.metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"],
        "a"
    );
    assert_eq!(
        gpu.metadata.labels.as_ref().unwrap()["kubernetes.io/hostname"],
        "gpu-1"
    );
    assert_eq!(
        gpu.metadata.annotations.as_ref().unwrap()["scheduler.slinky.slurm.net/external-node-partitions"],
        "gpu"
    );
    let taint = &gpu.spec.as_ref().unwrap().taints.as_ref().unwrap()[0];
    assert_eq!(
        (taint.key.as_str(), taint.effect.as_str()),
        ("dedicated", "NoSchedule")
    );
    let st = gpu.status.as_ref().unwrap();
    assert_eq!(st.capacity.as_ref().unwrap()["nvidia.com/gpu"].0, "4");
    assert_eq!(st.allocatable.as_ref().unwrap()["cpu"].0, "31");
    assert_eq!(st.allocatable.as_ref().unwrap()["nvidia.com/gpu"].0, "4");
    assert_eq!(
        list[0].status.as_ref().unwrap().capacity.as_ref().unwrap()["cpu"].0,
        "8"
    );

    // The kubelet serves the file's nodes too.
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let p: Pod = from_json(json!({
        "metadata": {"name": "on-gpu"},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "x", "command": ["sleep", "infinity"]}]},
    }));
    pods.create(&PostParams::default(), &p).await.unwrap();
    let running = wait_for(&pods, "on-gpu", "Running", |p| phase(p) == "Running").await;
    assert!(running.status.unwrap().pod_ip.is_some());
    sim.stop().await;
}

#[tokio::test]
async fn malformed_nodes_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodes.yaml");
    std::fs::write(&path, "nodes:\n  - name: a\n    colour: red\n").unwrap();
    let started = kube_sim::KubeSim::start(kube_sim::Options {
        simulate: true,
        nodes_file: Some(path.clone()),
        ..Default::default()
    })
    .await;
    let Err(err) = started else {
        panic!("start must fail on a malformed nodes file");
    };
    let msg = err.to_string();
    assert!(
        msg.contains("nodes.yaml") && msg.contains("colour"),
        "{msg}"
    );
}
