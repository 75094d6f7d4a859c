//! One isolated Slurm: slurmctld + slurmrestd (and slurmd nodes) with their own slurm.conf, ports,
//! keys, state, logs.

mod accounting;
mod daemons;
mod faults;
mod slurmd;

pub use faults::Daemon;

use crate::conf::Policy;
use crate::cpus::HostCpus;
use crate::error::{Error, Result};
use crate::node::NodeSpec;
use crate::paths::run_dir;
use crate::process::{self, ProcId};
use crate::rootfs::{self, Rootfs};
use crate::{cgroup, ports, sandbox};
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The data_parser version slurmrestd serves.
pub const DATA_PARSER: &str = "v0.0.44";
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How to start an instance.
#[derive(Clone, Debug)]
pub struct InstanceOptions {
    /// Instance name; tests leave it `None` for a unique one.
    pub name: Option<String>,
    /// External nodes created at start (8 CPUs, 16000 MB, feature slurm-bridge), numbered after
    /// the slurmd nodes: `node-(S+1)` .. `node-(S+N)` with `S = slurmd_nodes`.
    pub nodes: u32,
    /// Nodes `node-1` .. `node-S`, each run by a real slurmd (8 CPUs, 16000 MB, feature
    /// slurm-bridge; with [`InstanceOptions::cgroups`] the host's real CPUs), where batch jobs
    /// run: the hybrid nodes a kubelet shares with slurmd.
    pub slurmd_nodes: u32,
    /// Preemption, more partitions, licenses and other slurm.conf knobs.
    pub policy: Policy,
    /// slurm.conf MaxNodeCount; default: 4096, or more when `nodes` needs it.
    pub max_node_count: Option<u32>,
    /// Lifetime of the root token.
    pub token_lifespan: Duration,
    /// Keep running after this handle is dropped and after this process exits (the CLI's `up`).
    pub detached: bool,
    /// Slurm accounting: a MariaDB server and slurmdbd run with the instance, slurm.conf stores
    /// accounting there and enforces associations, limits and QoS, and job priority is
    /// multifactor (fairshare). The cluster is registered, with account `root` and user root.
    pub accounting: bool,
    /// slurmd confines job steps with Slurm's own cgroups (v1: cpuset, memory, freezer):
    /// `proctrack/cgroup`, `task/cgroup,task/affinity`, `ConstrainCores`, `ConstrainRAMSpace`,
    /// `DefMemPerCPU=500` unless the policy sets one. The slurmd nodes are described as the
    /// host's real CPUs: one node owns them all; several split them by whole cores with
    /// `CpuSpecList` ([`Instance::machine_cpus`] tells which). Needs `slurmd_nodes` > 0 and the
    /// host's v1 hierarchies at `/sys/fs/cgroup/{cpuset,memory,freezer}`.
    pub cgroups: bool,
}

impl Default for InstanceOptions {
    fn default() -> Self {
        InstanceOptions {
            name: None,
            nodes: 0,
            slurmd_nodes: 0,
            policy: Policy::default(),
            max_node_count: None,
            token_lifespan: Duration::from_secs(30 * 24 * 3600),
            detached: false,
            accounting: false,
            cgroups: false,
        }
    }
}

/// What is written to `meta.json` so other processes (`env`, `exec`, `down`, the stale-instance
/// sweep) can find and stop an instance.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Meta {
    name: String,
    rootfs: PathBuf,
    rest_port: u16,
    slurmctld_port: u16,
    slurmd_port: u16,
    /// The process that owns the instance; `None` for detached instances.
    owner: Option<ProcId>,
    slurmctld: Option<ProcId>,
    slurmrestd: Option<ProcId>,
    /// The slurmd-run nodes, in name order.
    #[serde(default)]
    slurmd: Vec<SlurmdMeta>,
    /// ClusterName, fixed at creation (the database knows the cluster by it).
    #[serde(default)]
    cluster_name: Option<String>,
    /// With accounting: slurmdbd's port and the database's, and their `unshare` wrappers.
    #[serde(default)]
    slurmdbd_port: Option<u16>,
    #[serde(default)]
    mariadb_port: Option<u16>,
    #[serde(default)]
    slurmdbd: Option<ProcId>,
    #[serde(default)]
    mariadbd: Option<ProcId>,
    /// With cgroups: the host's CPUs, as slurm.conf describes the slurmd nodes.
    #[serde(default)]
    cgroups: Option<HostCpus>,
}

