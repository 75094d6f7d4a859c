//! The scheduler: binds the pods whose `spec.schedulerName` is the bridge's to the nodes Slurm
//! allocates for their group's external job.
//!
//! Passes over pods ([`reconcile`]) run from our own queue ([`queue`], [`runner`]: ranked as
//! kube-scheduler's, with the requeues, one pass per pod at a time); their triggers are pod changes
//! and allocations seen by the shared Slurm job watcher ([`crate::slurm::JobWatcher`]), so a pod
//! is bound as soon as Slurm allocates, not on a timer. Nodes come from a reflector; Slurm node
//! names from a cache.
//!
//! Lifecycle: the caches (job watcher, Slurm node names, node and pod reflectors) run from start
//! to shutdown, on a standby too. The passes and the sweep run only while this replica leads
//! (a Lease, [`crate::leader`]): they start when leadership is gained, with a pass for every
//! cached pod, and are dropped the moment it is lost, which aborts the passes in flight. On
//! shutdown readiness goes false, no new pass starts, and the passes in flight may finish within
//! [`SchedulerOptions::shutdown_grace`].

pub mod assign;
pub mod context;
pub mod feasibility;
mod lifecycle;
pub mod locks;
pub mod metrics;
pub mod podgroup;
mod queue;
pub mod reason;
pub mod reconcile;
pub mod rejection;
pub mod runner;
mod siblings;
mod triggers;

use lifecycle::Lifecycle;
use triggers::{follow_pods, follow_slurm_nodes, follow_volumes, forward_job_events};
#[cfg(test)]
mod tests;

use crate::caches::{CacheOptions, Caches};
use crate::config::Config;
use crate::slurm::Instrumented;
use context::{Ctx, Slurm};
use kube::Client;
use metrics::{LifecycleMetrics, Metrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
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
    /// Interval of the safety-net pass over every waiting pod (changes are handled at once).
    pub resync: Duration,
    /// On shutdown, how long in-flight reconciles may finish before they are aborted.
    pub shutdown_grace: Duration,
    /// How long an allocated pod may wait for its claims' binding ([`Ctx::volume_bind_timeout`]).
    pub volume_bind_timeout: Duration,
    /// Job submits in flight at once, and the job watcher's reads ([`context::SUBMITS_IN_FLIGHT`]).
    pub slurm_requests_in_flight: usize,
}

impl SchedulerOptions {
    pub fn new(config: Config) -> Self {
        SchedulerOptions {
            config,
            job_poll_interval: Duration::from_secs(1),
            node_poll_interval: Duration::from_secs(10),
            concurrency: 64,
            sweep_interval: Duration::from_secs(30),
            resync: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(10),
            volume_bind_timeout: context::DEFAULT_VOLUME_BIND_TIMEOUT,
            slurm_requests_in_flight: context::SUBMITS_IN_FLIGHT,
        }
    }
}

impl SchedulerOptions {
    /// What the scheduler needs of the shared caches.
    pub fn cache_options(&self) -> CacheOptions {
        CacheOptions {
            volumes: true,
            job_reads_in_flight: self.slurm_requests_in_flight,
            ..CacheOptions::new(
                &self.config,
                self.job_poll_interval,
                self.node_poll_interval,
            )
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
    /// Their durations (`slurm_bridge_scheduler_reconcile_duration_seconds`), whose count is the
    /// passes ended.
    pub reconcile_duration: prometheus_client::metrics::histogram::Histogram,
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
    let slurm = Arc::new(Instrumented::new(slurm, registry));
    let (caches, tasks) = Caches::start(client.clone(), slurm, &opts.cache_options());
    let mut handle = run_with(client, caches, opts, registry, leader, ready_tx, shutdown).await;
    tasks.stop_after(&mut handle.stopped);
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
    let metrics = Metrics::counting(registry, &caches.handles.slurm.metrics);
    let lifecycle_metrics = LifecycleMetrics::new(registry);
    let ctx = Arc::new(Ctx {
        volume_bind_timeout: opts.volume_bind_timeout,
        submits_in_doubt: std::sync::Mutex::new(std::collections::HashMap::new()),
        submit_slots: tokio::sync::Semaphore::new(opts.slurm_requests_in_flight.max(1)),
        ..Ctx::new(
            opts.config.clone(),
            client,
            caches.handles(),
            metrics.clone(),
        )
    });
    let triggers = ctx.triggers.clone();

    // Subscriptions to the caches, kept from start to shutdown, on a standby too.
    let mut followers = JoinSet::new();
    followers.spawn(follow_pods(
        ctx.clone(),
        caches.pod_changes(),
        triggers.clone(),
    ));
    followers.spawn(follow_slurm_nodes(
        ctx.clone(),
        caches.handles.slurm_nodes.subscribe_changes(),
        triggers.clone(),
    ));
    followers.spawn(follow_volumes(
        ctx.clone(),
        caches.volume_changes(),
        triggers.clone(),
    ));
    followers.spawn(forward_job_events(
        ctx.clone(),
        caches.handles.jobs.subscribe(),
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
        reconcile_duration: lifecycle_metrics.pass_duration.clone(),
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
