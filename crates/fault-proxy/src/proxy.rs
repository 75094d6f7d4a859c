//! The proxy: accepts HTTP/1.1 (optionally over TLS), draws a fault per request, and forwards
//! the rest to the server over a pooled client (TLS re-originated for `https` servers).

use crate::error::{Error, Result};
use crate::faults::{Counters, Draw, Fault, Faults, Stats};
use crate::tls;
use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

type Body = BoxBody<Bytes, hyper::Error>;
type Upstreams = Client<hyper_rustls::HttpsConnector<HttpConnector>, Incoming>;

/// The server the proxy forwards to, and how it talks TLS to it.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// `http://host:port` or `https://host:port`; request paths are appended.
    pub url: Uri,
    /// PEM of the CA the server's certificate is checked against (`https` only).
    pub ca_pem: Option<String>,
    /// PEM client certificate and key the proxy presents (kube-apiserver's client auth).
    pub identity: Option<(String, String)>,
}

impl Upstream {
    /// A plain-HTTP server such as slurmrestd.
    pub fn plain(url: &str) -> Result<Self> {
        Ok(Upstream {
            url: parse_url(url)?,
            ca_pem: None,
            identity: None,
        })
    }
}

pub(crate) fn parse_url(url: &str) -> Result<Uri> {
    let uri: Uri = url
        .trim_end_matches('/')
        .parse()
        .map_err(|e| Error::Upstream(format!("{url:?}: {e}")))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(uri),
        _ => Err(Error::Upstream(format!(
            "{url:?}: expected http://HOST:PORT or https://HOST:PORT"
        ))),
    }
}

/// The proxy's serving certificate and key (PEM), to terminate TLS.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
}

/// How to start a proxy.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    pub upstream: Upstream,
    /// Where to listen; port 0 picks a free one (default `127.0.0.1:0`).
    pub listen: SocketAddr,
    /// Terminate TLS with this certificate (`None`: plain HTTP).
    pub serve_tls: Option<ServerTls>,
    pub faults: Faults,
    /// Seed of the fault draws (default: from the clock).
    pub seed: Option<u64>,
}

impl ProxyOptions {
    /// No faults yet, plain HTTP on a free loopback port.
    pub fn new(upstream: Upstream) -> Self {
        ProxyOptions {
            upstream,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            serve_tls: None,
            faults: Faults::none(),
            seed: None,
        }
    }
}

pub(crate) struct State {
    pub faults: RwLock<Faults>,
    pub counters: Counters,
    draw: Draw,
    client: Upstreams,
    upstream: Uri,
}

/// A running proxy; dropping it closes the listener and every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    url: String,
    pub(crate) state: Arc<State>,
    shutdown: watch::Sender<bool>,
}

