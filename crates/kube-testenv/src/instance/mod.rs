//! One control plane: etcd, kube-apiserver and kube-controller-manager (plus, on request,
//! kube-scheduler and the JobSet and LeaderWorkerSet controllers) as host processes in one
//! process group, and the node agent as tasks of the owning process.

use crate::agent::{self, AgentHandle, NodeSpec};
use crate::binaries::{self, ETCD, JOBSET, KUBERNETES, LWS};
use crate::error::{Error, Result};
use crate::launcher::{Launcher, wait_nodes_schedulable};
use crate::paths::run_dir;
use crate::ports;
use crate::realnodes;
use slurm_testenv::process::ProcId;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

mod boot;
mod state;

use boot::Ports;
use state::write_meta;
pub(crate) use state::{KubeletMeta, Meta, kill_group, owner_gone, read_meta, reap};
pub use state::{sweep_stale, validate_name};

pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// The service CIDR; its first address is the `kubernetes` Service (in the serving certificate).
const SERVICE_CIDR: &str = "10.0.0.0/24";
/// Feature gates of API server, controller manager and scheduler: the original's Helm chart turns
/// on DRA extended resources; the Workload API (scheduling.k8s.io/v1alpha2) needs its gate.
pub const FEATURE_GATES: &str = "DRAExtendedResource=true,GenericWorkload=true";
/// API groups off by default that slurm-bridge uses.
const RUNTIME_CONFIG: &str = "scheduling.k8s.io/v1alpha2=true";

/// How to start an instance.
#[derive(Clone, Debug, Default)]
pub struct InstanceOptions {
    /// Instance name; tests leave it `None` for a unique one.
    pub name: Option<String>,
    /// Nodes the agent registers and runs pods on.
    pub nodes: Vec<NodeSpec>,
    /// Also run kube-scheduler (binds pods that name `default-scheduler`).
    pub kube_scheduler: bool,
    /// Extra kube-scheduler flags, e.g. `--kube-api-qps=1000` for a benchmark (its client
    /// allows 50 requests per second by default).
    pub kube_scheduler_args: Vec<String>,
    /// Also run the JobSet and LeaderWorkerSet controllers (their CRDs are always installed).
    pub workload_controllers: bool,
    /// Also run Kubeflow Trainer v2 (its CRDs and webhooks; JobSet's controller runs with it, as
    /// Trainer creates JobSets).
    pub trainer: bool,
    /// Also run Kueue (its CRDs and webhooks, the `batch/job` and `pod` integrations).
    pub kueue: bool,
    /// kube-controller-manager's `--controllers` (default `*`: every default controller); for
    /// example `*,-job-controller` for a test that creates a Job's pods itself.
    pub controllers: Option<String>,
    /// kube-controller-manager's `--node-monitor-grace-period`: how long a node may miss
    /// heartbeats before it is marked NotReady. When `None`, Kubernetes' default, 50 s, up to
    /// 625 nodes; with more, four of the agent's stretched Lease periods (1,000 nodes: 80 s, 5,000: 400 s;
    /// see docs/kube-testenv.md, Heartbeats). The agent renews leases every 10 s at least, so
    /// keep it above 15 s.
    pub node_monitor_grace_period: Option<Duration>,
    /// Serve kube-apiserver's `/debug/pprof` (its `--profiling`), for a benchmark that profiles
    /// the API server; off otherwise, as it serves nothing a test needs.
    pub profiling: bool,
    /// Nodes `node-1` .. `node-N` run a real kubelet with its own containerd (runc, CNI bridge
    /// networking) instead of being simulated by the agent; their labels and taints come from
    /// `nodes` when it names them (capacity is the host's). The image [`crate::IMAGE`] is on
    /// each. At most [`crate::realnodes::MAX_KUBELET_NODES`].
    pub kubelet_nodes: usize,
}

impl InstanceOptions {
    /// `node-1` .. `node-N` with 8 CPUs, 16000Mi and 110 pods each (as slurm-testenv's nodes).
    pub fn with_nodes(n: usize) -> Self {
        InstanceOptions {
            nodes: agent::standard_nodes(n),
            ..Default::default()
        }
    }
}

