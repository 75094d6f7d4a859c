//! The fault proxy against a small real HTTP server (plain and TLS with client certificates):
//! each fault kind as a client sees it, rates changed while running, the drawn rate, the CLI.

use bytes::Bytes;
use fault_proxy::{FaultProxy, Faults, ProxyOptions, ServerTls, Upstream};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

type TestClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server answering `ok <path>` to everything, over TLS when `tls` is given.
async fn upstream(tls: Option<rustls::ServerConfig>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let body = format!("ok {}", req.uri().path());
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            body,
                        ))))
                    });
                let http = hyper::server::conn::http1::Builder::new();
                match acceptor {
                    Some(a) => {
                        if let Ok(s) = a.accept(tcp).await {
                            let _ = http.serve_connection(TokioIo::new(s), svc).await;
                        }
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
                    }
                }
            });
        }
    });
    addr
}

fn client(ca: Option<&str>) -> TestClient {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
    }
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(cfg)
        .https_or_http()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(conn)
}

/// GET `url`: the status, the Retry-After header and the body, or the client's error.
async fn get(c: &TestClient, url: &str) -> Result<(StatusCode, Option<String>, String), String> {
    let req = Request::get(url).body(Full::new(Bytes::new())).unwrap();
    let resp = c.request(req).await.map_err(|e| format!("{e:?}"))?;
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok((
        status,
        retry,
        String::from_utf8_lossy(&body.to_bytes()).into(),
    ))
}

async fn plain_proxy(faults: Faults) -> FaultProxy {
    let up = upstream(None).await;
    let mut opts = ProxyOptions::new(Upstream::plain(&format!("http://{up}")).unwrap());
    opts.faults = faults;
    opts.seed = Some(42);
    FaultProxy::start(opts).await.unwrap()
}

#[tokio::test]
async fn each_fault_kind_is_seen_by_the_client() {
    let proxy = plain_proxy(Faults::none()).await;
    let c = client(None);
    let url = format!("{}/a/b?x=1", proxy.url());
    assert_eq!(get(&c, &url).await.unwrap().2, "ok /a/b");

    proxy
        .set_faults(Faults {
            latency: 1.0,
            latency_ms: 400,
            ..Faults::none()
        })
        .unwrap();
    let t = Instant::now();
    assert_eq!(get(&c, &url).await.unwrap().0, StatusCode::OK);
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );

    proxy
        .set_faults(Faults {
            reset: 1.0,
            ..Faults::none()
        })
        .unwrap();
    let e = get(&c, &url).await.unwrap_err();
    assert!(
        e.contains("IncompleteMessage") || e.contains("closed"),
        "{e}"
    );

    proxy
        .set_faults(Faults {
            error_5xx: 1.0,
            ..Faults::none()
        })
        .unwrap();
    let (s, _, body) = get(&c, &url).await.unwrap();
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("injected 503"), "{body}");

    proxy
        .set_faults(Faults {
            throttle_429: 1.0,
            ..Faults::none()
        })
        .unwrap();
    let (s, retry, _) = get(&c, &url).await.unwrap();
    assert_eq!(
        (s, retry.as_deref()),
        (StatusCode::TOO_MANY_REQUESTS, Some("1"))
    );

    proxy
        .set_faults(Faults {
            stall: 1.0,
            stall_ms: 1_500,
            ..Faults::none()
        })
        .unwrap();
    let stalled = tokio::time::timeout(Duration::from_millis(700), get(&c, &url)).await;
    assert!(stalled.is_err(), "no answer while stalled: {stalled:?}");
    let t = Instant::now();
    let e = get(&c, &url).await.unwrap_err();
    assert!(
        t.elapsed() >= Duration::from_millis(1_400),
        "closed after the stall: {e}"
    );

    // Changed back while running: forwarded again.
    proxy.set_faults(Faults::none()).unwrap();
    assert_eq!(get(&c, &url).await.unwrap().2, "ok /a/b");
    let s = proxy.stats();
    assert_eq!(
        (s.latency, s.reset, s.error_5xx, s.throttle_429, s.stall),
        (1, 1, 1, 1, 2),
        "{s:?}"
    );
    assert_eq!((s.requests, s.forwarded, s.injected()), (8, 3, 6), "{s:?}");
}

#[tokio::test]
async fn a_rate_faults_about_that_share_of_requests() {
    let proxy = plain_proxy(Faults {
        error_5xx: 0.25,
        ..Faults::none()
    })
    .await;
    let c = client(None);
    let mut failed = 0;
    for i in 0..400 {
        let (s, _, _) = get(&c, &format!("{}/r{i}", proxy.url())).await.unwrap();
        failed += usize::from(s == StatusCode::SERVICE_UNAVAILABLE);
    }
    assert!((60..140).contains(&failed), "{failed} of 400 at 25 %");
    assert_eq!(proxy.stats().error_5xx, failed as u64);
}

