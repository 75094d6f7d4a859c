//! rustls configurations: the proxy's serving side and its client side towards the server.

use crate::error::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

fn tls_err(what: &str) -> impl Fn(String) -> Error + '_ {
    move |message| Error::Tls {
        what: what.to_string(),
        message,
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| tls_err(what)(e.to_string()))?;
    if certs.is_empty() {
        return Err(tls_err(what)("no PEM certificate found".into()));
    }
    Ok(certs)
}

fn key(pem: &str, what: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| tls_err(what)(format!("no PEM private key: {e}")))
}

/// The serving side: `cert_pem` (with its chain) and `key_pem`; HTTP/1.1 only.
pub(crate) fn server_config(cert_pem: &str, key_pem: &str) -> Result<rustls::ServerConfig> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("server")(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(
            certs(cert_pem, "serving certificate")?,
            key(key_pem, "serving key")?,
        )
        .map_err(|e| tls_err("serving certificate")(e.to_string()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The client side: trusts `ca_pem` (none: nothing, so only plain HTTP works) and presents
/// `identity` (certificate, key) when the server asks.
pub(crate) fn client_config(
    ca_pem: Option<&str>,
    identity: Option<(&str, &str)>,
) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca_pem {
        for c in certs(ca, "upstream CA")? {
            roots
                .add(c)
                .map_err(|e| tls_err("upstream CA")(e.to_string()))?;
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("client")(e.to_string()))?
        .with_root_certificates(roots);
    match identity {
        Some((cert, k)) => builder
            .with_client_auth_cert(certs(cert, "client certificate")?, key(k, "client key")?)
            .map_err(|e| tls_err("client certificate")(e.to_string())),
        None => Ok(builder.with_no_client_auth()),
    }
}
