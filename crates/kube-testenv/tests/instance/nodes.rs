//! Nodes added later (custom capacity, labels, taints, the nodes-file format) adopting the pods
//! bound to them before, and a lost kubelet making its node not Ready until it is added again.

use crate::support::{eventually, is_ready, phase, pod, quantities, start, strings, taints};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, ListParams, PostParams};
use kube_testenv::{InstanceOptions, NodeSpec};
use serde_json::json;
use std::time::Duration;

/// Nodes added later get exactly their capacity, labels and taints, and adopt the pods bound
/// to them before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_nodes_registers_custom_nodes() {
    let inst = start(InstanceOptions::default()).await;
    let gpu = NodeSpec {
        name: "gpu-1".into(),
        labels: strings(&[
            ("topology.kubernetes.io/zone", "a"),
            ("example.com/pool", "gpu"),
        ]),
        capacity: strings(&[("cpu", "32"), ("memory", "128Gi"), ("nvidia.com/gpu", "4")]),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    // The nodes-file format of `--nodes-file`: allocatable below capacity, an annotation.
    let from_yaml = kube_testenv::agent::parse_nodes_yaml(
        "nodes:\n- name: big-mem\n  annotations: {example.com/owner: team-a}\n  capacity: {memory: 1Ti}\n  allocatable: {memory: 1000Gi, cpu: 7500m}\n",
    )
    .expect("nodes file");
    // gpu-1 registers first: the agent's pod watch is then seen to deliver the statuses below
    // through a pod bound to it (see the marker pod).
    inst.add_nodes(vec![gpu]).await.expect("add node gpu-1");

    // Pods bound to big-mem before it registers: one not started yet, and two that (as their
    // status says) started 150 s ago on a kubelet before this one, as after an agent restart.
    // The agent adopts them with the time they already ran: 2 minutes of run time, and an
    // active deadline of 2 minutes, are over.
    let pods: Api<Pod> = Api::namespaced(inst.client(), "default");
    let pp = PostParams::default();
    let mut overdue = pod(
        "overdue",
        Some("big-mem"),
        &["sleep", "infinity"],
        json!({}),
    );
    overdue.spec.as_mut().unwrap().active_deadline_seconds = Some(120);
    for p in [
        pod("fresh", Some("big-mem"), &["sleep", "infinity"], json!({})),
        pod(
            "resumed",
            Some("big-mem"),
            &["sleep", "infinity"],
            json!({"kube-testenv/duration": "2m"}),
        ),
        overdue,
    ] {
        pods.create(&pp, &p).await.expect("create pod");
    }
    let started =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(150);
    let running = json!({"status": {
        "phase": "Running",
        "startTime": started.to_string(),
        "containerStatuses": [{
            "name": "main", "image": "busybox:1.36", "imageID": "", "ready": true,
            "restartCount": 0, "started": true, "state": {"running": {"startedAt": started.to_string()}},
        }],
    }});
    for name in ["resumed", "overdue"] {
        pods.patch_status(
            name,
            &Default::default(),
            &kube::api::Patch::Merge(&running),
        )
        .await
        .expect("write the status of an earlier kubelet");
    }
    // The agent's pod watch delivers those statuses before big-mem appears: it delivers changes
    // in order, so once the agent has started a pod created after them (bound to gpu-1, which it
    // serves), it has seen them.
    pods.create(
        &pp,
        &pod("marker", Some("gpu-1"), &["sleep", "infinity"], json!({})),
    )
    .await
    .expect("create the marker pod");
    eventually("the agent to start the marker pod", || {
        let pods = pods.clone();
        async move { (phase(&pods.get("marker").await.ok()?) == "Running").then_some(()) }
    })
    .await;
    inst.add_nodes(from_yaml).await.expect("add node big-mem");

    let nodes: Api<Node> = Api::all(inst.client());
    let well_known = [
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ];

    let gpu = nodes.get("gpu-1").await.expect("node gpu-1");
    let st = gpu.status.as_ref().expect("status");
    let want = strings(&[
        ("cpu", "32"),
        ("memory", "128Gi"),
        ("nvidia.com/gpu", "4"),
        ("pods", "110"),
    ]);
    assert_eq!(quantities(st.capacity.as_ref()), want);
    assert_eq!(quantities(st.allocatable.as_ref()), want);
    let mut labels = strings(&well_known);
    labels.extend(strings(&[
        ("kubernetes.io/hostname", "gpu-1"),
        ("topology.kubernetes.io/zone", "a"),
        ("example.com/pool", "gpu"),
    ]));
    assert_eq!(gpu.metadata.labels.clone().unwrap_or_default(), labels);
    let t = taints(&gpu);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(
        (
            t[0].key.as_str(),
            t[0].value.as_deref(),
            t[0].effect.as_str()
        ),
        ("dedicated", Some("gpu"), "NoSchedule")
    );
    assert!(is_ready(&gpu));

    let big = nodes.get("big-mem").await.expect("node big-mem");
    let st = big.status.as_ref().expect("status");
    assert_eq!(
        quantities(st.capacity.as_ref()),
        strings(&[("cpu", "8"), ("memory", "1Ti"), ("pods", "110")])
    );
    assert_eq!(
        quantities(st.allocatable.as_ref()),
        strings(&[("cpu", "7500m"), ("memory", "1000Gi"), ("pods", "110")])
    );
    assert_eq!(
        big.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("example.com/owner"))
            .map(String::as_str),
        Some("team-a")
    );
    assert!(taints(&big).is_empty(), "{:?}", taints(&big));
    assert!(is_ready(&big));

    let ended = |name: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(&format!("pod {name} to end"), || {
                let pods = pods.clone();
                async move {
                    let p = pods.get(name).await.ok()?;
                    matches!(phase(&p).as_str(), "Succeeded" | "Failed").then_some(p)
                }
            })
            .await
        }
    };
    let resumed = ended("resumed").await;
    assert_eq!(phase(&resumed), "Succeeded");
    let overdue = ended("overdue").await;
    assert_eq!(phase(&overdue), "Failed");
    let status = overdue.status.as_ref().unwrap();
    assert_eq!(
        status.reason.as_deref(),
        Some("DeadlineExceeded"),
        "{status:?}"
    );
    eventually("pod fresh to run", || {
        let pods = pods.clone();
        async move { (phase(&pods.get("fresh").await.ok()?) == "Running").then_some(()) }
    })
    .await;

    let all = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes");
    assert_eq!(all.items.len(), 2);
    // An invalid spec is refused before it reaches the API server.
    let err = inst
        .add_nodes(vec![NodeSpec::standard("Not_A_DNS_Name")])
        .await
        .expect_err("an invalid node name is refused");
    assert!(err.to_string().contains("DNS"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_kubelet_makes_its_node_not_ready_and_add_nodes_brings_it_back() {
    let inst = start(InstanceOptions {
        node_monitor_grace_period: Some(Duration::from_secs(20)),
        ..InstanceOptions::with_nodes(2)
    })
    .await;
    let nodes: Api<Node> = Api::all(inst.client());
    let running = nodes.clone();
    inst.lose_kubelet("node-1").unwrap();
    let lost = eventually("node-1 marked not Ready with the unreachable taint", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get("node-1").await.ok()?;
            let unreachable = taints(&n)
                .iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable");
            (!is_ready(&n) && unreachable).then_some(n)
        }
    })
    .await;
    let ready = lost
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .expect("Ready condition");
    assert_eq!(ready.status, "Unknown", "{ready:?}");
    assert!(
        is_ready(&running.get("node-2").await.unwrap()),
        "the other node keeps its kubelet"
    );
    inst.add_nodes(vec![kube_testenv::NodeSpec::standard("node-1")])
        .await
        .unwrap();
    let back = nodes.get("node-1").await.unwrap();
    assert!(is_ready(&back), "node-1 served again");
    assert!(
        !taints(&back)
            .iter()
            .any(|t| t.key.starts_with("node.kubernetes.io/")),
        "{:?}",
        taints(&back)
    );
}