/// One slurmd-run node: its name, port and (while it runs) the `unshare` wrapper of its slurmd.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct SlurmdMeta {
    node: String,
    port: u16,
    proc: Option<ProcId>,
    /// With cgroups: the machine CPUs the node's jobs use.
    #[serde(default)]
    cpus: Vec<u32>,
}

#[derive(Default)]
struct Children {
    slurmctld: Option<Child>,
    slurmrestd: Option<Child>,
    slurmd: std::collections::BTreeMap<String, Child>,
    slurmdbd: Option<Child>,
    mariadbd: Option<Child>,
    watchdog: Option<Child>,
}

/// A running Slurm instance. Dropping an owned (non-detached) handle stops it and removes its state.
pub struct Instance {
    name: String,
    dir: PathBuf,
    rootfs: Rootfs,
    rest_url: String,
    token: String,
    token_file: PathBuf,
    meta: Mutex<Meta>,
    children: Mutex<Children>,
    owned: bool,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("name", &self.name)
            .field("rest_url", &self.rest_url)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Locks `m`, even if a panicking holder poisoned it (what it guards is plain bookkeeping).
fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn validate_name(name: &str) -> Result<()> {
    if crate::paths::is_valid_instance_name(name) {
        Ok(())
    } else {
        Err(Error::InvalidName { name: name.into() })
    }
}

fn write_secret(path: &Path, data: &[u8]) -> Result<()> {
    fs::write(path, data).map_err(Error::io(format!("write {}", path.display())))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(Error::io(format!("chmod {}", path.display())))
}

fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(Error::io("read /dev/urandom"))?;
    Ok(buf)
}

