//! `slurm-bridge scheduler` (and `run`): the scheduler process with its probes, metrics, leader
//! election and clean shutdown on SIGTERM.

use super::process;
use crate::config::Config;
use crate::leader;
use crate::scheduler::{self, SchedulerOptions};
use crate::slurm::Slurm;
use crate::sync::until_true;
use futures::Stream;
use tokio::sync::watch;

/// Flags of `scheduler` and `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct SchedulerArgs {
    #[command(flatten)]
    pub process: process::ProcessFlags,
    /// Pods reconciled at once.
    #[arg(long, default_value_t = 64)]
    pub workers: u16,
    /// How long an allocated pod waits for its PersistentVolumeClaims to be bound before its
    /// volume reservations are undone and its Slurm job is cancelled (kube-scheduler's
    /// bindTimeoutSeconds).
    #[arg(long, default_value = "10m", value_parser = process::parse_duration)]
    pub volume_bind_timeout: std::time::Duration,
    /// Interval of the scheduler's safety-net pass over every waiting pod (changes are handled
    /// at once; this catches what a broken watch may have missed), e.g. 5m.
    #[arg(long, default_value = "5m", value_parser = process::parse_duration)]
    pub scheduler_resync: std::time::Duration,
    /// Slurm requests of each kind the scheduler has in flight at once: job submits, and the
    /// job watcher's reads of changed jobs (GET /job/{id}). slurmrestd shares itself between the
    /// requests in flight, so more submits slow the reads that report allocations; raise it
    /// with slurmrestd's threads and slurmctld's capacity.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub slurm_requests_in_flight: u16,
}

impl SchedulerArgs {
    /// What these flags set in `opts`.
    pub fn apply(&self, opts: &mut SchedulerOptions) {
        let p = &self.process;
        opts.job_poll_interval = p.slurm_poll_interval;
        opts.node_poll_interval = p.slurm_node_poll_interval;
        opts.concurrency = self.workers;
        opts.shutdown_grace = p.shutdown_grace;
        opts.volume_bind_timeout = self.volume_bind_timeout;
        opts.resync = self.scheduler_resync;
        opts.slurm_requests_in_flight = self.slurm_requests_in_flight.into();
    }
}

/// Runs the scheduler until SIGTERM/SIGINT.
pub async fn run(cfg: Config, args: SchedulerArgs) -> anyhow::Result<()> {
    let p = &args.process;
    let started = process::start(&cfg, p).await?;
    let lease = p.lease(cfg.scheduler_name.clone());
    let mut opts = SchedulerOptions::new(cfg);
    args.apply(&mut opts);
    serve(
        started.client,
        started.slurm,
        opts,
        lease,
        started.listener,
        started.signals,
    )
    .await
}

/// The scheduler process: leader election (`lease`, or none: lead at once), the scheduler and
/// the probes on `listener`, until the first item of `signals` (see [`process::serve`]).
pub async fn serve<S: Slurm>(
    client: kube::Client,
    slurm: S,
    opts: SchedulerOptions,
    lease: Option<leader::LeaseSpec>,
    listener: tokio::net::TcpListener,
    signals: impl Stream<Item = ()> + Unpin,
) -> anyhow::Result<()> {
    process::serve_alone(
        "scheduler",
        client,
        slurm,
        lease,
        listener,
        signals,
        async |client, slurm, registry, leader, stop| {
            let (ready_tx, _) = watch::channel(false);
            let handle = scheduler::run(
                client,
                slurm,
                opts,
                registry,
                leader,
                ready_tx,
                until_true(stop),
            )
            .await;
            (handle.ready, handle.stopped)
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SchedulerArgs,
    }

    #[test]
    fn the_flags_reach_the_options() {
        let apply = |args: &[&str]| {
            let cli =
                Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
            let mut opts = SchedulerOptions::new(Config::default());
            cli.args.apply(&mut opts);
            opts
        };
        let opts = apply(&[]);
        assert_eq!(opts.node_poll_interval, Duration::from_secs(10));
        assert_eq!(opts.slurm_requests_in_flight, 16);
        let opts = apply(&[
            "--slurm-node-poll-interval=1m",
            "--slurm-requests-in-flight=4",
        ]);
        assert_eq!(opts.node_poll_interval, Duration::from_secs(60));
        assert_eq!(opts.slurm_requests_in_flight, 4);
    }
}
