//! `slurm-bridge admission`: the admission webhooks in their own process (and the webhook flags
//! `run` shares), with probes, metrics and a clean shutdown on SIGTERM.

use super::process;
use super::process::parse_duration;
use crate::admission::{self, AdmissionOptions, certs::SelfManaged};
use crate::config::Config;
use crate::{leader, server};
use anyhow::Context;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::watch;

/// Leader-election ID of the Go original's admission process.
pub const LEASE_NAME: &str = "a1f3cd42.slinky.slurm.net";

/// The webhook server's flags, in `admission` and `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookFlags {
    /// HTTPS address of the webhooks (/mutate--v1-pod, /validate--v1-pod).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,
    /// Directory of tls.crt and tls.key (re-read when they change) [admission default:
    /// /tmp/k8s-webhook-server/serving-certs]. In `run`, giving it (or --self-signed-names)
    /// turns the webhooks on.
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Option<PathBuf>,
    /// Offer HTTP/2 on the webhook server (off: HTTP/1.1 only, the rapid-reset mitigation).
    #[arg(long)]
    pub enable_http2: bool,
    /// How often the certificate files are checked for changes.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub cert_poll_interval: Duration,
    /// Self-managed certificates: make a CA and a serving certificate for these DNS names or
    /// IP addresses (comma-separated, e.g. slurm-bridge-admission.slurm-bridge.svc) in
    /// --cert-dir, which must be writable, and renew them before they expire.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub self_signed_names: Vec<String>,
    /// With --self-signed-names: Mutating/ValidatingWebhookConfigurations (comma-separated
    /// names) whose caBundle the bridge keeps equal to its CA (written by the leader only).
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        requires = "self_signed_names"
    )]
    pub webhook_configurations: Vec<String>,
    /// With --self-signed-names: lifetime of a serving certificate (e.g. 365d).
    #[arg(long, default_value = "365d", value_parser = parse_duration)]
    pub self_signed_validity: Duration,
    /// With --self-signed-names: renew the serving certificate (and the CA) this long before
    /// it expires.
    #[arg(long, default_value = "30d", value_parser = parse_duration)]
    pub self_signed_renew_before: Duration,
    /// With --self-signed-names: keep the CA in this Secret (created by the first replica,
    /// read by the others), so several replicas serve certificates of one CA. Needs get,
    /// create and update on Secrets in its namespace. Without it the CA stays in the cert dir:
    /// one replica only.
    #[arg(long, value_name = "NAME", requires = "self_signed_names")]
    pub self_signed_ca_secret: Option<String>,
    /// Namespace of --self-signed-ca-secret (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub self_signed_ca_secret_namespace: String,
    /// With --self-signed-names: interval of the renewal check and caBundle sync.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub self_signed_check_interval: Duration,
}

impl WebhookFlags {
    /// Whether `run` serves the webhooks (a cert dir or self-signed names were given).
    pub fn enabled(&self) -> bool {
        self.cert_dir.is_some() || !self.self_signed_names.is_empty()
    }

    /// The component's options.
    pub fn options(&self, cfg: Config) -> AdmissionOptions {
        let mut opts = AdmissionOptions::new(cfg);
        opts.listen = self.listen;
        if let Some(dir) = &self.cert_dir {
            opts.cert_dir = dir.clone();
        }
        opts.enable_http2 = self.enable_http2;
        opts.cert_poll_interval = self.cert_poll_interval;
        if !self.self_signed_names.is_empty() {
            let mut sm = SelfManaged::new(
                opts.cert_dir.clone(),
                self.self_signed_names.clone(),
                self.webhook_configurations.clone(),
            );
            sm.validity = self.self_signed_validity;
            sm.renew_before = self.self_signed_renew_before;
            sm.check_interval = self.self_signed_check_interval;
            sm.ca_secret =
                self.self_signed_ca_secret
                    .as_ref()
                    .map(|name| crate::admission::certs::CaSecret {
                        namespace: self.self_signed_ca_secret_namespace.clone(),
                        name: name.clone(),
                    });
            opts.self_managed = Some(sm);
        }
        opts
    }
}

/// Flags of `admission`.
#[derive(Debug, Clone, clap::Args)]
pub struct AdmissionArgs {
    /// Compete for a Lease; only the leader writes caBundles in the self-managed mode (every
    /// replica serves). Off by default, as in the original.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_elect_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, default_value = LEASE_NAME)]
    pub leader_elect_name: String,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: SocketAddr,
    #[command(flatten)]
    pub webhook: WebhookFlags,
}

/// Runs the webhooks until SIGTERM/SIGINT.
pub async fn run(cfg: Config, args: AdmissionArgs) -> anyhow::Result<()> {
    let signals = process::signals()?;
    let listener = server::bind(args.health_probe_bind_address).await?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster config)")?;
    let lease = args.leader_elect.then(|| leader::LeaseSpec {
        namespace: args.leader_elect_namespace.clone(),
        name: args.leader_elect_name.clone(),
        identity: leader::identity(),
    });
    let leadership = process::leadership(&client, lease.as_ref()).await?;
    let mut registry = Registry::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let handle = admission::start(
        client,
        args.webhook.options(cfg),
        &mut registry,
        leadership.receiver(),
        crate::sync::until_true(stop_rx),
    )
    .await?;
    let components = vec![process::Component {
        name: "admission",
        ready: handle.ready.clone(),
        stopped: handle.stopped.clone(),
    }];
    process::serve(leadership, registry, components, stop_tx, listener, signals).await
}
