//! The daemons of one instance, started in one process group, waited for until ready, and
//! stopped together; readiness probes of the API server and of plain-HTTP endpoints.

use crate::agent::NodeSpec;
use crate::error::{Error, Result, tail_of};
use crate::instance::{READY_TIMEOUT, kill_group};
use slurm_testenv::process::ProcId;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills and reaps one child. The watchdog leads its own process group: the whole group goes,
/// else its `tail --pid=OWNER` would live on until the owner exits.
pub(crate) fn stop_child(component: &str, child: &mut Child) {
    if component == "watchdog" {
        kill_group(child.id() as i32, None);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The daemons of one instance: one process group, led by the first one started.
pub(crate) struct Launcher {
    pub(crate) dir: PathBuf,
    pub(crate) children: Vec<(&'static str, Child)>,
    pub(crate) pgid: i32,
    /// The group's leader as it was started, so a later kill never hits a reused group ID.
    pub(crate) leader: Option<ProcId>,
    /// How each daemon was started (binary, arguments), to start it again (crate::faults).
    pub(crate) specs: Vec<(&'static str, PathBuf, Vec<String>)>,
    /// `(instance name, slot)` when the instance runs kubelet nodes: the watchdog cleans up
    /// after them too.
    pub(crate) kubelet: Option<(String, u8)>,
    /// TCP forwarders of the kubelet nodes' pods (crate::realnodes::forward), stopped with the
    /// daemons.
    pub(crate) forwards: Vec<tokio::task::AbortHandle>,
}

impl Launcher {
    pub(crate) fn log_path(&self, component: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{component}.log"))
    }

    /// Starts `binary ARGS` with output to `logs/<component>.log`, in the instance's group.
    pub(crate) fn spawn(
        &mut self,
        component: &'static str,
        binary: &Path,
        args: &[String],
    ) -> Result<()> {
        let log_path = self.log_path(component);
        // Appended: a daemon started again (crate::faults) keeps its earlier log.
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(Error::io(format!("create {}", log_path.display())))?;
        let err = log.try_clone().map_err(Error::io("clone log handle"))?;
        let child = Command::new(binary)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(self.pgid)
            .spawn()
            .map_err(Error::io(format!("start {}", binary.display())))?;
        let first = self.pgid == 0;
        if first {
            self.pgid = child.id() as i32;
            self.leader = ProcId::of(self.pgid);
        }
        tracing::debug!(component, pid = child.id(), "kube-testenv: started");
        self.children.push((component, child));
        if !self.specs.iter().any(|(c, _, _)| *c == component) {
            self.specs
                .push((component, binary.to_path_buf(), args.to_vec()));
        }
        if first {
            self.spawn_watchdog()?;
        }
        Ok(())
    }

    /// A shell outside the group that kills the group when the owning process dies (a test
    /// killed mid-run), so no daemon outlives its owner.
    fn spawn_watchdog(&mut self) -> Result<()> {
        // `kill -s KILL -- -PGID` is the POSIX form; dash (Debian's /bin/sh) rejects `-KILL --`.
        let script = format!(
            r#"tail --pid="$1" -f /dev/null 2>/dev/null; kill -s KILL -- "-$2" 2>/dev/null; {}sleep 0.5; rm -rf --one-file-system "$3""#,
            crate::realnodes::WATCHDOG_CLEANUP
        );
        let (name, slot) = match &self.kubelet {
            Some((name, slot)) => (name.clone(), slot.to_string()),
            None => (String::new(), String::new()),
        };
        let child = Command::new("/bin/sh")
            .args(["-c", &script, "kube-testenv-watchdog"])
            .arg(std::process::id().to_string())
            .arg(self.pgid.to_string())
            .arg(&self.dir)
            .arg(name)
            .arg(slot)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(Error::io("start the watchdog"))?;
        self.children.push(("watchdog", child));
        Ok(())
    }

    fn check_alive(&mut self) -> Result<()> {
        match self.exited().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The daemons that exited on their own (a daemon stopped by `crate::faults` is no longer
    /// a child), each with its status and the tail of its log.
    pub(crate) fn exited(&mut self) -> Vec<Error> {
        let mut out = Vec::new();
        for (component, child) in self.children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let log = self.dir.join("logs").join(format!("{component}.log"));
                out.push(Error::Exited {
                    component,
                    status: status.to_string(),
                    tail: tail_of(&log, 30),
                    log,
                });
            }
        }
        out
    }

    fn not_ready(&self, component: &'static str, detail: &str) -> Error {
        let log = self.log_path(component);
        Error::NotReady {
            component,
            seconds: READY_TIMEOUT.as_secs(),
            detail: detail.into(),
            tail: tail_of(&log, 30),
            log,
        }
    }

    pub(crate) async fn wait_until(
        &mut self,
        component: &'static str,
        ready: impl Fn() -> bool,
    ) -> Result<()> {
        self.wait_until_async(component, || {
            let r = ready();
            async move { r }
        })
        .await
    }

    pub(crate) async fn wait_until_async<F, Fut>(
        &mut self,
        component: &'static str,
        ready: F,
    ) -> Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if ready().await {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                return Err(self.not_ready(component, "readiness check kept failing"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn kill_all(&mut self) {
        for f in self.forwards.drain(..) {
            f.abort();
        }
        kill_group(self.pgid, self.leader);
        for (component, c) in self.children.iter_mut() {
            stop_child(component, c);
        }
    }
}

/// Readiness polls of the API server. Not through `kube::Client`, whose tracing layer logs every
/// expected 500 of a starting server as an error.
pub(crate) struct Probe {
    server: String,
    http: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        http_body_util::Empty<bytes::Bytes>,
    >,
}

impl Probe {
    pub(crate) async fn new(kubeconfig: &Path) -> Result<Probe> {
        use kube::client::ConfigExt;
        let kc = kube::config::Kubeconfig::read_from(kubeconfig)
            .map_err(|e| Error::Invalid(format!("read {}: {e}", kubeconfig.display())))?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Invalid(format!("kubeconfig: {e}")))?;
        let https = config
            .rustls_https_connector()
            .map_err(|e| Error::Invalid(format!("TLS for the readiness probe: {e}")))?;
        let http =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(https);
        Ok(Probe {
            server: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_string(),
            http,
        })
    }

    /// True when GET `path` answers 200.
    pub(crate) async fn ok(&self, path: &str) -> bool {
        let Ok(uri) = format!("{}{path}", self.server).parse::<http::Uri>() else {
            return false;
        };
        self.http
            .get(uri)
            .await
            .is_ok_and(|r| r.status() == http::StatusCode::OK)
    }
}

/// Plain-HTTP GET on loopback (etcd's /health); the body when the status is 200.
pub(crate) fn http_get_plain(port: u16, path: &str) -> Option<String> {
    let client = slurm_testenv::http::Client::with_timeouts(
        Duration::from_millis(500),
        Duration::from_secs(2),
    );
    let r = client
        .get(slurm_testenv::http::local(port), path, &[])
        .ok()?;
    (r.status == 200).then(|| r.text())
}

/// Taints the node lifecycle controller manages: admission puts `not-ready` on new nodes, a node
/// that missed its heartbeats gets `unreachable`; both are lifted once it reports Ready.
const LIFECYCLE_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// How long registering `nodes` nodes and having them all Ready may take: the components'
/// 90 s, plus 60 ms a node (5,000 nodes: 390 s), as the API server and the controller manager
/// (which lifts the `not-ready` taints, 8 nodes at a time) take each node in turn.
pub(crate) fn nodes_ready_timeout(nodes: usize) -> Duration {
    READY_TIMEOUT + Duration::from_millis(60) * u32::try_from(nodes).unwrap_or(u32::MAX)
}

/// True when the node is Ready and free of the node lifecycle controller's taints.
pub(crate) fn schedulable(n: &k8s_openapi::api::core::v1::Node) -> bool {
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| LIFECYCLE_TAINTS.contains(&t.key.as_str()))
        });
    ready && !tainted
}

/// Waits until every node is Ready and free of the node lifecycle controller's taints, from
/// one watch of the nodes (a list, then their changes: no request per node), within
/// [`nodes_ready_timeout`].
pub(crate) async fn wait_nodes_schedulable(
    client: &kube::Client,
    nodes: &[NodeSpec],
) -> Result<()> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Node;
    use kube::runtime::{WatchStreamExt, watcher};
    use std::collections::HashSet;
    if nodes.is_empty() {
        return Ok(());
    }
    let timeout = nodes_ready_timeout(nodes.len());
    let wanted: HashSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let mut waiting: HashSet<&str> = wanted.clone();
    let api: kube::Api<Node> = kube::Api::all(client.clone());
    let events = watcher(api, watcher::Config::default()).default_backoff();
    let mut events = std::pin::pin!(events);
    let mut last_error = None;
    let watch = async {
        while let Some(ev) = events.next().await {
            let (node, present) = match ev {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => (n, true),
                Ok(watcher::Event::Delete(n)) => (n, false),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                Err(e) => {
                    last_error = Some(e.to_string());
                    continue;
                }
            };
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let Some(&name) = wanted.get(name) else {
                continue;
            };
            if present && schedulable(&node) {
                waiting.remove(name);
            } else {
                waiting.insert(name);
            }
            if waiting.is_empty() {
                return true;
            }
        }
        false
    };
    let done = tokio::time::timeout(timeout, watch).await.unwrap_or(false);
    if done {
        return Ok(());
    }
    let mut left: Vec<&str> = waiting.iter().copied().collect();
    left.sort_unstable();
    let shown = left.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    Err(Error::Agent(format!(
        "{} of {} nodes ({shown}{}) not Ready, or still tainted not-ready or unreachable, within {} s{}",
        left.len(),
        nodes.len(),
        if left.len() > 5 { ", ..." } else { "" },
        timeout.as_secs(),
        last_error
            .map(|e| format!(" (last node watch error: {e})"))
            .unwrap_or_default()
    )))
}
