//! `kube-testenv`: start, inspect and stop real Kubernetes control planes from the shell.

use clap::{Args, Parser, Subcommand};
use kube_testenv::{Attached, Instance, InstanceOptions, agent};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};

#[derive(Parser)]
#[command(
    name = "kube-testenv",
    version,
    about = "A real Kubernetes control plane (kube-apiserver, etcd, controllers, simulated nodes) on loopback ports, for tests and demos"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Args, Clone)]
struct StartArgs {
    #[arg(long, default_value = "default")]
    name: String,
    /// Nodes node-1 .. node-N (cpu 8, memory 16000Mi, pods 110).
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// YAML file of further nodes with their own capacity, labels and taints.
    #[arg(long)]
    nodes_file: Option<std::path::PathBuf>,
    /// Also run kube-scheduler.
    #[arg(long)]
    kube_scheduler: bool,
    /// Also run the JobSet and LeaderWorkerSet controllers.
    #[arg(long)]
    workload_controllers: bool,
    /// Also run Kubeflow Trainer v2 (with the JobSet controller it needs).
    #[arg(long)]
    trainer: bool,
    /// Also run Kueue (batch/job and pod integrations).
    #[arg(long)]
    kueue: bool,
    /// Nodes node-1 .. node-N run a real kubelet and containerd (the others up to --nodes stay
    /// simulated); `up` then also prints KUBE_TESTENV_IMAGE, an image on every such node.
    #[arg(long, default_value_t = 0)]
    kubelet_nodes: usize,
    /// A loopback port of the host that the kubelet nodes' pods may call, e.g. slurmrestd's
    /// (repeatable): forwarded from `$KUBE_TESTENV_HOST:PORT`, which `up` prints.
    #[arg(long = "expose-host-port", value_name = "PORT")]
    expose_host_ports: Vec<u16>,
}

impl StartArgs {
    fn to_flags(&self) -> Vec<String> {
        let mut out = vec![
            "--name".into(),
            self.name.clone(),
            "--nodes".into(),
            self.nodes.to_string(),
        ];
        if let Some(f) = &self.nodes_file {
            out.extend(["--nodes-file".into(), f.display().to_string()]);
        }
        if self.kube_scheduler {
            out.push("--kube-scheduler".into());
        }
        if self.workload_controllers {
            out.push("--workload-controllers".into());
        }
        if self.trainer {
            out.push("--trainer".into());
        }
        if self.kueue {
            out.push("--kueue".into());
        }
        if self.kubelet_nodes > 0 {
            out.extend(["--kubelet-nodes".into(), self.kubelet_nodes.to_string()]);
        }
        for p in &self.expose_host_ports {
            out.extend(["--expose-host-port".into(), p.to_string()]);
        }
        out
    }

