//! The webhook's HTTPS server: `/mutate--v1-pod` and `/validate--v1-pod`.
//!
//! Every request gets an answer: an `AdmissionReview` response, or HTTP 400 with the reason
//! when the body is not a usable `AdmissionReview` (the connection and the server go on).

use super::deadlines::{Deadlines, Limits};
use super::managed::{Namespaces, needs_namespace};
use super::review::{self, AdmissionRequest, Verdict};
use super::{mutate, tls, validate};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::core::v1::Pod;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// Path of the mutating webhook.
pub const MUTATE_PATH: &str = "/mutate--v1-pod";
/// Path of the validating webhook.
pub const VALIDATE_PATH: &str = "/validate--v1-pod";
/// Largest request body accepted (a pod is at most ~1.5 MiB in etcd).
const BODY_LIMIT: usize = 8 << 20;

/// Which webhook.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Webhook {
    /// `/mutate--v1-pod`
    Mutate,
    /// `/validate--v1-pod`
    Validate,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    /// Allowed without a patch.
    Allowed,
    /// Allowed with a patch.
    Patched,
    /// Refused.
    Denied,
    /// The webhook could not decide.
    Errored,
    /// Not an AdmissionReview (HTTP 400).
    BadRequest,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    webhook: Webhook,
    outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabel {
    webhook: Webhook,
}

/// Request counters and latency.
#[derive(Clone)]
pub struct AdmissionMetrics {
    requests: Family<Labels, Counter>,
    duration: Family<WebhookLabel, Histogram, fn() -> Histogram>,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
    ])
}

impl AdmissionMetrics {
    /// Metrics nobody reads (tests).
    pub fn unregistered() -> AdmissionMetrics {
        AdmissionMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
        }
    }

    /// Registers the metrics.
    pub fn new(registry: &mut Registry) -> AdmissionMetrics {
        let m = AdmissionMetrics::unregistered();
        registry.register(
            "slurm_bridge_admission_requests",
            "Admission requests by webhook and outcome",
            m.requests.clone(),
        );
        registry.register(
            "slurm_bridge_admission_duration_seconds",
            "Time to answer an admission request",
            m.duration.clone(),
        );
        m
    }
}

/// What the handlers share.
pub struct Webhooks {
    /// The bridge scheduler name.
    pub scheduler_name: String,
    /// The bridge config (tenants, PriorityClass mappings).
    pub config: crate::config::Config,
    /// The tenancy policy ([`super::tenancy`]).
    pub tenancy: crate::tenancy::Tenancy,
    /// The managed-namespace predicate.
    pub namespaces: Namespaces,
    /// Metrics.
    pub metrics: AdmissionMetrics,
}

impl Webhooks {
    /// The answer to one decoded request.
    pub async fn decide(&self, webhook: Webhook, req: &AdmissionRequest<Pod>) -> Verdict {
        let needs = req
            .object
            .as_ref()
            .is_some_and(|pod| needs_namespace(req.operation.clone(), pod, &self.scheduler_name));
        let managed = if needs {
            match self.namespaces.is_managed(review::namespace(req)).await {
                Ok(m) => m,
                Err(e) => return Verdict::Error(e.to_string()),
            }
        } else {
            false
        };
        match webhook {
            Webhook::Mutate => Verdict::Allow(mutate::patch(req, &self.scheduler_name, managed)),
            Webhook::Validate => match validate::validate(
                req,
                &self.scheduler_name,
                managed,
                &self.config.gres_drivers(),
            ) {
                Ok(()) => match super::tenancy::check(
                    req,
                    &self.scheduler_name,
                    &self.config,
                    &self.tenancy,
                    managed,
                )
                .await
                {
                    Ok(()) => Verdict::allow(),
                    Err(Ok(refused)) => Verdict::Deny(refused),
                    Err(Err(e)) => Verdict::Error(e),
                },
                Err(m) => Verdict::Deny(m),
            },
        }
    }

