//! What every long-running subcommand shares: leader election, the probe server, and a clean
//! shutdown on SIGTERM (readiness off, passes in flight finish, Lease released).

use crate::config::Config;
use crate::sync::until_true;
use crate::{leader, server};
use anyhow::{Context, bail};
use futures::{Stream, StreamExt};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// SIGTERM and SIGINT, as a stream: the first asks for a graceful shutdown, a second for an
/// immediate one.
pub fn signals() -> anyhow::Result<impl Stream<Item = ()> + Unpin + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(Box::pin(futures::stream::unfold(
        (term, int),
        |(mut term, mut int)| async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = int.recv() => tracing::info!("SIGINT"),
            }
            Some(((), (term, int)))
        },
    )))
}

/// The flags every long-running subcommand that talks to Slurm shares (`scheduler`,
/// `controllers`, `run`).
#[derive(Debug, Clone, clap::Args)]
pub struct ProcessFlags {
    /// Compete for a Lease so only one replica acts (`--leader-elect=false` turns it off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_elect_namespace: String,
    /// Name of the leader Lease (default: the scheduler name; for `controllers`,
    /// `<scheduler name>-controllers`).
    #[arg(long)]
    pub leader_elect_name: Option<String>,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: std::net::SocketAddr,
    /// Interval of the Slurm job watcher's poll of GET /jobs/state/ (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub slurm_poll_interval: Duration,
    /// Interval of the Slurm node listing (GET /nodes/), which the node controller follows
    /// (drains, reasons, new nodes) and the scheduler's Slurm node names come from. When no
    /// node changed since the last, Slurm answers 304 at next to no cost; otherwise a listing
    /// costs slurmrestd about 0.13 ms of CPU a node (0.6 s for 5,000), and any job start or
    /// end counts as a change. A listing that took longer than 1/20 of the interval stretches
    /// the pause after it to 20 times its duration (at most 1 minute unless the interval is
    /// longer), so on a large, busy cluster polling keeps to about 5 % of slurmrestd's time.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub slurm_node_poll_interval: Duration,
    /// On SIGTERM, how long the passes in flight may finish before they are aborted (keep it
    /// below the pod's terminationGracePeriodSeconds).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Kubernetes requests per second this process may start (kube-scheduler's
    /// `clientConnection.qps`, 50 there); 0 turns the limit off. It guards the API server
    /// against a runaway loop; the default leaves a 5,000-pod burst (about 3 writes per pod)
    /// unthrottled on a small control plane.
    #[arg(long, default_value_t = DEFAULT_KUBE_API_QPS)]
    pub kube_api_qps: f64,
    /// Requests allowed above `--kube-api-qps` in a burst (kube-scheduler's
    /// `clientConnection.burst`, 100 there).
    #[arg(long, default_value_t = DEFAULT_KUBE_API_BURST)]
    pub kube_api_burst: u32,
}

/// Default of `--kube-api-qps`.
pub const DEFAULT_KUBE_API_QPS: f64 = 1000.0;
/// Default of `--kube-api-burst`.
pub const DEFAULT_KUBE_API_BURST: u32 = 2000;

impl ProcessFlags {
    /// The Kubernetes client's request limits, checked.
    pub fn kube_limits(
        &self,
    ) -> Result<crate::k8s::rate_limit::Limits, crate::k8s::rate_limit::LimitError> {
        crate::k8s::rate_limit::Limits::new(self.kube_api_qps, self.kube_api_burst)
    }

    /// The Lease to compete for (`None` with `--leader-elect=false`), named `default_name`
    /// unless `--leader-elect-name` is given.
    pub fn lease(&self, default_name: String) -> Option<leader::LeaseSpec> {
        lease(
            self.leader_elect,
            &self.leader_elect_namespace,
            self.leader_elect_name.as_deref(),
            default_name,
        )
    }
}

/// What every long-running subcommand opens first: signals, the probe listener, the Kubernetes
/// client and the Slurm client.
pub struct Started {
    pub signals: std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>,
    pub listener: tokio::net::TcpListener,
    pub client: kube::Client,
    pub slurm: slurm_rest::Client,
}

