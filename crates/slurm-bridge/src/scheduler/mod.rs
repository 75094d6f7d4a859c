//! The scheduler: binds the pods whose `spec.schedulerName` is the bridge's to the nodes Slurm
//! allocates for their group's external job.
//!
//! A kube-runtime [`Controller`] reconciles pods ([`reconcile`]); its triggers are pod changes
//! and allocations seen by the shared Slurm job watcher ([`crate::slurm::JobWatcher`]), so a pod
//! is bound as soon as Slurm allocates, not on a timer. Nodes come from a reflector; Slurm node
//! names from a cache. Leader election (a Lease) keeps two replicas from acting twice.

pub mod assign;
pub mod context;
pub mod feasibility;
pub mod locks;
pub mod metrics;
pub mod pod_ops;
pub mod podgroup;
pub mod reconcile;
pub mod slurm_ops;
pub mod sweep;

use crate::config::Config;
use crate::slurm::{JobWatcher, JobWatcherConfig, SlurmNodeCache};
use crate::workload::kube_reader::KubeReader;
use context::{Ctx, Slurm};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use metrics::{Instrumented, Metrics};
use pod_ops::PodWriter;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch as tokio_watch;

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
    /// On shutdown, how long in-flight reconciles may finish before everything is stopped.
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

/// A running scheduler's observable state, for health probes, metrics and tests.
#[derive(Clone)]
pub struct SchedulerHandle {
    /// True once the job watcher, the node cache and the reflectors are synced.
    pub ready: tokio_watch::Receiver<bool>,
    /// True once every task of the scheduler has stopped after shutdown.
    pub stopped: tokio_watch::Receiver<bool>,
    pub metrics: Arc<Metrics>,
}

/// Strips what the scheduler never reads from cached pods (managed fields are most of a pod's
/// size), to keep memory flat with many pods.
fn slim(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
}

