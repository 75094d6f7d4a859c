//! The TLS server (bad input, certificate reload) and self-managed certificate files and
//! rotation.

use super::*;

/// A CA and a serving certificate for 127.0.0.1 in `dir`; returns the CA PEM.
pub(crate) fn write_certs(dir: &std::path::Path) -> String {
    let sm = certs::SelfManaged::new(dir.to_path_buf(), vec!["127.0.0.1".into()], vec![]);
    sm.ensure_files(SystemTime::now()).unwrap();
    sm.ca_bundle().unwrap()
}

/// A TLS connection to the test server at `addr`, trusting `ca_pem`.
async fn tls_connect(
    addr: std::net::SocketAddr,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(addr.ip().to_string()).unwrap();
    connector.connect(name, tcp).await.unwrap()
}

pub(crate) async fn https_post(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    path: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tls_connect(addr, ca_pem).await;
    let leaf = s.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body, leaf)
}

#[tokio::test]
async fn tls_server_survives_bad_input_and_reloads_certificates() {
    let dir = std::env::temp_dir().join(format!("sb-adm-unit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ca = write_certs(&dir);
    let certs = Arc::new(tls::CertReloader::load(&dir).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(crate::admission::server::serve_tls(
        listener,
        crate::admission::server::router(webhooks()),
        certs.clone(),
        crate::admission::server::ServeOptions {
            header_read_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(1),
            ..crate::admission::server::ServeOptions::new(false)
        },
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    ));
    // Bad input: 400 with a message, and the server keeps serving.
    for body in [
        &b"garbage"[..],
        b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}",
        b"",
    ] {
        let (status, msg, _) = https_post(addr, &ca, "/validate--v1-pod", body).await;
        assert_eq!(status, 400, "{msg}");
        assert!(!msg.trim().is_empty());
    }
    let good = review_json("CREATE", pod_json(), None).to_string();
    let (status, body, leaf1) = https_post(addr, &ca, "/mutate--v1-pod", good.as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("JSONPatch"));
    // A plain-HTTP client gets no answer, and the server goes on.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
        plain.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = Vec::new();
        let _ = plain.read_to_end(&mut buf).await;
        assert!(!String::from_utf8_lossy(&buf).contains("200 OK"));
    }
    // A kept-alive connection idle for longer than the header limit still serves its next
    // request (the API server reuses idle connections for up to 90 s and does not retry a POST
    // the server closed under it).
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tls_connect(addr, &ca).await;
        let request =
            b"POST /validate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\ngarbage";
        for round in 0..2 {
            if round == 1 {
                // The client pausing: three header limits.
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
            conn.write_all(request).await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            // One whole response: headers, then Content-Length bytes of body.
            let complete = |got: &[u8]| {
                let text = String::from_utf8_lossy(got);
                let Some((head, body)) = text.split_once("\r\n\r\n") else {
                    return false;
                };
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                body.len() >= len
            };
            while !complete(&got) {
                let n = conn.read(&mut buf).await.unwrap();
                assert!(
                    n > 0,
                    "round {round}: the server closed the kept-alive connection"
                );
                got.extend_from_slice(&buf[..n]);
            }
            assert!(
                got.starts_with(b"HTTP/1.1 400"),
                "{}",
                String::from_utf8_lossy(&got)
            );
        }
    }
    // A client that stops in the middle of its headers is disconnected, and the server goes on.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut slow = tls_connect(addr, &ca).await;
        slow.write_all(b"POST /validate--v1-pod HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut buf)).await;
        assert!(
            closed.is_ok(),
            "a client with half-sent headers still holds its connection after 20 s"
        );
        // One that sends its headers but not all of its body gets 408.
        let mut slow = tls_connect(addr, &ca).await;
        slow.write_all(
            b"POST /validate--v1-pod HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\"",
        )
        .await
        .unwrap();
        let mut buf = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut buf)).await;
        assert!(
            closed.is_ok(),
            "a client with a half-sent body still holds its connection after 20 s"
        );
        let text = String::from_utf8_lossy(&buf);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    }
    // Rotation: a new pair in the dir (same CA) is served to new connections.
    let sm = certs::SelfManaged::new(dir.clone(), vec!["127.0.0.1".into()], vec![]);
    std::fs::remove_file(dir.join("tls.crt")).unwrap();
    sm.ensure_files(SystemTime::now()).unwrap();
    assert!(certs.reload().unwrap());
    let (status, _, leaf2) = https_post(addr, &ca, "/validate--v1-pod", good.as_bytes()).await;
    assert_eq!(status, 200);
    assert_ne!(leaf1, leaf2);
    // A half-written pair (a certificate without its key) keeps the previous one.
    let other = std::env::temp_dir().join(format!("sb-adm-unit-other-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&other);
    write_certs(&other);
    std::fs::copy(other.join("tls.crt"), dir.join("tls.crt")).unwrap();
    assert!(matches!(
        certs.reload(),
        Err(tls::TlsError::Mismatch { .. })
    ));
    let (status, _, leaf3) = https_post(addr, &ca, "/validate--v1-pod", good.as_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(leaf2, leaf3);
    stop_tx.send_replace(true);
    server.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&other);
}

#[test]
fn self_managed_files_and_rotation() {
    let dir = std::env::temp_dir().join(format!("sb-adm-certs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let names = vec!["127.0.0.1".to_string(), "webhook.ns.svc".to_string()];
    let mut sm = certs::SelfManaged::new(dir.clone(), names, vec![]);
    sm.validity = Duration::from_secs(3600);
    sm.ca_validity = Duration::from_secs(4 * 3600);
    sm.renew_before = Duration::from_secs(600);
    let now = SystemTime::now();
    let first = sm.ensure_files(now).unwrap();
    assert!(first.ca_rotated && first.serving_rotated);
    let key_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.join("tls.key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(key_mode & 0o777, 0o600);
    // Nothing due: nothing changes.
    assert_eq!(sm.ensure_files(now).unwrap(), certs::PassOutcome::default());
    let ca1 = sm.ca_bundle().unwrap();
    let leaf = std::fs::read(dir.join("tls.crt")).unwrap();
    // The certificate's notAfter is read back (within the validity asked).
    let der: Vec<u8> = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_slice(&leaf)
            .unwrap()
            .to_vec()
    };
    let until = certs::not_after(&der).unwrap();
    let left = until.duration_since(now).unwrap();
    assert!(
        left <= Duration::from_secs(3600) && left > Duration::from_secs(3500),
        "{left:?}"
    );
    // 55 minutes later the serving certificate is within its renewal margin.
    let later = now + Duration::from_secs(55 * 60);
    let o = sm.ensure_files(later).unwrap();
    assert!(o.serving_rotated && !o.ca_rotated);
    assert_ne!(std::fs::read(dir.join("tls.crt")).unwrap(), leaf);
    // 3 hours later the CA is too close to its end: a new one, and the old one stays in the bundle.
    let o = sm
        .ensure_files(now + Duration::from_secs(3 * 3600))
        .unwrap();
    assert!(o.ca_rotated && o.serving_rotated);
    let ca2 = sm.ca_bundle().unwrap();
    assert_eq!(ca2.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(ca2.ends_with(&ca1));
    // Once the old CA has expired it leaves the bundle.
    let o = sm
        .ensure_files(now + Duration::from_secs(4 * 3600 + 60))
        .unwrap();
    assert!(o.ca_rotated);
    assert_eq!(
        sm.ca_bundle().unwrap().matches("BEGIN CERTIFICATE").count(),
        1
    );
    // Names change: reissued.
    sm.names.push("other.ns.svc".into());
    assert!(
        sm.ensure_files(now + Duration::from_secs(4 * 3600 + 60))
            .unwrap()
            .serving_rotated
    );
    // Bad names are refused.
    sm.names = vec!["not a name!".into()];
    assert!(sm.validate().is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
