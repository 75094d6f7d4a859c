//! `slurm-bridge run`: every component in one process (the scheduler and the controllers), on
//! one set of caches and one Slurm job watcher, under one Lease.

use super::controllers::ControllerFlags;
use super::process;
use super::scheduler::{SchedulerArgs, slurm_client};
use crate::caches::Caches;
use crate::config::Config;
use crate::scheduler::metrics::{Instrumented, Metrics};
use crate::scheduler::{self, SchedulerOptions};
use crate::{controllers, leader, server};
use anyhow::{Context, bail};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::sync::watch;

/// Flags of `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub scheduler: SchedulerArgs,
    #[command(flatten)]
    pub controllers: ControllerFlags,
}

/// Runs every component until SIGTERM/SIGINT.
pub async fn run(cfg: Config, args: RunArgs) -> anyhow::Result<()> {
    if cfg.scheduler_name.is_empty() {
        bail!(
            "schedulerName is not set in the config file: pods select the bridge with spec.schedulerName, e.g. slurm-bridge-scheduler"
        );
    }
    let s = &args.scheduler;
    let signals = process::signals()?;
    let listener = server::bind(s.health_probe_bind_address).await?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster config)")?;
    let slurm = slurm_client(&cfg)?;
    let lease = s.leader_elect.then(|| leader::LeaseSpec {
        namespace: s.leader_elect_namespace.clone(),
        name: s
            .leader_elect_name
            .clone()
            .unwrap_or_else(|| cfg.scheduler_name.clone()),
        identity: leader::identity(),
    });
    let mut sched_opts = SchedulerOptions::new(cfg.clone());
    sched_opts.job_poll_interval = s.slurm_poll_interval;
    sched_opts.concurrency = s.workers;
    sched_opts.shutdown_grace = s.shutdown_grace;
    let ctrl_opts = args
        .controllers
        .options(cfg, s.slurm_poll_interval, s.shutdown_grace);

    let leadership = process::leadership(&client, lease.as_ref()).await?;
    let mut registry = Registry::default();
    let slurm = Arc::new(Instrumented {
        inner: slurm,
        metrics: Metrics::new(&mut registry),
    });
    let (caches, cache_tasks) = Caches::start(client.clone(), slurm, &sched_opts.cache_options());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ready_tx, _) = watch::channel(false);
    let sched = scheduler::run_with(
        client.clone(),
        caches.clone(),
        sched_opts,
        &mut registry,
        leadership.receiver(),
        ready_tx,
        process::until_true(stop_rx.clone()),
    )
    .await;
    let ctrl = controllers::run_with(
        client,
        caches,
        ctrl_opts,
        &mut registry,
        leadership.receiver(),
        process::until_true(stop_rx),
    );
    let components = vec![
        process::Component {
            name: "scheduler",
            ready: sched.ready.clone(),
            stopped: sched.stopped.clone(),
        },
        process::Component {
            name: "controllers",
            ready: ctrl.ready.clone(),
            stopped: ctrl.stopped.clone(),
        },
    ];
    let result = process::serve(leadership, registry, components, stop_tx, listener, signals).await;
    cache_tasks.stop().await;
    result
}
