//! Real nodes: `node-1` .. `node-N` of an instance run a real kubelet with its own containerd
//! (runc, CNI bridge networking), beside the agent's simulated nodes.
//!
//! Each node gets, under `<instance>/nodes/<node>/`, containerd's root, state, socket and
//! configuration, kubelet's configuration, kubeconfig and root folder, its CNI configuration and
//! IP allocations; a cgroup root `/kube-testenv/<instance>/<node>` in every cgroup v1
//! hierarchy; a node IP on the instance's bridge `kt<slot>` and a pod /24 on the CNI bridge
//! `kt<slot>n<i>`. containerd and kubelet share a mount namespace of their own (`unshare`, then
//! `nsenter`): private folders are bound over the host paths kubelet and containerd hard-code
//! (`/var/lib/kubelet`, `/var/log/pods`, `/var/log/containers`, `/run/containerd`,
//! `/var/lib/cni`) and over the standard folders of containerd's NRI socket (`/var/run/nri`)
//! and CDI specs (`/var/run/cdi`), so a DaemonSet's hostPath finds them where a site has them;
//! files holding the values kubelet wants are bound over the sysctls it would otherwise change
//! on the host; every mount they make goes away with the namespace.

pub mod forward;
pub mod host;

use crate::agent::NodeSpec;
use crate::error::{Error, Result};
use crate::kubeconfig::client_kubeconfig;
use crate::launcher::Launcher;
use crate::paths::run_dir;
use crate::pki::Pki;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use host::{IMAGE, PAUSE_IMAGE};

/// How many instances may run kubelet nodes at once (each takes a slot: its addresses and link
/// names).
pub(crate) const SLOTS: u8 = 64;
/// At most this many kubelet nodes per instance (each is a kubelet and a containerd, about
/// 150 MB).
pub const MAX_KUBELET_NODES: usize = 32;

/// The v1 hierarchies kubelet and runc use (all that are mounted, `name=systemd` included).
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Host paths bound to private folders in the nodes' mount namespace: `(host path, folder
/// under the node's folder)`. The NRI and CDI folders are named by their `/var/run` paths, which
/// `mount` and `create_dir_all` resolve: `/run/nri` where `/var/run` is a symlink to `/run`.
const PRIVATE_PATHS: [(&str, &str); 7] = [
    (KUBELET_ROOT, "kubelet"),
    ("/var/log/pods", "pod-logs"),
    ("/var/log/containers", "container-logs"),
    ("/run/containerd", "run-containerd"),
    ("/var/lib/cni", "cni/cache"),
    ("/var/run/nri", NRI_FOLDER),
    ("/var/run/cdi", CDI_FOLDER),
];

/// containerd's NRI socket as the node sees it, the chart's `nodeAgent.nriSocket` default.
pub const NRI_SOCKET: &str = "/var/run/nri/nri.sock";
/// containerd's CDI spec folder (`cdi_spec_dirs`) as the node sees it, the chart's
/// `nodeAgent.cdiDir` default.
pub const CDI_DIR: &str = "/var/run/cdi";
/// The node's private folder bound over `/var/run/nri` (holds `nri.sock`).
const NRI_FOLDER: &str = "run-nri";
/// The node's private folder bound over `/var/run/cdi`.
const CDI_FOLDER: &str = "cdi";

/// The host path of kubelet node `node`'s NRI socket ([`NRI_SOCKET`] in its namespace), given
/// the instance's folder.
pub(crate) fn node_nri_socket(dir: &Path, node: &str) -> PathBuf {
    dir.join("nodes")
        .join(node)
        .join(NRI_FOLDER)
        .join("nri.sock")
}

/// Sysctls kubelet sets when they differ (it has no option to leave them), and the CNI bridge
/// plugin's `ip_forward`: in the nodes' mount namespace a file with the wanted value is bound
/// over each, so the host's stay as they are (and with `ip_forward` off, pods' traffic never
/// leaves the host).
const SYSCTLS: [(&str, &str); 7] = [
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
    ("net/ipv4/ip_forward", "1"),
];

