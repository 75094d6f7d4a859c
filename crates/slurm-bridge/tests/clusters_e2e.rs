//! Two Kubernetes clusters sharing one Slurm, each bridge with its `clusterName`: each registers
//! and keeps only its own external nodes and jobs. One bridge restarted and swept (a job whose
//! pod was deleted while it was down is cancelled) leaves the other cluster's job and nodes
//! untouched.

mod e2e;

use e2e::controllers::Controllers;
use e2e::wait_for;
use e2e::*;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use slurm_bridge::wellknown::{
    ANNOTATION_EXTERNAL_NODE_PARTITIONS, LABEL_EXTERNAL_NODE, LABEL_SLURM_JOBID,
    LABEL_SLURM_NODENAME,
};
use slurm_bridge::workload::admin_comment::AdminComment;
use std::sync::Arc;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

/// A control plane of two nodes whose Slurm nodes are `<cluster>-1`, `<cluster>-2`.
fn cluster_nodes(cluster: &str) -> kube_testenv::InstanceOptions {
    let mut opts = kube_testenv::InstanceOptions::with_nodes(2);
    for (i, n) in opts.nodes.iter_mut().enumerate() {
        n.labels.insert(LABEL_EXTERNAL_NODE.into(), "true".into());
        n.labels
            .insert(LABEL_SLURM_NODENAME.into(), format!("{cluster}-{}", i + 1));
        n.annotations.insert(
            ANNOTATION_EXTERNAL_NODE_PARTITIONS.into(),
            "slurm-bridge".into(),
        );
    }
    opts
}

/// The scheduler and the controllers of `env` as the bridge of `cluster`.
async fn start_bridge(env: &mut Env, cluster: &str) -> Controllers {
    let name = cluster.to_string();
    env.start_scheduler_opts(
        rest_client(&env.slurm),
        tokio::sync::watch::channel(true).1,
        |o| o.config.cluster_name = name,
    )
    .await;
    let name = cluster.to_string();
    Controllers::start(env, |o| o.config.cluster_name = name).await
}

fn node_comment(env: &Env, node: &str) -> String {
    let out = env
        .slurm
        .exec(&["scontrol", "show", "node", node])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap();
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Comment="))
        .unwrap_or_default()
        .to_string()
}

/// The lifecycle invariants of one cluster's bridge, over the jobs stamped with its name: no
/// live job of it without a live pod of it, every bound pod on its job's nodes.
async fn assert_cluster_invariants(env: &Env, cluster: &str) {
    let pods = Api::<Pod>::all(env.kube.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    for id in env.active_job_ids() {
        let job = env.rest.job(id).await.unwrap();
        let comment = AdminComment::decode(job.admin_comment.as_deref().unwrap_or("")).unwrap();
        if comment.cluster.as_deref() != Some(cluster) {
            continue;
        }
        assert!(
            pods.iter()
                .any(|p| !is_terminal(p)
                    && p.labels().get(LABEL_SLURM_JOBID) == Some(&id.to_string())),
            "{cluster}: job {id} is live without a live pod"
        );
    }
    let names = env.slurm_names().await;
    for p in pods.iter().filter(|p| !is_terminal(p)) {
        if let (Some(node), Some(id)) = (
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            p.labels().get(LABEL_SLURM_JOBID),
        ) {
            env.assert_on_its_job(&p.name_any(), node, id.parse().unwrap(), &names)
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_share_one_slurm_and_each_bridge_touches_only_its_own() {
    init_tracing();
    let slurm = Arc::new(
        tokio::task::spawn_blocking(|| {
            slurm_testenv::Instance::start(slurm_testenv::InstanceOptions::default())
        })
        .await
        .unwrap()
        .expect("start Slurm"),
    );
    let mut east = Env::start_sharing(slurm.clone(), cluster_nodes("east")).await;
    let mut west = Env::start_sharing(slurm.clone(), cluster_nodes("west")).await;
    let east_controllers = start_bridge(&mut east, "east").await;
    let west_controllers = start_bridge(&mut west, "west").await;

    // Each registers its own nodes, marked with its name.
    for (env, cluster) in [(&east, "east"), (&west, "west")] {
        for i in 1..=2 {
            let node = format!("{cluster}-{i}");
            let want = format!("in cluster {cluster}");
            wait_for(&format!("{node} registered"), TIMEOUT, || async {
                let c = node_comment(env, &node);
                if c.ends_with(&want) { Ok(()) } else { Err(c) }
            })
            .await;
        }
    }

    east.create_pod(pod("e1", json!({}), json!({}))).await;
    east.create_pod(pod("e-gone", json!({}), json!({}))).await;
    west.create_pod(pod("w1", json!({}), json!({}))).await;
    let e = east
        .wait_bound(&["e1".into(), "e-gone".into()], TIMEOUT)
        .await;
    let w = west.wait_bound(&["w1".into()], TIMEOUT).await;
    for (p, cluster) in [(&e[0], "east"), (&e[1], "east"), (&w[0], "west")] {
        assert!(
            node_of(p).starts_with("node-"),
            "bound to a Kubernetes node of its own cluster"
        );
        let job = east.rest.job(job_id_of(p)).await.unwrap();
        let comment = AdminComment::decode(job.admin_comment.as_deref().unwrap()).unwrap();
        assert_eq!(comment.cluster.as_deref(), Some(cluster));
        let nodes = job.nodes.unwrap_or_default();
        assert!(nodes.starts_with(cluster), "{cluster} job on {nodes}");
    }

    // East's bridge goes down; a pod of east is deleted for good meanwhile (no finalizer).
    east.stop_scheduler().await;
    east_controllers.stop().await;
    east.pods()
        .delete("e-gone", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let _ = east
        .pods()
        .patch(
            "e-gone",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    // Back up with fresh caches: its sweep cancels the orphaned east job...
    let east_controllers = start_bridge(&mut east, "east").await;
    east.wait_job_ended(job_id_of(&e[1]), TIMEOUT).await;
    // ...and leaves west's job running, west's nodes registered and undrained.
    assert!(
        east.job_running(job_id_of(&w[0])).await,
        "west's job was touched"
    );
    for i in 1..=2 {
        let node = format!("west-{i}");
        assert!(node_comment(&east, &node).ends_with("in cluster west"));
        let state = job_field_of_node(&east, &node);
        assert!(!state.contains("DRAIN"), "{node} drained: {state}");
    }
    assert!(east.job_running(job_id_of(&e[0])).await);
    assert_cluster_invariants(&east, "east").await;
    assert_cluster_invariants(&west, "west").await;
    east_controllers.stop().await;
    west_controllers.stop().await;
}

/// The `State=` of a Slurm node.
fn job_field_of_node(env: &Env, node: &str) -> String {
    let out = env
        .slurm
        .exec(&["scontrol", "show", "node", node])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap();
    out.split_whitespace()
        .find_map(|f| f.strip_prefix("State="))
        .unwrap_or_default()
        .to_string()
}
