//! Slurm nodes the bridge registered whose Kubernetes node is gone ([`ownership::orphans`]):
//! drained at once (no job starts on them), deleted once idle. The per-node passes cannot see
//! them (a pass runs for a Kubernetes node that exists), so this loop compares the Slurm node
//! listing with the Kubernetes nodes: when the controller starts (nodes deleted while the bridge
//! was down), when a Kubernetes node is deleted, when the listing changes, and at every resync.

use super::drain::{Removal, StateAction, decide, is_drained};
use super::{Ctx, NodeError, WAIT_IDLE_RETRY, ownership, slurm_err};
use crate::k8s::slurm_node_name;
use crate::slurm::{NodeControl, SlurmNodes};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::Store;
use slurm_rest::models::{NodeState, UpdateNodeMsg};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// Sweeps for orphans until `stop` turns true: once now, then on every `wake` (a Kubernetes
/// node deleted, the Slurm listing changed) or after the resync (30 s while an orphan waits for
/// its jobs to end).
pub(super) async fn run<S: NodeControl, C: SlurmNodes, W: Send + 'static>(
    ctx: Arc<Ctx<S, C>>,
    nodes: Store<Node>,
    mut wake: UnboundedReceiver<W>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let next = match sweep(&ctx, &nodes).await {
            Ok(waiting) if waiting => WAIT_IDLE_RETRY,
            Ok(_) => ctx.opts.resync.max(Duration::from_secs(1)),
            Err(e) => {
                tracing::warn!(error = %e, "removing Slurm nodes of deleted Kubernetes nodes failed; retrying");
                Duration::from_secs(5)
            }
        };
        tokio::select! {
            w = wake.recv() => if w.is_none() { return },
            _ = tokio::time::sleep(next) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        // A burst of deletions is one sweep.
        while wake.try_recv().is_ok() {}
    }
}

/// One sweep; returns true when an orphan still runs jobs (look again soon).
async fn sweep<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    nodes: &Store<Node>,
) -> Result<bool, NodeError> {
    let listing = ctx.slurm_nodes.nodes();
    let kube_names =
        || -> BTreeSet<String> { nodes.state().iter().map(|n| slurm_node_name(n)).collect() };
    let candidates: Vec<String> =
        ownership::orphans(listing.values(), &kube_names(), ctx.opts.cluster.as_deref())
            .into_iter()
            .map(|n| n.name.clone())
            .collect();
    let mut waiting = false;
    for name in candidates {
        waiting |= remove(ctx, &name, &kube_names).await?;
    }
    Ok(waiting)
}

/// Drains, then (idle) deletes one orphan, after checking again on a fresh read that it is the
/// bridge's and no Kubernetes node has come back for it. Returns true while it runs jobs.
async fn remove<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    name: &str,
    kube_names: &impl Fn() -> BTreeSet<String>,
) -> Result<bool, NodeError> {
    for _ in 0..2 {
        let fresh = ctx
            .slurm
            .node(name)
            .await
            .map_err(slurm_err(format!("reading node {name}")))?;
        let Some(s) = fresh else {
            return Ok(false);
        };
        let cluster = ctx.opts.cluster.as_deref();
        let still_orphan = !ownership::orphans([&s], &kube_names(), cluster).is_empty();
        let Some(kube) = ownership::owner(&s, cluster).filter(|_| still_orphan) else {
            return Ok(false);
        };
        let removal = Removal::NodeDeleted(kube.to_string());
        match decide(kube, false, Some(&removal), &[], &s) {
            StateAction::Drain(reason) => {
                tracing::info!(slurm_node = %name, kubernetes_node = %kube, %reason, "draining the Slurm node of a deleted Kubernetes node");
                let u = UpdateNodeMsg::state(NodeState::Drain, Some(reason));
                ctx.slurm
                    .update_node(name, &u)
                    .await
                    .map_err(slurm_err(format!("draining node {name}")))?;
                ctx.metrics.nodes_drained.inc();
            }
            StateAction::WaitIdle => {
                tracing::debug!(slurm_node = %name, "waiting for the jobs on a deleted Kubernetes node's Slurm node to end");
                return Ok(true);
            }
            StateAction::Delete if is_drained(&s) => {
                tracing::info!(slurm_node = %name, kubernetes_node = %kube, "removing the Slurm node of a deleted Kubernetes node");
                if let Err(e) = ctx.slurm.delete_node(name).await
                    && ctx
                        .slurm
                        .node(name)
                        .await
                        .map_err(slurm_err(format!("reading node {name}")))?
                        .is_some()
                {
                    return Err(NodeError::Slurm {
                        action: format!("removing node {name}"),
                        source: e,
                    });
                }
                ctx.metrics.nodes_removed.inc();
                if let Err(e) = ctx.slurm_nodes.refresh().await {
                    tracing::debug!(error = %e, "listing Slurm nodes after a removal failed");
                }
                return Ok(false);
            }
            _ => return Ok(false),
        }
    }
    // Drained now, still busy.
    Ok(true)
}
