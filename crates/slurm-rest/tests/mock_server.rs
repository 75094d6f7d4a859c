//! Client behaviour that real Slurm cannot show on demand (exact headers, scripted 503s,
//! slow answers), checked against a small in-process HTTP server on 127.0.0.1.

mod common;

use common::{mock, reply};
use slurm_rest::{Client, ErrorKind, RetryPolicy, TokenProvider};
use std::time::Duration;

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(20),
    }
}

#[tokio::test]
async fn sends_token_user_and_path_prefix() {
    let m = mock(vec![reply(
        200,
        r#"{"job_id": 42, "step_id": "batch", "extra": 1}"#,
    )])
    .await;
    let client = Client::builder(format!("{}/prefix/", m.url))
        .token(TokenProvider::Static("tok-123".into()))
        .user_name(Some("slurm".into()))
        .build()
        .unwrap();
    let desc = slurm_rest::models::JobDescMsg {
        name: Some("j".into()),
        ..Default::default()
    };
    let r = client.submit_job(&desc).await.unwrap();
    assert_eq!(r.job_id, 42);
    let seen = m.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].uri, "/prefix/slurm/v0.0.44/job/submit");
    assert_eq!(seen[0].header("x-slurm-user-token"), Some("tok-123"));
    assert_eq!(seen[0].header("x-slurm-user-name"), Some("slurm"));
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    assert_eq!(seen[0].body, r#"{"job":{"name":"j"}}"#);
    assert!(!format!("{client:?}").contains("tok-123"));
}

#[tokio::test]
async fn retries_transient_reads_but_not_submits() {
    let unavailable = reply(503, "");
    let m = mock(vec![
        unavailable.clone(),
        unavailable.clone(),
        reply(200, r#"{"pings": []}"#),
    ])
    .await;
    let client = Client::builder(&m.url).retry(fast_retry()).build().unwrap();
    client.ping().await.unwrap();
    assert_eq!(m.seen.lock().unwrap().len(), 3);
    let stats = client.clone().stats();
    assert_eq!((stats.requests, stats.retries, stats.failures), (3, 2, 2));

    let m = mock(vec![unavailable.clone(), unavailable]).await;
    let client = Client::builder(&m.url).retry(fast_retry()).build().unwrap();
    let e = client.submit_job(&Default::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient);
    assert_eq!(e.http_status(), Some(503));
    assert_eq!(
        m.seen.lock().unwrap().len(),
        1,
        "a submit that reached slurmrestd is not repeated"
    );
}

#[tokio::test]
async fn retries_are_bounded() {
    let unavailable = reply(502, "");
    let m = mock(vec![unavailable; 10]).await;
    let client = Client::builder(&m.url).retry(fast_retry()).build().unwrap();
    let e = client.nodes().await.unwrap_err();
    assert!(e.is_transient());
    assert_eq!(m.seen.lock().unwrap().len(), 4);
}

#[tokio::test]
async fn slow_answers_time_out_as_transient() {
    let m = mock(vec![(200, "{}".to_string(), Duration::from_secs(5))]).await;
    let client = Client::builder(&m.url)
        .timeout(Duration::from_millis(200))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let e = client.jobs(None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient);
    assert!(e.to_string().contains("no answer"), "{e}");
}

#[tokio::test]
async fn connection_refused_is_transient_and_retried_even_for_submit() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = Client::builder(&url).retry(fast_retry()).build().unwrap();
    let e = client.submit_job(&Default::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient);
    assert_eq!(e.http_status(), None);
    assert!(e.to_string().contains("cannot reach slurmrestd"), "{e}");
}

#[tokio::test]
async fn query_strings_and_path_encoding() {
    let m = mock(vec![
        reply(
            200,
            r#"{"jobs": [], "last_update": {"set": true, "number": 5}}"#,
        ),
        reply(200, r#"{"status": []}"#),
        reply(200, r#"{"nodes": []}"#),
    ])
    .await;
    let client = Client::builder(&m.url).build().unwrap();
    let r = client.jobs(Some(1700000000)).await.unwrap();
    assert_eq!(r.last_update.get(), Some(5));
    client
        .cancel_job(
            7,
            Some("SIGTERM"),
            Some(&[slurm_rest::models::SignalFlag::FullJob]),
        )
        .await
        .unwrap();
    let e = client.node("a b/c").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let seen = m.seen.lock().unwrap().clone();
    assert_eq!(seen[0].uri, "/slurm/v0.0.44/jobs/?update_time=1700000000");
    assert_eq!(
        seen[1].uri,
        "/slurm/v0.0.44/job/7?signal=SIGTERM&flags=FULL_JOB"
    );
    assert_eq!(seen[1].method, "DELETE");
    assert_eq!(seen[2].uri, "/slurm/v0.0.44/node/a%20b%2Fc");
}

#[test]
fn bad_base_urls_are_rejected() {
    for bad in ["", "ftp://x", "127.0.0.1:6820", "http://x/?q=1"] {
        let e = Client::builder(bad).build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRequest, "{bad}");
    }
    let c = Client::builder("https://slurm.example:6820/api/")
        .build()
        .unwrap();
    assert_eq!(c.base_url(), "https://slurm.example:6820/api");
}

#[tokio::test]
async fn https_base_url_with_a_custom_root() {
    use std::sync::Arc;
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert_der = cert.cert.der().clone();
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(
        rustls::pki_types::PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()),
    );
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_cfg = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone()], key_der)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let body = format!(
                            r#"{{"pings":[{{"hostname":"tls","responding":true,"primary":true}}],"path":"{}","token":"{}"}}"#,
                            req.uri().path(),
                            req.headers()
                                .get("x-slurm-user-token")
                                .map(|v| v.to_str().unwrap_or(""))
                                .unwrap_or("")
                        );
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(body)),
                        ))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).unwrap();
    let client_cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let url = format!("https://127.0.0.1:{port}/api");
    let client = Client::builder(&url)
        .token(TokenProvider::Static("tls-token".into()))
        .tls_config(client_cfg)
        .build()
        .unwrap();
    let pings = client.ping().await.unwrap();
    assert_eq!(pings[0].hostname.as_deref(), Some("tls"));

    // The default roots (webpki) do not trust the self-signed certificate.
    let default_roots = Client::builder(&url)
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let e = default_roots.ping().await.unwrap_err();
    assert!(e.to_string().contains("cannot reach slurmrestd"), "{e}");
}

/// A 304 is an answer only to the request that asked conditionally (`nodes_since`); to any
/// other it stays the error it was.
#[tokio::test]
async fn a_304_is_unchanged_only_where_asked_for() {
    let m = mock(vec![reply(304, ""), reply(304, "")]).await;
    let client = Client::builder(&m.url)
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    assert_eq!(
        client.nodes_since(Some(7)).await.unwrap(),
        slurm_rest::models::NodeListing::Unchanged
    );
    let e = client.nodes().await.unwrap_err();
    assert_eq!(e.http_status(), Some(304), "{e}");
    assert!(
        e.to_string().contains("(HTTP 304)"),
        "the answer, not a decode error: {e}"
    );
    let seen = m.seen.lock().unwrap().clone();
    assert_eq!(seen[0].uri, "/slurm/v0.0.44/nodes/?update_time=7");
    assert_eq!(seen[1].uri, "/slurm/v0.0.44/nodes/");
}
