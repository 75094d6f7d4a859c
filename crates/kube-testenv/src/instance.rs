//! One control plane: etcd, kube-apiserver and kube-controller-manager (plus, on request,
//! kube-scheduler and the JobSet and LeaderWorkerSet controllers) as host processes in one
//! process group, and the node agent as tasks of the owning process.

use crate::agent::{self, AgentHandle, AgentOptions, NodeSpec};
use crate::binaries::{self, ETCD, JOBSET, KUBERNETES, LWS};
use crate::error::{Error, Result};
use crate::kubeconfig::kubeconfig_yaml;
use crate::launcher::{Launcher, Probe, http_get_plain, wait_nodes_schedulable};
use crate::paths::run_dir;
use crate::{crds, pki, ports};
use slurm_testenv::process::ProcId;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

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
    /// heartbeats before it is marked NotReady (Kubernetes' default, 50 s, when `None`). The
    /// agent renews leases every 10 s, so keep it above 15 s.
    pub node_monitor_grace_period: Option<Duration>,
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

/// What `meta.json` records so other processes (`env`, `exec`, `down`, the stale sweep) can find
/// and stop an instance.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Meta {
    name: String,
    /// The process holding the instance (a test, or `kube-testenv run`).
    pub(crate) owner: ProcId,
    /// Process group of the daemons (0 until the first one started).
    pgid: i32,
    ports: BTreeMap<String, u16>,
    pub(crate) bin_dir: PathBuf,
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

/// Checks an instance name: 1-40 characters from `[A-Za-z0-9_-]` (it names a folder and files).
pub fn validate_name(name: &str) -> Result<()> {
    if slurm_testenv::paths::is_valid_instance_name(name) {
        Ok(())
    } else {
        Err(Error::InvalidName { name: name.into() })
    }
}

fn write_file(path: &Path, data: &str, mode: u32) -> Result<()> {
    fs::write(path, data).map_err(Error::io(format!("write {}", path.display())))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(Error::io(format!("chmod {}", path.display())))
}

fn meta_path(dir: &Path) -> PathBuf {
    dir.join("meta.json")
}

pub(crate) fn read_meta(dir: &Path) -> Option<Meta> {
    serde_json::from_str(&fs::read_to_string(meta_path(dir)).ok()?).ok()
}

fn write_meta(dir: &Path, meta: &Meta) -> Result<()> {
    let text = serde_json::to_string_pretty(meta).expect("meta serializes");
    let tmp = dir.join("meta.json.tmp");
    fs::write(&tmp, text).map_err(Error::io("write meta.json"))?;
    fs::rename(&tmp, meta_path(dir)).map_err(Error::io("rename meta.json"))
}

/// Sends SIGKILL to process group `pgid` (slurm-testenv's `kill` ignores the negative PIDs
/// that name groups).
pub(crate) fn kill_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: plain syscall; a group that is already gone is fine.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Kills the daemons of an instance whose owner is gone, and removes its folder.
pub(crate) fn reap(dir: &Path, meta: Option<&Meta>) {
    if let Some(m) = meta
        && m.pgid > 0
    {
        kill_group(m.pgid);
    }
    let _ = fs::remove_dir_all(dir);
}

/// Removes instances whose owning process has died (a test killed mid-run, a crashed `run`).
pub fn sweep_stale() {
    let Ok(entries) = fs::read_dir(run_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let dir = e.path();
        if !dir.is_dir() {
            continue;
        }
        match read_meta(&dir) {
            Some(m) if m.owner.is_alive() => {}
            Some(m) => reap(&dir, Some(&m)),
            // A folder without meta.json is either being created right now (meta is written
            // right after) or left by a crash before that: only remove old ones.
            None => {
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .map(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(120))
                    .unwrap_or(false);
                if old {
                    reap(&dir, None);
                }
            }
        }
    }
}

/// Ports of one instance, by role.
struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    apiserver: u16,
    controller_manager: u16,
    scheduler: u16,
    jobset: [u16; 3],
    lws: [u16; 3],
    trainer: [u16; 3],
    kueue: [u16; 3],
}

impl Ports {
    const COUNT: usize = 17;

