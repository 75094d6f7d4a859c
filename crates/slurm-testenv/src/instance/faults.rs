//! Faults for tests: daemons restarted, paused and resumed.

use super::{Instance, STOP_TIMEOUT, locked};
use crate::error::{Error, Result};
use crate::process::{self, ProcId};
use std::time::{Duration, Instant};

/// A daemon of an instance, for [`Instance::pause`] and [`Instance::resume`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Daemon {
    Slurmctld,
    Slurmrestd,
    /// slurmdbd (instances with accounting): while it is away slurmctld queues its records.
    Slurmdbd,
    /// The slurmd of the named node.
    Slurmd(String),
}

impl std::fmt::Display for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Daemon::Slurmctld => f.write_str("slurmctld"),
            Daemon::Slurmrestd => f.write_str("slurmrestd"),
            Daemon::Slurmdbd => f.write_str("slurmdbd"),
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
            "slurmdbd" => Ok(Daemon::Slurmdbd),
            _ => match s.strip_prefix("slurmd:") {
                Some(node) if !node.is_empty() => Ok(Daemon::Slurmd(node.to_string())),
                _ => Err(format!(
                    "{s:?}: expected `slurmctld`, `slurmrestd`, `slurmdbd` or `slurmd:NODE`"
                )),
            },
        }
    }
}

impl Instance {
    /// Stops slurmctld as a service restart does (SIGTERM: it saves its state and exits; killed
    /// after 10 s) and starts it again from that state; returns once it answers. slurmrestd and
    /// the slurmd daemons stay up and reconnect.
    pub fn restart_slurmctld(&self) -> Result<()> {
        self.stop_slurmctld();
        self.spawn_slurmctld()
    }

    /// Stops slurmctld as [`Instance::restart_slurmctld`] does, empties its StateSaveLocation
    /// ([`Instance::state_dir`]) and starts it again: a slurmctld whose saved state was lost. It
    /// knows no job and no dynamic node (job ids start again from FirstJobId); slurmrestd and
    /// the slurmd daemons stay up and reconnect.
    pub fn restart_slurmctld_with_state_lost(&self) -> Result<()> {
        self.stop_slurmctld();
        self.empty_state_dir()?;
        self.spawn_slurmctld()
    }

    /// Stops slurmctld as [`Instance::restart_slurmctld`] does, replaces its StateSaveLocation
    /// with a copy of `saved` (a copy of [`Instance::state_dir`] taken earlier: a backup
    /// restored) and starts it again on that state.
    pub fn restart_slurmctld_with_state_from(&self, saved: &std::path::Path) -> Result<()> {
        self.stop_slurmctld();
        self.empty_state_dir()?;
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(saved.join("."))
            .arg(self.state_dir())
            .status()
            .map_err(Error::io("copy the saved state"))?;
        if !status.success() {
            return Err(Error::io("copy the saved state")(std::io::Error::other(
                format!(
                    "cp -a {} {}: {status}",
                    saved.display(),
                    self.state_dir().display()
                ),
            )));
        }
        self.spawn_slurmctld()
    }

    fn empty_state_dir(&self) -> Result<()> {
        let dir = self.state_dir();
        let entries = std::fs::read_dir(&dir).map_err(Error::io("read the state folder"))?;
        for entry in entries {
            let path = entry.map_err(Error::io("read the state folder"))?.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(Error::io("empty the state folder"))?;
        }
        Ok(())
    }

    /// The host folder slurmctld saves its state in (slurm.conf `StateSaveLocation`).
    pub fn state_dir(&self) -> std::path::PathBuf {
        self.dir().join("state")
    }

    /// SIGTERM to slurmctld (it saves its state and exits; killed after 10 s), its sandbox
    /// stopped and its child reaped.
    fn stop_slurmctld(&self) {
        let old = locked(&self.meta).slurmctld.take();
        if let Some(id) = old {
            for pid in process::descendants(id.pid) {
                if process::command_name(pid).as_deref() == Some("slurmctld") {
                    process::kill(pid, libc::SIGTERM);
                }
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while id.is_alive() && Instant::now() < deadline {
                // The owning handle reaps its child; an attached one waits for PID 1 to.
                if let Some(c) = locked(&self.children).slurmctld.as_mut() {
                    let _ = c.try_wait();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            process::stop_sandbox(id, STOP_TIMEOUT);
        }
        self.stop_child(|c| &mut c.slurmctld);
    }

    /// Kills `daemon` (SIGKILL) and starts it again, keeping its state; returns once it answers.
    pub fn restart(&self, daemon: &Daemon) -> Result<()> {
        match daemon {
            Daemon::Slurmctld => self.restart_slurmctld(),
            Daemon::Slurmrestd => {
                self.stop_slurmrestd()?;
                self.start_slurmrestd()
            }
            Daemon::Slurmdbd => {
                self.stop_slurmdbd()?;
                self.start_slurmdbd()
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

    pub(super) fn signal_daemon(&self, daemon: &Daemon, signal: i32) -> Result<()> {
        let wrapper = {
            let meta = locked(&self.meta);
            match daemon {
                Daemon::Slurmctld => meta.slurmctld,
                Daemon::Slurmrestd => meta.slurmrestd,
                Daemon::Slurmdbd => meta.slurmdbd,
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
}
