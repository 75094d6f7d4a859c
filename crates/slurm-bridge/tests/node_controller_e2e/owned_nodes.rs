//! Issue 21: the bridge changes and removes only the Slurm nodes it registered, and the Slurm
//! node of a deleted Kubernetes node goes.

use crate::harness::{Harness, admin_node, events_with, is_drain, label_arg};
use slurm_bridge::controllers::node::ownership;
use slurm_bridge::wellknown::LABEL_EXTERNAL_NODE;

/// Issue 21: a bridge never removes what it did not create. Admin-made external nodes behind
/// unlabelled Kubernetes nodes of the same names are left alone with one warning each; an
/// admin-commented one behind a labelled node is not taken over; the Go original's unmarked
/// registration behind a labelled node is adopted (marked), its mark survives a slurmctld
/// restart, and it is removed when its label goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_nodes_the_bridge_registered_are_changed_or_removed() {
    let h = Harness::start_with(5, |slurm, kube| {
        for n in 1..=5 {
            admin_node(slurm, &format!("node-{n}"));
        }
        let out = slurm
            .exec(&["scontrol", "update", "nodename=node-4", "comment=rack-4"])
            .expect("scontrol update");
        assert!(out.status.success());
        for n in ["node-4", "node-5"] {
            kube.kubectl(&["label", "node", n, &label_arg()])
                .expect("label");
        }
    })
    .await;

    // The original's registration (labelled, no comment): adopted.
    h.wait_slurm("node-5", "marked as the bridge's", |n| {
        n.comment.as_deref() == Some(ownership::owner_comment("node-5", None).as_str())
    })
    .await;
    // Each foreign node: one warning.
    for n in ["node-1", "node-2", "node-3"] {
        h.wait_event(
            n,
            "SlurmNodeNotOwned",
            &["not registered by slurm-bridge", "label"],
        )
        .await;
    }
    h.wait_event("node-4", "SlurmNodeNotOwned", &["rack-4", "hand it over"])
        .await;
    // Passes after the warnings (each seeing every change so far) change nothing and repeat no
    // warning.
    for n in ["node-1", "node-2", "node-3", "node-4"] {
        h.pass_over_bridged(n).await;
        h.pass_over_bridged(n).await;
    }
    for n in 1..=4 {
        let name = format!("node-{n}");
        let s = h.slurm_node(&name).await.expect("admin's node stays");
        assert!(!is_drain(&s), "{s:?}");
        let want = (n == 4).then_some("rack-4");
        assert_eq!(
            s.comment.as_deref().filter(|c| !c.is_empty()),
            want,
            "{s:?}"
        );
        let events = h.node_events(&name).await;
        assert_eq!(events_with(&events, "SlurmNodeNotOwned"), 1, "{events:?}");
        assert_eq!(events_with(&events, "SlurmNodeRemoved"), 0, "{events:?}");
    }
    assert_eq!(h.metrics.nodes_removed.get(), 0);
    assert_eq!(h.metrics.nodes_drained.get(), 0);

    // The mark is in slurmctld's saved state.
    tokio::task::block_in_place(|| h.slurm.restart_slurmctld()).expect("restart slurmctld");
    let s = h.slurm_node("node-5").await.expect("node-5 after restart");
    assert_eq!(
        s.comment.as_deref(),
        Some(ownership::owner_comment("node-5", None).as_str()),
        "{s:?}"
    );
    // So the adopted node is the bridge's: removed when its label goes.
    h.kubectl(&[
        "label",
        "node",
        "node-5",
        &format!("{LABEL_EXTERNAL_NODE}-"),
    ]);
    h.wait_slurm_gone("node-5").await;
    for n in 1..=4 {
        assert!(h.slurm_node(&format!("node-{n}")).await.is_some());
    }
    h.shutdown().await;
}

/// Issue 21: the Slurm node of a deleted Kubernetes node is drained at once and removed once
/// idle, also when the node was deleted while the bridge was down (compared at start-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_kubernetes_node_loses_its_slurm_node() {
    let mut h = Harness::start(3).await;
    for n in ["node-1", "node-2", "node-3"] {
        // In the partition, so a job can run there.
        h.kubectl(&[
            "annotate",
            "node",
            n,
            "scheduler.slinky.slurm.net/external-node-partitions=slurm-bridge",
        ]);
        h.kubectl(&["label", "node", n, &label_arg()]);
    }
    for n in ["node-1", "node-2", "node-3"] {
        let s = h
            .wait_slurm(n, "registered and marked", |s| {
                ownership::owner(s, None).is_some()
            })
            .await;
        assert_eq!(ownership::owner(&s, None), Some(n), "{s:?}");
    }

    // Idle: removed.
    h.kubectl(&["delete", "node", "node-1"]);
    h.wait_slurm_gone("node-1").await;

    // Busy: drained at once (no job starts there), removed when its job ends.
    let job = h.busy("node-2").await;
    h.kubectl(&["delete", "node", "node-2"]);
    let s = h.wait_slurm("node-2", "drained", is_drain).await;
    assert!(
        s.reason
            .as_deref()
            .unwrap_or_default()
            .contains("Kubernetes node node-2 is gone"),
        "{s:?}"
    );
    h.rest.cancel_job(job, None, None).await.expect("cancel");
    h.wait_slurm_gone("node-2").await;

    // Deleted while the bridge is down: removed when it starts.
    h.stop_controller().await;
    h.kubectl(&["delete", "node", "node-3"]);
    tokio::task::block_in_place(|| h.slurm.restart_slurmctld()).expect("restart slurmctld");
    assert!(
        h.slurm_node("node-3").await.is_some(),
        "still there while down"
    );
    h.spawn_controller();
    h.wait_slurm_gone("node-3").await;
    assert_eq!(h.metrics.nodes_removed.get(), 3);
    h.shutdown().await;
}