    /// The HTTP answer to one body.
    pub async fn handle(&self, webhook: Webhook, body: &[u8]) -> Response {
        let start = Instant::now();
        let (response, outcome) = match review::decode(body) {
            Err(e) => {
                tracing::warn!(?webhook, error = %e, "bad admission request");
                (
                    (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
                    Outcome::BadRequest,
                )
            }
            Ok(req) => {
                let verdict = self.decide(webhook, &req).await;
                let outcome = match &verdict {
                    Verdict::Allow(p) if p.0.is_empty() => Outcome::Allowed,
                    Verdict::Allow(_) => Outcome::Patched,
                    Verdict::Deny(_) => Outcome::Denied,
                    Verdict::Error(_) => Outcome::Errored,
                };
                let meta = req.object.as_ref().map(|p| &p.metadata);
                let pod = meta
                    .and_then(|m| m.name.as_deref().or(m.generate_name.as_deref()))
                    .unwrap_or_default();
                let namespace = review::namespace(&req);
                match &verdict {
                    Verdict::Deny(m) => {
                        tracing::info!(?webhook, namespace, pod, operation = ?req.operation, message = %m, "denied")
                    }
                    Verdict::Error(m) => {
                        tracing::warn!(?webhook, namespace, pod, operation = ?req.operation, error = %m, "admission error")
                    }
                    Verdict::Allow(p) if !p.0.is_empty() => {
                        tracing::debug!(?webhook, namespace, pod, "patched")
                    }
                    Verdict::Allow(_) => {}
                }
                match serde_json::to_vec(&review::response(&req, &verdict)) {
                    Ok(body) => (
                        ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
                        outcome,
                    ),
                    Err(e) => {
                        tracing::error!(?webhook, error = %e, "encoding the admission answer");
                        (
                            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
                            Outcome::Errored,
                        )
                    }
                }
            }
        };
        self.metrics
            .requests
            .get_or_create(&Labels { webhook, outcome })
            .inc();
        self.metrics
            .duration
            .get_or_create(&WebhookLabel { webhook })
            .observe(start.elapsed().as_secs_f64());
        response
    }
}

/// The webhook routes (plain HTTP; [`serve_tls`] puts TLS in front).
pub fn router(webhooks: Arc<Webhooks>) -> Router {
    Router::new()
        .route(
            MUTATE_PATH,
            post(|State(w): State<Arc<Webhooks>>, body: Bytes| async move {
                w.handle(Webhook::Mutate, &body).await
            }),
        )
        .route(
            VALIDATE_PATH,
            post(|State(w): State<Arc<Webhooks>>, body: Bytes| async move {
                w.handle(Webhook::Validate, &body).await
            }),
        )
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(webhooks)
}

/// How the TLS server treats its connections: protocols, and how long a slow or silent client
/// may hold one.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Offer HTTP/2 by ALPN beside HTTP/1.1.
    pub enable_http2: bool,
    /// Longest TLS handshake.
    pub handshake_timeout: Duration,
    /// Longest wait for a request's headers on HTTP/1.1, from its first byte (from the
    /// connection's start for the first request).
    pub header_read_timeout: Duration,
    /// Longest wait of a kept-alive HTTP/1.1 connection for its next request: longer than the
    /// API server's webhook client keeps an idle connection (90 s), so the client closes first
    /// and never sends a request on a connection being closed (see [`super::deadlines`]).
    pub idle_timeout: Duration,
    /// Longest time for one request, its body included; the API server gives a webhook 30 s at
    /// most.
    pub request_timeout: Duration,
}

impl ServeOptions {
    /// The defaults: a client has 10 s for the handshake and for its headers, 30 s in all; an
    /// idle connection is kept 120 s.
    pub fn new(enable_http2: bool) -> Self {
        ServeOptions {
            enable_http2,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `app` over TLS on `listener` until `shutdown` completes: certificates from `certs`
/// (re-read on change by [`tls::CertReloader::watch`]), TLS 1.2 or newer, HTTP/1.1 (and HTTP/2
/// when asked). A failed handshake or connection only ends that connection; a client that is
/// slow to shake hands, send its headers or finish its request is disconnected (see
/// [`ServeOptions`]), so slow clients cannot hold connections forever.
pub async fn serve_tls(
    listener: TcpListener,
    app: Router,
    certs: Arc<tls::CertReloader>,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tls::TlsError> {
    let acceptor =
        tokio_rustls::TlsAcceptor::from(Arc::new(tls::server_config(certs, opts.enable_http2)?));
    let request_timeout = opts.request_timeout;
    let app = app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| async move {
            match tokio::time::timeout(request_timeout, next.run(req)).await {
                Ok(resp) => resp,
                Err(_) => (
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request was not complete within {} s",
                        request_timeout.as_secs()
                    ),
                )
                    .into_response(),
            }
        },
    ));
    tokio::pin!(shutdown);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, http2 = opts.enable_http2, "serving the admission webhooks over TLS");
    }
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a webhook connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let tls =
                match tokio::time::timeout(opts.handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let served = if h2 {
                let io = TokioIo::new(tls);
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                builder
                    .http2()
                    .timer(TokioTimer::new())
                    .keep_alive_interval(opts.header_read_timeout)
                    .keep_alive_timeout(opts.header_read_timeout);
                builder.http2_only().serve_connection(io, service).await
            } else {
                let limits = Limits {
                    header: opts.header_read_timeout,
                    idle: opts.idle_timeout,
                };
                // Our deadlines, not hyper's header_read_timeout (which counts idle time).
                hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(None)
                    .serve_connection(TokioIo::new(Deadlines::new(tls, limits)), service)
                    .await
                    .map_err(Into::into)
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
            }
        });
    }
}
