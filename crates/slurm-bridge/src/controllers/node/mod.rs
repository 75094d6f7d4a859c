//! The node controller (reference §6.2, §6.4): Kubernetes nodes as Slurm external nodes.
//!
//! Per Kubernetes node, one pass (`reconcile`, steps in `pass/`):
//! 1. **Registration** ([`registration`]). With the label
//!    `scheduler.slinky.slurm.net/external-node`: create the Slurm node (CPUs, memory, GPUs as
//!    GRES, partitions as `Feature=`, topology) once its partitions exist, else a Warning Event
//!    naming the partition and those that exist; keep an existing node's features and topology
//!    in step; a node whose CPUs, memory or GRES changed is re-created, once drained and idle,
//!    and only if Slurm reports it EXTERNAL. Without the label, an external Slurm node the
//!    bridge registered ([`ownership`]: marked by its comment) is drained and deleted once idle;
//!    others are left alone with one warning; nodes run by slurmd are never removed.
//!
//! Besides the passes, [`orphans`] drains and deletes the bridge's Slurm nodes whose Kubernetes
//! node is gone (deleted while the bridge ran or while it was down).
//! 2. **State** ([`drain`]): a cordon drains the Slurm node (reason `slurm-bridge: ...`), an
//!    uncordon lifts the bridge's own drains only; one decision covers cordon and removal, so a
//!    drain made for removal is not undone in the same or a later pass (quirk 6).
//! 3. **Taint** ([`taint`]): `slinky.slurm.net/managed-node=<scheduler>:NoExecute` on nodes
//!    whose Slurm name is a Slurm node, on no other; no patch when nothing changes.
//! 4. **Slurm's view** ([`slurm_view`]): the condition `SlurmNodeUnavailable` and an Event
//!    while an admin has drained the Slurm node or it is DOWN/FAIL; removed when it resumes.
//!
//! Passes are triggered by node changes (filtered: heartbeats alone do not count), by the Slurm
//! node listing's changes (an admin's drain arrives within one listing interval), and by a
//! periodic resync as a safety net only.

pub mod drain;
pub mod kube_ops;
pub mod metrics;
mod orphans;
pub mod ownership;
mod pass;
pub mod registration;
pub mod slurm_view;
pub mod taint;
mod triggers;

use crate::controllers::node::pass::pass;
use crate::controllers::node::triggers::filter_node_changes;
use crate::controllers::node::triggers::slurm_triggers;
use crate::controllers::state_loss::StateLoss;
use crate::slurm::NodeControl;
use crate::slurm::{SlurmNodeCache, SlurmNodes};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube_ops::NodeWriter;
pub use metrics::NodeMetrics;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the node controller runs.
#[derive(Clone, Debug)]
pub struct NodeControllerOptions {
    /// The bridge scheduler's name: the managed-node taint's value.
    pub scheduler_name: String,
    /// Nodes reconciled at once (`--node-workers`).
    pub workers: u16,
    /// Every node is reconciled this often as a safety net (e.g. 5 minutes); changes are
    /// handled when they happen.
    pub resync: Duration,
    /// The bridge's cluster name (config `clusterName`), written in the mark of every node it
    /// registers; nodes marked by another cluster's bridge are left alone.
    pub cluster: Option<String>,
    /// The DRA drivers whose devices register as GRES (config `draDeviceDrivers` with the
    /// built-in GPU drivers).
    pub gres_drivers: crate::dra::GresDrivers,
}

/// Retry of a removal waiting for its node to go idle, in case the listing's change is missed.
const WAIT_IDLE_RETRY: Duration = Duration::from_secs(30);

/// Retry of a node whose partitions do not exist (yet).
const BAD_PARTITION_RETRY: Duration = Duration::from_secs(60);

/// Retry after a write conflict on the node.
const CONFLICT_RETRY: Duration = Duration::from_millis(500);

const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Why a pass failed; the node is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("Kubernetes API: {}", crate::k8s::api_error::Brief(.0))]
    Kube(#[from] kube::Error),
    #[error("Slurm: {action}: {source}")]
    Slurm {
        action: String,
        source: slurm_rest::Error,
    },
}

