//! Command line: `slurm-bridge [--config PATH] <subcommand>`.

pub mod admission;
pub mod controllers;
mod malloc;
pub mod node_agent;
pub mod process;
pub mod release_finalizers;
pub mod release_lost;
pub mod run;
pub mod scheduler;
pub mod status;
pub mod translate;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{Config, ConfigError};
use crate::wellknown::DEFAULT_CONFIG_PATH;

/// slurm-bridge: Slurm as the scheduler for selected Kubernetes workloads.
#[derive(Debug, Parser)]
#[command(name = "slurm-bridge", version, about)]
pub struct Cli {
    /// Config file (default /etc/slurm-bridge/config.yaml).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Dry run: read manifests and print the Slurm external job(s) they would become.
    Translate(translate::TranslateArgs),
    /// The scheduler: binds the pods naming this scheduler to the nodes Slurm allocates.
    Scheduler(scheduler::SchedulerArgs),
    /// The controllers: pods and their Slurm jobs after binding, Kubernetes nodes as Slurm external nodes.
    Controllers(controllers::ControllersArgs),
    /// The admission webhooks: pods in managed namespaces get the bridge scheduler, and
    /// scheduler-owned labels and annotations are protected (HTTPS, see docs/admission.md).
    Admission(admission::AdmissionArgs),
    /// Everything in one process (the scheduler and the controllers, and the admission
    /// webhooks when --cert-dir or --self-signed-names is given), on shared caches.
    Run(run::RunArgs),
    /// One line per pod group: pods bound, Slurm job, state, Slurm's reason, nodes ("why is my
    /// pod pending?").
    Status(status::StatusArgs),
    /// Once, when the bridge goes away for good (`helm uninstall`'s pre-delete hook): removes
    /// the bridge's finalizer from every pod, cancels the Slurm jobs of finished pods, and
    /// prints the jobs of running pods it leaves running (docs/operations.md, "Uninstalling").
    ReleaseFinalizers(release_finalizers::ReleaseFinalizersArgs),
    /// When Slurm lost its state and the admin accepts the loss: prints the pods the
    /// controllers hold for jobs Slurm lost (condition SlurmJobLost) and deletes them, so their
    /// owners recreate them as new jobs (docs/controllers.md, "Slurm losing its state").
    ReleaseLost(release_lost::ReleaseLostArgs),
    /// On a hybrid node: the containerd NRI plugin that pins each container of a pod the bridge
    /// bound to the CPUs Slurm gave its job on this node (docs/hybrid.md).
    NodeAgent(node_agent::NodeAgentArgs),
}

/// Load the config: the given path, else the default path when it exists, else the empty
/// config. The second value says which was used.
pub fn load_config(path: Option<&Path>) -> Result<(Config, String), ConfigError> {
    match path {
        Some(p) => Ok((Config::load(p)?, format!("config {}", p.display()))),
        None if Path::new(DEFAULT_CONFIG_PATH).exists() => Ok((
            Config::load(Path::new(DEFAULT_CONFIG_PATH))?,
            format!("config {DEFAULT_CONFIG_PATH}"),
        )),
        None => Ok((
            Config::default(),
            format!("no config file ({DEFAULT_CONFIG_PATH} absent): empty defaults"),
        )),
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Long-running processes log their progress; the dry run only warnings.
    let default_level = match cli.command {
        Command::Translate(_) | Command::Status(_) => "warn",
        _ => "info,kube=warn,tower=warn,hyper=warn",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    let (cfg, origin) = match load_config(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let process: std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>>>> =
        match cli.command {
            Command::Scheduler(args) => Box::pin(scheduler::run(cfg, args)),
            Command::Controllers(args) => Box::pin(controllers::run(cfg, args)),
            Command::Admission(args) => Box::pin(admission::run(cfg, args)),
            Command::Run(args) => Box::pin(run::run(cfg, args)),
            Command::Status(args) => Box::pin(status::run(cfg, args)),
            Command::ReleaseFinalizers(args) => Box::pin(release_finalizers::run(cfg, args)),
            Command::ReleaseLost(args) => Box::pin(release_lost::run(args)),
            Command::NodeAgent(args) => Box::pin(node_agent::run(cfg, args)),
            Command::Translate(args) => return run_translate(&args, &cfg, &origin),
        };
    eprintln!("note: using {origin}");
    malloc::return_freed_memory();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(process) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The dry run.
fn run_translate(args: &translate::TranslateArgs, cfg: &Config, origin: &str) -> ExitCode {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    eprintln!("note: using {origin}");
    match translate::run(args, cfg, &mut stdin.lock(), &mut stdout, &mut stderr) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
