//! `slurm-testenv`: start, inspect and stop real Slurm instances from the shell.

use clap::{Args, Parser, Subcommand};
use slurm_testenv::conf::{Partition, Policy, PreemptMode, PreemptType};
use slurm_testenv::{Daemon, Instance, InstanceOptions};
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
        #[command(flatten)]
        shape: Shape,
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
        #[command(flatten)]
        shape: Shape,
    },
    /// Pause a daemon (SIGSTOP): `slurmctld`, `slurmrestd`, `slurmdbd` or `slurmd:NODE`; it answers nothing until resumed.
    Pause {
        #[arg(long, default_value = "default")]
        name: String,
        daemon: Daemon,
    },
    /// Resume a paused daemon (SIGCONT).
    Resume {
        #[arg(long, default_value = "default")]
        name: String,
        daemon: Daemon,
    },
    /// Kill a daemon (SIGKILL, as a crash) and start it again with its saved state.
    Restart {
        #[arg(long, default_value = "default")]
        name: String,
        daemon: Daemon,
    },
    /// Build (or check) the cached root file system only.
    Prepare,
}

/// The nodes and policy of a new instance (`up` and `run`).
#[derive(Args)]
struct Shape {
    /// Nodes node-1 .. node-S, each run by a real slurmd (8 CPUs, 16000 MB, feature slurm-bridge;
    /// with --cgroups the host's real CPUs).
    #[arg(long, default_value_t = 0)]
    slurmd_nodes: u32,
    /// External nodes (8 CPUs, 16000 MB, feature slurm-bridge), numbered after the slurmd nodes.
    #[arg(long, default_value_t = 0)]
    nodes: u32,
    /// Preemption by partition priority tier (`requeue` or `cancel`: PreemptMode), or by QoS
    /// (`qos`: preempt/qos with PreemptMode=REQUEUE, `qos-cancel`; needs --accounting).
    #[arg(long, value_parser = parse_preempt)]
    preempt: Option<(PreemptType, PreemptMode)>,
    /// Slurm accounting: MariaDB and slurmdbd with the instance, associations, limits and QoS
    /// enforced, multifactor priority with fairshare; the cluster, account root and user root registered.
    #[arg(long)]
    accounting: bool,
    /// One more partition over the same nodes, as NAME:PRIORITY_TIER (slurm-bridge has tier 1); repeatable.
    #[arg(long = "partition", value_parser = parse_partition)]
    partitions: Vec<Partition>,
    /// A cluster license, as NAME:COUNT; repeatable.
    #[arg(long = "license", value_parser = parse_license)]
    licenses: Vec<(String, u32)>,
    /// DefMemPerCPU in MB (without it a job that asks no memory takes a whole node's).
    #[arg(long)]
    def_mem_per_cpu: Option<u64>,
    /// slurmd confines job steps with cgroups v1 (cpuset, memory, freezer; proctrack/cgroup,
    /// task/cgroup,task/affinity, DefMemPerCPU=500 unless --def-mem-per-cpu): the slurmd nodes
    /// are the host's real CPUs, all of them for one node, split by CpuSpecList for several.
    /// Needs --slurmd-nodes.
    #[arg(long, requires = "slurmd_nodes")]
    cgroups: bool,
}

impl Shape {
    fn options(self, name: String, detached: bool) -> InstanceOptions {
        InstanceOptions {
            name: Some(name),
            nodes: self.nodes,
            slurmd_nodes: self.slurmd_nodes,
            accounting: self.accounting,
            cgroups: self.cgroups,
            policy: Policy {
                preempt: self.preempt.map(|(_, mode)| mode),
                preempt_type: self.preempt.map(|(t, _)| t).unwrap_or_default(),
                partitions: self.partitions,
                licenses: self.licenses,
                def_mem_per_cpu_mb: self.def_mem_per_cpu,
                extra_lines: Vec::new(),
            },
            detached,
            ..Default::default()
        }
    }
}

fn parse_preempt(s: &str) -> Result<(PreemptType, PreemptMode), String> {
    match s.to_ascii_lowercase().as_str() {
        "requeue" => Ok((PreemptType::PartitionPrio, PreemptMode::Requeue)),
        "cancel" => Ok((PreemptType::PartitionPrio, PreemptMode::Cancel)),
        "qos" | "qos-requeue" => Ok((PreemptType::Qos, PreemptMode::Requeue)),
        "qos-cancel" => Ok((PreemptType::Qos, PreemptMode::Cancel)),
        _ => Err(format!(
            "{s:?}: expected `requeue`, `cancel`, `qos` or `qos-cancel`"
        )),
    }
}

fn name_and_number<T: std::str::FromStr>(s: &str, what: &str) -> Result<(String, T), String> {
    let (name, n) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected NAME:{what}"))?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!("{s:?}: NAME must be letters, digits, '-' or '_'"));
    }
    let n = n
        .parse()
        .map_err(|_| format!("{s:?}: {what} must be a whole number"))?;
    Ok((name.to_string(), n))
}

fn parse_partition(s: &str) -> Result<Partition, String> {
    name_and_number::<u16>(s, "PRIORITY_TIER").map(|(n, t)| Partition::new(n, t))
}

fn parse_license(s: &str) -> Result<(String, u32), String> {
    name_and_number(s, "COUNT")
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
        Cmd::Up { name, shape } => {
            eprintln!(
                "slurm-testenv: starting instance {name:?} with {} slurmd node(s) and {} external node(s){}",
                shape.slurmd_nodes,
                shape.nodes,
                match (shape.accounting, shape.cgroups) {
                    (true, true) => ", with accounting and cgroups",
                    (true, false) => ", with accounting",
                    (false, true) => ", with cgroups",
                    (false, false) => "",
                }
            );
            let started = std::time::Instant::now();
            let inst = Instance::start(shape.options(name, true))?;
            eprintln!(
                "slurm-testenv: instance {:?} is up after {:.1} s (state and logs in {})",
                inst.name(),
                started.elapsed().as_secs_f64(),
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
        Cmd::Run { name, shape } => {
            let inst = Instance::start(shape.options(name, false))?;
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
        Cmd::Pause { name, daemon } => {
            running(&name)?.pause(&daemon)?;
            eprintln!("slurm-testenv: {daemon} of instance {name:?} paused");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Resume { name, daemon } => {
            running(&name)?.resume(&daemon)?;
            eprintln!("slurm-testenv: {daemon} of instance {name:?} resumed");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Restart { name, daemon } => {
            running(&name)?.restart(&daemon)?;
            eprintln!("slurm-testenv: {daemon} of instance {name:?} restarted");
            Ok(ExitCode::SUCCESS)
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