impl FaultProxy {
    /// Binds the listener and starts serving.
    pub async fn start(opts: ProxyOptions) -> Result<FaultProxy> {
        opts.faults.validate()?;
        let client_tls = tls::client_config(
            opts.upstream.ca_pem.as_deref(),
            opts.upstream
                .identity
                .as_ref()
                .map(|(c, k)| (c.as_str(), k.as_str())),
        )?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client_tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let acceptor = match &opts.serve_tls {
            Some(t) => Some(tokio_rustls::TlsAcceptor::from(Arc::new(
                tls::server_config(&t.cert_pem, &t.key_pem)?,
            ))),
            None => None,
        };
        let listener = TcpListener::bind(opts.listen)
            .await
            .map_err(|source| Error::Listen {
                addr: opts.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: opts.listen,
            source,
        })?;
        let seed = opts.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
        let state = Arc::new(State {
            faults: RwLock::new(opts.faults),
            counters: Counters::default(),
            draw: Draw::new(seed),
            client,
            upstream: opts.upstream.url.clone(),
        });
        let (shutdown, stop) = watch::channel(false);
        tokio::spawn(accept_loop(listener, acceptor, state.clone(), stop));
        let scheme = if opts.serve_tls.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!(%addr, upstream = %opts.upstream.url, seed, "fault proxy listening");
        Ok(FaultProxy {
            addr,
            url: format!("{scheme}://{addr}"),
            state,
            shutdown,
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://` or `https://` and the listening address: what the client is given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Changes the fault rates from the next request on.
    pub fn set_faults(&self, faults: Faults) -> Result<()> {
        faults.validate()?;
        tracing::info!(?faults, "fault proxy: faults changed");
        *self.state.faults.write().unwrap_or_else(|e| e.into_inner()) = faults;
        Ok(())
    }

    /// The rates in force.
    pub fn faults(&self) -> Faults {
        self.state
            .faults
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What was forwarded and injected so far.
    pub fn stats(&self) -> Stats {
        self.state.counters.snapshot()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "fault proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = tcp.set_nodelay(true);
        let (state, acceptor, mut stop) = (state.clone(), acceptor.clone(), stop.clone());
        tokio::spawn(async move {
            let served = async {
                match acceptor {
                    Some(a) => match a.accept(tcp).await {
                        Ok(tls) => serve(TokioIo::new(tls), state).await,
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "fault proxy: TLS handshake failed")
                        }
                    },
                    None => serve(TokioIo::new(tcp), state).await,
                }
            };
            tokio::select! {
                _ = served => {}
                _ = stop.changed() => {}
            }
        });
    }
}

/// The error a service returns to make hyper close the connection without an answer.
#[derive(Debug, thiserror::Error)]
#[error("fault proxy: {0}")]
struct Dropped(&'static str);

async fn serve<I>(io: I, state: Arc<State>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| handle(state.clone(), req));
    // Errors here are the injected resets and stalls, or the client going away.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .await;
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> std::result::Result<Response<Body>, Dropped> {
    state
        .counters
        .requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let fault = {
        let faults = state.faults.read().unwrap_or_else(|e| e.into_inner());
        // Every request draws, so a run's draws do not depend on the routes.
        let u = state.draw.next();
        faults
            .applies_to(req.method().as_str(), req.uri().path())
            .then(|| faults.pick(u))
            .flatten()
    };
    if let Some(f) = fault {
        state.counters.count(f);
        tracing::debug!(fault = ?f, method = %req.method(), path = %req.uri().path(), "fault proxy: injecting");
    }
    match fault {
        None => Ok(forward(&state, req).await),
        Some(Fault::Latency(d)) => {
            tokio::time::sleep(d).await;
            Ok(forward(&state, req).await)
        }
        Some(Fault::Reset) => Err(Dropped("injected connection reset")),
        Some(Fault::Stall(d)) => {
            tokio::time::sleep(d).await;
            Err(Dropped("injected stall"))
        }
        Some(Fault::Error5xx) => Ok(status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
        )),
        Some(Fault::LostAnswer) => {
            // The server acts on the request; its answer goes nowhere.
            let _ = forward(&state, req).await;
            Err(Dropped("injected lost answer"))
        }
        Some(Fault::SlowAnswer(d)) => {
            let answer = forward(&state, req).await;
            tokio::time::sleep(d).await;
            Ok(answer)
        }
        Some(Fault::Throttle429) => {
            let mut r = status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests");
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            Ok(r)
        }
    }
}

/// An answer of the proxy's own: a Kubernetes `Status` body, which slurmrestd clients take as
/// an error body too.
fn status(code: StatusCode, reason: &str) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("fault-proxy: injected {}", code.as_u16()),
        "reason": reason, "code": code.as_u16(),
    })
    .to_string();
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Headers that belong to one hop, not to the request.
const HOP_BY_HOP: &[header::HeaderName] = &[
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::HOST,
];

async fn forward(state: &State, req: Request<Incoming>) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let base = &state.upstream;
    let uri = format!(
        "{}://{}{}",
        base.scheme_str().unwrap_or("http"),
        base.authority().map_or("", |a| a.as_str()),
        pq
    );
    parts.uri = match uri.parse() {
        Ok(u) => u,
        Err(_) => return status(StatusCode::BAD_REQUEST, "BadRequest"),
    };
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    parts.headers.remove("keep-alive");
    parts.version = http::Version::HTTP_11;
    match state.client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            state
                .counters
                .forwarded
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (mut parts, body) = resp.into_parts();
            for h in HOP_BY_HOP {
                parts.headers.remove(h);
            }
            parts.headers.remove("keep-alive");
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => {
            state
                .counters
                .upstream_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(error = %e, "fault proxy: upstream unreachable");
            status(StatusCode::BAD_GATEWAY, "BadGateway")
        }
    }
}
