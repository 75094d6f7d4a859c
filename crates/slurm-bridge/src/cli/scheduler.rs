//! `slurm-bridge scheduler` (and `run`): the scheduler process with its probes, metrics, leader
//! election and clean shutdown on SIGTERM.

use super::process;
use crate::config::Config;
use crate::leader;
use crate::scheduler::{self, SchedulerOptions};
use crate::slurm::Slurm;
use anyhow::{Context, bail};
use futures::Stream;
use prometheus_client::registry::Registry;
use std::time::Duration;
use tokio::sync::watch;

/// Flags of `scheduler` and `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct SchedulerArgs {
    #[command(flatten)]
    pub process: process::ProcessFlags,
    /// Pods reconciled at once.
    #[arg(long, default_value_t = 64)]
    pub workers: u16,
}

/// Parses a duration as `humantime` does (`500ms`, `1s`, `2m`, `12h`, `365d`, `1h 30m`), or a
/// bare number of seconds; it must be positive.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let err = |why: String| {
        format!(
            "invalid duration {s:?}: {why}; use a number with a unit, e.g. 500ms, 1s, 2m, 12h, 365d"
        )
    };
    let d = if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) {
        s.parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|e| err(e.to_string()))?
    } else {
        humantime::parse_duration(s).map_err(|e| err(e.to_string()))?
    };
    if d.is_zero() {
        return Err(err("it must be positive".into()));
    }
    Ok(d)
}

/// The Slurm client from the config URL and `SLURM_JWT_FILE` (re-read when it changes), or
/// `SLURM_JWT`.
pub fn slurm_client(cfg: &Config) -> anyhow::Result<slurm_rest::Client> {
    if cfg.slurm_rest_api.is_empty() {
        bail!(
            "slurmRestApi is not set in the config file: give the slurmrestd URL, e.g. http://slurm-restapi.slurm:6820"
        );
    }
    let token = match (std::env::var("SLURM_JWT_FILE"), std::env::var("SLURM_JWT")) {
        (Ok(path), _) if !path.is_empty() => slurm_rest::TokenProvider::file(path),
        (_, Ok(tok)) if !tok.is_empty() => slurm_rest::TokenProvider::Static(tok),
        _ => bail!(
            "no Slurm token: set SLURM_JWT_FILE to a file holding the JWT (re-read when it changes), or SLURM_JWT"
        ),
    };
    slurm_rest::Client::builder(cfg.slurm_rest_api.clone())
        .token(token)
        .build()
        .with_context(|| format!("creating the Slurm client for {}", cfg.slurm_rest_api))
}

/// Runs the scheduler until SIGTERM/SIGINT.
pub async fn run(cfg: Config, args: SchedulerArgs) -> anyhow::Result<()> {
    let p = &args.process;
    let started = process::start(&cfg, p.health_probe_bind_address).await?;
    let lease = p.lease(cfg.scheduler_name.clone());
    let mut opts = SchedulerOptions::new(cfg);
    opts.job_poll_interval = p.slurm_poll_interval;
    opts.concurrency = args.workers;
    opts.shutdown_grace = p.shutdown_grace;
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
    let leadership = process::leadership(&client, lease.as_ref()).await?;
    let mut registry = Registry::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ready_tx, _) = watch::channel(false);
    let handle = scheduler::run(
        client,
        slurm,
        opts,
        &mut registry,
        leadership.receiver(),
        ready_tx,
        crate::sync::until_true(stop_rx),
    )
    .await;
    let component = process::Component {
        name: "scheduler",
        ready: handle.ready.clone(),
        stopped: handle.stopped.clone(),
    };
    process::serve(
        leadership,
        registry,
        vec![component],
        stop_tx,
        listener,
        signals,
    )
    .await
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1s 500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("365d"), Ok(Duration::from_secs(365 * 86400)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("fast").unwrap_err().contains("500ms"));
    }
}