/// Checks the config, then opens what [`Started`] holds (the Kubernetes client with the
/// process's request limits).
pub async fn start(cfg: &crate::config::Config, flags: &ProcessFlags) -> anyhow::Result<Started> {
    let limits = flags.kube_limits()?;
    let probe_address = flags.health_probe_bind_address;
    if cfg.scheduler_name.is_empty() {
        anyhow::bail!(
            "schedulerName is not set in the config file: pods select the bridge with spec.schedulerName, e.g. slurm-bridge-scheduler"
        );
    }
    let signals = Box::pin(signals()?);
    let listener = server::bind(probe_address).await?;
    let client = crate::k8s::rate_limit::client(limits)
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster config)")?;
    let slurm = slurm_client(cfg)?;
    Ok(Started {
        signals,
        listener,
        client,
        slurm,
    })
}

/// The Lease to compete for (`None` with `--leader-elect=false`): `name`, else `default_name`.
pub fn lease(
    enabled: bool,
    namespace: &str,
    name: Option<&str>,
    default_name: String,
) -> Option<leader::LeaseSpec> {
    enabled.then(|| leader::LeaseSpec {
        namespace: namespace.to_string(),
        name: name.map_or(default_name, str::to_string),
        identity: leader::identity(),
    })
}

/// One running component (scheduler, controllers) as the process sees it.
pub struct Component {
    pub name: &'static str,
    /// True while it is ready (caches synced, not shutting down).
    pub ready: watch::Receiver<bool>,
    /// True once it has stopped after its stop signal.
    pub stopped: watch::Receiver<bool>,
}

/// Competes for `lease`, or leads at once without one (`--leader-elect=false`).
pub async fn leadership(
    client: &kube::Client,
    lease: Option<&leader::LeaseSpec>,
) -> anyhow::Result<leader::Leadership> {
    Ok(match lease {
        Some(l) => leader::elect(client.clone(), &l.namespace, &l.name, &l.identity).await?,
        None => leader::Leadership::always(),
    })
}

/// The Kubernetes client and the Slurm client with their writes behind `leadership`'s fence
/// (docs/operations.md, "Fencing"); registers the fenced-write counter in `registry`.
pub fn fenced<S>(
    leadership: &leader::Leadership,
    registry: &mut Registry,
    client: &kube::Client,
    slurm: S,
) -> (kube::Client, crate::slurm::Fenced<S>) {
    let fence = leadership.fence();
    fence.register(registry);
    (
        crate::k8s::fenced::client(client, fence.clone()),
        crate::slurm::Fenced::new(slurm, fence),
    )
}

/// One component in a process of its own (`scheduler`, `controllers`): competes for `lease`
/// (or leads at once without one), puts the clients behind its fence, starts the component with
/// `start` (the fenced clients, the registry, the leadership and the stop signal; it answers
/// the component's `ready` and `stopped`), then serves its probes on `listener` until the first
/// item of `signals` (see [`serve`]).
pub async fn serve_alone<S>(
    name: &'static str,
    client: kube::Client,
    slurm: S,
    lease: Option<leader::LeaseSpec>,
    listener: tokio::net::TcpListener,
    signals: impl Stream<Item = ()> + Unpin,
    start: impl AsyncFnOnce(
        kube::Client,
        crate::slurm::Fenced<S>,
        &mut Registry,
        watch::Receiver<bool>,
        watch::Receiver<bool>,
    ) -> (watch::Receiver<bool>, watch::Receiver<bool>),
) -> anyhow::Result<()> {
    let leadership = leadership(&client, lease.as_ref()).await?;
    let mut registry = Registry::default();
    let (client, slurm) = fenced(&leadership, &mut registry, &client, slurm);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ready, stopped) =
        start(client, slurm, &mut registry, leadership.receiver(), stop_rx).await;
    let component = Component {
        name,
        ready,
        stopped,
    };
    serve(
        leadership,
        registry,
        vec![component],
        stop_tx,
        listener,
        signals,
    )
    .await
}