/// The kubelet node names of an instance: `node-1` .. `node-N`.
pub fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node-{i}")).collect()
}

/// The node IP of kubelet node `i` (1-based) of the instance in `slot`.
pub(crate) fn node_ip(slot: u8, i: usize) -> String {
    format!("10.199.{slot}.{i}")
}

/// The host's address on the bridge of the instance in `slot`: pods reach the host's loopback
/// ports exposed there ([`crate::Instance::expose_host_port`]).
pub(crate) fn host_ip(slot: u8) -> String {
    format!("10.199.{slot}.254")
}

/// The service CIDR of an instance with kubelet nodes, its own so that each instance's
/// `kubernetes` Service (the first address) can be an address on its bridge.
pub(crate) fn service_cidr(slot: u8) -> String {
    format!("10.96.{slot}.0/24")
}

/// The ClusterIP of the `kubernetes` Service of the instance in `slot` (kube-apiserver takes the
/// first address of the service CIDR).
pub(crate) fn kubernetes_service_ip(slot: u8) -> String {
    format!("10.96.{slot}.1")
}

/// The pod /24 of kubelet node `i` (1-based) of the instance in `slot` (inside 10.200.0.0/13).
pub(crate) fn pod_subnet(slot: u8, i: usize) -> String {
    let k = usize::from(slot) * MAX_KUBELET_NODES + (i - 1);
    format!("10.{}.{}.0/24", 200 + k / 256, k % 256)
}

/// The bridge holding the node IPs of the instance in `slot`.
pub(crate) fn node_bridge(slot: u8) -> String {
    format!("kt{slot}")
}

/// The CNI bridge of kubelet node `i`.
fn cni_bridge(slot: u8, i: usize) -> String {
    format!("kt{slot}n{i}")
}

/// The cgroup (below each hierarchy's root) holding the instance's kubelet nodes.
pub(crate) fn cgroup_parent(instance: &str) -> String {
    format!("kube-testenv/{instance}")
}

/// The kubelet's root folder as the kubelet and containerd see it in their mount namespace.
pub const KUBELET_ROOT: &str = "/var/lib/kubelet";

/// The folders of one kubelet node a node agent on the host uses. The kubelet's root
/// (`/var/lib/kubelet` to the kubelet, [`KUBELET_ROOT`]) is the node's private `kubelet` folder
/// bound over it, so a socket the agent creates under [`KubeletDirs::plugins_registry`] is the
/// kubelet's `plugins_registry/` entry; an endpoint the kubelet dials is named by its own path
/// ([`KubeletDirs::kubelet_path`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletDirs {
    /// The kubelet's root folder on the host.
    pub root: PathBuf,
    /// Where the kubelet's plugin watcher looks for registration sockets.
    pub plugins_registry: PathBuf,
    /// The kubelet's plugins folder (`plugins/<driver>/` holds a DRA driver's socket).
    pub plugins: PathBuf,
    /// containerd's `cdi_spec_dirs` folder (CDI specs of the node's devices), [`CDI_DIR`] in
    /// the node's namespace.
    pub cdi: PathBuf,
}

impl KubeletDirs {
    pub(crate) fn of(node_dir: &Path) -> KubeletDirs {
        let root = node_dir.join("kubelet");
        KubeletDirs {
            plugins_registry: root.join("plugins_registry"),
            plugins: root.join("plugins"),
            cdi: node_dir.join(CDI_FOLDER),
            root,
        }
    }

    /// The path the kubelet sees for `host_path`, a path under [`KubeletDirs::root`]
    /// (`None` elsewhere).
    pub fn kubelet_path(&self, host_path: &Path) -> Option<PathBuf> {
        host_path
            .strip_prefix(&self.root)
            .ok()
            .map(|rest| Path::new(KUBELET_ROOT).join(rest))
    }
}