/// Runs the scheduler until `shutdown` completes. `leader` says whether this replica may act
/// (a constant `true` without leader election).
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
        metrics: metrics.clone(),
    });
    let watcher_cfg = JobWatcherConfig {
        interval: opts.job_poll_interval,
        ..Default::default()
    };
    let job_watcher = JobWatcher::new(slurm.clone(), watcher_cfg);
    let node_cache = SlurmNodeCache::new(slurm.clone(), opts.node_poll_interval);
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(job_watcher.clone().run());
    tasks.spawn(node_cache.clone().run());

    let (node_store, node_writer) = reflector::store::<Node>();
    let nodes_api: Api<Node> = Api::all(client.clone());
    let node_generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let generation = node_generation.clone();
    let mut fingerprints: std::collections::HashMap<String, u64> = Default::default();
    tasks.spawn(
        watcher(nodes_api, watcher::Config::default())
            .default_backoff()
            .reflect(node_writer)
            .for_each(move |event| {
                // Only what placement reads invalidates cached placements (not heartbeats).
                let changed = match &event {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                        let name = n.metadata.name.clone().unwrap_or_default();
                        let fp = feasibility::fingerprint(n);
                        fingerprints.insert(name, fp) != Some(fp)
                    }
                    Ok(watcher::Event::Delete(n)) => {
                        fingerprints.remove(n.metadata.name.as_deref().unwrap_or_default());
                        true
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => true,
                    Err(_) => false,
                };
                if changed {
                    generation.fetch_add(1, Ordering::Relaxed);
                }
                futures::future::ready(())
            }),
    );

    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let ctx = Arc::new(Ctx {
        config: opts.config.clone(),
        client: client.clone(),
        slurm: slurm.clone(),
        watcher: job_watcher.clone(),
        slurm_nodes: node_cache.clone(),
        nodes: node_store.clone(),
        pods: pod_store.clone(),
        reader: KubeReader::new(client.clone()),
        writer: PodWriter::new(client.clone(), &opts.config.scheduler_name),
        locks: Default::default(),
        metrics: metrics.clone(),
        sent: Default::default(),
        failures: Default::default(),
        leader: AtomicBool::new(*leader.borrow()),
        node_generation,
        placements: Default::default(),
    });

    let pods_api: Api<Pod> = Api::all(client.clone());
    let pod_cfg = watcher::Config::default().fields(&format!(
        "spec.schedulerName={}",
        opts.config.scheduler_name
    ));
    let pod_events = ctx.clone();
    let pod_stream = watcher(pods_api, pod_cfg)
        .default_backoff()
        .modify(slim)
        .reflect(pod_writer)
        .inspect_ok(move |event| pod_events.pod_event(event))
        .applied_objects();

    // Leadership changes flip the flag reconciles check.
    {
        let ctx = ctx.clone();
        let mut leader = leader.clone();
        tasks.spawn(async move {
            while leader.changed().await.is_ok() {
                let is = *leader.borrow();
                tracing::info!(leader = is, "leadership changed");
                ctx.leader.store(is, Ordering::Relaxed);
            }
        });
    }

    // Allocations (and other job changes) trigger the reconcile of every pod of the job.
    let mut job_events = job_watcher.subscribe();
    let pending_gauge = metrics.clone();
    let watcher_for_gauge = job_watcher.clone();
    let job_event_ctx = ctx.clone();
    let triggers = async_stream_from(
        move |tx: futures::channel::mpsc::UnboundedSender<ObjectRef<Pod>>| async move {
            let mut gauge_at: Option<std::time::Instant> = None;
            while let Some(event) = job_events.recv().await {
                job_event_ctx.job_event(&event);
                let job = event.job();
                // Counting scans the index: at most once a second, not per event.
                if gauge_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    gauge_at = Some(std::time::Instant::now());
                    let pending = watcher_for_gauge
                        .index()
                        .jobs()
                        .filter(|j| j.is_pending())
                        .count();
                    pending_gauge.pending_groups.set(pending as i64);
                }
                for (ns, name) in reconcile::comment_pods(&job.comment) {
                    let _ = tx.unbounded_send(ObjectRef::new(name).within(ns));
                }
            }
        },
    );

    tasks.spawn(sweep::run(ctx.clone(), opts.sweep_interval));

    let (ready_rx_for_handle, handle_metrics) = (ready_tx.subscribe(), metrics.clone());
    let controller_ctx = ctx.clone();
    let concurrency = opts.concurrency;
    let (stop_tx, stop_rx) = tokio_watch::channel(false);
    let stopped = {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    tasks.spawn(async move {
        // Decisions need the full picture: a restarted scheduler must see its jobs first.
        job_watcher.wait_synced().await;
        node_cache.wait_synced().await;
        let _ = node_store.wait_until_ready().await;
        tracing::info!("scheduler caches synced; scheduling");
        ready_tx.send_replace(true);
        Controller::for_stream(pod_stream, pod_store)
            .with_config(ControllerConfig::default().concurrency(concurrency))
            .reconcile_on(triggers)
            .graceful_shutdown_on(stopped)
            .run(
                reconcile::reconcile,
                reconcile::error_policy,
                controller_ctx,
            )
            .for_each(|res| {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "reconcile error");
                }
                futures::future::ready(())
            })
            .await;
    });
    // On shutdown: let in-flight reconciles finish (up to the grace period), then stop every task.
    let (stopped_tx, stopped_rx) = tokio_watch::channel(false);
    let grace = opts.shutdown_grace;
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
        let _ = tokio::time::timeout(grace, async {
            while let Some(res) = tasks.join_next().await {
                if res.is_ok() {
                    break;
                }
            }
        })
        .await;
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        tracing::info!("scheduler stopped");
        stopped_tx.send_replace(true);
    });
    SchedulerHandle {
        ready: ready_rx_for_handle,
        stopped: stopped_rx,
        metrics: handle_metrics,
    }
}

/// A stream fed by a task: `produce` gets the sending half.
fn async_stream_from<T, F, Fut>(produce: F) -> futures::channel::mpsc::UnboundedReceiver<T>
where
    T: Send + 'static,
    F: FnOnce(futures::channel::mpsc::UnboundedSender<T>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = futures::channel::mpsc::unbounded();
    tokio::spawn(produce(tx));
    rx
}
