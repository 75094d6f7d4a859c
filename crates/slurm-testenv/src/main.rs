//! `slurm-testenv`: start, inspect and stop real Slurm instances from the shell.

use clap::{Parser, Subcommand};
use slurm_testenv::{Instance, InstanceOptions};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "slurm-testenv",
    version,
    about = "Real Slurm (slurmctld + slurmrestd) on loopback ports, for tests and demos"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start an instance in the background and print `export` lines for SLURM_REST_URL, SLURM_JWT,
    /// SLURM_JWT_FILE and SLURM_CONF: `eval "$(slurm-testenv up)"` sets them for child processes too.
    Up {
        #[arg(long, default_value = "default")]
        name: String,
        /// External nodes node-1 .. node-N to create (8 CPUs, 16000 MB, feature slurm-bridge).
        #[arg(long, default_value_t = 0)]
        nodes: u32,
    },
    /// Print the same lines as `up` for a running instance.
    Env {
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Run a Slurm client command (scontrol, squeue, sinfo, sbatch, scancel, ...) against an instance.
    Exec {
        #[arg(long, default_value = "default")]
        name: String,
        /// The command and its arguments, after `--`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Stop an instance and remove its state.
    Down {
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Run an instance in the foreground until this process is stopped (Ctrl-C, SIGTERM or SIGKILL);
    /// prints the four `KEY=value` lines (without `export`). Its watchdog removes the instance when the process dies.
    Run {
        #[arg(long, default_value = "default")]
        name: String,
        #[arg(long, default_value_t = 0)]
        nodes: u32,
    },
    /// Build (or check) the cached root file system only.
    Prepare,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slurm-testenv: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn running(name: &str) -> slurm_testenv::Result<Instance> {
    let inst = Instance::attach(name)?;
    if !inst.is_running() {
        return Err(slurm_testenv::Error::NoSuchInstance { name: name.into() });
    }
    Ok(inst)
}

/// How long `down` waits for PID 1 to reap the stopped `unshare` wrappers of a detached instance.
const REAP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn run(cmd: Cmd) -> slurm_testenv::Result<ExitCode> {
    match cmd {
        Cmd::Up { name, nodes } => {
            eprintln!("slurm-testenv: starting instance {name:?} with {nodes} external node(s)");
            let inst = Instance::start(InstanceOptions {
                name: Some(name),
                nodes,
                detached: true,
                ..Default::default()
            })?;
            eprintln!(
                "slurm-testenv: instance {:?} is up (state and logs in {})",
                inst.name(),
                inst.dir().display()
            );
            print!("{}", slurm_testenv::shell::exports(&inst.env_lines()));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Env { name } => {
            print!(
                "{}",
                slurm_testenv::shell::exports(&running(&name)?.env_lines())
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Exec { name, command } => {
            let inst = running(&name)?;
            let argv: Vec<&str> = command.iter().map(String::as_str).collect();
            let status = inst.exec_inherit(&argv)?;
            Ok(ExitCode::from(
                status.code().unwrap_or(1).clamp(0, 255) as u8
            ))
        }
        Cmd::Down { name } => {
            match Instance::attach(&name) {
                Ok(inst) => {
                    let wrappers = inst.daemon_wrappers();
                    inst.stop()?;
                    // A detached instance's wrappers are PID 1's children since `up` exited: wait
                    // until it has reaped them, so no `[unshare] <defunct>` entry outlives `down`.
                    let left = slurm_testenv::process::wait_reaped(&wrappers, REAP_WAIT);
                    eprintln!("slurm-testenv: instance {name:?} stopped and removed");
                    if !left.is_empty() {
                        let pids: Vec<String> = left.iter().map(|p| p.pid.to_string()).collect();
                        eprintln!(
                            "slurm-testenv: note: PID 1 has not reaped the stopped `unshare` wrapper(s) {} yet; they hold no resources",
                            pids.join(", ")
                        );
                    }
                }
                Err(slurm_testenv::Error::NoSuchInstance { .. }) => {
                    eprintln!("slurm-testenv: no instance named {name:?}; nothing to stop");
                }
                Err(e) => return Err(e),
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run { name, nodes } => {
            let inst = Instance::start(InstanceOptions {
                name: Some(name),
                nodes,
                ..Default::default()
            })?;
            print!("{}", inst.env_lines());
            use std::io::Write;
            let _ = std::io::stdout().flush();
            eprintln!(
                "slurm-testenv: instance {:?} runs until this process stops",
                inst.name()
            );
            loop {
                std::thread::park();
            }
        }
        Cmd::Prepare => {
            let rootfs = slurm_testenv::rootfs::ensure()?;
            eprintln!(
                "slurm-testenv: root file system ready at {}",
                rootfs.path.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