fn slurm_err(action: impl Into<String>) -> impl FnOnce(slurm_rest::Error) -> NodeError {
    let action = action.into();
    move |source| NodeError::Slurm { action, source }
}

/// What every pass shares.
struct Ctx<S, C> {
    opts: NodeControllerOptions,
    slurm: Arc<S>,
    slurm_nodes: Arc<SlurmNodeCache<C>>,
    /// The ResourceSlices: each node's DRA devices ([`crate::dra::NodeInventory`]).
    slices: Store<ResourceSlice>,
    writer: NodeWriter,
    metrics: Arc<NodeMetrics>,
    /// Backoff per node: 1 s, 2 s, 4 s, ... up to 5 minutes.
    failures: crate::backoff::Backoffs,
    /// Warnings already published per node, so a retry does not repeat them.
    warned: Mutex<HashMap<String, BTreeSet<String>>>,
    /// The Slurm view last written per node, so a pass on a cache that does not show it yet
    /// does not publish its Event twice.
    shown: Mutex<HashMap<String, Option<slurm_view::View>>>,
    /// The state-loss census: nodes hosting pods held for jobs Slurm lost stay drained.
    state_loss: Option<Arc<StateLoss>>,
}

/// What the node controller runs on: the Kubernetes client, the Slurm client, the shared caches
/// (already running; [`run`] waits until they are synced) and the streams of nodes to pass
/// again: `node_changes` (nodes that changed or went) and `slice_changes` (nodes whose
/// ResourceSlices changed: a changed device inventory re-registers the node through the same
/// drain-then-recreate path as a capacity change).
pub struct NodeInputs<S, C, N, L> {
    /// For the node writes (taints, condition, Events).
    pub client: kube::Client,
    /// For the Slurm node writes and fresh reads.
    pub slurm: Arc<S>,
    /// The Slurm node listing (shared cache).
    pub slurm_nodes: Arc<SlurmNodeCache<C>>,
    /// The Kubernetes nodes (shared reflector).
    pub nodes: Store<Node>,
    /// Nodes that changed or went.
    pub node_changes: N,
    /// The ResourceSlices (shared reflector).
    pub slices: Store<ResourceSlice>,
    /// Nodes whose ResourceSlices changed.
    pub slice_changes: L,
    /// The state-loss census ([`crate::controllers::state_loss`]): the nodes hosting held pods
    /// are drained, and passed again when their held pods change. None: no such drains.
    pub state_loss: Option<Arc<StateLoss>>,
}

