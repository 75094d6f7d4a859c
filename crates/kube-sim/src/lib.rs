//! kube-sim: an in-memory Kubernetes API server and a simulated cluster.
//!
//! The server speaks the Kubernetes HTTP/JSON API generically over a registry of resource
//! types (see [`registry`]), with the semantics controllers rely on: resourceVersions from one
//! global counter, optimistic concurrency, finalizers, graceful pod deletion, ownerReference
//! garbage collection, label/field selectors, pagination, watches with bookmarks and 410,
//! merge/JSON/strategic-merge patches, status subresources, pods/binding and pods/eviction,
//! and admission webhooks. The simulated cluster ([`sim`]) adds nodes, a kubelet and workload
//! controllers that talk to the server through the API only.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_sim::Error> {
//! let sim = kube_sim::KubeSim::start(kube_sim::Options { nodes: 3, simulate: true, ..Default::default() }).await?;
//! let client = sim.client();
//! # let _ = client;
//! sim.stop().await;
//! # Ok(()) }
//! ```

pub mod admission;
pub mod defaults;
pub mod discovery;
pub mod error;
pub mod meta;
pub mod ops;
pub mod patch;
pub mod registry;
pub mod selector;
pub mod server;
pub mod sim;
pub mod ssa;
pub mod store;
pub mod table;
pub mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

pub use error::ApiError;
pub use registry::{Registry, ResourceType};

/// How to start kube-sim.
#[derive(Debug, Clone)]
pub struct Options {
    /// Number of simulated nodes (`<node_prefix>1`..`<node_prefix>N`), when `simulate`.
    pub nodes: usize,
    /// Prefix of generated node names.
    pub node_prefix: String,
    /// YAML file of nodes (replaces the generated ones), when `simulate`.
    pub nodes_file: Option<PathBuf>,
    /// Run the simulated cluster (nodes, kubelet, controllers). Off: API server only.
    pub simulate: bool,
    /// Extra resource types (simple entries or CRDs, JSON or YAML).
    pub types_file: Option<PathBuf>,
    /// Address to listen on; default 127.0.0.1 on a free port.
    pub listen: Option<SocketAddr>,
    /// Simulated cluster settings (its node fields are taken from the fields above).
    pub sim: sim::SimConfig,
    /// Events kept for watch resumption; older versions get 410 Gone.
    pub history_limit: usize,
    /// How often watchers that allow bookmarks receive one.
    pub bookmark_interval: Duration,
    /// Serve HTTPS with this certificate (PEM chain) and key instead of plain HTTP.
    pub tls: Option<TlsFiles>,
}

/// Certificate and key files for serving HTTPS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM certificate chain; every certificate in it is also trusted by [`KubeSim::client`]
    /// and written as the kubeconfig's certificate authority (so a self-signed certificate or
    /// a chain ending with its CA works as is).
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            node_prefix: "node-".into(),
            nodes_file: None,
            simulate: false,
            types_file: None,
            listen: None,
            sim: sim::SimConfig::default(),
            history_limit: 100_000,
            bookmark_interval: Duration::from_secs(5),
            tls: None,
        }
    }
}

/// Why kube-sim could not start or write its kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The types file could not be read.
    #[error(transparent)]
    Types(#[from] registry::RegistryError),
    /// Binding the listener or writing a file failed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// The kube client could not be built.
    #[error("building kube client: {0}")]
    Client(String),
    /// The TLS certificate or key could not be loaded.
    #[error("TLS: {0}")]
    Tls(String),
    /// Creating the initial objects failed.
    #[error("initial objects: {0}")]
    Init(#[from] ApiError),
    /// The simulated cluster failed to start.
    #[error("simulated cluster: {0}")]
    Sim(#[from] sim::SimError),
}

/// A running kube-sim: the API server (and the simulated cluster when asked). Stops on
/// [`KubeSim::stop`] or when dropped.
pub struct KubeSim {
    ca_pem: Option<String>,
    url: String,
    addr: SocketAddr,
    ctx: Arc<server::Ctx>,
    client: kube::Client,
    shutdown: tokio::sync::watch::Sender<bool>,
    server: Option<tokio::task::JoinHandle<()>>,
    sim: Option<sim::SimHandle>,
}

impl std::fmt::Debug for KubeSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSim").field("url", &self.url).finish()
    }
}

/// A kube client for a plain-HTTP server URL.
pub fn client_for(url: &str) -> Result<kube::Client, Error> {
    client_with(url, None)
}

