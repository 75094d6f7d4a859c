//! Slurm's view of hybrid nodes reaches Kubernetes, and the bridge never manages a slurmd node.

use crate::e2e::controllers::{Controllers, disruption};
use crate::e2e::{Env, node_of, wait_some};
use crate::support::{
    WAIT, pending_reason, pod, scontrol, slurm_state, tainted, unavailable, wait_node,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use slurm_bridge::wellknown::{LABEL_EXTERNAL_NODE, LABEL_SLURM_NODENAME};
use slurm_testenv::conf::Policy;
use std::collections::BTreeSet;

/// 4. Slurm's view reaches Kubernetes on hybrid nodes, one of them named differently in each
/// (`slurm-nodename` label); the bridge never registers, re-creates or removes a slurmd node.
#[tokio::test]
async fn slurm_node_states_reach_kubernetes_and_slurmd_nodes_are_never_managed() {
    let mut env = Env::start_hybrid(3, Policy::default(), |o| {
        // Kubernetes calls the third host kube-3; Slurm calls it node-3.
        o.nodes[2].name = "kube-3".into();
        o.nodes[2]
            .labels
            .insert(LABEL_SLURM_NODENAME.into(), "node-3".into());
    })
    .await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;
    for name in ["node-1", "node-2", "kube-3"] {
        wait_node(&env, name, "the bridge taint", tainted).await;
    }

    // A Kubernetes node labelled external whose Slurm node is run by slurmd: a warning, and
    // the Slurm node is left as it is.
    let nodes: Api<Node> = Api::all(env.kube.clone());
    nodes
        .patch(
            "node-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL_EXTERNAL_NODE: "true"}}})),
        )
        .await
        .unwrap();
    wait_some("SlurmNodeNotExternal Event on node-2", WAIT, async || {
        let out = env
            .kube_env
            .kubectl(&[
                "get",
                "events",
                "-A",
                "--field-selector",
                "involvedObject.name=node-2,reason=SlurmNodeNotExternal",
                "-o",
                "name",
            ])
            .unwrap_or_default();
        (!out.trim().is_empty()).then_some(())
    })
    .await;
    let state = slurm_state(&env, "node-2");
    assert_eq!(state, "IDLE", "node-2 was touched: {state}");

    // Drained in Slurm: the condition shows it and nothing new lands there.
    scontrol(
        &env,
        &[
            "update",
            "nodename=node-1",
            "state=drain",
            "reason=maintenance",
        ],
    );
    let n = wait_node(&env, "node-1", "SlurmNodeUnavailable", |n| {
        unavailable(n).is_some()
    })
    .await;
    let (reason, message) = unavailable(&n).unwrap();
    assert_eq!(reason, "SlurmNodeDrained", "{message}");
    assert!(message.contains("maintenance"), "{message}");
    for name in ["a", "b", "c"] {
        env.create_pod(pod(name, json!({}), json!({}))).await;
    }
    let bound = wait_some("two of three pods bound", WAIT, async || {
        let pods: Vec<Pod> = env.pods().list(&ListParams::default()).await.unwrap().items;
        let bound: Vec<Pod> = pods
            .into_iter()
            .filter(|p| !node_of(p).is_empty())
            .collect();
        (bound.len() == 2).then_some(bound)
    })
    .await;
    let on: BTreeSet<String> = bound.iter().map(node_of).collect();
    assert_eq!(on, BTreeSet::from(["node-2".into(), "kube-3".into()]));
    let waiting = ["a", "b", "c"]
        .into_iter()
        .find(|n| !bound.iter().any(|p| p.name_any() == *n))
        .unwrap();
    let msg = env.wait_condition(waiting, "SlurmJobPending", WAIT).await;
    assert!(pending_reason(&msg), "{msg}");
    env.assert_invariants().await;

    // Resumed: the condition goes and the waiting pod runs there.
    scontrol(&env, &["update", "nodename=node-1", "state=resume"]);
    wait_node(&env, "node-1", "SlurmNodeUnavailable gone", |n| {
        unavailable(n).is_none()
    })
    .await;
    let p = env.wait_bound(&[waiting.to_string()], WAIT).await.remove(0);
    assert_eq!(node_of(&p), "node-1");
    env.assert_invariants().await;

    // Cordon drains the Slurm node (with the bridge's reason); uncordon lifts it.
    env.kube_env.kubectl(&["cordon", "kube-3"]).unwrap();
    wait_some("node-3 drained for the cordon", WAIT, async || {
        slurm_state(&env, "node-3").contains("DRAIN").then_some(())
    })
    .await;
    let reason = env
        .slurm
        .run(&["sinfo", "-h", "-n", "node-3", "-o", "%E"])
        .unwrap();
    assert!(reason.contains("slurm-bridge:"), "{reason}");
    env.kube_env.kubectl(&["uncordon", "kube-3"]).unwrap();
    wait_some("node-3 undrained", WAIT, async || {
        (!slurm_state(&env, "node-3").contains("DRAIN")).then_some(())
    })
    .await;

    // slurmd of node-2 dies: the node goes DOWN, the Kubernetes node says so, and its pod is
    // removed with the reason shown.
    let victim = bound
        .iter()
        .find(|p| node_of(p) == "node-2")
        .unwrap()
        .name_any();
    env.slurm.kill_slurmd("node-2").unwrap();
    let n = wait_node(&env, "node-2", "SlurmNodeDown", |n| {
        unavailable(n).is_some_and(|(r, _)| r == "SlurmNodeDown")
    })
    .await;
    assert!(unavailable(&n).is_some());
    let removed = env
        .wait_pod(&victim, "removed for the lost node", WAIT, |p| {
            p.is_none_or(|p| disruption(p).is_some())
        })
        .await;
    if let Some(p) = removed {
        let (reason, message) = disruption(&p).unwrap();
        assert!(
            ["SlurmNodeFailure", "SlurmJobRequeued", "SlurmJobCancelled"]
                .contains(&reason.as_str()),
            "{reason}: {message}"
        );
    }
    let events = env.event_reasons(&victim).await;
    assert!(
        events.iter().any(|(r, _)| r.starts_with("Slurm")),
        "no Slurm reason among {victim}'s Events: {events:?}"
    );
    env.wait_pod(&victim, "gone", WAIT, |p| p.is_none()).await;
    env.assert_invariants().await;

    // Through all of it the slurmd nodes stayed slurmd nodes: none deleted or made external.
    let sinfo = env.slurm.run(&["sinfo", "-h", "-N", "-o", "%N"]).unwrap();
    let listed: BTreeSet<&str> = sinfo.lines().map(str::trim).collect();
    assert_eq!(listed, BTreeSet::from(["node-1", "node-2", "node-3"]));
    for n in ["node-1", "node-2", "node-3"] {
        assert!(!slurm_state(&env, n).contains("EXTERNAL"), "{n} external");
    }
}