#[tokio::test]
async fn bad_rates_are_refused_and_an_unreachable_server_is_a_502() {
    let proxy = plain_proxy(Faults::none()).await;
    let e = proxy
        .set_faults(Faults {
            stall: -0.1,
            ..Faults::none()
        })
        .unwrap_err();
    assert!(e.to_string().contains("stall = -0.1"), "{e}");
    assert!(
        Upstream::plain("ftp://x")
            .unwrap_err()
            .to_string()
            .contains("expected http://")
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let p = FaultProxy::start(ProxyOptions::new(
        Upstream::plain(&format!("http://{closed}")).unwrap(),
    ))
    .await
    .unwrap();
    let (s, _, _) = get(&client(None), &format!("{}/x", p.url())).await.unwrap();
    assert_eq!(s, StatusCode::BAD_GATEWAY);
    assert_eq!(p.stats().upstream_errors, 1);
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all PEM.
struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        ca: ca_cert.pem(),
        server: leaf(vec!["127.0.0.1".into()]),
        client: leaf(vec!["client".into()]),
    }
}

#[tokio::test]
async fn tls_is_terminated_and_reoriginated_with_the_client_identity() {
    let pki = pki();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca.as_bytes()).unwrap())
        .unwrap();
    // The server insists on a client certificate from the CA, as kube-apiserver checks the admin's.
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(pki.server.0.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(pki.server.1.as_bytes()).unwrap(),
        )
        .unwrap();
    let up = upstream(Some(server)).await;
    let url = format!("https://{up}");
    let c = client(Some(&pki.ca));
    assert!(
        get(&c, &format!("{url}/direct")).await.is_err(),
        "no client certificate, no answer"
    );

    let mut opts = ProxyOptions::new(Upstream {
        url: url.parse().unwrap(),
        ca_pem: Some(pki.ca.clone()),
        identity: Some(pki.client.clone()),
    });
    opts.serve_tls = Some(ServerTls {
        cert_pem: pki.server.0.clone(),
        key_pem: pki.server.1.clone(),
    });
    let proxy = FaultProxy::start(opts).await.unwrap();
    assert!(proxy.url().starts_with("https://"));
    assert_eq!(
        get(&c, &format!("{}/via", proxy.url())).await.unwrap().2,
        "ok /via"
    );
    proxy
        .set_faults(Faults {
            error_5xx: 1.0,
            ..Faults::none()
        })
        .unwrap();
    assert_eq!(
        get(&c, &format!("{}/via", proxy.url())).await.unwrap().0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn the_cli_runs_a_proxy_and_changes_its_faults_while_it_runs() {
    use std::io::{BufRead, BufReader};
    let up = upstream(None).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fault-proxy"))
        .args(["run", "--upstream", &format!("http://{up}"), "--seed", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let proxy = lines.next().unwrap().unwrap();
    let control = lines.next().unwrap().unwrap();
    let proxy = proxy
        .strip_prefix("PROXY=")
        .expect("PROXY= line")
        .to_string();
    let control = control
        .strip_prefix("CONTROL=")
        .expect("CONTROL= line")
        .to_string();
    let c = client(None);
    assert_eq!(
        get(&c, &format!("{proxy}/x")).await.unwrap().0,
        StatusCode::OK
    );

    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fault-proxy"))
            .args(args)
            .output()
            .unwrap()
    };
    let set = cli(&["set", "--control", &control, "--error-5xx", "1"]);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    assert_eq!(
        get(&c, &format!("{proxy}/x")).await.unwrap().0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let bad = cli(&["set", "--control", &control, "--reset", "0.5"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("sum to"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let stats = cli(&["stats", "--control", &control]);
    let stats: fault_proxy::Stats = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!((stats.requests, stats.error_5xx), (2, 1), "{stats:?}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A plain server answering `ok` and counting the requests it handled.
async fn counting_upstream() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        async {
                            Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                                Bytes::from("ok"),
                            )))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, count)
}

/// Answers lost after the server acted, and answers held: the server sees the request, the
/// client an error (or the answer late); only the routes named are faulted.
#[tokio::test]
async fn answers_are_lost_or_held_after_the_server_acted_on_the_routes_named() {
    let (up, handled) = counting_upstream().await;
    let mut opts = ProxyOptions::new(Upstream::plain(&format!("http://{up}")).unwrap());
    opts.faults = Faults::lost_answers(1.0, &["GET /act"]);
    let proxy = FaultProxy::start(opts).await.unwrap();
    let c = client(None);
    let handled_now = || handled.load(std::sync::atomic::Ordering::SeqCst);

    let e = get(&c, &format!("{}/act", proxy.url())).await.unwrap_err();
    assert!(
        e.contains("IncompleteMessage") || e.contains("closed"),
        "{e}"
    );
    assert_eq!(handled_now(), 1, "the server acted on the request");
    assert_eq!(proxy.stats().lost_answer, 1);
    // Another route passes untouched.
    assert_eq!(
        get(&c, &format!("{}/other", proxy.url())).await.unwrap().0,
        StatusCode::OK
    );
    assert_eq!(handled_now(), 2);

    proxy
        .set_faults(Faults {
            slow_answer: 1.0,
            slow_answer_ms: 300,
            ..Faults::none()
        })
        .unwrap();
    let t = Instant::now();
    assert_eq!(
        get(&c, &format!("{}/act", proxy.url())).await.unwrap().2,
        "ok"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(handled_now(), 3);
    assert_eq!(proxy.stats().slow_answer, 1);
}
