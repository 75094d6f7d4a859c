//! The node controller (reference §6.2, §6.4): Kubernetes nodes as Slurm external nodes.
//!
//! Per Kubernetes node, one pass ([`reconcile`]):
//! 1. **Registration** ([`registration`]). With the label
//!    `scheduler.slinky.slurm.net/external-node`: create the Slurm node (CPUs, memory, GPUs as
//!    GRES, partitions as `Feature=`, topology) once its partitions exist, else a Warning Event
//!    naming the partition and those that exist; keep an existing node's features and topology
//!    in step; a node whose CPUs, memory or GRES changed is re-created, once drained and idle,
//!    and only if Slurm reports it EXTERNAL. Without the label, an EXTERNAL Slurm node is drained
//!    and deleted once idle; nodes run by slurmd are never removed.
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
pub mod registration;
pub mod slurm_view;
pub mod taint;

pub use metrics::NodeMetrics;

use crate::k8s::slurm_node_name;
use crate::slurm::NodeControl;
use crate::slurm::{SlurmNodeCache, SlurmNodes};
use crate::wellknown::{
    ANNOTATION_EXTERNAL_NODE_PARTITIONS, ANNOTATION_TOPOLOGY_SPEC, DEVICE_PLUGIN_GPUS,
    LABEL_EXTERNAL_NODE, LABEL_SLURM_NODENAME, TAINT_MANAGED_NODE,
};
use drain::{Removal, StateAction, decide, is_drained, is_external};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube_ops::NodeWriter;
use registration::Desired;
use slurm_rest::models::{Node as SlurmNode, NodeState, UpdateNodeMsg};
use slurm_view::ConditionChange;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::hash::{Hash, Hasher};
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
    #[error("Kubernetes API: {}", crate::kube_error::Brief(.0))]
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
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the node controller until `stop` completes (then lets the passes in flight finish).
/// The caches (`slurm_nodes`, `nodes`) must already be running; this waits until they are
/// synced. Call it once per term of leadership. `slices` is the ResourceSlice cache and
/// `slice_changes` the nodes whose slices changed (a changed device inventory re-registers the
/// node through the same drain-then-recreate path as a capacity change).
#[allow(clippy::too_many_arguments)]
pub async fn run<S: NodeControl, C: SlurmNodes>(
    client: kube::Client,
    slurm: Arc<S>,
    slurm_nodes: Arc<SlurmNodeCache<C>>,
    nodes: Store<Node>,
    node_changes: impl Stream<Item = ObjectRef<Node>> + Send + 'static,
    slices: Store<ResourceSlice>,
    slice_changes: impl Stream<Item = ObjectRef<Node>> + Send + 'static,
    opts: NodeControllerOptions,
    metrics: Arc<NodeMetrics>,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let mut stop = Box::pin(stop);
    // Subscribed before the first pass, so no listing change falls in between.
    let slurm_changes = slurm_nodes.subscribe_changes();
    let synced = async {
        slurm_nodes.wait_synced().await;
        let _ = nodes.wait_until_ready().await;
        let _ = slices.wait_until_ready().await;
    };
    tokio::select! {
        _ = synced => {}
        _ = &mut stop => return,
    }
    tracing::info!(workers = opts.workers, resync = ?opts.resync, "node controller started");
    let ctx = Arc::new(Ctx {
        opts: opts.clone(),
        slurm,
        slurm_nodes,
        slices,
        writer: NodeWriter::new(client),
        metrics,
        failures: crate::backoff::Backoffs::new(Duration::from_secs(1), MAX_BACKOFF),
        warned: Default::default(),
        shown: Default::default(),
    });

    let node_triggers = filter_node_changes(node_changes, nodes.clone());
    let slurm_triggers = slurm_triggers(slurm_changes, nodes.clone());
    let resync = opts.resync.max(Duration::from_secs(1));
    let resyncs =
        futures::stream::once(async {}).chain(futures::stream::unfold((), move |_| async move {
            tokio::time::sleep(resync).await;
            Some(((), ()))
        }));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let graceful = async move {
        let mut rx = stop_rx;
        let _ = rx.wait_for(|s| *s).await;
    };
    let controller = Controller::for_stream(
        futures::stream::empty::<Result<Node, watcher::Error>>(),
        nodes,
    )
    .with_config(ControllerConfig::default().concurrency(opts.workers.max(1)))
    .reconcile_all_on(resyncs)
    .reconcile_on(futures::stream::select(
        futures::stream::select(node_triggers, slurm_triggers),
        slice_changes,
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
    tokio::select! {
        _ = controller => {}
        _ = forward_stop => {}
    }
    tracing::info!("node controller stopped");
}

/// What a pass reads from a node: a change to anything else (heartbeats, images, allocatable)
/// triggers no pass.
fn fingerprint(node: &Node) -> u64 {
    let labels = node.labels();
    let annotations = node.annotations();
    let spec = node.spec.as_ref();
    let status = node.status.as_ref();
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let watched = (
        node.uid(),
        labels.get(LABEL_EXTERNAL_NODE),
        labels.get(LABEL_SLURM_NODENAME),
        annotations.get(ANNOTATION_EXTERNAL_NODE_PARTITIONS),
        annotations.get(ANNOTATION_TOPOLOGY_SPEC),
        spec.and_then(|s| s.unschedulable),
        spec.and_then(|s| s.taints.as_ref()).map(|t| {
            t.iter()
                .map(|t| (&t.key, &t.value, &t.effect))
                .collect::<Vec<_>>()
        }),
        [
            "cpu",
            "memory",
            DEVICE_PLUGIN_GPUS[0],
            DEVICE_PLUGIN_GPUS[1],
        ]
        .map(|r| capacity.and_then(|c| c.get(r)).map(|q| &q.0)),
        status
            .and_then(|s| s.addresses.as_ref())
            .map(|a| a.iter().map(|a| (&a.type_, &a.address)).collect::<Vec<_>>()),
        slurm_view::current(node).map(|c| (&c.status, &c.reason, &c.message)),
    );
    let mut h = std::collections::hash_map::DefaultHasher::new();
    watched.hash(&mut h);
    h.finish()
}

/// Node changes that matter to a pass (see [`fingerprint`]).
fn filter_node_changes(
    changes: impl Stream<Item = ObjectRef<Node>> + Send + 'static,
    nodes: Store<Node>,
) -> impl Stream<Item = ObjectRef<Node>> + Send + 'static {
    let seen: Arc<Mutex<HashMap<String, u64>>> = Default::default();
    changes.filter(move |r| {
        let pass = match nodes.get(r) {
            Some(node) => {
                let fp = fingerprint(&node);
                lock(&seen).insert(r.name.clone(), fp) != Some(fp)
            }
            None => {
                lock(&seen).remove(&r.name);
                false
            }
        };
        futures::future::ready(pass)
    })
}

/// The Kubernetes nodes behind the Slurm nodes each listing reports as changed.
fn slurm_triggers(
    changes: tokio::sync::mpsc::UnboundedReceiver<Arc<Vec<String>>>,
    nodes: Store<Node>,
) -> impl Stream<Item = ObjectRef<Node>> + Send + 'static {
    futures::stream::unfold(
        changes,
        |mut rx| async move { rx.recv().await.map(|c| (c, rx)) },
    )
    .flat_map(move |changed| {
        let changed: BTreeSet<&String> = changed.iter().collect();
        let refs: Vec<ObjectRef<Node>> = nodes
            .state()
            .iter()
            .filter(|n| changed.contains(&slurm_node_name(n)))
            .map(|n| ObjectRef::from_obj(n.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
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

/// What one pass found and did, for the steps after registration.
struct Pass<'a> {
    node: &'a Node,
    name: String,
    slurm_name: String,
    /// The Slurm node as of the last fresh read or write of this pass.
    slurm: Option<SlurmNode>,
    requeue: Duration,
    warnings: Vec<(&'static str, String)>,
}

impl Pass<'_> {
    fn requeue_within(&mut self, d: Duration) {
        self.requeue = self.requeue.min(d);
    }
}

async fn pass<S: NodeControl, C: SlurmNodes>(
    node: &Node,
    ctx: &Ctx<S, C>,
) -> Result<Action, NodeError> {
    let name = node.name_any();
    let slurm_name = slurm_node_name(node);
    let labelled = node.labels().contains_key(LABEL_EXTERNAL_NODE);
    // A fresh read only where it can matter: a node to register, or a name the listing knows.
    let known = ctx
        .slurm_nodes
        .snapshot()
        .names
        .contains(slurm_name.as_str());
    let slurm = if labelled || known {
        fresh(ctx, &slurm_name).await?
    } else {
        None
    };
    let mut p = Pass {
        node,
        name,
        slurm_name,
        slurm,
        requeue: ctx.opts.resync,
        warnings: Vec::new(),
    };

    let (desired, removal) = registration_step(ctx, &mut p, labelled).await?;
    state_step(ctx, &mut p, desired.as_ref(), removal).await?;
    let conflict = taint_step(ctx, &p).await?;
    view_step(ctx, &p).await?;
    publish_warnings(ctx, &p).await;
    if conflict {
        p.requeue_within(CONFLICT_RETRY);
    }
    Ok(Action::requeue(p.requeue))
}

async fn fresh<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    slurm_name: &str,
) -> Result<Option<SlurmNode>, NodeError> {
    ctx.slurm
        .node(slurm_name)
        .await
        .map_err(slurm_err(format!("reading node {slurm_name}")))
}

/// Registers, or keeps in step, a labelled node; finds what is to be removed. Returns the
/// desired Slurm node (labelled and valid) and a pending removal.
async fn registration_step<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    labelled: bool,
) -> Result<(Option<Desired>, Option<Removal>), NodeError> {
    if !labelled {
        let removal = p
            .slurm
            .as_ref()
            .filter(|s| is_external(s))
            .map(|_| Removal::LabelRemoved);
        return Ok((None, removal));
    }
    let inv = crate::dra::NodeInventory::from_slices(
        &p.name,
        ctx.slices.state().iter().map(|s| s.as_ref()),
    );
    let d = match registration::desired(p.node, &inv) {
        Ok(d) => d,
        Err(e) => {
            p.warnings.push((
                "InvalidExternalNode",
                format!("not registered in Slurm: {e}"),
            ));
            return Ok((None, None));
        }
    };
    let partitions_ok = partitions_exist(ctx, p, &d).await?;
    let Some(s) = p.slurm.clone() else {
        if partitions_ok {
            create(ctx, p, &d).await?;
        }
        return Ok((Some(d), None));
    };
    if !is_external(&s) {
        p.warnings.push((
            "SlurmNodeNotExternal",
            format!(
                "Slurm node {} exists and is not an external node (it is run by slurmd): \
                 slurm-bridge does not manage it",
                p.slurm_name
            ),
        ));
        return Ok((Some(d), None));
    }
    let why = registration::recreate_reasons(&d, &s);
    if !why.is_empty() {
        // Re-created only once it can be registered again (its partitions exist).
        let removal = partitions_ok.then_some(Removal::Recreate(why));
        return Ok((Some(registration::keeping_features(d, &s)), removal));
    }
    let mut updates = Vec::new();
    if let Some(u) = registration::topology_update(&d, &s) {
        updates.push(("topology", u));
    }
    for (what, u) in &updates {
        tracing::info!(node = %p.name, slurm_node = %p.slurm_name, ?u, "updating Slurm node {what}");
        ctx.slurm
            .update_node(&p.slurm_name, u)
            .await
            .map_err(slurm_err(format!(
                "updating the {what} of node {}",
                p.slurm_name
            )))?;
    }
    if !updates.is_empty() {
        p.slurm = fresh(ctx, &p.slurm_name).await?;
    }
    Ok((Some(d), None))
}

/// True when every partition of the annotation exists; else a warning naming them.
async fn partitions_exist<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    d: &Desired,
) -> Result<bool, NodeError> {
    if d.partitions.is_empty() {
        return Ok(true);
    }
    let existing = ctx
        .slurm
        .partition_names()
        .await
        .map_err(slurm_err("listing partitions"))?;
    let missing = registration::missing_partitions(&d.partitions, &existing);
    if missing.is_empty() {
        return Ok(true);
    }
    let quoted = |v: &[String]| {
        v.iter()
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let action = if p.slurm.is_some() {
        "its features are left as they are"
    } else {
        "it is not registered"
    };
    p.warnings.push((
        "InvalidPartition",
        format!(
            "annotation {ANNOTATION_EXTERNAL_NODE_PARTITIONS}: partition {} not found in Slurm \
             (existing partitions: {}); {action}",
            quoted(&missing),
            quoted(&existing)
        ),
    ));
    p.requeue_within(BAD_PARTITION_RETRY);
    Ok(false)
}

/// Creates the Slurm node and reads it back.
/// Lists the Slurm nodes again after this controller added or removed one; a failure only
/// delays the change to the next poll.
async fn refresh_listing<S: NodeControl, C: SlurmNodes>(ctx: &Ctx<S, C>) {
    if let Err(e) = ctx.slurm_nodes.refresh().await {
        tracing::debug!(error = %e, "listing Slurm nodes after a change failed");
    }
}

async fn create<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    d: &Desired,
) -> Result<(), NodeError> {
    let conf = registration::node_conf(d);
    tracing::info!(node = %p.name, slurm_node = %d.slurm_name, node_conf = %conf, "registering node in Slurm");
    ctx.slurm
        .create_node(&conf)
        .await
        .map_err(slurm_err(format!("creating node {}", d.slurm_name)))?;
    ctx.metrics.nodes_registered.inc();
    // The scheduler places pods on the listed Slurm nodes: list them now, not at the next poll.
    refresh_listing(ctx).await;
    p.slurm = fresh(ctx, &p.slurm_name).await?;
    ctx.writer
        .event(
            p.node,
            false,
            "SlurmNodeRegistered",
            "Register",
            &format!("registered in Slurm as external node: {conf}"),
        )
        .await;
    Ok(())
}

/// Drains, lifts the bridge's drain, deletes (and for a re-creation registers again).
async fn state_step<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    desired: Option<&Desired>,
    mut removal: Option<Removal>,
) -> Result<(), NodeError> {
    let cordoned = p
        .node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    // At most: drain, then (idle already) delete, then (re-created) drain for the cordon.
    for _ in 0..3 {
        let Some(s) = p.slurm.clone() else {
            return Ok(());
        };
        let action = decide(&p.name, cordoned, removal.as_ref(), &s);
        match action {
            StateAction::Nothing => return Ok(()),
            StateAction::WaitAdmin => {
                tracing::info!(node = %p.name, slurm_node = %p.slurm_name, reason = ?s.reason,
                    "re-creation waits until the admin's drain is lifted");
                return Ok(());
            }
            StateAction::WaitIdle => {
                tracing::debug!(node = %p.name, slurm_node = %p.slurm_name, "waiting for the node to go idle before removing it");
                p.requeue_within(WAIT_IDLE_RETRY);
                return Ok(());
            }
            StateAction::Drain(reason) => {
                tracing::info!(node = %p.name, slurm_node = %p.slurm_name, %reason, "draining Slurm node");
                let u = UpdateNodeMsg::state(NodeState::Drain, Some(reason));
                ctx.slurm
                    .update_node(&p.slurm_name, &u)
                    .await
                    .map_err(slurm_err(format!("draining node {}", p.slurm_name)))?;
                ctx.metrics.nodes_drained.inc();
                p.slurm = fresh(ctx, &p.slurm_name).await?;
                if removal.is_none() {
                    return Ok(());
                }
                // Already idle: removed in this pass.
                if !p.slurm.as_ref().is_some_and(is_drained) {
                    p.requeue_within(WAIT_IDLE_RETRY);
                    return Ok(());
                }
            }
            StateAction::Undrain => {
                tracing::info!(node = %p.name, slurm_node = %p.slurm_name, "lifting the bridge's drain of the Slurm node");
                let u = UpdateNodeMsg::state(NodeState::Undrain, None);
                ctx.slurm
                    .update_node(&p.slurm_name, &u)
                    .await
                    .map_err(slurm_err(format!("undraining node {}", p.slurm_name)))?;
                p.slurm = fresh(ctx, &p.slurm_name).await?;
                return Ok(());
            }
            StateAction::Delete => {
                delete(ctx, p, removal.as_ref()).await?;
                match (removal.take(), desired) {
                    (Some(Removal::Recreate(_)), Some(d)) => create(ctx, p, d).await?,
                    _ => return Ok(()),
                }
            }
        }
    }
    Ok(())
}

