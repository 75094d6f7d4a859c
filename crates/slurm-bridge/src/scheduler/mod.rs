//! The scheduler: binds the pods whose `spec.schedulerName` is the bridge's to the nodes Slurm
//! allocates for their group's external job.
//!
//! A kube-runtime [`Controller`] reconciles pods ([`reconcile`]); its triggers are pod changes
//! and allocations seen by the shared Slurm job watcher ([`crate::slurm::JobWatcher`]), so a pod
//! is bound as soon as Slurm allocates, not on a timer. Nodes come from a reflector; Slurm node
//! names from a cache.
//!
//! Lifecycle: the caches (job watcher, Slurm node names, node and pod reflectors) run from start
//! to shutdown, on a standby too. The controller and the sweep run only while this replica leads
//! (a Lease, [`crate::leader`]): they start when leadership is gained, with a pass for every
//! cached pod, and are dropped the moment it is lost, which aborts the passes in flight. On
//! shutdown readiness goes false, no new pass starts, and the passes in flight may finish within
//! [`SchedulerOptions::shutdown_grace`].

pub mod assign;
pub mod context;
pub mod feasibility;
pub mod locks;
pub mod metrics;
pub mod pod_ops;
pub mod podgroup;
pub mod reconcile;
pub mod rejection;
pub mod slurm_ops;
pub mod sweep;
#[cfg(test)]
mod tests;

use crate::caches::{CacheOptions, Caches, Change};
use crate::config::Config;
use crate::workload::kube_reader::KubeReader;
use context::{Ctx, Slurm};
use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use metrics::{Instrumented, LifecycleMetrics, Metrics};
use pod_ops::PodWriter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch as tokio_watch;
use tokio::task::JoinSet;

/// How the scheduler runs.
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    pub config: Config,
    /// Interval of the Slurm job watcher's poll.
    pub job_poll_interval: Duration,
    /// Interval of the Slurm node listing.
    pub node_poll_interval: Duration,
    /// Pods reconciled at once.
    pub concurrency: u16,
    /// Interval of the sweep that cancels jobs whose pods are gone.
    pub sweep_interval: Duration,
    /// On shutdown, how long in-flight reconciles may finish before they are aborted.
    pub shutdown_grace: Duration,
}