    fn new(p: &[u16]) -> Ports {
        Ports {
            etcd_client: p[0],
            etcd_peer: p[1],
            apiserver: p[2],
            controller_manager: p[3],
            scheduler: p[4],
            jobset: [p[5], p[6], p[7]],
            lws: [p[8], p[9], p[10]],
            trainer: [p[11], p[12], p[13]],
            kueue: [p[14], p[15], p[16]],
        }
    }

    fn named(p: &[u16]) -> BTreeMap<String, u16> {
        [
            "etcd-client",
            "etcd-peer",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "jobset-webhook",
            "jobset-metrics",
            "jobset-health",
            "lws-webhook",
            "lws-metrics",
            "lws-health",
            "trainer-webhook",
            "trainer-metrics",
            "trainer-health",
            "kueue-webhook",
            "kueue-metrics",
            "kueue-health",
        ]
        .iter()
        .zip(p)
        .map(|(k, v)| (k.to_string(), *v))
        .collect()
    }
}

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
                if m.owner.is_alive() {
                    return Err(Error::AlreadyRunning { name: name.clone() });
                }
                reap(&dir, Some(&m));
            }
            let _ = fs::remove_dir_all(&dir);
            for sub in ["pki", "logs"] {
                fs::create_dir_all(dir.join(sub))
                    .map_err(Error::io(format!("create {}", dir.display())))?;
            }
            write_meta(
                &dir,
                &Meta {
                    name: name.clone(),
                    owner: ProcId::current(),
                    pgid: 0,
                    ports: Ports::named(p),
                    bin_dir: bins[0].clone(),
                },
            )?;
            Ok(p.to_vec())
        })?;
        let ports = Ports::new(&port_list);
        let server = format!("https://127.0.0.1:{}", ports.apiserver);
        let mut launcher = Launcher {
            dir: dir.clone(),
            children: Vec::new(),
            pgid: 0,
            specs: Vec::new(),
        };
        match Self::boot(&opts, &bins, &dir, &ports, &server, &mut launcher).await {
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
                let _ = fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    async fn boot(
        opts: &InstanceOptions,
        bins: &[PathBuf],
        dir: &Path,
        ports: &Ports,
        server: &str,
        launcher: &mut Launcher,
    ) -> Result<(kube::Client, AgentHandle)> {
        let kube_bin = &bins[0];
        let pki = pki::generate()?;
        let p = dir.join("pki");
        for (file, text, mode) in [
            ("ca.crt", &pki.ca_cert, 0o644),
            ("serving.crt", &pki.serving_cert, 0o644),
            ("serving.key", &pki.serving_key, 0o600),
            ("sa.key", &pki.sa_key, 0o600),
            ("sa.pub", &pki.sa_pub, 0o644),
        ] {
            write_file(&p.join(file), text, mode)?;
        }
        let kubeconfig = dir.join("kubeconfig");
        write_file(&kubeconfig, &kubeconfig_yaml(server, &pki), 0o600)?;

        let etcd_url = format!("http://127.0.0.1:{}", ports.etcd_client);
        let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
        launcher.spawn(
            "etcd",
            &bins[1].join("etcd"),
            &[
                "--name=default".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                // Test data lives and dies with the instance: durability costs only time.
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        )?;
        // Record the process group at once, so a crash from here on leaves nothing behind.
        let mut meta = read_meta(dir).ok_or_else(|| Error::Invalid("meta.json vanished".into()))?;
        meta.pgid = launcher.pgid;
        write_meta(dir, &meta)?;
        launcher
            .wait_until("etcd", || {
                http_get_plain(ports.etcd_client, "/health").is_some_and(|b| b.contains("true"))
            })
            .await?;

        let pkis = |f: &str| p.join(f).display().to_string();
        launcher.spawn(
            "kube-apiserver",
            &kube_bin.join("kube-apiserver"),
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={}", ports.apiserver),
                format!("--tls-cert-file={}", pkis("serving.crt")),
                format!("--tls-private-key-file={}", pkis("serving.key")),
                format!("--client-ca-file={}", pkis("ca.crt")),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", pkis("sa.pub")),
                format!("--service-account-signing-key-file={}", pkis("sa.key")),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--authorization-mode=Node,RBAC".into(),
                format!("--runtime-config={RUNTIME_CONFIG}"),
                format!("--feature-gates={FEATURE_GATES}"),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                format!("--cert-dir={}", dir.join("pki").display()),
            ],
        )?;
        let client = client_for(&kubeconfig).await?;
        let probe = Probe::new(&kubeconfig).await?;
        launcher
            .wait_until_async("kube-apiserver", || probe.ok("/readyz"))
            .await?;

        let kc = kubeconfig.display().to_string();
        let auth_flags = |port: u16| {
            vec![
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                "--bind-address=127.0.0.1".to_string(),
                format!("--secure-port={port}"),
                "--leader-elect=false".to_string(),
                format!("--feature-gates={FEATURE_GATES}"),
            ]
        };
        let mut kcm = auth_flags(ports.controller_manager);
        kcm.extend([
            format!("--service-account-private-key-file={}", pkis("sa.key")),
            format!("--root-ca-file={}", pkis("ca.crt")),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            format!(
                "--controllers={}",
                opts.controllers.as_deref().unwrap_or("*")
            ),
            // The node lifecycle controller looks every second (default 5 s), so new nodes lose
            // their not-ready taint quickly.
            "--node-monitor-period=1s".into(),
            format!(
                "--node-monitor-grace-period={}s",
                opts.node_monitor_grace_period
                    .unwrap_or(Duration::from_secs(50))
                    .as_secs()
            ),
            "--kube-api-qps=100".into(),
            "--kube-api-burst=200".into(),
        ]);
        launcher.spawn(
            "kube-controller-manager",
            &kube_bin.join("kube-controller-manager"),
            &kcm,
        )?;
        if opts.kube_scheduler {
            let mut flags = auth_flags(ports.scheduler);
            flags.extend(opts.kube_scheduler_args.iter().cloned());
            launcher.spawn("kube-scheduler", &bins[6].join("kube-scheduler"), &flags)?;
        }

        let mut more_crds = Vec::new();
        if opts.trainer {
            more_crds.extend(crds::read_dir(&bins[4].join("crds"))?);
        }
        if opts.kueue {
            more_crds.extend(crds::read_dir(&bins[5].join("crds"))?);
        }
        crds::install(&client, opts.workload_controllers, &more_crds).await?;
        {
            use crate::workloads::{self, JOBSET, KUEUE, LWS, TRAINER};
            let jobset = opts.workload_controllers || opts.trainer;
            let mut started = Vec::new();
            if jobset {
                workloads::start(&JOBSET, &client, launcher, &bins[2], dir, &kc, ports.jobset)
                    .await?;
                started.push((&JOBSET, ports.jobset));
            }
            if opts.workload_controllers {
                workloads::start(&LWS, &client, launcher, &bins[3], dir, &kc, ports.lws).await?;
                started.push((&LWS, ports.lws));
            }
            if opts.kueue {
                workloads::start(&KUEUE, &client, launcher, &bins[5], dir, &kc, ports.kueue)
                    .await?;
                started.push((&KUEUE, ports.kueue));
            }
            if opts.trainer {
                workloads::start(
                    &TRAINER,
                    &client,
                    launcher,
                    &bins[4],
                    dir,
                    &kc,
                    ports.trainer,
                )
                .await?;
                started.push((&TRAINER, ports.trainer));
            }
            for (c, p) in started {
                workloads::wait_ready(c, launcher, p).await?;
            }
        }

        // Pods need the `default` ServiceAccount, which the controller manager creates.
        let sa: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(client.clone(), "default");
        launcher
            .wait_until_async("kube-controller-manager", || async {
                sa.get_opt("default").await.ok().flatten().is_some()
            })
            .await?;

        let agent = agent::start(client.clone(), opts.nodes.clone(), AgentOptions::default())
            .await
            .map_err(|e| Error::Agent(e.to_string()))?;
        wait_nodes_schedulable(&client, &opts.nodes).await?;
        Ok((client, agent))
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

    /// `KUBECONFIG=...` as `up` prints it.
    pub fn env_lines(&self) -> String {
        env_lines(&self.dir)
    }

    fn shutdown(&mut self) {
        // The agent's tasks stop first, so nothing writes to a dying API server.
        self.agent.take();
        self.launcher.kill_all();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub(crate) fn env_lines(dir: &Path) -> String {
    format!("KUBECONFIG={}\n", dir.join("kubeconfig").display())
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