/// A running control plane. Dropping it stops every process and removes its state.
pub struct Instance {
    name: String,
    pub(crate) dir: PathBuf,
    bin_dir: PathBuf,
    server: String,
    client: kube::Client,
    /// The daemons (and the watchdog), stopped together on drop.
    pub(crate) launcher: Launcher,
    agent: Option<AgentHandle>,
    startup: Duration,
    /// The kubelet nodes' slot and names, when there are some.
    kubelet: Option<KubeletMeta>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("name", &self.name)
            .field("server", &self.server)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl Instance {
    /// Builds the binaries if the cache lacks them, starts the control plane, installs the CRDs,
    /// registers the nodes and waits until they are Ready.
    pub async fn start(opts: InstanceOptions) -> Result<Instance> {
        if !slurm_testenv::process::is_root() {
            return Err(Error::NotRoot);
        }
        let started = Instant::now();
        let want_workloads = opts.workload_controllers;
        let (want_trainer, want_kueue) = (opts.trainer, opts.kueue);
        let want_scheduler = opts.kube_scheduler;
        if opts.kubelet_nodes > realnodes::MAX_KUBELET_NODES {
            return Err(Error::Invalid(format!(
                "--kubelet-nodes {}: at most {} kubelet nodes per instance",
                opts.kubelet_nodes,
                realnodes::MAX_KUBELET_NODES
            )));
        }
        let real = if opts.kubelet_nodes > 0 {
            Some(
                tokio::task::spawn_blocking(realnodes::prepare)
                    .await
                    .map_err(|e| Error::Invalid(format!("build task: {e}")))??,
            )
        } else {
            None
        };
        let bins = tokio::task::spawn_blocking(move || -> Result<Vec<PathBuf>> {
            // Fixed slots: [kubernetes, etcd, jobset, lws, trainer, kueue, kube-scheduler];
            // unused ones empty.
            let mut dirs = vec![binaries::ensure(&KUBERNETES)?, binaries::ensure(&ETCD)?];
            let want = |on: bool, m| -> Result<PathBuf> {
                if on {
                    binaries::ensure(m)
                } else {
                    Ok(PathBuf::new())
                }
            };
            dirs.push(want(want_workloads || want_trainer, &JOBSET)?);
            dirs.push(want(want_workloads, &LWS)?);
            dirs.push(want(want_trainer, &binaries::TRAINER)?);
            dirs.push(want(want_kueue, &binaries::KUEUE)?);
            dirs.push(want(want_scheduler, &binaries::KUBE_SCHEDULER)?);
            Ok(dirs)
        })
        .await
        .map_err(|e| Error::Invalid(format!("build task: {e}")))??;
        let started_after_build = Instant::now();
        sweep_stale();

        let name = match &opts.name {
            Some(n) => n.clone(),
            None => format!(
                "t{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ),
        };
        validate_name(&name)?;
        let root = run_dir();
        let dir = root.join(&name);
        // Reserve ports and claim the name under the port lock, so two starts never collide.
        let port_list = ports::reserve(Ports::COUNT, |p| {
            if let Some(m) = read_meta(&dir) {
                if !owner_gone(&m) {
                    return Err(Error::AlreadyRunning { name: name.clone() });
                }
                reap(&dir, Some(&m));
            }
            let _ = fs::remove_dir_all(&dir);
            for sub in ["pki", "logs"] {
                fs::create_dir_all(dir.join(sub))
                    .map_err(Error::io(format!("create {}", dir.display())))?;
            }
            let kubelet = match &real {
                Some(real) => {
                    let taken: Vec<u8> = state::live_instances()
                        .into_iter()
                        .filter_map(|(_, s)| s)
                        .collect();
                    Some(KubeletMeta {
                        slot: realnodes::free_slot(&taken)?,
                        nodes: realnodes::names(opts.kubelet_nodes),
                        containerd_bin: real.containerd.clone(),
                    })
                }
                None => None,
            };
            write_meta(
                &dir,
                &Meta {
                    name: name.clone(),
                    owner: ProcId::current(),
                    pgid: 0,
                    leader: None,
                    ports: Ports::named(p),
                    bin_dir: bins[0].clone(),
                    kubelet: kubelet.clone(),
                },
            )?;
            Ok((p.to_vec(), kubelet))
        })?;
        let (port_list, kubelet) = port_list;
        let ports = Ports::new(&port_list);
        let server = format!("https://127.0.0.1:{}", ports.apiserver);
        let mut launcher = Launcher {
            dir: dir.clone(),
            children: Vec::new(),
            pgid: 0,
            leader: None,
            specs: Vec::new(),
            kubelet: kubelet.as_ref().map(|k| (name.clone(), k.slot)),
            forwards: Vec::new(),
        };
        let booted = Self::boot(
            &opts,
            &bins,
            &dir,
            &ports,
            &server,
            &mut launcher,
            real.as_ref().zip(kubelet.as_ref()),
        )
        .await;
        match booted {
            Ok((client, agent)) => {
                let instance = Instance {
                    name,
                    dir,
                    bin_dir: bins[0].clone(),
                    server,
                    client,
                    launcher,
                    agent: Some(agent),
                    startup: started_after_build.elapsed(),
                    kubelet,
                };
                tracing::info!(
                    instance = %instance.name,
                    startup_ms = instance.startup.as_millis() as u64,
                    total_ms = started.elapsed().as_millis() as u64,
                    "kube-testenv: control plane ready"
                );
                Ok(instance)
            }
            Err(e) => {
                launcher.kill_all();
                if kubelet.is_some() {
                    realnodes::cleanup(&dir, &name, kubelet.as_ref().map(|k| k.slot));
                }
                let _ = fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Instance name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Folder with the kubeconfig, certificates, etcd data and logs (`logs/<component>.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the cluster-admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Folder holding `kubectl`, `kube-apiserver` and the other Kubernetes binaries.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// Time from the binaries being ready to the nodes being Ready.
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// A cluster-admin client (a cheap clone of the one the agent uses).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Registers more nodes with the agent (given capacity, labels, taints).
    /// Returns once they are Ready and the node lifecycle controller has lifted the
    /// `not-ready` taint that new nodes get, as in a real cluster.
    pub async fn add_nodes(&self, nodes: Vec<NodeSpec>) -> Result<()> {
        self.agent
            .as_ref()
            .expect("agent runs while the instance lives")
            .add_nodes(nodes.clone())
            .await
            .map_err(|e| Error::Agent(e.to_string()))?;
        wait_nodes_schedulable(&self.client, &nodes).await
    }

    /// Simulates a lost kubelet on node `name`: no more heartbeats, so the node lifecycle
    /// controller marks it NotReady (about 50 s) and taints it; `add_nodes` brings it back.
    pub fn lose_kubelet(&self, name: &str) -> Result<()> {
        self.agent
            .as_ref()
            .expect("agent runs while the instance lives")
            .lose_kubelet(name)
            .map_err(|e| Error::Agent(e.to_string()))
    }

    /// Runs `kubectl ARGS` against this instance and returns its standard output.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(self.bin_dir.join("kubectl"))
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .stdin(Stdio::null())
            .output()
            .map_err(Error::io("run kubectl"))?;
        if !out.status.success() {
            return Err(Error::Invalid(format!(
                "kubectl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `helm ARGS` against this instance (`KUBECONFIG` set, helm's own state in the
    /// instance's folder); returns stdout, or an error with stderr. Builds helm the first time.
    pub fn helm(&self, args: &[&str]) -> Result<String> {
        let helm = binaries::helm()?;
        let home = self.dir.join("helm");
        let out = Command::new(helm)
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null())
            .output()
            .map_err(Error::io("run helm"))?;
        if !out.status.success() {
            return Err(Error::Invalid(format!(
                "helm {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `KUBECONFIG=...` as `up` prints it (and `KUBE_TESTENV_IMAGE=...`,
    /// `KUBE_TESTENV_NRI_DIR=...` with kubelet nodes).
    pub fn env_lines(&self) -> String {
        env_lines(&self.dir)
    }

    /// The image present on every kubelet node ([`crate::IMAGE`], busybox), when the instance
    /// has kubelet nodes.
    pub fn image(&self) -> Option<&'static str> {
        self.kubelet.as_ref().map(|_| realnodes::IMAGE)
    }

    /// The NRI socket of kubelet node `node`'s containerd (`<dir>/nri/<node>.sock`, in the
    /// folder `up` prints as `KUBE_TESTENV_NRI_DIR`: a symlink to the socket containerd creates
    /// at `/var/run/nri/nri.sock` in the node's mount namespace, [`crate::NRI_SOCKET`],
    /// where a DaemonSet's hostPath finds it), where an NRI plugin connects to adjust the
    /// node's containers; `None` when `node` is not a kubelet node.
    pub fn nri_socket(&self, node: &str) -> Option<PathBuf> {
        self.kubelet
            .as_ref()
            .filter(|k| k.nodes.iter().any(|n| n == node))
            .map(|_| nri_dir(&self.dir).join(format!("{node}.sock")))
    }

    /// The folders of kubelet node `node` a node agent needs (a DRA kubelet plugin's sockets,
    /// containerd's CDI specs), as host paths; `None` when `node` is not a kubelet node.
    pub fn kubelet_dirs(&self, node: &str) -> Option<realnodes::KubeletDirs> {
        self.kubelet
            .as_ref()
            .filter(|k| k.nodes.iter().any(|n| n == node))
            .map(|_| realnodes::KubeletDirs::of(&self.dir.join("nodes").join(node)))
    }

    /// The kubelet nodes (`node-1` .. `node-N`); empty without.
    pub fn kubelet_nodes(&self) -> Vec<String> {
        self.kubelet
            .as_ref()
            .map(|k| k.nodes.clone())
            .unwrap_or_default()
    }

    /// Imports an image archive (docker `save` or OCI layout tar, as hack/build-image.sh writes)
    /// into every kubelet node's containerd, under the names the archive gives.
    pub fn load_image(&self, archive: &Path) -> Result<()> {
        load_image(&self.dir, self.kubelet.as_ref(), archive)
    }

    /// The host's address on the instance's bridge, `10.199.<slot>.254`, where pods reach the
    /// ports [`Instance::expose_host_port`] exposed; `None` without kubelet nodes.
    pub fn host_address(&self) -> Option<String> {
        self.kubelet.as_ref().map(|k| realnodes::host_ip(k.slot))
    }

    /// Makes port `port` of the host's loopback reachable from the kubelet nodes' pods, for a
    /// service started beside the instance such as slurm-testenv's slurmrestd; returns the
    /// address pods use, `10.199.<slot>.254:<port>` (the host's address on the instance's
    /// bridge). The forwarding runs in this process (crate::realnodes::forward) until the
    /// instance stops.
    pub async fn expose_host_port(&mut self, port: u16) -> Result<String> {
        let k = self.kubelet.as_ref().ok_or_else(|| {
            Error::Invalid("the instance has no kubelet nodes whose pods need the host".into())
        })?;
        let addr = format!("{}:{port}", realnodes::host_ip(k.slot));
        let listen = addr.parse().expect("an IP and a port");
        let handle =
            realnodes::forward::spawn(listen, std::net::SocketAddr::from(([127, 0, 0, 1], port)))
                .await?;
        self.launcher.forwards.push(handle);
        Ok(addr)
    }

    fn shutdown(&mut self) {
        // The agent's tasks stop first, so nothing writes to a dying API server.
        self.agent.take();
        // A daemon that died under a test is the likeliest cause of its failure: say so.
        for e in self.launcher.exited() {
            eprintln!("kube-testenv: instance {}: {e}", self.name);
        }
        self.launcher.kill_all();
        if let Some(k) = &self.kubelet {
            realnodes::cleanup(&self.dir, &self.name, Some(k.slot));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The lines `up` prints: `KUBE_TESTENV_IMAGE` and `KUBE_TESTENV_NRI_DIR` first when the
/// instance has kubelet nodes, then `KUBECONFIG` (which `up` waits for).
pub(crate) fn env_lines(dir: &Path) -> String {
    let kubelet = match read_meta(dir).and_then(|m| m.kubelet) {
        Some(_) => format!(
            "KUBE_TESTENV_IMAGE={}\nKUBE_TESTENV_NRI_DIR={}\n",
            realnodes::IMAGE,
            nri_dir(dir).display()
        ),
        None => String::new(),
    };
    format!("{kubelet}KUBECONFIG={}\n", dir.join("kubeconfig").display())
}

/// The folder of the kubelet nodes' NRI sockets, `<node>.sock` each (symlinks realnodes makes
/// to the socket of each node's containerd).
fn nri_dir(dir: &Path) -> PathBuf {
    dir.join("nri")
}

/// Imports `archive` into each kubelet node's containerd.
pub(crate) fn load_image(dir: &Path, kubelet: Option<&KubeletMeta>, archive: &Path) -> Result<()> {
    let k = kubelet.ok_or_else(|| {
        Error::Invalid("the instance has no kubelet nodes to load an image onto".into())
    })?;
    if !archive.is_file() {
        return Err(Error::Invalid(format!(
            "no image archive at {}",
            archive.display()
        )));
    }
    for node in &k.nodes {
        realnodes::import_image(
            &k.containerd_bin.join("ctr"),
            &dir.join("nodes").join(node).join("containerd.sock"),
            archive,
        )?;
    }
    Ok(())
}

/// A client for the kubeconfig at `path`.
pub async fn client_for(path: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| Error::Invalid(format!("read {}: {e}", path.display())))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Invalid(format!("kubeconfig {}: {e}", path.display())))?;
    kube::Client::try_from(config).map_err(Error::kube("build a client"))
}
