//! The admission webhooks (reference §3): pods in managed namespaces go to the bridge
//! scheduler, and scheduler-owned state is protected. See `docs/admission.md`.
//!
//! - [`managed`]: which pods are taken, the managed-namespace predicate (watch cache);
//! - [`mutate`], [`validate`]: the decisions, as pure functions over the request;
//! - [`review`]: `AdmissionReview` decoding and responses;
//! - [`tls`]: the serving certificate, reloaded on change;
//! - [`certs`]: self-managed CA, serving certificate, `caBundle` sync and rotation;
//! - [`server`]: the HTTPS server; [`start`] runs it all as one component.

pub mod certs;
pub mod deadlines;
pub mod managed;
pub mod mutate;
pub mod review;
pub mod server;
pub mod tenancy;
pub mod tls;
pub mod validate;

use crate::config::Config;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// The controller-runtime default cert dir, which the Go original and its Helm chart use.
pub const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The webhook address could not be bound.
    #[error("binding the webhook address {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The serving certificate could not be loaded.
    #[error("serving certificate: {0}")]
    Tls(#[from] tls::TlsError),
    /// The self-managed certificates could not be made.
    #[error("self-managed certificates: {0}")]
    Certs(#[from] certs::CertError),
    /// The config cannot drive the webhook.
    #[error("{0}")]
    Config(String),
}

/// Settings of the webhook component.
#[derive(Debug, Clone)]
pub struct AdmissionOptions {
    /// The bridge config (`schedulerName`, `managedNamespaces`, `managedNamespaceSelector`).
    pub config: Config,
    /// HTTPS address.
    pub listen: SocketAddr,
    /// Directory of `tls.crt` and `tls.key`.
    pub cert_dir: PathBuf,
    /// Offer HTTP/2 (ALPN `h2`); off by default (HTTP/2 rapid-reset mitigation).
    pub enable_http2: bool,
    /// Interval of the certificate files' change check.
    pub cert_poll_interval: Duration,
    /// Self-managed certificates (their `dir` is `cert_dir`), or certificates provided.
    pub self_managed: Option<certs::SelfManaged>,
}

impl AdmissionOptions {
    /// Options with defaults: `0.0.0.0:9443`, the controller-runtime cert dir, HTTP/1.1 only,
    /// files checked every 5 s, certificates provided.
    pub fn new(config: Config) -> AdmissionOptions {
        AdmissionOptions {
            config,
            listen: SocketAddr::from(([0, 0, 0, 0], 9443)),
            cert_dir: PathBuf::from(DEFAULT_CERT_DIR),
            enable_http2: false,
            cert_poll_interval: Duration::from_secs(5),
            self_managed: None,
        }
    }
}

/// The running webhook component.
pub struct AdmissionHandle {
    /// True while it serves (certificate loaded, namespace cache synced, not stopping).
    pub ready: watch::Receiver<bool>,
    /// True once it has stopped.
    pub stopped: watch::Receiver<bool>,
    /// The bound HTTPS address (useful with port 0).
    pub local_addr: SocketAddr,
    /// The serving certificate in service.
    pub certs: Arc<tls::CertReloader>,
}

/// Starts the webhook: binds `opts.listen`, makes the self-managed certificates when asked
/// (their `caBundle` sync runs while `leading` is true), loads the certificate, starts the
/// namespace cache and serves until `stop` completes. Needs no leadership to serve.
pub async fn start(
    client: kube::Client,
    opts: AdmissionOptions,
    registry: &mut Registry,
    leading: watch::Receiver<bool>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<AdmissionHandle, AdmissionError> {
    if opts.config.scheduler_name.is_empty() {
        return Err(AdmissionError::Config(
            "schedulerName is not set in the config file: the webhook gives pods that scheduler name, e.g. slurm-bridge-scheduler".into(),
        ));
    }
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|source| AdmissionError::Bind {
            addr: opts.listen,
            source,
        })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| AdmissionError::Bind {
            addr: opts.listen,
            source,
        })?;
    if let Some(sm) = &opts.self_managed {
        sm.validate()?;
        sm.ensure_start(&client, SystemTime::now()).await?;
    }
    let certs = Arc::new(tls::CertReloader::load(&opts.cert_dir)?);

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        stop.await;
        stop_tx.send_replace(true);
    });
    let stopping = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let (namespaces, ns_task) = managed::Namespaces::start(
        &client,
        &opts.config.managed_namespaces,
        opts.config.managed_namespace_selector.as_ref(),
    );
    if let Some(task) = ns_task {
        let stop = stopping();
        tokio::spawn(async move {
            tokio::select! {
                _ = task => {}
                _ = stop => {}
            }
        });
    }
    tokio::spawn(certs.clone().watch(opts.cert_poll_interval, stopping()));
    if let Some(sm) = opts.self_managed.clone() {
        tokio::spawn(sm.run(client.clone(), leading, stopping()));
    }

    let webhooks = Arc::new(server::Webhooks {
        scheduler_name: opts.config.scheduler_name.clone(),
        tenancy: crate::tenancy::Tenancy::new(&opts.config, Some(client.clone())),
        config: opts.config.clone(),
        namespaces: namespaces.clone(),
        metrics: server::AdmissionMetrics::new(registry),
    });
    let (ready_tx, ready) = watch::channel(false);
    let (stopped_tx, stopped) = watch::channel(false);
    let app = server::router(webhooks);
    let serve = server::serve_tls(
        listener,
        app,
        certs.clone(),
        server::ServeOptions::new(opts.enable_http2),
        stopping(),
    );
    let ready_tx = Arc::new(ready_tx);
    let ready_tx2 = ready_tx.clone();
    let stop_for_ready = stopping();
    tokio::spawn(async move {
        let became_ready = async {
            loop {
                if namespaces.wait_ready(Duration::from_secs(30)).await {
                    ready_tx2.send_replace(true);
                    tracing::info!("admission webhooks ready");
                    return;
                }
                tracing::warn!("namespace cache not synced after 30 s; still waiting");
            }
        };
        tokio::pin!(stop_for_ready);
        tokio::select! {
            _ = became_ready => {}
            _ = &mut stop_for_ready => {}
        }
        stop_for_ready.await;
        ready_tx2.send_replace(false);
    });
    tokio::spawn(async move {
        let result = serve.await;
        ready_tx.send_replace(false);
        if let Err(e) = result {
            tracing::error!(error = %e, "admission webhook server failed");
        }
        stopped_tx.send_replace(true);
    });
    Ok(AdmissionHandle {
        ready,
        stopped,
        local_addr,
        certs,
    })
}

#[cfg(test)]
mod tests;