impl SchedulerOptions {
    pub fn new(config: Config) -> Self {
        SchedulerOptions {
            config,
            job_poll_interval: Duration::from_secs(1),
            node_poll_interval: Duration::from_secs(10),
            concurrency: 64,
            sweep_interval: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl SchedulerOptions {
    /// What the scheduler needs of the shared caches.
    pub fn cache_options(&self) -> CacheOptions {
        CacheOptions {
            scheduler_name: self.config.scheduler_name.clone(),
            job_poll_interval: self.job_poll_interval,
            node_poll_interval: self.node_poll_interval,
        }
    }
}

/// A running scheduler's observable state, for health probes, metrics and tests.
#[derive(Clone)]
pub struct SchedulerHandle {
    /// True once the job watcher, the node cache and the reflectors are synced; false again as
    /// soon as shutdown starts.
    pub ready: tokio_watch::Receiver<bool>,
    /// True while the controller runs: from gaining leadership until its passes have been
    /// stopped (leadership lost: aborted; shutdown: finished or aborted after the grace).
    pub leading: tokio_watch::Receiver<bool>,
    /// True once every task of the scheduler has stopped after shutdown.
    pub stopped: tokio_watch::Receiver<bool>,
    pub metrics: Arc<Metrics>,
    /// Reconcile passes started (`slurm_bridge_scheduler_reconcile_passes_total`).
    pub reconcile_passes: Counter,
}

/// Runs the scheduler with caches of its own until `shutdown` completes (see [`run_with`]);
/// the caches stop with it.
pub async fn run<S: Slurm>(
    client: Client,
    slurm: S,
    opts: SchedulerOptions,
    registry: &mut Registry,
    leader: tokio_watch::Receiver<bool>,
    ready_tx: tokio_watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> SchedulerHandle {
    let metrics = Metrics::new(registry);
    let slurm = Arc::new(Instrumented {
        inner: slurm,
        metrics,
    });
    let (caches, tasks) = Caches::start(client.clone(), slurm, &opts.cache_options());
    let mut handle = run_with(client, caches, opts, registry, leader, ready_tx, shutdown).await;
    // The caches go when the scheduler has stopped; `stopped` then says both.
    let (stopped_tx, stopped_rx) = tokio_watch::channel(false);
    let mut scheduler_stopped = std::mem::replace(&mut handle.stopped, stopped_rx);
    tokio::spawn(async move {
        let _ = scheduler_stopped.wait_for(|s| *s).await;
        tasks.stop().await;
        stopped_tx.send_replace(true);
    });
    handle
}

/// Runs the scheduler on shared `caches` until `shutdown` completes. `leader` says whether this
/// replica may act: the controller runs only while it reads true (a channel whose sender is gone
/// keeps its last value; `watch::channel(true).1` leads for ever, as without leader election).
pub async fn run_with<S: Slurm>(
    client: Client,
    caches: Arc<Caches<Instrumented<S>>>,
    opts: SchedulerOptions,
    registry: &mut Registry,
    leader: tokio_watch::Receiver<bool>,
    ready_tx: tokio_watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> SchedulerHandle {
    let metrics = caches.slurm.metrics.clone();
    let lifecycle_metrics = LifecycleMetrics::new(registry);
    let ctx = Arc::new(Ctx {
        config: opts.config.clone(),
        client: client.clone(),
        slurm: caches.slurm.clone(),
        watcher: caches.jobs.clone(),
        slurm_nodes: caches.slurm_nodes.clone(),
        nodes: caches.nodes.clone(),
        pods: caches.pods.clone(),
        reader: KubeReader::new(client.clone()),
        writer: PodWriter::new(client.clone(), &opts.config.scheduler_name),
        locks: Default::default(),
        metrics: metrics.clone(),
        sent: Default::default(),
        failures: Default::default(),
        leader: AtomicBool::new(false),
        node_generation: caches.node_generation.clone(),
        placements: Default::default(),
        rejections: Default::default(),
    });
    let triggers = Arc::new(Triggers::default());

    // Subscriptions to the caches, kept from start to shutdown, on a standby too.
    let mut followers = JoinSet::new();
    followers.spawn(follow_pods(
        ctx.clone(),
        caches.pod_changes(),
        triggers.clone(),
    ));
    followers.spawn(follow_slurm_nodes(
        ctx.clone(),
        caches.slurm_nodes.subscribe_changes(),
        triggers.clone(),
    ));
    followers.spawn(forward_job_events(
        ctx.clone(),
        caches.jobs.subscribe(),
        metrics.clone(),
        triggers.clone(),
    ));
    let synced = {
        let caches = caches.clone();
        async move { caches.wait_synced().await }
    };

    let (leading_tx, leading_rx) = tokio_watch::channel(false);
    let (stopped_tx, stopped_rx) = tokio_watch::channel(false);
    let handle = SchedulerHandle {
        ready: ready_tx.subscribe(),
        leading: leading_rx,
        stopped: stopped_rx,
        metrics,
        reconcile_passes: lifecycle_metrics.passes.clone(),
    };
    let lifecycle = Lifecycle {
        ctx,
        triggers,
        opts,
        leader,
        ready: ready_tx,
        leading: leading_tx,
        metrics: lifecycle_metrics,
    };
    tokio::spawn(async move {
        let mut lifecycle = lifecycle;
        let mut shutdown: Pin<Box<dyn Future<Output = ()> + Send + Sync>> = Box::pin(shutdown);
        let shut_down_early = tokio::select! {
            _ = synced => false,
            _ = &mut shutdown => true,
        };
        if !shut_down_early {
            tracing::info!("scheduler caches synced");
            lifecycle.ready.send_replace(true);
            lifecycle.lead_until(shutdown).await;
        }
        lifecycle.ready.send_replace(false);
        followers.abort_all();
        while followers.join_next().await.is_some() {}
        tracing::info!("scheduler stopped");
        stopped_tx.send_replace(true);
    });
    handle
}

/// Where reconcile requests go: the running controller's queue while this replica leads,
/// nowhere while it stands by (the controller starts with a pass for every cached pod).
#[derive(Default)]
struct Triggers(Mutex<Option<mpsc::UnboundedSender<ObjectRef<Pod>>>>);

impl Triggers {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<mpsc::UnboundedSender<ObjectRef<Pod>>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, pod: ObjectRef<Pod>) {
        if let Some(tx) = self.slot().as_ref() {
            let _ = tx.unbounded_send(pod);
        }
    }

    /// A new queue; requests go there from now on.
    fn open(&self) -> mpsc::UnboundedReceiver<ObjectRef<Pod>> {
        let (tx, rx) = mpsc::unbounded();
        *self.slot() = Some(tx);
        rx
    }

    fn close(&self) {
        *self.slot() = None;
    }
}

/// Pod changes: per-pod state is kept in step, and a changed pod is reconciled (while leading).
async fn follow_pods<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<Change<Pod>>,
    triggers: Arc<Triggers>,
) {
    while let Some(change) = changes.recv().await {
        ctx.pod_change(&change);
        if let Change::Applied(pod) = &change {
            triggers.send(ObjectRef::from_obj(&**pod));
        }
    }
}

/// Slurm node listings: when the set of Slurm nodes changes (a node registered or removed), every
/// unbound pod is reconciled, so a pod that found no node is placed at once, not at its retry.
async fn follow_slurm_nodes<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<Arc<Vec<String>>>,
    triggers: Arc<Triggers>,
) {
    let mut generation = ctx.slurm_nodes.snapshot().generation;
    while changes.recv().await.is_some() {
        let now = ctx.slurm_nodes.snapshot().generation;
        if now == generation {
            continue;
        }
        generation = now;
        for pod in ctx.pods.state() {
            let bound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            if !bound && !crate::workload::kinds::is_terminal(&pod) {
                triggers.send(ObjectRef::from_obj(&*pod));
            }
        }
    }
}

/// Job changes seen by the job watcher: per-job state is kept in step, and every pod of the job
/// is reconciled (while leading), so an allocation binds at once.
async fn forward_job_events<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut job_events: tokio::sync::mpsc::UnboundedReceiver<crate::slurm::JobEvent>,
    metrics: Arc<Metrics>,
    triggers: Arc<Triggers>,
) {
    let mut gauge_at: Option<std::time::Instant> = None;
    while let Some(event) = job_events.recv().await {
        ctx.job_event(&event);
        // Counting scans the index: at most once a second, not per event.
        if gauge_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            gauge_at = Some(std::time::Instant::now());
            let pending = ctx
                .watcher
                .index()
                .jobs()
                .filter(|j| j.is_pending())
                .count();
            metrics.pending_groups.set(pending as i64);
        }
        for (ns, name) in reconcile::comment_pods(&event.job().comment) {
            triggers.send(ObjectRef::new(name).within(ns));
        }
    }
}