/// Runs the node controller until `stop` completes (then lets the passes in flight finish).
/// Call it once per term of leadership.
pub async fn run<S, C, N, L>(
    inputs: NodeInputs<S, C, N, L>,
    opts: NodeControllerOptions,
    metrics: Arc<NodeMetrics>,
    stop: impl Future<Output = ()> + Send + 'static,
) where
    S: NodeControl,
    C: SlurmNodes,
    N: Stream<Item = ObjectRef<Node>> + Send + 'static,
    L: Stream<Item = ObjectRef<Node>> + Send + 'static,
{
    let mut stop = Box::pin(stop);
    // Subscribed before the first pass, so no listing change falls in between.
    let slurm_changes = inputs.slurm_nodes.subscribe_changes();
    let orphan_wake = inputs.slurm_nodes.subscribe_changes();
    let synced = async {
        inputs.slurm_nodes.wait_synced().await;
        let _ = inputs.nodes.wait_until_ready().await;
        let _ = inputs.slices.wait_until_ready().await;
    };
    tokio::select! {
        _ = synced => {}
        _ = &mut stop => return,
    }
    tracing::info!(workers = opts.workers, resync = ?opts.resync, "node controller started");
    let ctx = Arc::new(Ctx {
        opts: opts.clone(),
        slurm: inputs.slurm,
        slurm_nodes: inputs.slurm_nodes,
        slices: inputs.slices,
        writer: NodeWriter::new(inputs.client),
        metrics,
        failures: crate::backoff::Backoffs::new(Duration::from_secs(1), MAX_BACKOFF),
        warned: Default::default(),
        shown: Default::default(),
        state_loss: inputs.state_loss.clone(),
    });
    // Nodes whose held pods changed (state-loss hold begins or ends there).
    let held_changes = match &inputs.state_loss {
        Some(s) => {
            let mut rx = s.subscribe_nodes();
            futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
        }
        None => futures::stream::empty().boxed(),
    };

    // Deleted Kubernetes nodes wake the orphan sweep, as the listing's changes do.
    let (gone_tx, mut gone_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (wake_tx, wake_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let forward_wakes = {
        let mut listing = orphan_wake;
        let wake_tx = wake_tx.clone();
        async move {
            loop {
                let woke = tokio::select! {
                    c = listing.recv() => c.is_some(),
                    g = gone_rx.recv() => g.is_some(),
                };
                if !woke || wake_tx.send(()).is_err() {
                    std::future::pending::<()>().await
                }
            }
        }
    };
    let node_triggers = filter_node_changes(inputs.node_changes, inputs.nodes.clone(), gone_tx);
    let slurm_triggers = slurm_triggers(slurm_changes, inputs.nodes.clone());
    let resync = opts.resync.max(Duration::from_secs(1));
    let resyncs =
        futures::stream::once(async {}).chain(futures::stream::unfold((), move |_| async move {
            tokio::time::sleep(resync).await;
            Some(((), ()))
        }));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let orphan_sweep = orphans::run(ctx.clone(), inputs.nodes.clone(), wake_rx, stop_rx.clone());
    let graceful = async move {
        let mut rx = stop_rx;
        let _ = rx.wait_for(|s| *s).await;
    };
    let controller = Controller::for_stream(
        futures::stream::empty::<Result<Node, watcher::Error>>(),
        inputs.nodes,
    )
    .with_config(ControllerConfig::default().concurrency(opts.workers.max(1)))
    .reconcile_all_on(resyncs)
    .reconcile_on(futures::stream::select(
        futures::stream::select(node_triggers, slurm_triggers),
        futures::stream::select(inputs.slice_changes, held_changes),
    ))
    .graceful_shutdown_on(graceful)
    .run(reconcile, error_policy, ctx)
    .for_each(|res| {
        if let Err(e) = res {
            tracing::debug!(error = %e, "node reconcile error");
        }
        futures::future::ready(())
    });
    let forward_stop = async move {
        stop.await;
        let _ = stop_tx.send(true);
        std::future::pending::<()>().await
    };
    let controller = async move {
        // The orphan sweep ends with the stop signal; the controller after its passes in flight.
        tokio::join!(controller, orphan_sweep);
    };
    tokio::select! {
        _ = controller => {}
        _ = forward_stop => {}
        _ = forward_wakes => {}
    }
    tracing::info!("node controller stopped");
}

/// One pass for a node, measured.
async fn reconcile<S: NodeControl, C: SlurmNodes>(
    node: Arc<Node>,
    ctx: Arc<Ctx<S, C>>,
) -> Result<Action, NodeError> {
    let started = Instant::now();
    let name = node.name_any();
    tracing::debug!(node = %name, "started syncing node");
    let res = pass(&node, &ctx).await;
    let took = started.elapsed();
    ctx.metrics.observe(started, res.is_ok());
    if res.is_ok() {
        ctx.failures.forget(&name);
    }
    tracing::debug!(node = %name, ?took, ok = res.is_ok(), "finished syncing node");
    res
}

/// Backoff per node: 1 s, 2 s, 4 s, ... up to 5 minutes.
fn error_policy<S: NodeControl, C: SlurmNodes>(
    node: Arc<Node>,
    err: &NodeError,
    ctx: Arc<Ctx<S, C>>,
) -> Action {
    let name = node.name_any();
    let delay = ctx.failures.next(&name);
    tracing::warn!(node = %name, error = %err, retry_in = ?delay, "node sync failed");
    Action::requeue(delay)
}
