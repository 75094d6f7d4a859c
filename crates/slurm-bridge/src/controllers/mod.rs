//! The controllers: what happens after binding. The pod controller ([`pod`]) keeps pods and
//! their Slurm jobs alive and dead together; the node controller ([`node`]) keeps Kubernetes
//! nodes registered in Slurm as external nodes.
//!
//! They run on the shared caches ([`crate::caches`]) and only while this replica leads (a Lease,
//! [`crate::leader`]): started when leadership is gained, dropped the moment it is lost. On
//! shutdown readiness goes false and the passes in flight may finish within
//! [`ControllersOptions::shutdown_grace`].

pub mod metrics;
pub mod node;
pub mod pod;
pub mod state_loss;

use crate::caches::{CacheOptions, Caches, Change};
use crate::config::Config;
use crate::leader::until_leadership;
use crate::slurm::Slurm;
use crate::slurm::{Instrumented, NodeControl};
use crate::sync::until_true;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::runtime::reflector::ObjectRef;
use metrics::ControllerMetrics;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

/// Interval of the state-loss census task ([`state_loss::StateLoss::run`]).
const STATE_LOSS_CENSUS_INTERVAL: Duration = Duration::from_secs(1);

/// How the controllers run.
#[derive(Clone, Debug)]
pub struct ControllersOptions {
    pub config: Config,
    /// Pods reconciled at once.
    pub pod_workers: u16,
    /// Nodes reconciled at once.
    pub node_workers: u16,
    /// How long a node may be gone or NotReady before its pods are released.
    pub lost_node_grace: Duration,
    /// Interval of the safety-net pass over every cached object.
    pub resync: Duration,
    /// On shutdown, how long in-flight passes may finish before they are aborted.
    pub shutdown_grace: Duration,
    /// Interval of the Slurm job watcher's poll (when the controllers run their own caches).
    pub job_poll_interval: Duration,
    /// Interval of the Slurm node listing (when the controllers run their own caches).
    pub node_poll_interval: Duration,
    /// Interval of the sweep that cancels jobs whose pods are all gone
    /// ([`crate::slurm::sweep`]); None where the scheduler runs in the same process and sweeps
    /// (`run`), so it is not done twice.
    pub sweep_interval: Option<Duration>,
    /// When pods whose Slurm jobs Slurm does not know are kept rather than removed (Slurm may
    /// have lost its state; [`state_loss`]).
    pub state_loss: state_loss::StateLossOptions,
}

impl ControllersOptions {
    pub fn new(config: Config) -> Self {
        ControllersOptions {
            config,
            pod_workers: 16,
            node_workers: 4,
            lost_node_grace: Duration::from_secs(300),
            resync: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(10),
            job_poll_interval: Duration::from_secs(1),
            node_poll_interval: Duration::from_secs(10),
            sweep_interval: Some(Duration::from_secs(30)),
            state_loss: state_loss::StateLossOptions::default(),
        }
    }

    /// What the controllers need of the shared caches.
    pub fn cache_options(&self) -> CacheOptions {
        CacheOptions::new(
            &self.config,
            self.job_poll_interval,
            self.node_poll_interval,
        )
    }
}

/// Running controllers' observable state, for probes, metrics and tests.
#[derive(Clone)]
pub struct ControllersHandle {
    /// True once the caches are synced; false again as soon as shutdown starts.
    pub ready: watch::Receiver<bool>,
    /// True while the controllers run (this replica leads).
    pub leading: watch::Receiver<bool>,
    /// True once everything has stopped after shutdown.
    pub stopped: watch::Receiver<bool>,
    pub metrics: Arc<ControllerMetrics>,
    /// The state-loss census (its gauges: [`state_loss::StateLoss::gauges`]).
    pub state_loss: Arc<state_loss::StateLoss>,
}

