//! An external node's life in Slurm as Kubernetes changes it (label, cordon, capacity, label
//! removed) and as an admin does (drain, resume), and a partition that does not exist.

use crate::e2e;
use crate::harness::{Harness, condition, has_state, is_drain, label_arg, managed_taint};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use slurm_bridge::wellknown::LABEL_EXTERNAL_NODE;
use slurm_rest::models::NodeState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_node_registration_cordon_admin_drain_recreate_and_removal() {
    let h = Harness::start(2).await;

    // Registration: CPUs, memory, features, EXTERNAL; the taint on the Kubernetes node.
    h.kubectl(&[
        "annotate",
        "node",
        "node-1",
        "scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge",
    ]);
    h.kubectl(&["label", "node", "node-1", &label_arg()]);
    let s = h.wait_slurm("node-1", "registered", |_| true).await;
    assert_eq!(s.cpus, Some(8), "{s:?}");
    assert_eq!(s.real_memory, Some(16000), "{s:?}");
    assert_eq!(s.features, ["slurm-bridge"], "{s:?}");
    assert!(s.partitions.contains(&"slurm-bridge".to_string()), "{s:?}");
    assert!(has_state(&s, NodeState::External), "{s:?}");
    assert!(!is_drain(&s), "{s:?}");
    h.wait_kube("node-1", "managed taint", |n| {
        managed_taint(n).as_deref() == Some(e2e::SCHEDULER)
    })
    .await;
    h.wait_event("node-1", "SlurmNodeRegistered", &["NodeName=node-1"])
        .await;
    assert_eq!(h.metrics.nodes_registered.get(), 1);

    // Cordon drains with the bridge's reason; uncordon resumes.
    h.kubectl(&["cordon", "node-1"]);
    let s = h.wait_slurm("node-1", "drained", is_drain).await;
    assert!(
        s.reason
            .as_deref()
            .unwrap_or_default()
            .starts_with("slurm-bridge:"),
        "{s:?}"
    );
    h.kubectl(&["uncordon", "node-1"]);
    h.wait_slurm("node-1", "resumed", |n| !is_drain(n)).await;

    // An admin's drain: left alone, shown as the condition and an Event.
    h.scontrol(&[
        "update",
        "nodename=node-1",
        "state=drain",
        "reason=maintenance",
    ]);
    let n = h
        .wait_kube("node-1", "SlurmNodeUnavailable condition", |n| {
            condition(n).is_some()
        })
        .await;
    let (status, reason, message) = condition(&n).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "SlurmNodeDrained")
    );
    assert!(
        message.contains("DRAIN") && message.contains("maintenance"),
        "{message}"
    );
    let note = h
        .wait_event("node-1", "SlurmNodeDrained", &["maintenance"])
        .await;
    assert!(note.contains("DRAIN"), "{note}");
    // Cordon and uncordon do not undo it: after a pass that saw the cordon, and one that saw
    // the uncordon, the drain and its reason are the admin's.
    let drained_before = h.metrics.nodes_drained.get();
    h.kubectl(&["cordon", "node-1"]);
    h.pass_over_bridged("node-1").await;
    let s = h.slurm_node("node-1").await.expect("node-1");
    assert!(is_drain(&s), "the admin's drain stays when cordoned: {s:?}");
    assert_eq!(s.reason.as_deref(), Some("maintenance"), "{s:?}");
    h.kubectl(&["uncordon", "node-1"]);
    h.pass_over_bridged("node-1").await;
    let s = h.slurm_node("node-1").await.expect("node-1");
    assert!(is_drain(&s), "the admin's drain stays: {s:?}");
    assert_eq!(s.reason.as_deref(), Some("maintenance"), "{s:?}");
    assert_eq!(
        h.metrics.nodes_drained.get(),
        drained_before,
        "the cordon drained nothing over the admin's drain"
    );
    // Slurm resumes it: the condition goes, an Event says so.
    h.scontrol(&["update", "nodename=node-1", "state=resume"]);
    h.wait_kube("node-1", "condition removed", |n| condition(n).is_none())
        .await;
    h.wait_event("node-1", "SlurmNodeResumed", &["node-1"])
        .await;
    let drained_events = h
        .node_events("node-1")
        .await
        .into_iter()
        .filter(|(_, r, _)| r == "SlurmNodeDrained")
        .count();
    assert_eq!(drained_events, 1, "one Event per drain");

    // Capacity changed (and with it the kubelet's allocatable, which registration reads): the
    // idle node is drained, removed and registered again.
    Api::<Node>::all(h.kube.clone())
        .patch_status(
            "node-1",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"capacity": {"cpu": "16"}, "allocatable": {"cpu": "16"}}}),
            ),
        )
        .await
        .expect("patch capacity");
    let s = h
        .wait_slurm("node-1", "re-created with 16 CPUs", |n| n.cpus == Some(16))
        .await;
    assert!(!is_drain(&s) && has_state(&s, NodeState::External), "{s:?}");
    assert_eq!(s.features, ["slurm-bridge"], "{s:?}");
    h.wait_event("node-1", "SlurmNodeRemoved", &["CPUs 8 -> 16"])
        .await;
    assert_eq!(h.metrics.nodes_registered.get(), 2);
    assert_eq!(h.metrics.nodes_removed.get(), 1);

    // Label removed from a busy node: drained, and the drain holds (no flip-flop, quirk 6)
    // while the job runs; removed once idle, and the taint goes.
    let job = h.busy("node-1").await;
    let drained_before = h.metrics.nodes_drained.get();
    h.kubectl(&[
        "label",
        "node",
        "node-1",
        &format!("{LABEL_EXTERNAL_NODE}-"),
    ]);
    let s = h
        .wait_slurm("node-1", "drained for removal", is_drain)
        .await;
    assert!(
        s.reason
            .as_deref()
            .unwrap_or_default()
            .contains("removing external node node-1"),
        "{s:?}"
    );
    // Passes over the busy node (each one seeing the drain it made) leave the drain as it is.
    for _ in 0..3 {
        h.pass_over_bridged("node-1").await;
        let s = h
            .slurm_node("node-1")
            .await
            .expect("still there while busy");
        assert!(is_drain(&s), "the removal drain holds: {s:?}");
    }
    assert_eq!(
        h.metrics.nodes_drained.get(),
        drained_before + 1,
        "drained once, never undrained in between"
    );
    h.rest.cancel_job(job, None, None).await.expect("cancel");
    h.wait_slurm_gone("node-1").await;
    h.wait_kube("node-1", "taint removed", |n| managed_taint(n).is_none())
        .await;
    assert_eq!(h.metrics.nodes_removed.get(), 2);

    // The unlabelled node was never registered nor tainted.
    assert!(h.slurm_node("node-2").await.is_none());
    assert_eq!(managed_taint(&h.kube_node("node-2").await), None);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_partition_is_reported_and_not_registered() {
    let h = Harness::start(1).await;
    h.kubectl(&[
        "annotate",
        "node",
        "node-1",
        "scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge,nope",
    ]);
    h.kubectl(&["label", "node", "node-1", &label_arg()]);
    let note = h
        .wait_event("node-1", "InvalidPartition", &["\"nope\""])
        .await;
    assert!(
        note.contains("existing partitions: \"slurm-bridge\""),
        "{note}"
    );
    // Passes after the Warning (the last of them complete): still not registered, no taint,
    // and the Warning not repeated.
    h.passes_over_unbridged("node-1").await;
    assert!(h.slurm_node("node-1").await.is_none(), "not registered");
    assert_eq!(managed_taint(&h.kube_node("node-1").await), None);
    let warnings = h
        .node_events("node-1")
        .await
        .into_iter()
        .filter(|(t, r, _)| t == "Warning" && r == "InvalidPartition")
        .count();
    assert_eq!(warnings, 1, "one Warning, not one per retry");

    // Fixed: registered.
    h.kubectl(&[
        "annotate",
        "--overwrite",
        "node",
        "node-1",
        "scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge",
    ]);
    let s = h.wait_slurm("node-1", "registered", |_| true).await;
    assert_eq!(s.features, ["slurm-bridge"], "{s:?}");
    h.shutdown().await;
}
