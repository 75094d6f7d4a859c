//! One isolated Slurm: slurmctld + slurmrestd with their own slurm.conf, ports, keys, state, logs.

use crate::conf::{self, ConfParams, Policy};
use crate::error::{Error, Result};
use crate::node::NodeSpec;
use crate::paths::run_dir;
use crate::process::{self, ProcId};
use crate::rootfs::{self, REST_USER, Rootfs, tail_of};
use crate::{http, ports, sandbox};
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

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
    /// slurm-bridge), where batch jobs run: the hybrid nodes a kubelet shares with slurmd.
    pub slurmd_nodes: u32,
    /// Preemption, more partitions, licenses and other slurm.conf knobs.
    pub policy: Policy,
    /// slurm.conf MaxNodeCount; default: 4096, or more when `nodes` needs it.
    pub max_node_count: Option<u32>,
    /// Lifetime of the root token.
    pub token_lifespan: Duration,
    /// Keep running after this handle is dropped and after this process exits (the CLI's `up`).
    pub detached: bool,
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
}

/// A daemon of an instance, for [`Instance::pause`] and [`Instance::resume`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Daemon {
    Slurmctld,
    Slurmrestd,
    /// The slurmd of the named node.
    Slurmd(String),
}

impl std::fmt::Display for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Daemon::Slurmctld => f.write_str("slurmctld"),
            Daemon::Slurmrestd => f.write_str("slurmrestd"),
            Daemon::Slurmd(node) => write!(f, "the slurmd of {node}"),
        }
    }
}

impl std::str::FromStr for Daemon {
    type Err = String;

    /// `slurmctld`, `slurmrestd` or `slurmd:NODE`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "slurmctld" => Ok(Daemon::Slurmctld),
            "slurmrestd" => Ok(Daemon::Slurmrestd),
            _ => match s.strip_prefix("slurmd:") {
                Some(node) if !node.is_empty() => Ok(Daemon::Slurmd(node.to_string())),
                _ => Err(format!(
                    "{s:?}: expected `slurmctld`, `slurmrestd` or `slurmd:NODE`"
                )),
            },
        }
    }
}

/// One slurmd-run node: its name, port and (while it runs) the `unshare` wrapper of its slurmd.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct SlurmdMeta {
    node: String,
    port: u16,
    proc: Option<ProcId>,
}

