//! `slurm-bridge run`: every component in one process (the scheduler and the controllers, and
//! the admission webhooks when certificates are configured), on one set of caches and one Slurm
//! job watcher, under one Lease. The webhooks serve on every replica; only the leader writes
//! caBundles in the self-managed certificate mode.

use super::admission::WebhookFlags;
use super::controllers::ControllerFlags;
use super::process;
use super::scheduler::SchedulerArgs;
use crate::caches::Caches;
use crate::config::Config;
use crate::scheduler::{self, SchedulerOptions};
use crate::slurm::Instrumented;
use crate::{admission, controllers};
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
    #[command(flatten)]
    pub webhook: WebhookFlags,
}

/// Runs every component until SIGTERM/SIGINT.
pub async fn run(cfg: Config, args: RunArgs) -> anyhow::Result<()> {
    let s = &args.scheduler.process;
    let started = process::start(&cfg, s).await?;
    let (client, slurm) = (started.client, started.slurm);
    let lease = s.lease(cfg.scheduler_name.clone());
    let mut sched_opts = SchedulerOptions::new(cfg.clone());
    args.scheduler.apply(&mut sched_opts);
    let admission_opts = args
        .webhook
        .enabled()
        .then(|| args.webhook.options(cfg.clone()));
    let mut ctrl_opts = args.controllers.options(cfg, s);
    // The scheduler in this process sweeps; the controllers do not do it a second time.
    ctrl_opts.sweep_interval = None;

    let leadership = process::leadership(&client, lease.as_ref()).await?;
    let mut registry = Registry::default();
    // The scheduler and the controllers write through the fence; admission (on every replica)
    // and leader election use the plain client.
    let (writer, slurm) = process::fenced(&leadership, &mut registry, &client, slurm);
    let slurm = Arc::new(Instrumented::new(slurm, &mut registry));
    let (caches, cache_tasks) = Caches::start(client.clone(), slurm, &sched_opts.cache_options());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ready_tx, _) = watch::channel(false);
    let sched = scheduler::run_with(
        writer.clone(),
        caches.clone(),
        sched_opts,
        &mut registry,
        leadership.receiver(),
        ready_tx,
        crate::sync::until_true(stop_rx.clone()),
    )
    .await;
    let webhooks = match admission_opts {
        Some(opts) => Some(
            admission::start(
                client.clone(),
                opts,
                &mut registry,
                leadership.receiver(),
                crate::sync::until_true(stop_rx.clone()),
            )
            .await?,
        ),
        None => None,
    };
    let ctrl = controllers::run_with(
        writer,
        caches,
        ctrl_opts,
        &mut registry,
        leadership.receiver(),
        crate::sync::until_true(stop_rx),
    );
    let mut components = vec![
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
    if let Some(w) = &webhooks {
        components.push(process::Component {
            name: "admission",
            ready: w.ready.clone(),
            stopped: w.stopped.clone(),
        });
    }
    let result = process::serve(
        leadership,
        registry,
        components,
        stop_tx,
        started.listener,
        started.signals,
    )
    .await;
    cache_tasks.stop().await;
    result
}