async fn delete<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &mut Pass<'_>,
    removal: Option<&Removal>,
) -> Result<(), NodeError> {
    tracing::info!(node = %p.name, slurm_node = %p.slurm_name, ?removal, "removing Slurm node");
    if let Err(e) = ctx.slurm.delete_node(&p.slurm_name).await {
        // Gone meanwhile is as good as removed.
        if fresh(ctx, &p.slurm_name).await?.is_some() {
            return Err(NodeError::Slurm {
                action: format!("removing node {}", p.slurm_name),
                source: e,
            });
        }
    }
    ctx.metrics.nodes_removed.inc();
    refresh_listing(ctx).await;
    p.slurm = None;
    let note = match removal {
        Some(Removal::Recreate(why)) => format!(
            "removed Slurm node {} to register it again: {}",
            p.slurm_name,
            why.join(", ")
        ),
        _ => format!(
            "removed Slurm node {}: label {LABEL_EXTERNAL_NODE} is gone",
            p.slurm_name
        ),
    };
    ctx.writer
        .event(p.node, false, "SlurmNodeRemoved", "Remove", &note)
        .await;
    Ok(())
}

/// The managed-node taint; returns true when the patch met a conflict (retried soon).
async fn taint_step<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &Pass<'_>,
) -> Result<bool, NodeError> {
    let current = p
        .node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let bridged = p.slurm.is_some();
    let Some(taints) = taint::desired_taints(current, bridged, &ctx.opts.scheduler_name) else {
        return Ok(false);
    };
    tracing::info!(node = %p.name, bridged, "{} taint {TAINT_MANAGED_NODE}", if bridged { "setting" } else { "removing" });
    match ctx.writer.set_taints(p.node, &taints).await {
        Ok(()) => Ok(false),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Slurm's view: the condition and its Events.
async fn view_step<S: NodeControl, C: SlurmNodes>(
    ctx: &Ctx<S, C>,
    p: &Pass<'_>,
) -> Result<(), NodeError> {
    let want = slurm_view::view(p.slurm.as_ref());
    let change = slurm_view::diff(slurm_view::current(p.node), want.clone());
    let announced = lock(&ctx.shown).get(&p.name) == Some(&want);
    match change {
        ConditionChange::Keep => {}
        ConditionChange::Set { view, transition } => {
            tracing::info!(node = %p.name, reason = view.reason, message = %view.message, "Slurm node unavailable");
            ctx.writer.set_condition(p.node, &view, transition).await?;
            if !announced {
                ctx.writer
                    .event(p.node, true, view.reason, "SlurmNodeState", &view.message)
                    .await;
            }
        }
        ConditionChange::Remove => {
            tracing::info!(node = %p.name, "Slurm node available again");
            ctx.writer.remove_condition(p.node).await?;
            if !announced {
                let state = p
                    .slurm
                    .as_ref()
                    .map(|s| {
                        let st: Vec<&str> = s.state.iter().map(|x| x.as_str()).collect();
                        format!("Slurm node {} is {}", s.name, st.join("+"))
                    })
                    .unwrap_or_else(|| format!("Slurm node {} is gone", p.slurm_name));
                ctx.writer
                    .event(
                        p.node,
                        false,
                        slurm_view::REASON_RESUMED,
                        "SlurmNodeState",
                        &state,
                    )
                    .await;
            }
        }
    }
    lock(&ctx.shown).insert(p.name.clone(), want);
    Ok(())
}

/// Publishes the pass's warnings not yet published for this node.
async fn publish_warnings<S: NodeControl, C: SlurmNodes>(ctx: &Ctx<S, C>, p: &Pass<'_>) {
    let now: BTreeSet<String> = p.warnings.iter().map(|(_, w)| w.clone()).collect();
    let before = lock(&ctx.warned)
        .insert(p.name.clone(), now)
        .unwrap_or_default();
    for (reason, note) in &p.warnings {
        if !before.contains(note) {
            tracing::warn!(node = %p.name, reason, "{note}");
            ctx.writer
                .event(p.node, true, reason, "Register", note)
                .await;
        }
    }
}
