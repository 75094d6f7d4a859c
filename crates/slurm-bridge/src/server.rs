//! `/healthz`, `/readyz` and `/metrics` for every subcommand.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Clone)]
struct Probe {
    ready: Readiness,
    registry: Arc<Registry>,
}

/// What `/readyz` reads.
#[derive(Clone)]
enum Readiness {
    /// Ready while true (caches synced, not shutting down).
    Flag(watch::Receiver<bool>),
    /// Ready while `None`; otherwise why not, as `/readyz` says it (the node agent).
    Reason(watch::Receiver<Option<String>>),
}

/// Binds the probe address (so a taken port fails at start, with its address).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("binding the probe address {addr}: {e}"))
    })
}

/// Serves the probes and metrics on `listener` until `shutdown` completes. `/readyz` answers 200
/// while `ready` is true (caches synced, not shutting down), 503 otherwise; `/healthz` answers 200
/// as long as the process serves, through a graceful shutdown too.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ready: watch::Receiver<bool>,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, router(ready, registry), shutdown).await
}

/// [`serve`] where readiness carries its reason: `/readyz` answers 200 while `not_ready` is
/// `None`, else 503 with `not ready: <reason>`.
pub async fn serve_with_reason(
    listener: tokio::net::TcpListener,
    not_ready: watch::Receiver<Option<String>>,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, router_with_reason(not_ready, registry), shutdown).await
}

async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// The probe routes (public for tests).
pub fn router(ready: watch::Receiver<bool>, registry: Arc<Registry>) -> Router {
    routes(Readiness::Flag(ready), registry)
}

/// The probe routes of [`serve_with_reason`] (public for tests).
pub fn router_with_reason(
    not_ready: watch::Receiver<Option<String>>,
    registry: Arc<Registry>,
) -> Router {
    routes(Readiness::Reason(not_ready), registry)
}

fn routes(ready: Readiness, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Probe { ready, registry })
}

async fn readyz(State(p): State<Probe>) -> impl IntoResponse {
    let not_ready = match &p.ready {
        Readiness::Flag(ready) => {
            (!*ready.borrow()).then(|| "caches not synced yet, or shutting down".to_string())
        }
        Readiness::Reason(not_ready) => not_ready.borrow().clone(),
    };
    match not_ready {
        None => (StatusCode::OK, "ok".to_string()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")),
    }
}

async fn metrics(State(p): State<Probe>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &p.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get(app: &Router, path: &str) -> (StatusCode, String) {
        let resp = app
            .clone()
            .oneshot(axum::http::Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// `/readyz` says why it is not ready; `/healthz` answers meanwhile.
    #[tokio::test]
    async fn readiness_with_a_reason() {
        let (tx, rx) = watch::channel(Some("not registered yet".to_string()));
        let app = router_with_reason(rx, Arc::new(Registry::default()));
        assert_eq!(
            get(&app, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: not registered yet".into()
            )
        );
        assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
        tx.send_replace(None);
        assert_eq!(get(&app, "/readyz").await, (StatusCode::OK, "ok".into()));
        assert_eq!(get(&app, "/metrics").await.0, StatusCode::OK);
    }
}