impl Instance {
    /// Starts a new instance and waits until slurmctld and slurmrestd answer. Builds the cached
    /// root file system first if needed. Blocking; call it from tests directly or via
    /// `tokio::task::spawn_blocking`.
    pub fn start(opts: InstanceOptions) -> Result<Instance> {
        if !process::is_root() {
            return Err(Error::NotRoot);
        }
        let rootfs = rootfs::ensure()?;
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
        // Options refused before anything is made, so a refused start leaves no folder behind.
        if opts.policy.preempt.is_some()
            && opts.policy.preempt_type == crate::conf::PreemptType::Qos
            && !opts.accounting
        {
            return Err(Error::NeedsAccounting {
                what: "QoS preemption (preempt/qos)",
            });
        }
        if opts.cgroups && opts.slurmd_nodes == 0 {
            return Err(Error::NeedsSlurmdNodes {
                what: "confining job steps with cgroups (`--cgroups`)",
            });
        }
        let dir = run_dir().join(&name);
        if dir.exists() {
            if let Ok(existing) = Instance::attach(&name)
                && existing.is_running()
            {
                return Err(Error::AlreadyRunning { name });
            }
            cgroup::remove_instance(&name)?;
            rootfs::remove_tree(&dir)?;
        }
        let host_cpus = if opts.cgroups {
            cgroup::check_available()?;
            Some(HostCpus::detect().map_err(Error::io("read the host's CPUs"))?)
        } else {
            None
        };
        let node_cpus = host_cpus
            .as_ref()
            .map(|h| h.split(opts.slurmd_nodes as usize))
            .unwrap_or_default();
        for sub in ["state", "spool", "work", "etc"] {
            fs::create_dir_all(dir.join(sub))
                .map_err(Error::io(format!("create {}", dir.display())))?;
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .map_err(Error::io(format!("chmod {}", dir.display())))?;
        // Jobs of the users a test adds (Instance::add_unix_user) write their output there too.
        fs::set_permissions(dir.join("work"), fs::Permissions::from_mode(0o1777))
            .map_err(Error::io(format!("chmod {}/work", dir.display())))?;
        // The instance's own user and group files, bound over the root file system's in its
        // sandboxes, so users added to one instance do not appear in others.
        for file in ["passwd", "group"] {
            fs::copy(
                rootfs.path.join("etc").join(file),
                dir.join("etc").join(file),
            )
            .map_err(Error::io(format!("copy etc/{file} into {}", dir.display())))?;
        }
        write_secret(&dir.join("slurm.key"), &random_bytes(1024)?)?;
        write_secret(&dir.join("jwt_hs256.key"), &random_bytes(32)?)?;

        // A detached instance too is owned by this process until it is up, so another process's
        // sweep does not take it for one whose slurmctld died while slurmctld has not started yet
        // (with accounting, mariadbd and slurmdbd start first); a failed `up` is swept.
        let owner = Some(ProcId::current());
        let slurmd_count = opts.slurmd_nodes as usize;
        let accounting_ports = if opts.accounting { 2 } else { 0 };
        let inst = ports::reserve(3 + slurmd_count + accounting_ports, |p| {
            let slurmd = (0..slurmd_count)
                .map(|i| SlurmdMeta {
                    node: format!("node-{}", i + 1),
                    port: p[3 + i],
                    proc: None,
                    cpus: node_cpus.get(i).cloned().unwrap_or_default(),
                })
                .collect();
            let inst = Instance {
                rest_url: format!("http://127.0.0.1:{}", p[2]),
                token: String::new(),
                token_file: dir.join("token"),
                meta: Mutex::new(Meta {
                    name: name.clone(),
                    rootfs: rootfs.path.clone(),
                    rest_port: p[2],
                    slurmctld_port: p[0],
                    slurmd_port: p[1],
                    owner,
                    slurmctld: None,
                    slurmrestd: None,
                    slurmd,
                    cluster_name: Some(format!("st{}", p[0])),
                    slurmdbd_port: opts.accounting.then(|| p[3 + slurmd_count]),
                    mariadb_port: opts.accounting.then(|| p[4 + slurmd_count]),
                    slurmdbd: None,
                    mariadbd: None,
                    cgroups: host_cpus.clone(),
                }),
                children: Mutex::new(Children::default()),
                owned: true,
                name: name.clone(),
                dir: dir.clone(),
                rootfs: rootfs.clone(),
            };
            inst.save_meta()?;
            Ok(inst)
        })?;
        if !opts.detached {
            inst.spawn_watchdog()?;
        }
        // From here on, dropping `inst` on error stops whatever was started.
        let mut inst = inst;
        let max_nodes = opts
            .max_node_count
            .unwrap_or_else(|| 4096.max(opts.nodes.saturating_add(1024)));
        if opts.accounting {
            // slurmdbd is up and the cluster registered before slurmctld starts and registers.
            inst.write_conf(max_nodes, &opts.policy)?;
            inst.start_accounting()?;
        }
        inst.start_slurmctld(max_nodes, &opts.policy)?;
        if opts.nodes > 0 {
            let first = opts.slurmd_nodes + 1;
            let last = opts.slurmd_nodes + opts.nodes;
            inst.create_node(&NodeSpec::new(format!("node-[{first}-{last}]")))?;
        }
        inst.start_all_slurmd()?;
        inst.token = inst.mint_token("root", opts.token_lifespan.as_secs())?;
        write_secret(&inst.token_file, inst.token.as_bytes())?;
        inst.start_slurmrestd()?;
        fs::write(inst.dir.join("env"), inst.env_lines())
            .map_err(Error::io("write the env file"))?;
        if opts.detached {
            locked(&inst.meta).owner = None;
            inst.save_meta()?;
            inst.owned = false;
        }
        Ok(inst)
    }

    /// A handle on an instance started by another process (for `env`, `exec`, `down`). It does
    /// not stop the instance when dropped.
    pub fn attach(name: &str) -> Result<Instance> {
        validate_name(name)?;
        let dir = run_dir().join(name);
        let meta_text =
            fs::read_to_string(dir.join("meta.json")).map_err(|_| Error::NoSuchInstance {
                name: name.to_string(),
            })?;
        let meta: Meta = serde_json::from_str(&meta_text).map_err(|e| Error::Io {
            context: format!("parse {}", dir.join("meta.json").display()),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?;
        let token_file = dir.join("token");
        let token = fs::read_to_string(&token_file).unwrap_or_default();
        Ok(Instance {
            name: name.to_string(),
            rest_url: format!("http://127.0.0.1:{}", meta.rest_port),
            rootfs: Rootfs {
                path: meta.rootfs.clone(),
            },
            token: token.trim().to_string(),
            token_file,
            meta: Mutex::new(meta),
            children: Mutex::new(Children::default()),
            owned: false,
            dir,
        })
    }

    /// The instance's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Base URL of slurmrestd, e.g. `http://127.0.0.1:40123`.
    pub fn rest_url(&self) -> &str {
        &self.rest_url
    }

    /// A JWT for user root, valid for the instance's lifetime.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A file holding [`Instance::token`] (mode 600), as `SLURM_JWT_FILE` expects.
    pub fn token_file(&self) -> &Path {
        &self.token_file
    }

    /// Host path of this instance's slurm.conf (its paths are those seen inside the root fs).
    pub fn slurm_conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// The host folder holding this instance's config, keys, state and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of slurmctld's log on the host.
    pub fn slurmctld_log(&self) -> PathBuf {
        self.dir.join("slurmctld.log")
    }

    /// The four `KEY=value` lines `slurm-testenv up` and `env` print.
    pub fn env_lines(&self) -> String {
        format!(
            "SLURM_REST_URL={}\nSLURM_JWT={}\nSLURM_JWT_FILE={}\nSLURM_CONF={}\n",
            self.rest_url,
            self.token,
            self.token_file.display(),
            self.slurm_conf().display()
        )
    }

    /// The `unshare` wrappers of slurmctld and slurmrestd (and slurmdbd, mariadbd and the slurmd
    /// daemons), as recorded when they started.
    pub fn daemon_wrappers(&self) -> Vec<ProcId> {
        let meta = locked(&self.meta);
        [
            meta.slurmctld,
            meta.slurmrestd,
            meta.slurmdbd,
            meta.mariadbd,
        ]
        .into_iter()
        .flatten()
        .chain(meta.slurmd.iter().filter_map(|d| d.proc))
        .collect()
    }

    /// True when the instance's slurmd confine job steps with cgroups
    /// ([`InstanceOptions::cgroups`]).
    pub fn cgroups(&self) -> bool {
        locked(&self.meta).cgroups.is_some()
    }

    /// With cgroups: the host's CPUs as slurm.conf describes every slurmd node.
    pub fn host_cpus(&self) -> Option<HostCpus> {
        locked(&self.meta).cgroups.clone()
    }

    /// With cgroups: the machine CPU ids (as in `/proc/PID/status`'s `Cpus_allowed_list`) that
    /// jobs on slurmd node `node` run on: all of the host's for a single node, a share of whole
    /// cores when there are several. `None` without cgroups (jobs are not confined) or for a
    /// node not run by slurmd.
    pub fn machine_cpus(&self, node: &str) -> Option<Vec<u32>> {
        let meta = locked(&self.meta);
        meta.cgroups.as_ref()?;
        meta.slurmd
            .iter()
            .find(|d| d.node == node)
            .map(|d| d.cpus.clone())
    }

    /// The CPUs Slurm allocated to job `job_id` on each node (`scontrol show -d job`'s
    /// `CPU_IDs`), as `(node list, CPU ids)` in its order. With cgroups the ids are machine ids
    /// (mapped from Slurm's abstract ids by [`HostCpus::to_machine`], the identity on hosts
    /// numbering CPUs socket, core, thread), comparable with a step's `Cpus_allowed_list`
    /// ([`crate::cpus::cpus_allowed_list`]); without, Slurm's abstract ids of its 8 bookkept CPUs.
    pub fn job_cpu_ids(&self, job_id: &str) -> Result<Vec<(String, Vec<u32>)>> {
        let text = self.run(&["scontrol", "show", "-d", "job", job_id])?;
        let host = self.host_cpus();
        let mut out = Vec::new();
        for line in text.lines() {
            let mut nodes = None;
            let mut ids = None;
            for word in line.split_whitespace() {
                if let Some(n) = word.strip_prefix("Nodes=") {
                    nodes = Some(n.to_string());
                } else if let Some(c) = word.strip_prefix("CPU_IDs=") {
                    ids = Some(crate::cpus::parse_list(c));
                }
            }
            if let (Some(n), Some(ids)) = (nodes, ids) {
                let ids = match &host {
                    Some(h) => h.to_machine(&ids),
                    None => ids,
                };
                out.push((n, ids));
            }
        }
        Ok(out)
    }

    /// The instance's cgroup folders on the host, one per controller
    /// (`/sys/fs/cgroup/<controller>/slurm-testenv/<instance>`), existing while its slurmd run
    /// with cgroups; gone once it is stopped.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        cgroup::instance_dirs(&self.name)
    }

    /// True while slurmctld is alive.
    pub fn is_running(&self) -> bool {
        let meta = locked(&self.meta);
        meta.slurmctld.is_some_and(|p| p.is_alive())
    }

    /// Runs a Slurm client command (scontrol, squeue, sinfo, sbatch, scancel, ...) inside the root
    /// file system against this instance and returns its output, whatever its exit status.
    pub fn exec(&self, argv: &[&str]) -> Result<Output> {
        self.command(argv)
            .stdin(Stdio::null())
            .output()
            .map_err(Error::io(format!("run `{}`", sandbox::display_argv(argv))))
    }

    /// Like [`Instance::exec`] with the caller's stdin/stdout/stderr (the CLI's `exec`).
    pub fn exec_inherit(&self, argv: &[&str]) -> Result<ExitStatus> {
        self.command(argv)
            .status()
            .map_err(Error::io(format!("run `{}`", sandbox::display_argv(argv))))
    }

    /// Runs a command and returns its stdout; a non-zero exit is an error carrying stderr.
    pub fn run(&self, argv: &[&str]) -> Result<String> {
        let out = self.exec(argv)?;
        if !out.status.success() {
            return Err(Error::CommandFailed {
                command: sandbox::display_argv(argv),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    fn command(&self, argv: &[&str]) -> Command {
        sandbox::command(
            &self.rootfs.path,
            Some(&self.dir),
            argv,
            sandbox::Mode::Exec,
        )
    }

    /// Creates external node(s) with `scontrol create`.
    pub fn create_node(&self, spec: &NodeSpec) -> Result<()> {
        let args = spec.scontrol_args();
        let mut argv = vec!["scontrol"];
        argv.extend(args.iter().map(String::as_str));
        self.run(&argv).map(|_| ())
    }

    /// Mints a fresh JWT for `user` (`scontrol token`).
    pub fn mint_token(&self, user: &str, lifespan_secs: u64) -> Result<String> {
        let out = self.run(&[
            "scontrol",
            "token",
            &format!("username={user}"),
            &format!("lifespan={lifespan_secs}"),
        ])?;
        out.lines()
            .find_map(|l| l.trim().strip_prefix("SLURM_JWT="))
            .map(str::to_string)
            .ok_or_else(|| Error::CommandFailed {
                command: "scontrol token".into(),
                status: "success".into(),
                stderr: "no SLURM_JWT= line in its output".into(),
            })
    }

    fn save_meta(&self) -> Result<()> {
        let meta = locked(&self.meta).clone();
        let text = serde_json::to_string_pretty(&meta).map_err(|e| Error::Io {
            context: "encode meta.json".into(),
            source: std::io::Error::other(e),
        })?;
        let tmp = self.dir.join("meta.json.tmp");
        fs::write(&tmp, text).map_err(Error::io("write meta.json"))?;
        fs::rename(&tmp, self.dir.join("meta.json")).map_err(Error::io("rename meta.json"))
    }

    fn spawn_daemon(&self, argv: &[&str], log: &Path, extra_env: &[(&str, &str)]) -> Result<Child> {
        self.spawn_daemon_in(argv, log, extra_env, &[])
    }

    /// Like [`Instance::spawn_daemon`]; with `cgroup_procs` (the `cgroup.procs` files of the
    /// folders it is to run in) the wrapper moves itself into them before it starts, and the
    /// daemon runs in a cgroup namespace rooted there ([`sandbox::Mode::CgroupDaemon`]).
    fn spawn_daemon_in(
        &self,
        argv: &[&str],
        log: &Path,
        extra_env: &[(&str, &str)],
        cgroup_procs: &[PathBuf],
    ) -> Result<Child> {
        let out = fs::File::create(log).map_err(Error::io(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(Error::io("dup log"))?;
        let mode = if cgroup_procs.is_empty() {
            sandbox::Mode::Daemon
        } else {
            sandbox::Mode::CgroupDaemon
        };
        let mut cmd = sandbox::command(&self.rootfs.path, Some(&self.dir), argv, mode);
        if !cgroup_procs.is_empty() {
            use std::os::unix::ffi::OsStrExt;
            let paths: Vec<std::ffi::CString> = cgroup_procs
                .iter()
                .map(|p| std::ffi::CString::new(p.as_os_str().as_bytes()))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Io {
                    context: "a cgroup path".into(),
                    source: std::io::Error::other(e),
                })?;
            // SAFETY: only open, write and close (async-signal-safe) on paths built beforehand.
            unsafe {
                cmd.pre_exec(move || {
                    for path in &paths {
                        // "0": the writing process itself (cgroup v1 and v2).
                        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                        if fd < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                        let e = std::io::Error::last_os_error();
                        libc::close(fd);
                        if n != 1 {
                            return Err(e);
                        }
                    }
                    Ok(())
                });
            }
        }
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        cmd.spawn().map_err(Error::io(format!(
            "start `{}`",
            sandbox::display_argv(argv)
        )))
    }

    fn child_alive(&self, pick: impl Fn(&mut Children) -> &mut Option<Child>) -> bool {
        let mut children = locked(&self.children);
        match pick(&mut children) {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn stop_child(&self, pick: impl Fn(&mut Children) -> &mut Option<Child>) {
        let mut children = locked(&self.children);
        if let Some(mut child) = pick(&mut children).take() {
            if let Some(id) = ProcId::of(child.id() as i32) {
                process::stop_sandbox(id, STOP_TIMEOUT);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A process outside this one that stops the instance if this process dies without doing so
    /// (killed tests), so nothing outlives it.
    fn spawn_watchdog(&self) -> Result<()> {
        let owner = std::process::id();
        // After $1 and $2: the instance's cgroup folders, removed deepest first (their tasks
        // thawed and killed) before the instance folder, as `cgroup::remove_tree` does.
        let script = r#"tail --pid="$1" -f /dev/null 2>/dev/null
D="$2"; shift 2
for U in $(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$D/meta.json" 2>/dev/null); do
  if grep -q slurm-testenv-sandbox "/proc/$U/cmdline" 2>/dev/null; then
    for C in $(cat /proc/$U/task/*/children 2>/dev/null); do kill -9 "$C" 2>/dev/null; done
    sleep 0.2
    kill -9 "$U" 2>/dev/null
  fi
done
sleep 0.5
for T in "$@"; do
  for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    [ -d "$T" ] || break
    for F in $(find "$T" -name freezer.state 2>/dev/null); do echo THAWED > "$F"; done 2>/dev/null
    for P in $(cat $(find "$T" -name cgroup.procs 2>/dev/null) 2>/dev/null); do kill -9 "$P"; done 2>/dev/null
    find "$T" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$T" ] && sleep 0.25
  done
  rmdir "${T%/*}" 2>/dev/null
done
rm -rf --one-file-system "$D""#;
        let child = Command::new("/bin/sh")
            .args(["-c", script, "slurm-testenv-watchdog"])
            .arg(owner.to_string())
            .arg(&self.dir)
            .args(if self.cgroups() {
                cgroup::instance_dirs(&self.name)
            } else {
                Vec::new()
            })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(Error::io("start the watchdog"))?;
        locked(&self.children).watchdog = Some(child);
        Ok(())
    }

    /// Stops slurmrestd, slurmctld (and slurmd, slurmdbd, mariadbd) and removes the instance's state. Works on attached handles
    /// too (the CLI's `down`).
    pub fn stop(&self) -> Result<()> {
        {
            let mut children = locked(&self.children);
            if let Some(mut w) = children.watchdog.take() {
                let _ = w.kill();
                let _ = w.wait();
            }
        }
        for node in self.slurmd_nodes() {
            let _ = self.kill_slurmd(&node);
        }
        self.stop_child(|c| &mut c.slurmrestd);
        self.stop_child(|c| &mut c.slurmctld);
        self.stop_child(|c| &mut c.slurmdbd);
        self.stop_child(|c| &mut c.mariadbd);
        let meta = locked(&self.meta).clone();
        for id in [
            meta.slurmrestd,
            meta.slurmctld,
            meta.slurmdbd,
            meta.mariadbd,
        ]
        .into_iter()
        .flatten()
        {
            process::stop_sandbox(id, STOP_TIMEOUT);
        }
        // Before the folder: a cgroup folder without its instance folder is an orphan to sweep.
        let cgroups = cgroup::remove_instance(&self.name);
        rootfs::remove_tree(&self.dir)?;
        cgroups
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.owned
            && let Err(e) = self.stop()
        {
            eprintln!("slurm-testenv: stopping instance {}: {e}", self.name);
        }
    }
}

/// Stops and removes instances whose owning process died without stopping them, and folders of
/// detached instances whose slurmctld is gone.
pub fn sweep_stale() {
    let Ok(entries) = fs::read_dir(run_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let Some(name) = dir.file_name().map(|n| n.to_string_lossy().to_string()) else {
            continue;
        };
        let Ok(inst) = Instance::attach(&name) else {
            // No meta.json: a start in progress, or debris. Remove debris older than 5 minutes.
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(300));
            if old {
                let _ = rootfs::remove_tree(&dir);
            }
            continue;
        };
        let meta = locked(&inst.meta).clone();
        let stale = match meta.owner {
            // Our own instances are never stale; an unreadable /proc entry is not a death.
            Some(owner) => owner.pid != std::process::id() as i32 && owner.is_gone(),
            None => !meta.slurmctld.is_some_and(|p| p.is_alive()),
        };
        if stale {
            let _ = inst.stop();
        }
    }
    cgroup::sweep_orphans(&run_dir());
}