/// A kube client for a server URL, trusting the certificates of `ca_pem` (HTTPS).
pub fn client_with(url: &str, ca_pem: Option<&str>) -> Result<kube::Client, Error> {
    let uri: http::Uri = url.parse().map_err(|e| Error::Client(format!("{e}")))?;
    let mut cfg = kube::Config::new(uri);
    if let Some(pem) = ca_pem {
        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
            .map(|c| c.map(|c| c.to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Client(format!("certificate: {e}")))?;
        cfg.root_cert = Some(certs);
    }
    cfg.default_namespace = "default".into();
    cfg.read_timeout = None;
    kube::Client::try_from(cfg).map_err(|e| Error::Client(e.to_string()))
}

impl KubeSim {
    /// Start the server on `opts.listen` (default: a free loopback port), create the
    /// namespaces `default`, `kube-system`, `kube-public`, `kube-node-lease`, then start the
    /// simulated cluster when `opts.simulate`.
    pub async fn start(opts: Options) -> Result<KubeSim, Error> {
        let mut reg = Registry::builtin();
        if let Some(p) = &opts.types_file {
            reg.load_file(p)?;
        }
        let listen = opts
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| Error::Io(format!("binding {listen}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Io("local address".into(), e))?;
        let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
        let ctx = Arc::new(server::Ctx {
            store: Arc::new(store::Store::new(reg, opts.history_limit)),
            admission: admission::Admission::default(),
            bookmark_interval: opts.bookmark_interval.max(Duration::from_millis(10)),
            addr: addr.to_string(),
            shutdown: shutdown_rx.clone(),
        });
        let ns_tid = ctx.store.tid("", "namespaces").unwrap_or(0);
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            ops::create(&ctx, ns_tid, "", json!({"metadata": {"name": ns}}), false).await?;
        }
        let app = server::router(ctx.clone());
        let mut rx = shutdown_rx;
        let (server, url, ca_pem) = match &opts.tls {
            None => {
                let server = tokio::spawn(async move {
                    let r = axum::serve(listener, app)
                        .with_graceful_shutdown(async move {
                            let _ = rx.wait_for(|s| *s).await;
                        })
                        .await;
                    if let Err(e) = r {
                        tracing::error!(error = %e, "kube-sim server failed");
                    }
                });
                (server, format!("http://{addr}"), None)
            }
            Some(files) => {
                let (cfg, pem) = tls_config(files)?;
                let std_listener = listener
                    .into_std()
                    .map_err(|e| Error::Io("listener".into(), e))?;
                let handle = axum_server::Handle::new();
                let srv = axum_server::from_tcp_rustls(
                    std_listener,
                    axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(cfg)),
                )
                .map_err(|e| Error::Io("TLS listener".into(), e))?
                .handle(handle.clone());
                let server = tokio::spawn(async move {
                    tokio::spawn(async move {
                        let _ = rx.wait_for(|s| *s).await;
                        handle.graceful_shutdown(Some(Duration::from_secs(1)));
                    });
                    if let Err(e) = srv.serve(app.into_make_service()).await {
                        tracing::error!(error = %e, "kube-sim server failed");
                    }
                });
                (server, format!("https://{addr}"), Some(pem))
            }
        };
        let client = client_with(&url, ca_pem.as_deref())?;
        tracing::info!(%url, "kube-sim API server listening");
        let mut me = KubeSim {
            ca_pem,
            url,
            addr,
            ctx,
            client,
            shutdown,
            server: Some(server),
            sim: None,
        };
        if opts.simulate {
            let mut cfg = opts.sim.clone();
            cfg.nodes = opts.nodes;
            cfg.node_prefix = opts.node_prefix.clone();
            cfg.nodes_file = opts.nodes_file.clone();
            me.sim = Some(sim::start(me.client.clone(), cfg).await?);
        }
        Ok(me)
    }

    /// The server URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kube-rs client talking to the server over HTTP.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The simulated cluster, when running.
    pub fn sim(&self) -> Option<&sim::SimHandle> {
        self.sim.as_ref()
    }

    /// The object store (for in-process inspection in tests and benchmarks).
    pub fn store(&self) -> &Arc<store::Store> {
        &self.ctx.store
    }

    /// Write a kubeconfig for this server that kubectl and kube-rs use as they are.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        let text = kubeconfig_yaml_with(&self.url, self.ca_pem.as_deref());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::Io(format!("creating {}", dir.display()), e))?;
        }
        std::fs::write(path, text).map_err(|e| Error::Io(format!("writing {}", path.display()), e))
    }

    /// Stop the simulated cluster, then the server (open watches end).
    pub async fn stop(mut self) {
        if let Some(s) = self.sim.take() {
            s.stop().await;
        }
        let _ = self.shutdown.send(true);
        if let Some(h) = self.server.take() {
            let abort = h.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), h)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(h) = self.server.take() {
            h.abort();
        }
    }
}

/// The kubeconfig text for a plain-HTTP server URL.
pub fn kubeconfig_yaml(url: &str) -> String {
    kubeconfig_yaml_with(url, None)
}

/// The kubeconfig text for a server URL, with the certificate authority data when HTTPS.
pub fn kubeconfig_yaml_with(url: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let ca = ca_pem
        .map(|p| {
            format!(
                "    certificate-authority-data: {}\n",
                base64::engine::general_purpose::STANDARD.encode(p)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {url}\n{ca}contexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    user: kube-sim\n    namespace: default\ncurrent-context: kube-sim\npreferences: {{}}\nusers:\n- name: kube-sim\n  user: {{}}\n"
    )
}

/// Load the server TLS configuration (ring provider) and the certificate PEM to trust.
fn tls_config(files: &TlsFiles) -> Result<(rustls::ServerConfig, String), Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let pem = std::fs::read_to_string(&files.cert)
        .map_err(|e| Error::Io(format!("reading {}", files.cert.display()), e))?;
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Tls(format!("certificate {}: {e}", files.cert.display())))?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| Error::Tls(format!("key {}: {e}", files.key.display())))?;
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| Error::Tls(format!("TLS configuration: {e}")))?;
    Ok((cfg, pem))
}

/// Write a kubeconfig for `url` to `path`.
pub fn write_kubeconfig(url: &str, path: &Path) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Io(format!("creating {}", dir.display()), e))?;
    }
    std::fs::write(path, kubeconfig_yaml(url))
        .map_err(|e| Error::Io(format!("writing {}", path.display()), e))
}