#[derive(Default)]
struct Children {
    slurmctld: Option<Child>,
    slurmrestd: Option<Child>,
    slurmd: std::collections::BTreeMap<String, Child>,
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
        let dir = run_dir().join(&name);
        if dir.exists() {
            if let Ok(existing) = Instance::attach(&name)
                && existing.is_running()
            {
                return Err(Error::AlreadyRunning { name });
            }
            rootfs::remove_tree(&dir)?;
        }
        for sub in ["state", "spool", "work"] {
            fs::create_dir_all(dir.join(sub))
                .map_err(Error::io(format!("create {}", dir.display())))?;
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .map_err(Error::io(format!("chmod {}", dir.display())))?;
        write_secret(&dir.join("slurm.key"), &random_bytes(1024)?)?;
        write_secret(&dir.join("jwt_hs256.key"), &random_bytes(32)?)?;

        let owner = if opts.detached {
            None
        } else {
            Some(ProcId::current())
        };
        let slurmd_count = opts.slurmd_nodes as usize;
        let inst = ports::reserve(3 + slurmd_count, |p| {
            let slurmd = (0..slurmd_count)
                .map(|i| SlurmdMeta {
                    node: format!("node-{}", i + 1),
                    port: p[3 + i],
                    proc: None,
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

    /// The `unshare` wrappers of slurmctld and slurmrestd, as recorded when they started.
    pub fn daemon_wrappers(&self) -> Vec<ProcId> {
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
        [meta.slurmctld, meta.slurmrestd]
            .into_iter()
            .flatten()
            .chain(meta.slurmd.iter().filter_map(|d| d.proc))
            .collect()
    }

    /// True while slurmctld is alive.
    pub fn is_running(&self) -> bool {
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
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
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let text = serde_json::to_string_pretty(&meta).map_err(|e| Error::Io {
            context: "encode meta.json".into(),
            source: std::io::Error::other(e),
        })?;
        let tmp = self.dir.join("meta.json.tmp");
        fs::write(&tmp, text).map_err(Error::io("write meta.json"))?;
        fs::rename(&tmp, self.dir.join("meta.json")).map_err(Error::io("rename meta.json"))
    }

    fn spawn_daemon(&self, argv: &[&str], log: &Path, extra_env: &[(&str, &str)]) -> Result<Child> {
        let out = fs::File::create(log).map_err(Error::io(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(Error::io("dup log"))?;
        let mut cmd = sandbox::command(
            &self.rootfs.path,
            Some(&self.dir),
            argv,
            sandbox::Mode::Daemon,
        );
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

    fn start_slurmctld(&self, max_node_count: u32, policy: &Policy) -> Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let params = {
                let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
                ConfParams {
                    cluster_name: format!("st{}", meta.slurmctld_port),
                    slurmctld_port: meta.slurmctld_port,
                    slurmd_port: meta.slurmd_port,
                    max_node_count,
                    slurmd_nodes: meta
                        .slurmd
                        .iter()
                        .map(|d| (d.node.clone(), d.port))
                        .collect(),
                    policy: policy.clone(),
                }
            };
            fs::write(self.slurm_conf(), conf::render(&params))
                .map_err(Error::io("write slurm.conf"))?;
            fs::write(self.dir.join("cgroup.conf"), conf::render_cgroup())
                .map_err(Error::io("write cgroup.conf"))?;
            match self.spawn_slurmctld() {
                Err(Error::PortInUse { .. }) if attempt < 4 => {
                    self.stop_child(|c| &mut c.slurmctld);
                    ports::reserve(2, |p| {
                        {
                            let mut meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
                            meta.slurmctld_port = p[0];
                            meta.slurmd_port = p[1];
                        }
                        self.save_meta()
                    })?;
                }
                other => return other,
            }
        }
    }

    /// Starts slurmctld on the instance's slurm.conf, recovering its saved state (jobs, dynamic
    /// nodes), and waits until it answers.
    fn spawn_slurmctld(&self) -> Result<()> {
        let log = self.dir.join("slurmctld.out");
        let child = self.spawn_daemon(&["slurmctld", "-D", "-i"], &log, &[])?;
        let id = ProcId::of(child.id() as i32);
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmctld = Some(child);
        self.meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmctld = id;
        self.save_meta()?;
        self.wait_slurmctld(&log)
    }

    /// Stops slurmctld as a service restart does (SIGTERM: it saves its state and exits; killed
    /// after 10 s) and starts it again from that state; returns once it answers. slurmrestd and
    /// the slurmd daemons stay up and reconnect.
    pub fn restart_slurmctld(&self) -> Result<()> {
        let old = self
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmctld
            .take();
        if let Some(id) = old {
            for pid in process::descendants(id.pid) {
                if process::command_name(pid).as_deref() == Some("slurmctld") {
                    process::kill(pid, libc::SIGTERM);
                }
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while id.is_alive() && Instant::now() < deadline {
                // The owning handle reaps its child; an attached one waits for PID 1 to.
                if let Some(c) = self
                    .children
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .slurmctld
                    .as_mut()
                {
                    let _ = c.try_wait();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            process::stop_sandbox(id, STOP_TIMEOUT);
        }
        self.stop_child(|c| &mut c.slurmctld);
        self.spawn_slurmctld()
    }

    /// Kills `daemon` (SIGKILL) and starts it again, keeping its state; returns once it answers.
    pub fn restart(&self, daemon: &Daemon) -> Result<()> {
        match daemon {
            Daemon::Slurmctld => self.restart_slurmctld(),
            Daemon::Slurmrestd => {
                self.stop_slurmrestd()?;
                self.start_slurmrestd()
            }
            Daemon::Slurmd(node) => {
                self.kill_slurmd(node)?;
                self.start_slurmd(node)
            }
        }
    }

    /// Stops (SIGSTOP) every process of `daemon`: it keeps its sockets open and answers nothing,
    /// as a stalled host does, until [`Instance::resume`].
    pub fn pause(&self, daemon: &Daemon) -> Result<()> {
        self.signal_daemon(daemon, libc::SIGSTOP)
    }

    /// Lets a daemon paused by [`Instance::pause`] run again (SIGCONT).
    pub fn resume(&self, daemon: &Daemon) -> Result<()> {
        self.signal_daemon(daemon, libc::SIGCONT)
    }

    fn signal_daemon(&self, daemon: &Daemon, signal: i32) -> Result<()> {
        let wrapper = {
            let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
            match daemon {
                Daemon::Slurmctld => meta.slurmctld,
                Daemon::Slurmrestd => meta.slurmrestd,
                Daemon::Slurmd(node) => meta
                    .slurmd
                    .iter()
                    .find(|d| d.node == *node)
                    .and_then(|d| d.proc),
            }
        };
        let wrapper = wrapper
            .filter(ProcId::is_alive)
            .ok_or_else(|| Error::NotRunning {
                daemon: daemon.to_string(),
            })?;
        // Everything below the `unshare` wrapper: the namespace's shell, the daemon, its children.
        for pid in process::descendants(wrapper.pid) {
            process::kill(pid, signal);
        }
        Ok(())
    }

    fn wait_slurmctld(&self, out_log: &Path) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let port = self
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmctld_port;
        loop {
            if !self.child_alive(|c| &mut c.slurmctld) {
                let mut tail = tail_of(&self.slurmctld_log(), 15);
                let out = tail_of(out_log, 10);
                if !out.is_empty() {
                    tail = format!("{tail}\n{out}");
                }
                if tail.contains("Address already in use") {
                    return Err(Error::PortInUse {
                        port,
                        what: "slurmctld",
                    });
                }
                return Err(Error::DaemonFailed {
                    daemon: "slurmctld",
                    reason: "it exited".into(),
                    log: self.slurmctld_log(),
                    tail,
                });
            }
            if tail_of(&self.slurmctld_log(), 30).contains("Address already in use") {
                return Err(Error::PortInUse {
                    port,
                    what: "slurmctld",
                });
            }
            if let Ok(out) = self.exec(&["scontrol", "ping"])
                && String::from_utf8_lossy(&out.stdout).contains("is UP")
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::DaemonFailed {
                    daemon: "slurmctld",
                    reason: format!(
                        "`scontrol ping` did not answer UP within {} s",
                        START_TIMEOUT.as_secs()
                    ),
                    log: self.slurmctld_log(),
                    tail: tail_of(&self.slurmctld_log(), 15),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The names of the nodes run by a real slurmd (`node-1` .. `node-S`).
    pub fn slurmd_nodes(&self) -> Vec<String> {
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
        meta.slurmd.iter().map(|d| d.node.clone()).collect()
    }

    /// Host path of the slurmd log of `node`.
    pub fn slurmd_log(&self, node: &str) -> PathBuf {
        self.dir.join(format!("slurmd.{node}.log"))
    }

    fn start_all_slurmd(&self) -> Result<()> {
        let nodes = self.slurmd_nodes();
        for node in &nodes {
            self.spawn_slurmd(node)?;
        }
        self.wait_slurmd_up(&nodes)
    }

    /// Starts the slurmd of `node` (again, after [`Instance::kill_slurmd`]) and waits until
    /// slurmctld has it responding.
    pub fn start_slurmd(&self, node: &str) -> Result<()> {
        self.spawn_slurmd(node)?;
        self.wait_slurmd_up(&[node.to_string()])
    }

    fn spawn_slurmd(&self, node: &str) -> Result<()> {
        if !self.slurmd_nodes().iter().any(|n| n == node) {
            return Err(Error::NoSuchNode {
                node: node.into(),
                nodes: self.slurmd_nodes(),
            });
        }
        fs::create_dir_all(self.dir.join("spool").join(node))
            .map_err(Error::io(format!("create the spool folder of {node}")))?;
        let out = self.dir.join(format!("slurmd.{node}.out"));
        // Its own /run: every slurmd binds /run/slurm/sack.socket, which two would fight over.
        let run = format!("run-{node}");
        let child = self.spawn_daemon(
            &["slurmd", "-D", "-N", node],
            &out,
            &[("SLURM_TESTENV_RUN", run.as_str())],
        )?;
        let id = ProcId::of(child.id() as i32);
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmd
            .insert(node.to_string(), child);
        if let Some(d) = self
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmd
            .iter_mut()
            .find(|d| d.node == node)
        {
            d.proc = id;
        }
        self.save_meta()
    }

    /// Kills the slurmd of `node` and everything it runs (its job steps), as a host crash
    /// would: slurmctld marks the node DOWN after `SlurmdTimeout` (10 s).
    pub fn kill_slurmd(&self, node: &str) -> Result<()> {
        let child = self
            .children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmd
            .remove(node);
        let proc = self
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmd
            .iter_mut()
            .find(|d| d.node == node)
            .and_then(|d| d.proc.take());
        if let Some(id) = proc {
            process::stop_sandbox(id, STOP_TIMEOUT);
        }
        if let Some(mut child) = child {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.save_meta()
    }

    /// Waits until every node in `nodes` has registered its slurmd and responds (a state
    /// without `*`, not DOWN or UNKNOWN).
    fn wait_slurmd_up(&self, nodes: &[String]) -> Result<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + START_TIMEOUT;
        let list = nodes.join(",");
        loop {
            for node in nodes {
                let alive = {
                    let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
                    children
                        .slurmd
                        .get_mut(node)
                        .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
                };
                if !alive {
                    let mut tail = tail_of(&self.slurmd_log(node), 15);
                    let out = tail_of(&self.dir.join(format!("slurmd.{node}.out")), 10);
                    if !out.is_empty() {
                        tail = format!("{tail}\n{out}");
                    }
                    return Err(Error::DaemonFailed {
                        daemon: "slurmd",
                        reason: format!("the slurmd of {node} exited"),
                        log: self.slurmd_log(node),
                        tail,
                    });
                }
            }
            let states = self
                .exec(&["sinfo", "-h", "-N", "-n", &list, "-o", "%N %T"])
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                .unwrap_or_default();
            let up = states
                .lines()
                .filter_map(|l| l.split_once(' '))
                .filter(|(_, st)| {
                    let st = st.trim();
                    !st.ends_with('*') && !st.starts_with("down") && !st.starts_with("unknown")
                })
                .count();
            if up >= nodes.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::DaemonFailed {
                    daemon: "slurmd",
                    reason: format!(
                        "nodes {list} did not respond within {} s (sinfo: {})",
                        START_TIMEOUT.as_secs(),
                        states.trim().replace('\n', "; ")
                    ),
                    log: self.slurmctld_log(),
                    tail: tail_of(&self.slurmctld_log(), 15),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts slurmrestd (again, after [`Instance::stop_slurmrestd`]) on the instance's REST port
    /// and waits until it answers.
    pub fn start_slurmrestd(&self) -> Result<()> {
        let port = self
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rest_port;
        let listen = format!("127.0.0.1:{port}");
        let log = self.dir.join("slurmrestd.log");
        let child = self.spawn_daemon(
            &[
                "slurmrestd",
                "-u",
                REST_USER,
                "-g",
                REST_USER,
                "-a",
                "rest_auth/jwt",
                "-s",
                "slurmctld",
                "-d",
                DATA_PARSER,
                &listen,
            ],
            &log,
            &[("SLURM_JWT", "daemon")],
        )?;
        let id = ProcId::of(child.id() as i32);
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmrestd = Some(child);
        self.meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmrestd = id;
        self.save_meta()?;
        let deadline = Instant::now() + START_TIMEOUT;
        let path = format!("/slurm/{DATA_PARSER}/ping/");
        loop {
            if !self.child_alive(|c| &mut c.slurmrestd) {
                let tail = tail_of(&log, 15);
                if tail.contains("Address already in use") {
                    return Err(Error::PortInUse {
                        port,
                        what: "slurmrestd",
                    });
                }
                return Err(Error::DaemonFailed {
                    daemon: "slurmrestd",
                    reason: "it exited".into(),
                    log,
                    tail,
                });
            }
            if let Ok(200) = http::get_status(port, &path, &self.token) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::DaemonFailed {
                    daemon: "slurmrestd",
                    reason: format!(
                        "GET {path} did not answer 200 within {} s",
                        START_TIMEOUT.as_secs()
                    ),
                    log: log.clone(),
                    tail: tail_of(&log, 15),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops slurmrestd only (slurmctld keeps running), to test a client against an outage.
    pub fn stop_slurmrestd(&self) -> Result<()> {
        self.stop_child(|c| &mut c.slurmrestd);
        let id = self
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slurmrestd
            .take();
        if let Some(id) = id {
            process::stop_sandbox(id, STOP_TIMEOUT);
        }
        self.save_meta()
    }

    fn child_alive(&self, pick: impl Fn(&mut Children) -> &mut Option<Child>) -> bool {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        match pick(&mut children) {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn stop_child(&self, pick: impl Fn(&mut Children) -> &mut Option<Child>) {
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
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
        let script = r#"tail --pid="$1" -f /dev/null 2>/dev/null
D="$2"
for U in $(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$D/meta.json" 2>/dev/null); do
  if grep -q slurm-testenv-sandbox "/proc/$U/cmdline" 2>/dev/null; then
    for C in $(cat /proc/$U/task/*/children 2>/dev/null); do kill -9 "$C" 2>/dev/null; done
    sleep 0.2
    kill -9 "$U" 2>/dev/null
  fi
done
sleep 0.5
rm -rf --one-file-system "$D""#;
        let child = Command::new("/bin/sh")
            .args(["-c", script, "slurm-testenv-watchdog"])
            .arg(owner.to_string())
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(Error::io("start the watchdog"))?;
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .watchdog = Some(child);
        Ok(())
    }

    /// Stops slurmrestd and slurmctld and removes the instance's state. Works on attached handles
    /// too (the CLI's `down`).
    pub fn stop(&self) -> Result<()> {
        {
            let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
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
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for id in [meta.slurmrestd, meta.slurmctld].into_iter().flatten() {
            process::stop_sandbox(id, STOP_TIMEOUT);
        }
        rootfs::remove_tree(&self.dir)
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
        let meta = inst.meta.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let stale = match meta.owner {
            Some(owner) => !owner.is_alive(),
            None => !meta.slurmctld.is_some_and(|p| p.is_alive()),
        };
        if stale {
            let _ = inst.stop();
        }
    }
}
