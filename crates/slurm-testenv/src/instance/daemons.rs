//! slurmctld and slurmrestd: started, waited for, stopped.

use super::{DATA_PARSER, Instance, START_TIMEOUT, STOP_TIMEOUT, locked};
use crate::conf::{self, ConfParams, Policy};
use crate::error::{Error, Result};
use crate::process::{self, ProcId};
use crate::rootfs::{REST_USER, tail_of};
use crate::{http, ports};
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

impl Instance {
    /// Writes slurm.conf and cgroup.conf from the instance's ports, nodes and `policy`.
    pub(super) fn write_conf(&self, max_node_count: u32, policy: &Policy) -> Result<()> {
        let params = {
            let meta = locked(&self.meta);
            ConfParams {
                cluster_name: meta
                    .cluster_name
                    .clone()
                    .unwrap_or_else(|| format!("st{}", meta.slurmctld_port)),
                slurmctld_port: meta.slurmctld_port,
                slurmd_port: meta.slurmd_port,
                max_node_count,
                slurmd_nodes: meta
                    .slurmd
                    .iter()
                    .map(|d| conf::SlurmdNode {
                        name: d.node.clone(),
                        port: d.port,
                        cpus: d.cpus.clone(),
                    })
                    .collect(),
                policy: policy.clone(),
                slurmdbd_port: meta.slurmdbd_port,
                cgroups: meta.cgroups.clone(),
            }
        };
        let cgroups = params.cgroups.is_some();
        fs::write(self.slurm_conf(), conf::render(&params))
            .map_err(Error::io("write slurm.conf"))?;
        fs::write(self.dir.join("cgroup.conf"), conf::render_cgroup(cgroups))
            .map_err(Error::io("write cgroup.conf"))
    }

    pub(super) fn start_slurmctld(&self, max_node_count: u32, policy: &Policy) -> Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.write_conf(max_node_count, policy)?;
            match self.spawn_slurmctld() {
                Err(Error::PortInUse { .. }) if attempt < 4 => {
                    self.stop_child(|c| &mut c.slurmctld);
                    ports::reserve(2, |p| {
                        {
                            let mut meta = locked(&self.meta);
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
    pub(super) fn spawn_slurmctld(&self) -> Result<()> {
        let log = self.dir.join("slurmctld.out");
        let child = self.spawn_daemon(&["slurmctld", "-D", "-i"], &log, &[])?;
        let id = ProcId::of(child.id() as i32);
        locked(&self.children).slurmctld = Some(child);
        locked(&self.meta).slurmctld = id;
        self.save_meta()?;
        self.wait_slurmctld(&log)
    }

    pub(super) fn wait_slurmctld(&self, out_log: &Path) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let port = locked(&self.meta).slurmctld_port;
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

    /// Starts slurmrestd (again, after [`Instance::stop_slurmrestd`]) on the instance's REST port
    /// and waits until it answers.
    pub fn start_slurmrestd(&self) -> Result<()> {
        let port = locked(&self.meta).rest_port;
        let listen = format!("127.0.0.1:{port}");
        let log = self.dir.join("slurmrestd.log");
        // With accounting it also serves the slurmdbd endpoints (/slurmdb/...).
        let plugins = if locked(&self.meta).slurmdbd_port.is_some() {
            "slurmctld,slurmdbd"
        } else {
            "slurmctld"
        };
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
                plugins,
                "-d",
                DATA_PARSER,
                &listen,
            ],
            &log,
            &[("SLURM_JWT", "daemon")],
        )?;
        let id = ProcId::of(child.id() as i32);
        locked(&self.children).slurmrestd = Some(child);
        locked(&self.meta).slurmrestd = id;
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
        let id = locked(&self.meta).slurmrestd.take();
        if let Some(id) = id {
            process::stop_sandbox(id, STOP_TIMEOUT);
        }
        self.save_meta()
    }
}
