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
pub mod store;
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
    let uri: http::Uri = url.parse().map_err(|e| Error::Client(format!("{e}")))?;
    let mut cfg = kube::Config::new(uri);
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
        let listen = opts.listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
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
        let url = format!("http://{addr}");
        let client = client_for(&url)?;
        tracing::info!(%url, "kube-sim API server listening");
        let mut me = KubeSim { url, addr, ctx, client, shutdown, server: Some(server), sim: None };
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
        write_kubeconfig(&self.url, path.as_ref())
    }

    /// Stop the simulated cluster, then the server (open watches end).
    pub async fn stop(mut self) {
        if let Some(s) = self.sim.take() {
            s.stop().await;
        }
        let _ = self.shutdown.send(true);
        if let Some(h) = self.server.take() {
            let abort = h.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), h).await.is_err() {
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

/// The kubeconfig text for a server URL.
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {url}\ncontexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    user: kube-sim\n    namespace: default\ncurrent-context: kube-sim\npreferences: {{}}\nusers:\n- name: kube-sim\n  user: {{}}\n"
    )
}

/// Write a kubeconfig for `url` to `path`.
pub fn write_kubeconfig(url: &str, path: &Path) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io(format!("creating {}", dir.display()), e))?;
    }
    std::fs::write(path, kubeconfig_yaml(url)).map_err(|e| Error::Io(format!("writing {}", path.display()), e))
}