/// Waits until `leader` reads `want`; never returns if it cannot change any more.
async fn until_leadership(leader: &mut tokio_watch::Receiver<bool>, want: bool) {
    if leader.wait_for(|l| *l == want).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves once `rx` reads true (or its sender is gone).
async fn until_true(mut rx: tokio_watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// How a term of leadership ended.
enum TermEnd {
    Lost,
    Shutdown,
    /// The controller stopped by itself (not expected); it is started again.
    Ended,
}

/// What the leadership loop needs.
struct Lifecycle<S: Slurm> {
    ctx: Arc<Ctx<Instrumented<S>>>,
    triggers: Arc<Triggers>,
    opts: SchedulerOptions,
    leader: tokio_watch::Receiver<bool>,
    ready: tokio_watch::Sender<bool>,
    leading: tokio_watch::Sender<bool>,
    metrics: LifecycleMetrics,
}

impl<S: Slurm> Lifecycle<S> {
    /// Stands by, leads while the leader signal says so, and stops at `shutdown`.
    async fn lead_until(&mut self, mut shutdown: Pin<Box<dyn Future<Output = ()> + Send + Sync>>) {
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = until_leadership(&mut self.leader, true) => {}
            }
            tracing::info!("leading: scheduling");
            self.ctx.leader.store(true, Ordering::SeqCst);
            self.leading.send_replace(true);
            self.metrics.leader.set(1);
            let (stop_tx, stop_rx) = tokio_watch::channel(false);
            let mut term = Box::pin(self.term(stop_rx));
            let end = tokio::select! {
                _ = &mut term => TermEnd::Ended,
                _ = until_leadership(&mut self.leader, false) => TermEnd::Lost,
                _ = &mut shutdown => TermEnd::Shutdown,
            };
            match end {
                TermEnd::Lost => {
                    tracing::warn!("leadership lost: aborting the passes in flight");
                }
                TermEnd::Ended => tracing::warn!("the controller stopped; starting it again"),
                TermEnd::Shutdown => {
                    // Readiness first, then no new pass; the passes in flight may finish.
                    self.ready.send_replace(false);
                    let _ = stop_tx.send(true);
                    let grace = self.opts.shutdown_grace;
                    tracing::info!(?grace, "shutting down: letting the passes in flight finish");
                    tokio::select! {
                        done = tokio::time::timeout(grace, &mut term) => if done.is_err() {
                            tracing::warn!(?grace, "shutdown grace over: aborting the passes still in flight");
                        },
                        _ = until_leadership(&mut self.leader, false) => {
                            tracing::warn!("leadership lost while shutting down: aborting the passes in flight");
                        }
                    }
                }
            }
            // Stop: a pass that starts now does nothing, and dropping the controller aborts the
            // passes still running at their next await.
            self.ctx.leader.store(false, Ordering::SeqCst);
            self.triggers.close();
            drop(term);
            self.metrics.leader.set(0);
            self.leading.send_replace(false);
            if matches!(end, TermEnd::Shutdown) {
                return;
            }
        }
    }

    /// One term of leadership: the controller (a pass for every cached pod first, then pod and
    /// job triggers) and the sweep, until `stop` reads true and the passes in flight are done.
    fn term(&self, stop: tokio_watch::Receiver<bool>) -> impl Future<Output = ()> + Send + use<S> {
        let queue = self.triggers.open();
        let passes = self.metrics.passes.clone();
        let controller = Controller::for_stream(
            futures::stream::empty::<Result<Pod, watcher::Error>>(),
            self.ctx.pods.clone(),
        )
        .with_config(ControllerConfig::default().concurrency(self.opts.concurrency))
        .reconcile_all_on(futures::stream::once(async {}))
        .reconcile_on(queue)
        .graceful_shutdown_on(until_true(stop.clone()))
        .run(
            move |pod, ctx| {
                passes.inc();
                reconcile::reconcile(pod, ctx)
            },
            reconcile::error_policy,
            self.ctx.clone(),
        )
        .for_each(|res| {
            if let Err(e) = res {
                tracing::debug!(error = %e, "reconcile error");
            }
            futures::future::ready(())
        });
        let sweep = sweep_until(self.ctx.clone(), self.opts.sweep_interval, stop);
        async move {
            futures::future::join(controller, sweep).await;
        }
    }
}

/// The sweep every `interval` until `stop` reads true (a sweep in flight finishes first).
async fn sweep_until<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    interval: Duration,
    mut stop: tokio_watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if ctx.watcher.is_synced() {
            sweep::sweep_once(&ctx).await;
        }
    }
}