/// Runs the controllers with caches of their own until `shutdown` completes.
pub async fn run<S: Slurm + NodeControl>(
    client: kube::Client,
    slurm: S,
    opts: ControllersOptions,
    registry: &mut Registry,
    leader: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> ControllersHandle {
    let slurm = Arc::new(Instrumented::new(slurm, registry));
    let (caches, tasks) = Caches::start(client.clone(), slurm, &opts.cache_options());
    let mut handle = run_with(client, caches, opts, registry, leader, shutdown);
    tasks.stop_after(&mut handle.stopped);
    handle
}

/// Runs the controllers on shared `caches` until `shutdown` completes; they act only while
/// `leader` reads true.
pub fn run_with<S: Slurm + NodeControl>(
    client: kube::Client,
    caches: Arc<Caches<S>>,
    opts: ControllersOptions,
    registry: &mut Registry,
    mut leader: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> ControllersHandle {
    let metrics = ControllerMetrics::new(registry);
    let state_loss = state_loss::StateLoss::new(
        caches.handles.pods.clone(),
        caches.handles.jobs.clone(),
        opts.state_loss.clone(),
        registry.sub_registry_with_prefix(ControllerMetrics::PREFIX),
    );
    let pod_ctx = pod::PodCtx::new(
        caches.handles(),
        client.clone(),
        pod::PodControllerOptions {
            scheduler_name: opts.config.scheduler_name.clone(),
            workers: opts.pod_workers,
            lost_node_grace: opts.lost_node_grace,
            resync: opts.resync,
        },
        metrics.clone(),
        state_loss.clone(),
    );
    let state_loss_census = state_loss.clone();
    let node_metrics =
        node::metrics::NodeMetrics::with_reconcile(registry, metrics.reconcile.clone());
    let node_opts = node::NodeControllerOptions {
        scheduler_name: opts.config.scheduler_name.clone(),
        workers: opts.node_workers,
        resync: opts.resync,
        cluster: Some(opts.config.cluster_name.clone()).filter(|c| !c.is_empty()),
        gres_drivers: opts.config.gres_drivers(),
    };
    let (ready_tx, ready_rx) = watch::channel(false);
    let (leading_tx, leading_rx) = watch::channel(false);
    let (stopped_tx, stopped_rx) = watch::channel(false);
    let grace = opts.shutdown_grace;
    tokio::spawn(async move {
        let mut shutdown: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(shutdown);
        let synced = tokio::select! {
            _ = caches.wait_synced() => true,
            _ = &mut shutdown => false,
        };
        if synced {
            tracing::info!("controller caches synced");
            ready_tx.send_replace(true);
            loop {
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = until_leadership(&mut leader, true) => {}
                }
                tracing::info!("leading: running the controllers");
                leading_tx.send_replace(true);
                let (stop_tx, stop_rx) = watch::channel(false);
                let node_changes = named_nodes(caches.node_changes(), node_ref);
                let inputs = node::NodeInputs {
                    client: client.clone(),
                    slurm: caches.handles.slurm.clone(),
                    slurm_nodes: caches.handles.slurm_nodes.clone(),
                    nodes: caches.handles.nodes.clone(),
                    node_changes,
                    slices: caches.handles.slices.clone(),
                    slice_changes: named_nodes(caches.slice_changes(), slice_node_ref),
                    state_loss: Some(state_loss_census.clone()),
                };
                let nodes = node::run(
                    inputs,
                    node_opts.clone(),
                    node_metrics.clone(),
                    until_true(stop_rx.clone()),
                );
                let pod_triggers = pod::PodTriggers {
                    pod_changes: caches.pod_changes(),
                    node_changes: caches.node_changes(),
                };
                let sweep = {
                    let sweep = crate::slurm::sweep::Sweep {
                        client: client.clone(),
                        slurm: caches.handles.slurm.clone(),
                        watcher: caches.handles.jobs.clone(),
                        pods: caches.handles.pods.clone(),
                    };
                    let stop = stop_rx.clone();
                    let interval = opts.sweep_interval;
                    async move {
                        // Without the scheduler in this process (split mode), nothing else
                        // cancels the jobs of force-deleted pods.
                        if let Some(interval) = interval {
                            sweep.every(interval, stop).await
                        }
                    }
                };
                // The census of pods whose jobs Slurm lost: metrics, logs and node passes follow
                // it even when no pod pass runs.
                let census = state_loss_census
                    .clone()
                    .run(STATE_LOSS_CENSUS_INTERVAL, until_true(stop_rx.clone()));
                let pods = pod::run(pod_ctx.clone(), pod_triggers, until_true(stop_rx));
                let mut term = Box::pin(futures::future::join4(pods, nodes, sweep, census));
                let shutting_down = tokio::select! {
                    _ = &mut term => {
                        tracing::warn!("the controllers stopped; starting them again");
                        false
                    }
                    _ = until_leadership(&mut leader, false) => {
                        tracing::warn!("leadership lost: aborting the controllers' passes in flight");
                        false
                    }
                    _ = &mut shutdown => true,
                };
                if shutting_down {
                    ready_tx.send_replace(false);
                    let _ = stop_tx.send(true);
                    if tokio::time::timeout(grace, &mut term).await.is_err() {
                        tracing::warn!(
                            ?grace,
                            "shutdown grace over: aborting the controllers' passes"
                        );
                    }
                }
                drop(term);
                leading_tx.send_replace(false);
                if shutting_down {
                    break;
                }
            }
        }
        ready_tx.send_replace(false);
        tracing::info!("controllers stopped");
        stopped_tx.send_replace(true);
    });
    ControllersHandle {
        ready: ready_rx,
        leading: leading_rx,
        stopped: stopped_rx,
        metrics,
        state_loss,
    }
}

/// The nodes a cache's changes name (`node` of each changed or deleted object), as the node
/// controller takes them.
fn named_nodes<K: Send + Sync + 'static>(
    mut changes: UnboundedReceiver<Change<K>>,
    node: fn(&K) -> Option<ObjectRef<Node>>,
) -> impl futures::Stream<Item = ObjectRef<Node>> + Send + 'static {
    futures::stream::poll_fn(move |cx| changes.poll_recv(cx)).filter_map(move |change| {
        futures::future::ready(match change {
            Change::Applied(o) | Change::Deleted(o) => node(&o),
            Change::Relisted => None,
        })
    })
}

/// A node names itself.
fn node_ref(node: &Node) -> Option<ObjectRef<Node>> {
    Some(ObjectRef::from_obj(node))
}

/// A ResourceSlice names its node (one without `spec.nodeName` names none).
fn slice_node_ref(slice: &ResourceSlice) -> Option<ObjectRef<Node>> {
    slice
        .spec
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .map(ObjectRef::new)
}
