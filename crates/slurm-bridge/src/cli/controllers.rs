//! `slurm-bridge controllers`: the pod and node controllers in their own process, with probes,
//! metrics, leader election and a clean shutdown on SIGTERM.

use super::process;
use super::process::parse_duration;
use crate::config::Config;
use crate::controllers::{self, ControllersOptions};
use crate::sync::until_true;
use std::time::Duration;

/// Flags of the controllers, in `controllers` and `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerFlags {
    /// Pods the pod controller reconciles at once.
    #[arg(long, default_value_t = 16)]
    pub pod_workers: u16,
    /// Nodes the node controller reconciles at once.
    #[arg(long, default_value_t = 4)]
    pub node_workers: u16,
    /// How long a node may be deleted or NotReady before the pods bound to it are released
    /// (their Slurm job cancelled, their finalizer removed), e.g. 5m.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub lost_node_grace: Duration,
    /// Interval of the safety-net pass over every pod and node (changes are handled at once).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub resync: Duration,
    /// State-loss hold: when at least this many bound pods' Slurm jobs are unknown to Slurm
    /// (and at least --state-loss-min-share of them), Slurm may have lost its state: those pods
    /// are kept running, marked `SlurmJobLost`, and their Slurm nodes drained, instead of being
    /// removed. 0 turns the guard off (docs/controllers.md, "Slurm losing its state").
    #[arg(long, default_value_t = 3)]
    pub state_loss_min_pods: usize,
    /// State-loss hold: the share (0.0 to 1.0) of the bound pods whose jobs must be unknown.
    #[arg(long, default_value_t = 0.5, value_parser = parse_share)]
    pub state_loss_min_share: f64,
}

/// A share between 0 and 1.
fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is not between 0 and 1")),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

impl ControllerFlags {
    /// The options these flags give, with the process-wide settings.
    pub fn options(&self, cfg: Config, process: &process::ProcessFlags) -> ControllersOptions {
        let mut opts = ControllersOptions::new(cfg);
        opts.pod_workers = self.pod_workers;
        opts.node_workers = self.node_workers;
        opts.lost_node_grace = self.lost_node_grace;
        opts.resync = self.resync;
        opts.state_loss.min_pods = self.state_loss_min_pods;
        opts.state_loss.min_share = self.state_loss_min_share;
        opts.job_poll_interval = process.slurm_poll_interval;
        opts.node_poll_interval = process.slurm_node_poll_interval;
        opts.shutdown_grace = process.shutdown_grace;
        opts
    }
}

/// Flags of `controllers`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllersArgs {
    #[command(flatten)]
    pub process: process::ProcessFlags,
    #[command(flatten)]
    pub controllers: ControllerFlags,
}

/// Runs the controllers until SIGTERM/SIGINT.
pub async fn run(cfg: Config, args: ControllersArgs) -> anyhow::Result<()> {
    let p = &args.process;
    let started = process::start(&cfg, p).await?;
    let lease = p.lease(format!("{}-controllers", cfg.scheduler_name));
    let opts = args.controllers.options(cfg, p);
    process::serve_alone(
        "controllers",
        started.client,
        started.slurm,
        lease,
        started.listener,
        started.signals,
        async |client, slurm, registry, leader, stop| {
            let handle =
                controllers::run(client, slurm, opts, registry, leader, until_true(stop)).await;
            (handle.ready, handle.stopped)
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: ControllerFlags,
        #[command(flatten)]
        process: process::ProcessFlags,
    }

    fn options(args: &[&str]) -> ControllersOptions {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
        cli.flags.options(Config::default(), &cli.process)
    }

    #[test]
    fn state_loss_flags() {
        let opts = options(&[]);
        assert_eq!(opts.state_loss.min_pods, 3);
        assert_eq!(opts.state_loss.min_share, 0.5);
        let opts = options(&["--state-loss-min-pods=0", "--state-loss-min-share=0.25"]);
        assert_eq!(opts.state_loss.min_pods, 0);
        assert_eq!(opts.state_loss.min_share, 0.25);
        assert!(Cli::try_parse_from(["x", "--state-loss-min-share=1.5"]).is_err());
    }

    #[test]
    fn the_process_flags_set_the_polls() {
        let opts = options(&[]);
        assert_eq!(opts.job_poll_interval, Duration::from_secs(1));
        assert_eq!(opts.node_poll_interval, Duration::from_secs(10));
        assert_eq!(opts.shutdown_grace, Duration::from_secs(10));
        let opts = options(&[
            "--slurm-poll-interval=500ms",
            "--slurm-node-poll-interval=30s",
            "--shutdown-grace=3s",
        ]);
        assert_eq!(opts.job_poll_interval, Duration::from_millis(500));
        assert_eq!(opts.node_poll_interval, Duration::from_secs(30));
        assert_eq!(opts.shutdown_grace, Duration::from_secs(3));
    }
}
