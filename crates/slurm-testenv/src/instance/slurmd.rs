//! The nodes run by a real slurmd: started, waited for, killed.

use super::{Instance, START_TIMEOUT, STOP_TIMEOUT, locked};
use crate::cgroup;
use crate::error::{Error, Result};
use crate::process::{self, ProcId};
use crate::rootfs::tail_of;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

impl Instance {
    /// The names of the nodes run by a real slurmd (`node-1` .. `node-S`).
    pub fn slurmd_nodes(&self) -> Vec<String> {
        let meta = locked(&self.meta);
        meta.slurmd.iter().map(|d| d.node.clone()).collect()
    }

    /// Host path of the slurmd log of `node`.
    pub fn slurmd_log(&self, node: &str) -> PathBuf {
        self.dir.join(format!("slurmd.{node}.log"))
    }

    pub(super) fn start_all_slurmd(&self) -> Result<()> {
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

    pub(super) fn spawn_slurmd(&self, node: &str) -> Result<()> {
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
        // With cgroups: in its own cgroup namespace rooted at the node's folders.
        let cgroup_procs = if self.cgroups() {
            cgroup::prepare_node(&self.name, node)?
        } else {
            Vec::new()
        };
        let child = self.spawn_daemon_in(
            &["slurmd", "-D", "-N", node],
            &out,
            &[("SLURM_TESTENV_RUN", run.as_str())],
            &cgroup_procs,
        )?;
        let id = ProcId::of(child.id() as i32);
        locked(&self.children)
            .slurmd
            .insert(node.to_string(), child);
        if let Some(d) = locked(&self.meta)
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
        let child = locked(&self.children).slurmd.remove(node);
        let proc = locked(&self.meta)
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
        // A killed slurmd leaves its `slurm_<node>` folders (and tasks, frozen perhaps): gone
        // with the host's crash, as they would be.
        let cgroups = if self.cgroups() && self.slurmd_nodes().iter().any(|n| n == node) {
            cgroup::remove_node(&self.name, node)
        } else {
            Ok(())
        };
        self.save_meta()?;
        cgroups
    }

    /// Waits until every node in `nodes` has registered its slurmd and responds (a state
    /// without `*`, not DOWN or UNKNOWN).
    pub(super) fn wait_slurmd_up(&self, nodes: &[String]) -> Result<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + START_TIMEOUT;
        let list = nodes.join(",");
        loop {
            for node in nodes {
                let alive = {
                    let mut children = locked(&self.children);
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
}
