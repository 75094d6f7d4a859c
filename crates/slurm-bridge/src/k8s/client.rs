//! The bridge's Kubernetes client: kube's own stack (base URI, retries, authentication, extra
//! headers, its TLS configuration), but speaking HTTP/2 to the API server when it offers it, as
//! client-go does. kube's default client speaks HTTP/1.1 only, one connection per request in
//! flight: in a burst the bridge kept about 140 TLS connections open to the API server (its
//! workers' Bindings, the label patches, reports and Events, and a watch each), each with its
//! own TLS state and read buffers, several MiB at 10,000 pods (docs/performance.md). Over HTTP/2
//! they are streams of one connection; dead connections are found by pings, as client-go's
//! `ReadIdleTimeout` does.

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ClientBuilder;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use std::time::Duration;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// How often an idle HTTP/2 connection is pinged (client-go's `ReadIdleTimeout`, 30 s).
const PING_INTERVAL: Duration = Duration::from_secs(30);

/// How long a ping may go unanswered before the connection is dropped and its requests fail
/// (client-go's `PingTimeout`, 15 s); watches then start again on a new connection.
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// The service under [`builder`]'s clients.
pub type Service = tower::util::BoxService<
    hyper::Request<kube::client::Body>,
    hyper::Response<hyper::body::Incoming>,
    BoxError,
>;

/// A client builder for `config`: HTTP/2 (HTTP/1.1 where the server does not offer it) over
/// kube's TLS configuration. Not for a kubeconfig with a `proxy-url`: kube's own stack
/// (`ClientBuilder::try_from`) knows proxies.
pub fn builder(config: kube::Config) -> Result<ClientBuilder<Service>, kube::Error> {
    let default_ns = config.default_namespace.clone();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_nodelay(true);
    let tls = config.rustls_client_config()?;
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(|e| kube::Error::Service(format!("tls-server-name {name:?}: {e}").into()))?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let connector = https.enable_http1().enable_http2().wrap_connector(http);
    let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client);
    Ok(ClientBuilder::new(
        tower::util::BoxService::new(service),
        default_ns,
    ))
}
