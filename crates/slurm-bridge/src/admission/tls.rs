//! The webhook's serving certificate: `tls.crt` and `tls.key` in a directory (the
//! controller-runtime convention), re-read when they change, and the rustls server config
//! (TLS 1.2 and 1.3; ALPN `http/1.1` only unless HTTP/2 is enabled).
//!
//! Changes are found by polling the two files' contents, which also follows a Secret volume's
//! symlink swap. A pair that does not load (half written, key not matching the certificate)
//! keeps the previous one in service and is tried again at the next poll.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Certificate file name in the cert dir.
pub const CERT_FILE: &str = "tls.crt";
/// Key file name in the cert dir.
pub const KEY_FILE: &str = "tls.key";

/// A certificate problem.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// File.
        path: String,
        /// I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{0} holds no PEM certificate")]
    NoCertificate(String),
    /// The key file holds no usable PEM private key.
    #[error("{path} holds no usable PEM private key: {message}")]
    BadKey {
        /// File.
        path: String,
        /// Why (never the key itself).
        message: String,
    },
    /// The key does not belong to the certificate.
    #[error("{key} does not match the certificate in {cert}")]
    Mismatch {
        /// Key file.
        key: String,
        /// Certificate file.
        cert: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The crypto provider of the tree (ring), for the server and for verification.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The contents of `dir/tls.crt` and `dir/tls.key`.
fn read_pair(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    Ok((read(&dir.join(CERT_FILE))?, read(&dir.join(KEY_FILE))?))
}

/// [`certified_key`] of the pair read from `dir`, naming its files in errors.
fn certified_pair(dir: &Path, cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    certified_key(
        cert_pem,
        key_pem,
        &dir.join(CERT_FILE).display().to_string(),
        &dir.join(KEY_FILE).display().to_string(),
    )
}

/// Builds the certified key from PEM texts (`cert_path`/`key_path` only name them in errors).
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &str,
    key_path: &str,
) -> Result<CertifiedKey, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(cert_path.into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::BadKey {
        path: key_path.into(),
        message: e.to_string(),
    })?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::BadKey {
            path: key_path.into(),
            message: e.to_string(),
        })?;
    let ck = CertifiedKey::new(certs, signing);
    if ck.keys_match().is_err() {
        return Err(TlsError::Mismatch {
            key: key_path.into(),
            cert: cert_path.into(),
        });
    }
    Ok(ck)
}

/// The serving certificate of a cert dir, reloaded on change; rustls asks it for the
/// certificate of every handshake, so new connections get the new one at once.
pub struct CertReloader {
    dir: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    /// Contents last loaded (or last refused), to notice changes.
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for CertReloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertReloader")
            .field("dir", &self.dir)
            .finish()
    }
}

impl CertReloader {
    /// Loads `dir/tls.crt` and `dir/tls.key`.
    pub fn load(dir: &Path) -> Result<CertReloader, TlsError> {
        let (cert, key) = read_pair(dir)?;
        let ck = certified_pair(dir, &cert, &key)?;
        Ok(CertReloader {
            dir: dir.to_path_buf(),
            current: RwLock::new(Arc::new(ck)),
            seen: Mutex::new((cert, key)),
        })
    }

    /// The certificate directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The certificate chain in service (DER, leaf first).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        match self.current.read() {
            Ok(c) => c.cert.clone(),
            Err(p) => p.into_inner().cert.clone(),
        }
    }

    /// Re-reads the files; true when a new pair went into service.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (cert, key) = read_pair(&self.dir)?;
        let mut seen = match self.seen.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if seen.0 == cert && seen.1 == key {
            return Ok(false);
        }
        *seen = (cert.clone(), key.clone());
        let ck = certified_pair(&self.dir, &cert, &key)?;
        match self.current.write() {
            Ok(mut c) => *c = Arc::new(ck),
            Err(p) => *p.into_inner() = Arc::new(ck),
        }
        Ok(true)
    }

    /// Polls the files every `interval` until `stop` completes.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            match self.reload() {
                Ok(true) => {
                    failing = false;
                    tracing::info!(dir = %self.dir.display(), "serving certificate reloaded");
                }
                Ok(false) => {}
                Err(e) => {
                    // The contents are remembered: one warning per bad version, not per poll.
                    if !failing {
                        tracing::warn!(error = %e, "new serving certificate not loaded; the previous one stays in service");
                    }
                    failing = matches!(e, TlsError::Read { .. });
                }
            }
        }
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(match self.current.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        })
    }
}

/// The server config: TLS 1.2 or newer, certificates from `certs`, ALPN `http/1.1` (and `h2`
/// first when `enable_http2`).
pub fn server_config(
    certs: Arc<CertReloader>,
    enable_http2: bool,
) -> Result<rustls::ServerConfig, TlsError> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    cfg.alpn_protocols = if enable_http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(cfg)
}