/// True while every component is ready.
fn all_ready(components: &[Component]) -> watch::Receiver<bool> {
    let mut readies: Vec<watch::Receiver<bool>> =
        components.iter().map(|c| c.ready.clone()).collect();
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            let ready = readies.iter().all(|r| *r.borrow());
            tx.send_replace(ready);
            let changes = readies.iter_mut().map(|r| Box::pin(r.changed()));
            if futures::future::select_all(changes).await.0.is_err() {
                tx.send_replace(false);
                return;
            }
        }
    });
    rx
}

/// Serves the probes of `components` on `listener` until the first item of `signals`. Then
/// `stop` is sent: `/readyz` turns 503, no new pass starts, the passes in flight finish, the
/// Lease is released so a standby takes over at once, and the probe server stops. A second item
/// of `signals` during that stops at once (the Lease then expires on its own).
pub async fn serve(
    leadership: leader::Leadership,
    registry: Registry,
    components: Vec<Component>,
    stop: watch::Sender<bool>,
    listener: tokio::net::TcpListener,
    mut signals: impl Stream<Item = ()> + Unpin,
) -> anyhow::Result<()> {
    let (server_stop_tx, server_stop_rx) = watch::channel(false);
    let mut server = tokio::spawn(server::serve(
        listener,
        all_ready(&components),
        Arc::new(registry),
        until_true(server_stop_rx),
    ));
    let server_ended = tokio::select! {
        Some(()) = signals.next() => None,
        res = &mut server => Some(res),
    };
    tracing::info!("shutting down");
    stop.send_replace(true);
    let stopped = async {
        for c in &components {
            let mut stopped = c.stopped.clone();
            let _ = stopped.wait_for(|s| *s).await;
            tracing::debug!(component = c.name, "stopped");
        }
    };
    tokio::select! {
        _ = stopped => {}
        Some(()) = signals.next() => {
            tracing::warn!("second signal: stopping at once");
            return Ok(());
        }
    }
    // Nothing acts on this replica's leadership any more.
    leadership.release().await;
    server_stop_tx.send_replace(true);
    let served = match server_ended {
        Some(res) => res,
        None => match tokio::time::timeout(Duration::from_secs(5), server).await {
            Ok(res) => res,
            Err(_) => return Ok(()),
        },
    };
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e).context("serving probes"),
        Err(e) => Err(e).context("the probe server failed"),
    }
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
/// `SLURM_JWT`. With `SLURM_CA_FILE` (PEM), an `https://` slurmRestApi is trusted only when its
/// certificate chains to one of that file's CAs (a site's private CA); without it, to the
/// public web roots.
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
    let mut builder = slurm_rest::Client::builder(cfg.slurm_rest_api.clone()).token(token);
    if let Ok(path) = std::env::var("SLURM_CA_FILE")
        && !path.is_empty()
    {
        builder = builder.tls_config(private_ca_tls(std::path::Path::new(&path))?);
    }
    builder
        .build()
        .with_context(|| format!("creating the Slurm client for {}", cfg.slurm_rest_api))
}

/// TLS towards slurmrestd trusting exactly the CA certificates of the PEM file `path`.
pub fn private_ca_tls(path: &std::path::Path) -> anyhow::Result<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let pem =
        std::fs::read(path).with_context(|| format!("reading SLURM_CA_FILE {}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert
            .with_context(|| format!("SLURM_CA_FILE {}: not a PEM certificate", path.display()))?;
        roots.add(cert).with_context(|| {
            format!(
                "SLURM_CA_FILE {}: a certificate is not a CA",
                path.display()
            )
        })?;
    }
    if roots.is_empty() {
        bail!(
            "SLURM_CA_FILE {}: no PEM certificate (-----BEGIN CERTIFICATE-----) found",
            path.display()
        );
    }
    Ok(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .context("TLS towards slurmrestd")?
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("slurm-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ca.crt");
        std::fs::write(&file, "not a certificate\n").unwrap();
        let e = format!("{:#}", private_ca_tls(&file).unwrap_err());
        assert!(
            e.contains("SLURM_CA_FILE") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = format!("{:#}", private_ca_tls(&dir.join("missing")).unwrap_err());
        assert!(e.contains("reading SLURM_CA_FILE"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