/// What the instance needs to run kubelet nodes: the folders of the kubelet and containerd
/// binaries and the image archive.
#[derive(Clone, Debug)]
pub(crate) struct Binaries {
    pub(crate) kubelet: PathBuf,
    pub(crate) containerd: PathBuf,
    pub(crate) images: PathBuf,
}

/// Builds (or finds) kubelet and containerd, installs runc and the CNI plugins if missing and
/// builds the test image: everything `--kubelet-nodes` needs. Blocking.
pub(crate) fn prepare() -> Result<Binaries> {
    host::ensure_packages()?;
    Ok(Binaries {
        kubelet: crate::binaries::ensure(&crate::binaries::KUBELET)?,
        containerd: crate::binaries::ensure(&crate::binaries::CONTAINERD)?,
        images: host::image_archive()?,
    })
}

fn run_quiet(what: &str, cmd: &mut Command) -> Result<()> {
    host::run(what, cmd).map(drop)
}

fn ip(args: &[&str]) -> Result<()> {
    run_quiet(
        &format!("ip {}", args.join(" ")),
        Command::new("ip").args(args),
    )
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(Error::io(format!("create {}", parent.display())))?;
    }
    fs::write(path, text).map_err(Error::io(format!("write {}", path.display())))
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Creates `/sys/fs/cgroup/<hierarchy>/<path>` in every v1 hierarchy (cpuset's `cpus` and
/// `mems` copied from the parent, as a new cpuset cgroup starts empty).
fn create_cgroup(path: &str) -> Result<()> {
    let entries = fs::read_dir(CGROUP_ROOT).map_err(Error::io("read /sys/fs/cgroup"))?;
    for e in entries.flatten() {
        let hierarchy = e.path();
        if e.file_name() == "unified" || !hierarchy.join("cgroup.procs").exists() {
            continue;
        }
        let mut dir = hierarchy.clone();
        for part in path.split('/') {
            let parent = dir.clone();
            dir = dir.join(part);
            if !dir.exists() {
                fs::create_dir(&dir).map_err(Error::io(format!("create {}", dir.display())))?;
            }
            for f in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(mine) = fs::read_to_string(dir.join(f))
                    && mine.trim().is_empty()
                {
                    let from = fs::read_to_string(parent.join(f)).unwrap_or_default();
                    fs::write(dir.join(f), from.trim())
                        .map_err(Error::io(format!("write {}", dir.join(f).display())))?;
                }
            }
        }
    }
    Ok(())
}