    fn options(&self) -> anyhow::Result<InstanceOptions> {
        // Before `up` uses the name in a log path.
        kube_testenv::validate_name(&self.name)?;
        let mut opts = InstanceOptions::with_nodes(self.nodes);
        opts.name = Some(self.name.clone());
        opts.kube_scheduler = self.kube_scheduler;
        opts.workload_controllers = self.workload_controllers;
        opts.trainer = self.trainer;
        opts.kueue = self.kueue;
        opts.kubelet_nodes = self.kubelet_nodes;
        if let Some(f) = &self.nodes_file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| anyhow::anyhow!("read nodes file {}: {e}", f.display()))?;
            let more = agent::parse_nodes_yaml(&text)
                .map_err(|e| anyhow::anyhow!("nodes file {}: {e}", f.display()))?;
            opts.nodes.extend(more);
        }
        Ok(opts)
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Start an instance in the background and print `export KUBECONFIG=<path>` (cluster admin), for
    /// `eval "$(kube-testenv up)"`.
    Up(StartArgs),
    /// Print the same `export` line as `up` for a running instance.
    Env {
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Run a command with the instance's KUBECONFIG and its kubectl first on PATH.
    Exec {
        #[arg(long, default_value = "default")]
        name: String,
        /// The command and its arguments, after `--`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Stop an instance: no process or state remains.
    Down {
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Run an instance in the foreground until Ctrl-C or SIGTERM; prints `KUBECONFIG=<path>`.
    Run(StartArgs),
    /// Import an image archive (docker or OCI tar) into every kubelet node of an instance.
    LoadImage {
        #[arg(long, default_value = "default")]
        name: String,
        /// The archive, e.g. target/slurm-bridge-image.tar from hack/build-image.sh.
        archive: std::path::PathBuf,
    },
    /// Build (or check) the cached Kubernetes, kube-scheduler, kubelet, containerd, etcd, JobSet, LeaderWorkerSet,
    /// Trainer and Kueue binaries, the chart tests' helm and Kubernetes' DRA test driver; `--only kubernetes,etcd` builds just
    /// those (what `up` without `--kube-scheduler`, `--workload-controllers`, `--trainer` or
    /// `--kueue` needs: the demo's set).
    Prepare {
        /// Comma-separated tools: kubernetes, kube-scheduler, kubelet, dra-test-driver,
        /// containerd, etcd, jobset, lws, trainer, kueue, helm (default: all; kubelet or containerd also install runc and
        /// the CNI plugins and build the test image).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Then empty Go's build and module caches (about 11 GB), keeping the binaries: for
        /// CI machines short of disk; a later version change rebuilds from scratch.
        #[arg(long)]
        prune: bool,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_testenv=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(Cli::parse().command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kube-testenv: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Up(args) => up(&args),
        Cmd::Env { name } => {
            print!(
                "{}",
                slurm_testenv::shell::exports(&Attached::find(&name)?.env_lines())
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Exec { name, command } => {
            let status = Attached::find(&name)?.exec(&command)?;
            Ok(ExitCode::from(
                status.code().unwrap_or(1).clamp(0, 255) as u8
            ))
        }
        Cmd::Down { name } => {
            match Attached::find(&name) {
                Ok(inst) => {
                    inst.stop()?;
                    eprintln!("kube-testenv: instance {name:?} stopped and removed");
                }
                Err(kube_testenv::Error::NoSuchInstance { .. }) => {
                    eprintln!("kube-testenv: no instance named {name:?}; nothing to stop");
                }
                Err(e) => return Err(e.into()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run(args) => foreground(&args),
        Cmd::LoadImage { name, archive } => {
            Attached::find(&name)?.load_image(&archive)?;
            eprintln!(
                "kube-testenv: {} imported into the kubelet nodes of {name:?}",
                archive.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Prepare { only, prune } => {
            let tools = kube_testenv::binaries::tools(&only)?;
            if tools
                .iter()
                .any(|(t, _)| *t == "kubelet" || *t == "containerd")
            {
                kube_testenv::realnodes::host::ensure_packages()?;
                let image = kube_testenv::realnodes::host::image_archive()?;
                eprintln!(
                    "kube-testenv: test image {} ready in {}",
                    kube_testenv::IMAGE,
                    image.display()
                );
            }
            for dir in kube_testenv::binaries::prepare_tools(&tools)? {
                eprintln!("kube-testenv: binaries ready in {}", dir.display());
            }
            if prune {
                kube_testenv::binaries::prune_go_caches()?;
                eprintln!("kube-testenv: Go build and module caches emptied");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Starts `kube-testenv run` as a background process that owns the instance (and runs its node
/// agent), and returns once it printed the KUBECONFIG line.
fn up(args: &StartArgs) -> anyhow::Result<ExitCode> {
    args.options()?; // a bad nodes file fails here, not in the background
    let log = kube_testenv::paths::run_dir().join(format!("{}.run.log", args.name));
    std::fs::create_dir_all(log.parent().expect("log has a folder"))?;
    let log_file = std::fs::File::create(&log)?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("run")
        .args(args.to_flags())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .process_group(0)
        .spawn()?;
    eprintln!(
        "kube-testenv: starting instance {:?} with {} node(s) (log {})",
        args.name,
        args.nodes,
        log.display()
    );
    let stdout = child.stdout.take().expect("piped stdout");
    // `run` prints KUBE_TESTENV_IMAGE (with kubelet nodes) before KUBECONFIG, its last line.
    let mut lines = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        lines.push_str(&line);
        lines.push('\n');
        if line.starts_with("KUBECONFIG=") {
            print!("{}", slurm_testenv::shell::exports(&lines));
            return Ok(ExitCode::SUCCESS);
        }
    }
    let status = child.wait()?;
    anyhow::bail!(
        "instance {:?} did not start ({status}); its log {}:\n{}",
        args.name,
        log.display(),
        kube_testenv::error::tail_of(&log, 30)
    )
}

fn foreground(args: &StartArgs) -> anyhow::Result<ExitCode> {
    let opts = args.options()?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut inst = Instance::start(opts).await?;
        for port in &args.expose_host_ports {
            inst.expose_host_port(*port).await?;
        }
        if let Some(host) = inst.host_address() {
            println!("KUBE_TESTENV_HOST={host}");
        }
        print!("{}", inst.env_lines());
        std::io::stdout().flush()?;
        eprintln!(
            "kube-testenv: instance {:?} ready in {:.1} s at {} (state and logs in {}); runs until this process stops",
            inst.name(),
            inst.startup().as_secs_f64(),
            inst.server(),
            inst.dir().display()
        );
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        drop(inst);
        Ok(ExitCode::SUCCESS)
    })
}
