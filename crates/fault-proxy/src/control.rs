//! The control endpoint of a proxy run from the command line: `GET /faults`, `PUT /faults`
//! (a JSON [`Faults`]) and `GET /stats` on a plain-HTTP loopback port, and the client the
//! `fault-proxy set` and `stats` commands use (hyper's client).

use crate::error::{Error, Result};
use crate::faults::Faults;
use crate::proxy::FaultProxy;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

impl FaultProxy {
    /// Serves the control endpoint on `addr` (port 0: any); returns the bound address.
    pub async fn serve_control(self: &Arc<Self>, addr: SocketAddr) -> Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| Error::Listen { addr, source })?;
        let proxy = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let proxy = proxy.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let proxy = proxy.clone();
                        async move {
                            let answer = match proxy.upgrade() {
                                Some(p) => control(&p, req).await,
                                None => (StatusCode::GONE, "the proxy stopped".into()),
                            };
                            let mut r = Response::new(Full::new(Bytes::from(answer.1)));
                            *r.status_mut() = answer.0;
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Ok(bound)
    }
}

async fn control(p: &FaultProxy, req: Request<hyper::body::Incoming>) -> (StatusCode, String) {
    match (req.method().clone(), req.uri().path()) {
        (Method::GET, "/faults") => (StatusCode::OK, json(&p.faults())),
        (Method::GET, "/stats") => (StatusCode::OK, json(&p.stats())),
        (Method::PUT, "/faults") => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()),
            };
            let faults: Faults = match serde_json::from_slice(&body) {
                Ok(f) => f,
                Err(e) => return (StatusCode::BAD_REQUEST, format!("faults JSON: {e}")),
            };
            match p.set_faults(faults) {
                Ok(()) => (StatusCode::OK, json(&p.faults())),
                Err(e) => (StatusCode::BAD_REQUEST, e.to_string()),
            }
        }
        (m, path) => (
            StatusCode::NOT_FOUND,
            format!("{m} {path}: expected GET /faults, PUT /faults or GET /stats"),
        ),
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// One request to a control endpoint at `addr` (hyper's client, plain HTTP/1.1); returns the
/// body of a 200 answer. Connecting may take 2 s, the whole exchange 10 s.
pub async fn request(addr: &str, method: &str, path: &str, body: &str) -> Result<String> {
    use hyper_util::client::legacy::{Client, connect::HttpConnector};
    let fail = |message: String| Error::Control {
        addr: addr.to_string(),
        message,
    };
    let sock: SocketAddr = addr
        .parse()
        .map_err(|e| fail(format!("expected HOST:PORT: {e}")))?;
    let method: Method = method
        .parse()
        .map_err(|e| fail(format!("method {method:?}: {e}")))?;
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{sock}{path}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| fail(e.to_string()))?;
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    let client: Client<_, Full<Bytes>> =
        Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
    let exchange = async {
        let answer = client.request(req).await.map_err(|e| fail(e.to_string()))?;
        let status = answer.status();
        let body = answer
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    let (status, answer) = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| fail("no answer within 10 s".into()))??;
    if status != StatusCode::OK {
        return Err(fail(format!("{status}: {answer}")));
    }
    Ok(answer)
}