/// Starts the kubelet nodes of an instance: its bridge and cgroups, then per node containerd
/// (waited for, the images imported) and kubelet. Returns once every kubelet runs; the caller
/// waits for the nodes to be Ready.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start(
    launcher: &mut Launcher,
    bins: &Binaries,
    dir: &Path,
    instance: &str,
    slot: u8,
    nodes: &[NodeSpec],
    pki: &Pki,
    server: &str,
) -> Result<()> {
    let bridge = node_bridge(slot);
    let _ = ip(&["link", "del", &bridge]);
    ip(&["link", "add", &bridge, "type", "bridge"])?;
    for i in 1..=nodes.len() {
        let _ = ip(&["link", "del", &cni_bridge(slot, i)]);
        ip(&[
            "addr",
            "add",
            &format!("{}/32", node_ip(slot, i)),
            "dev",
            &bridge,
        ])?;
    }
    for addr in [host_ip(slot), kubernetes_service_ip(slot)] {
        ip(&["addr", "add", &format!("{addr}/32"), "dev", &bridge])?;
    }
    ip(&["link", "set", &bridge, "up"])?;
    // The `kubernetes` Service for pods: its ClusterIP, port 443, to kube-apiserver.
    let apiserver: std::net::SocketAddr = server
        .strip_prefix("https://")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| Error::Invalid(format!("API server URL {server}: not https://IP:PORT")))?;
    let service: std::net::SocketAddr = format!("{}:443", kubernetes_service_ip(slot))
        .parse()
        .expect("an IP and a port");
    launcher
        .forwards
        .push(forward::spawn(service, apiserver).await?);
    for n in nodes {
        create_cgroup(&format!("{}/{}", cgroup_parent(instance), n.name))?;
    }
    // Mount points the namespaces bind over must exist on the host.
    for (host_path, _) in PRIVATE_PATHS {
        fs::create_dir_all(host_path).map_err(Error::io(format!("create {host_path}")))?;
    }
    fs::create_dir_all(dir.join("nri")).map_err(Error::io("create nri"))?;
    let mut containerds = Vec::new();
    for (idx, n) in nodes.iter().enumerate() {
        let i = idx + 1;
        let nd = dir.join("nodes").join(&n.name);
        write_node_files(&nd, dir, instance, slot, i, n, pki, server)?;
        let script = namespace_script(&nd, &bins.containerd);
        let component = leak(format!("containerd-{}", n.name));
        launcher.spawn(
            component,
            Path::new("/usr/bin/unshare"),
            &[
                "--mount".into(),
                "--propagation".into(),
                "private".into(),
                "--".into(),
                "/bin/sh".into(),
                "-c".into(),
                script,
                "kube-testenv-node".into(),
            ],
        )?;
        let pid = launcher
            .children
            .last()
            .map(|(_, c)| c.id())
            .expect("just spawned");
        containerds.push((component, pid, nd));
    }
    for (component, _, nd) in &containerds {
        let ctr = bins.containerd.join("ctr");
        let sock = nd.join("containerd.sock");
        launcher
            .wait_until(component, || {
                Command::new(&ctr)
                    .arg("--address")
                    .arg(&sock)
                    .arg("version")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .await?;
        import_image(&ctr, &sock, &bins.images)?;
    }
    for ((_, pid, nd), (idx, n)) in containerds.iter().zip(nodes.iter().enumerate()) {
        let mut args = vec![
            format!("--mount=/proc/{pid}/ns/mnt"),
            "--".into(),
            "/usr/bin/env".into(),
            // No /usr/sbin: without iptables kubelet leaves the host's tables alone.
            "PATH=/usr/local/bin:/usr/bin".into(),
            bins.kubelet.join("kubelet").display().to_string(),
            format!("--config={}", nd.join("kubelet.yaml").display()),
            format!("--kubeconfig={}", nd.join("kubeconfig").display()),
            format!("--hostname-override={}", n.name),
            format!("--node-ip={}", node_ip(slot, idx + 1)),
            format!("--containerd={}", nd.join("containerd.sock").display()),
            "--v=1".into(),
        ];
        if !n.labels.is_empty() {
            args.push(format!(
                "--node-labels={}",
                n.labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        if !n.taints.is_empty() {
            args.push(format!(
                "--register-with-taints={}",
                n.taints
                    .iter()
                    .map(|t| format!(
                        "{}={}:{}",
                        t.key,
                        t.value.as_deref().unwrap_or(""),
                        t.effect
                    ))
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        launcher.spawn(
            leak(format!("kubelet-{}", n.name)),
            Path::new("/usr/bin/nsenter"),
            &args,
        )?;
    }
    Ok(())
}

/// Imports a docker or OCI archive into a node's containerd (namespace `k8s.io`, where the CRI
/// plugin finds images).
pub(crate) fn import_image(ctr: &Path, sock: &Path, archive: &Path) -> Result<()> {
    run_quiet(
        &format!("ctr images import {}", archive.display()),
        Command::new(ctr)
            .arg("--address")
            .arg(sock)
            .args(["-n", "k8s.io", "images", "import", "--local"])
            .arg(archive),
    )
}

/// The shell run by `unshare --mount`: makes the new namespace's mounts shared among
/// themselves (for `mountPropagation`), binds the private folders and sysctl files, and
/// becomes containerd.
fn namespace_script(nd: &Path, containerd_bin: &Path) -> String {
    let q = |p: &Path| format!("'{}'", p.display());
    let mut s = String::from("set -e\nmount --make-rshared /\n");
    for (host_path, private) in PRIVATE_PATHS {
        s.push_str(&format!(
            "mount --bind {} {host_path}\n",
            q(&nd.join(private))
        ));
    }
    for (sysctl, _) in SYSCTLS {
        s.push_str(&format!(
            "mount --bind {} /proc/sys/{sysctl}\n",
            q(&nd.join("sysctl").join(sysctl.replace('/', ".")))
        ));
    }
    s.push_str(&format!(
        "export PATH={}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin\nexec {} --config {}\n",
        containerd_bin.display(),
        q(&containerd_bin.join("containerd")),
        q(&nd.join("containerd.toml"))
    ));
    s
}

#[allow(clippy::too_many_arguments)]
fn write_node_files(
    nd: &Path,
    dir: &Path,
    instance: &str,
    slot: u8,
    i: usize,
    n: &NodeSpec,
    pki: &Pki,
    server: &str,
) -> Result<()> {
    for (_, private) in PRIVATE_PATHS {
        fs::create_dir_all(nd.join(private)).map_err(Error::io("create a node folder"))?;
    }
    // `<instance>/nri/<node>.sock` (KUBE_TESTENV_NRI_DIR) for an NRI plugin on the host: a
    // symlink to the socket containerd creates at NRI_SOCKET in the node's namespace.
    let link = dir.join("nri").join(format!("{}.sock", n.name));
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(node_nri_socket(dir, &n.name), &link)
        .map_err(Error::io(format!("link {}", link.display())))?;
    for (sysctl, value) in SYSCTLS {
        write(
            &nd.join("sysctl").join(sysctl.replace('/', ".")),
            &format!("{value}\n"),
        )?;
    }
    let (_, cert, key) = pki
        .nodes
        .iter()
        .find(|(name, _, _)| *name == n.name)
        .ok_or_else(|| Error::Invalid(format!("no certificate for {}", n.name)))?;
    write(
        &nd.join("kubeconfig"),
        &client_kubeconfig(server, &pki.ca_cert, cert, key),
    )?;
    let sock = nd.join("containerd.sock");
    let d = |p: &str| nd.join(p).display().to_string();
    write(
        &nd.join("containerd.toml"),
        &format!(
            r#"version = 4
root = '{root}'
state = '{state}'
imports = []

[plugins.'io.containerd.server.v1.grpc']
  address = '{sock}'
[plugins.'io.containerd.server.v1.ttrpc']
  address = '{sock}.ttrpc'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{pause}'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ['{cdi}']
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '{runc}'
      Root = '{runc_root}'
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{cni_bin}']
    conf_dir = '{cni_conf}'
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '{nri}'
  plugin_path = '{nri_plugins}'
  plugin_config_path = '{nri_conf}'
[plugins.'io.containerd.internal.v1.opt']
  path = '{opt}'
[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = '{verifier}'
"#,
            root = d("containerd/root"),
            state = d("containerd/state"),
            sock = sock.display(),
            pause = PAUSE_IMAGE,
            cdi = CDI_DIR,
            runc = host::RUNC,
            runc_root = d("runc"),
            cni_bin = host::CNI_BIN_DIR,
            cni_conf = d("cni/net.d"),
            nri = NRI_SOCKET,
            nri_plugins = d("nri/plugins"),
            nri_conf = d("nri/conf.d"),
            opt = d("opt"),
            verifier = d("image-verifier"),
        ),
    )?;
    write(
        &nd.join("cni/net.d/10-kube-testenv.conflist"),
        &serde_json::to_string_pretty(&serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "kube-testenv",
            "plugins": [{
                "type": "bridge",
                "bridge": cni_bridge(slot, i),
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_subnet(slot, i)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": d("cni/ipam"),
                },
            }],
        }))
        .expect("CNI configuration serializes"),
    )?;
    let ip = node_ip(slot, i);
    write(
        &nd.join("kubelet.yaml"),
        &format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: {ip}
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://{sock}
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: /{cgroup}/{node}
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
evictionHard: {{}}
resolvConf: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
clusterDomain: cluster.local
# A pod whose setup failed (a DRA claim not prepared, a volume not mounted) is tried again at its
# next periodic sync: every 10-15 s here rather than the default 1-1.5 min, so tests wait less.
syncFrequency: 10s
"#,
            ca = dir.join("pki/ca.crt").display(),
            sock = sock.display(),
            cgroup = cgroup_parent(instance),
            node = n.name,
        ),
    )?;
    Ok(())
}

/// Everything an instance's kubelet nodes leave outside its folder, and their processes: the
/// shims and containers (and kubelets and containerds, if still running), the cgroups, the
/// bridges. Called after the daemons' group was killed; idempotent. The mounts went with the
/// nodes' mount namespaces.
pub(crate) fn cleanup(dir: &Path, instance: &str, slot: Option<u8>) {
    let marker = format!("{}/nodes/", dir.display());
    kill_naming(&marker);
    let parent = cgroup_parent(instance);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = cgroup_pids(&parent);
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in pids {
            slurm_testenv::process::kill(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Shims started while we killed (kubelet retrying) are gone with their containerd; once
    // more for any that were exiting.
    kill_naming(&marker);
    remove_cgroups(&parent);
    if let Some(slot) = slot {
        for link in links_of_slot(slot) {
            let _ = ip(&["link", "del", &link]);
        }
    }
}

/// SIGKILL to every process with `marker` in its command line.
fn kill_naming(marker: &str) {
    let me = std::process::id() as i32;
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            slurm_testenv::process::kill(pid, libc::SIGKILL);
        }
    }
}

/// The processes in the cgroup `path` (and below) of every hierarchy.
fn cgroup_pids(path: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(CGROUP_ROOT) else {
        return out;
    };
    for e in entries.flatten() {
        let mut stack = vec![e.path().join(path)];
        while let Some(d) = stack.pop() {
            if let Ok(procs) = fs::read_to_string(d.join("cgroup.procs")) {
                out.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
            if let Ok(subs) = fs::read_dir(&d) {
                stack.extend(
                    subs.flatten()
                        .filter(|s| s.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|s| s.path()),
                );
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Removes the cgroup `path` and everything below it in every hierarchy (deepest first), and
/// `kube-testenv` itself when no other instance uses it.
fn remove_cgroups(path: &str) {
    let Ok(entries) = fs::read_dir(CGROUP_ROOT) else {
        return;
    };
    for e in entries.flatten() {
        let top = e.path().join(path);
        let mut all = Vec::new();
        let mut stack = vec![top.clone()];
        while let Some(d) = stack.pop() {
            if let Ok(subs) = fs::read_dir(&d) {
                stack.extend(
                    subs.flatten()
                        .filter(|s| s.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|s| s.path()),
                );
            }
            all.push(d);
        }
        for d in all.iter().rev() {
            let _ = fs::remove_dir(d);
        }
        if let Some(parent) = top.parent() {
            let _ = fs::remove_dir(parent);
        }
    }
}

/// The links named after `slot`: its node bridge and its nodes' CNI bridges.
fn links_of_slot(slot: u8) -> Vec<String> {
    all_links()
        .into_iter()
        .filter(|l| link_slot(l) == Some(slot))
        .collect()
}

fn all_links() -> Vec<String> {
    fs::read_dir("/sys/class/net")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The slot a link named `kt<slot>` or `kt<slot>n<i>` belongs to.
fn link_slot(name: &str) -> Option<u8> {
    let rest = name.strip_prefix("kt")?;
    let (slot, node) = match rest.split_once('n') {
        Some((s, n)) => (s, Some(n)),
        None => (rest, None),
    };
    if slot.is_empty() || !slot.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if let Some(n) = node
        && (n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()))
    {
        return None;
    }
    slot.parse().ok()
}

/// Removes what kubelet nodes of instances no longer running left: bridges of slots no live
/// instance holds, cgroups of instances whose folder has no live owner, processes naming a
/// folder that is gone. `live` is the instances running (name, slot).
pub(crate) fn sweep_orphans(live: &[(String, Option<u8>)]) {
    for link in all_links() {
        if let Some(slot) = link_slot(&link)
            && !live.iter().any(|(_, s)| *s == Some(slot))
        {
            let _ = ip(&["link", "del", &link]);
        }
    }
    let Ok(entries) = fs::read_dir(CGROUP_ROOT) else {
        return;
    };
    let mut dead = std::collections::BTreeSet::new();
    for e in entries.flatten() {
        if let Ok(instances) = fs::read_dir(e.path().join("kube-testenv")) {
            for i in instances.flatten() {
                let name = i.file_name().to_string_lossy().into_owned();
                if i.path().is_dir() && !live.iter().any(|(n, _)| *n == name) {
                    dead.insert(name);
                }
            }
        }
    }
    for name in dead {
        cleanup(&run_dir().join(&name), &name, None);
    }
}

/// Free slot for a new instance, given those taken.
pub(crate) fn free_slot(taken: &[u8]) -> Result<u8> {
    (0..SLOTS).find(|s| !taken.contains(s)).ok_or_else(|| {
        Error::Invalid(format!(
            "{SLOTS} instances with kubelet nodes are running: stop one first"
        ))
    })
}

/// The watchdog's part for kubelet nodes (arguments `$4` instance name, `$5` slot): what
/// [`cleanup`] does, in shell, for an owner that died.
pub(crate) const WATCHDOG_CLEANUP: &str = r#"
if [ -n "$4" ]; then
  for p in /proc/[0-9]*; do
    case "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" in *"$3/nodes/"*) kill -s KILL "${p#/proc/}" 2>/dev/null;; esac
  done
  for i in 1 2 3 4 5 6 7 8 9 10; do
    for f in $(find /sys/fs/cgroup/*/kube-testenv/"$4" -name cgroup.procs 2>/dev/null); do
      for q in $(cat "$f"); do kill -s KILL "$q" 2>/dev/null; done
    done
    sleep 0.2
  done
  find /sys/fs/cgroup/*/kube-testenv/"$4" -depth -type d -exec rmdir {} \; 2>/dev/null
  rmdir /sys/fs/cgroup/*/kube-testenv 2>/dev/null
  for l in $(ls /sys/class/net); do
    case "$l" in "kt$5"|"kt$5"n*) ip link del "$l" 2>/dev/null;; esac
  done
fi
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_do_not_collide() {
        let mut seen = std::collections::HashSet::new();
        for slot in 0..SLOTS {
            for i in 1..=MAX_KUBELET_NODES {
                assert!(seen.insert(pod_subnet(slot, i)), "{slot} {i}");
                assert!(seen.insert(node_ip(slot, i)));
            }
        }
        assert_eq!(pod_subnet(0, 1), "10.200.0.0/24");
        assert_eq!(pod_subnet(63, 32), "10.207.255.0/24");
    }

    #[test]
    fn link_names_map_to_their_slot() {
        assert_eq!(link_slot("kt3"), Some(3));
        assert_eq!(link_slot("kt12n4"), Some(12));
        assert_eq!(link_slot("kt"), None);
        assert_eq!(link_slot("ktx"), None);
        assert_eq!(link_slot("kt1n"), None);
        assert_eq!(link_slot("eth0"), None);
        assert!(cni_bridge(SLOTS - 1, MAX_KUBELET_NODES).len() <= 15);
    }

    #[test]
    fn kubelet_dirs_name_the_kubelets_view_of_its_root() {
        let d = KubeletDirs::of(Path::new("/run/kt/i/nodes/node-1"));
        assert_eq!(d.cdi, Path::new("/run/kt/i/nodes/node-1/cdi"));
        let sock = d.plugins.join("dra.cpu/dra.sock");
        assert_eq!(
            d.kubelet_path(&sock).unwrap(),
            Path::new("/var/lib/kubelet/plugins/dra.cpu/dra.sock")
        );
        assert_eq!(d.kubelet_path(&d.cdi), None);
    }
}
