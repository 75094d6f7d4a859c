//! Faults of a running control plane, for tests of what production brings: a daemon stopped
//! and started again with its data kept, restarted, paused (SIGSTOP: its sockets stay open and
//! nothing answers) and resumed, and etcd compacted.

use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::launcher::{Launcher, Probe, http_get_plain};
use std::time::Instant;

/// A daemon of the control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Daemon {
    Etcd,
    KubeApiserver,
    KubeControllerManager,
    KubeScheduler,
}

impl Daemon {
    /// The component name the instance starts it under (and its log, `logs/<name>.log`).
    pub fn component(self) -> &'static str {
        match self {
            Daemon::Etcd => "etcd",
            Daemon::KubeApiserver => "kube-apiserver",
            Daemon::KubeControllerManager => "kube-controller-manager",
            Daemon::KubeScheduler => "kube-scheduler",
        }
    }
}

impl std::str::FromStr for Daemon {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            Daemon::Etcd,
            Daemon::KubeApiserver,
            Daemon::KubeControllerManager,
            Daemon::KubeScheduler,
        ]
        .into_iter()
        .find(|d| d.component() == s)
        .ok_or_else(|| {
            format!(
                "{s:?}: expected etcd, kube-apiserver, kube-controller-manager or kube-scheduler"
            )
        })
    }
}

impl std::fmt::Display for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.component())
    }
}

impl Launcher {
    fn not_started(&self, daemon: Daemon) -> Error {
        Error::Invalid(format!("{daemon} was not started in this instance"))
    }

    /// Kills the daemon (SIGKILL) and waits for it; its data folder is kept.
    fn kill_daemon(&mut self, daemon: Daemon) -> Result<()> {
        let name = daemon.component();
        if !self.specs.iter().any(|(c, _, _)| *c == name) {
            return Err(self.not_started(daemon));
        }
        if let Some(i) = self.children.iter().position(|(c, _)| *c == name) {
            let (_, mut child) = self.children.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
        Ok(())
    }

    /// Starts a stopped daemon again with the arguments it first had.
    fn respawn(&mut self, daemon: Daemon) -> Result<()> {
        let name = daemon.component();
        if self.children.iter().any(|(c, _)| *c == name) {
            return Err(Error::Invalid(format!("{daemon} is running already")));
        }
        let (component, binary, args) = self
            .specs
            .iter()
            .find(|(c, _, _)| *c == name)
            .cloned()
            .ok_or_else(|| self.not_started(daemon))?;
        self.spawn(component, &binary, &args)
    }

    fn signal(&self, daemon: Daemon, signal: i32) -> Result<()> {
        let name = daemon.component();
        let (_, child) = self
            .children
            .iter()
            .find(|(c, _)| *c == name)
            .ok_or_else(|| Error::Invalid(format!("{daemon} is not running")))?;
        let pid = child.id();
        // SAFETY: plain syscall on our own child's PID.
        unsafe {
            libc::kill(pid as i32, signal);
        }
        if signal == libc::SIGSTOP {
            wait_stopped(pid);
        }
        Ok(())
    }

    /// etcd's client port, from the arguments it was started with.
    fn etcd_port(&self) -> Result<u16> {
        self.specs
            .iter()
            .find(|(c, _, _)| *c == "etcd")
            .and_then(|(_, _, args)| {
                args.iter()
                    .find_map(|a| a.strip_prefix("--listen-client-urls=http://127.0.0.1:"))
            })
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| Error::Invalid("etcd's client port is unknown".into()))
    }
}

impl Instance {
    /// Stops a daemon as a crash does (SIGKILL); its data is kept for [`Instance::start_daemon`].
    pub fn stop_daemon(&mut self, daemon: Daemon) -> Result<()> {
        self.launcher.kill_daemon(daemon)
    }

    /// Starts a daemon stopped by [`Instance::stop_daemon`] on its kept data; returns once etcd
    /// answers `/health` or kube-apiserver `/readyz` (the controllers are only started).
    pub async fn start_daemon(&mut self, daemon: Daemon) -> Result<()> {
        self.launcher.respawn(daemon)?;
        match daemon {
            Daemon::Etcd => {
                let port = self.launcher.etcd_port()?;
                self.launcher
                    .wait_until("etcd", || {
                        http_get_plain(port, "/health").is_some_and(|b| b.contains("true"))
                    })
                    .await
            }
            Daemon::KubeApiserver => {
                let probe = Probe::new(&self.dir.join("kubeconfig")).await?;
                self.launcher
                    .wait_until_async("kube-apiserver", || probe.ok("/readyz"))
                    .await
            }
            Daemon::KubeControllerManager | Daemon::KubeScheduler => Ok(()),
        }
    }

    /// [`Instance::stop_daemon`] then [`Instance::start_daemon`].
    pub async fn restart_daemon(&mut self, daemon: Daemon) -> Result<()> {
        self.stop_daemon(daemon)?;
        self.start_daemon(daemon).await
    }

    /// Stops the real kubelet of kubelet node `node` as a crash does (SIGKILL): its containerd
    /// and the pods' containers run on, its heartbeats stop, and the node lifecycle controller
    /// marks the node Ready=Unknown after `node_monitor_grace_period` (a lost node). The
    /// simulated nodes' counterpart is [`Instance::lose_kubelet`].
    pub fn stop_kubelet(&mut self, node: &str) -> Result<()> {
        let component = format!("kubelet-{node}");
        let i = self
            .launcher
            .children
            .iter()
            .position(|(c, _)| *c == component)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{node} runs no kubelet of this instance (any more)"
                ))
            })?;
        let (_, mut child) = self.launcher.children.remove(i);
        let _ = child.kill();
        let _ = child.wait();
        Ok(())
    }

    /// Pauses a daemon (SIGSTOP): it holds its connections and answers nothing.
    pub fn pause_daemon(&self, daemon: Daemon) -> Result<()> {
        self.launcher.signal(daemon, libc::SIGSTOP)
    }

    /// Resumes a daemon paused by [`Instance::pause_daemon`] (SIGCONT).
    pub fn resume_daemon(&self, daemon: Daemon) -> Result<()> {
        self.launcher.signal(daemon, libc::SIGCONT)
    }

    /// Compacts etcd's history up to its current revision and returns that revision. A watch
    /// that resumes from an older resourceVersion then gets 410 Gone once kube-apiserver's watch
    /// cache no longer covers it (at once after a kube-apiserver restart).
    pub fn compact_etcd(&self) -> Result<i64> {
        let port = self.launcher.etcd_port()?;
        // The gRPC gateway: a range read for the header's revision, then the compaction.
        let range = etcd_post(port, "/v3/kv/range", r#"{"key":"AA==","limit":1}"#)?;
        let revision: i64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| Error::Invalid(format!("etcd range answered {range}")))?;
        etcd_post(
            port,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )?;
        Ok(revision)
    }
}

/// POSTs JSON to etcd's gRPC gateway on loopback and returns the JSON answer.
fn etcd_post(port: u16, path: &str, body: &str) -> Result<serde_json::Value> {
    let fail = |what: String| Error::Invalid(format!("etcd {path}: {what}"));
    let started = Instant::now();
    let r = slurm_testenv::http::post(
        slurm_testenv::http::local(port),
        path,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .map_err(|e| fail(format!("{e} after {:?}", started.elapsed())))?;
    let answer = r.text();
    if r.status != 200 {
        return Err(fail(format!("{} {answer}", r.status)));
    }
    serde_json::from_str(&answer).map_err(|e| fail(format!("{e}: {answer}")))
}

/// Waits (at most 5 s) until every thread of `pid` has stopped: `kill` only queues SIGSTOP, and
/// on a loaded machine a thread already serving a request may answer it before the group stop
/// reaches it, so a "paused" daemon could still answer right after the call.
fn wait_stopped(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let stopped = || -> bool {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return true; // gone: nothing answers
        };
        tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(") ")
                        .and_then(|(_, rest)| rest.chars().next())
                })
                .is_none_or(|state| matches!(state, 'T' | 't' | 'Z' | 'X'))
        })
    };
    while !stopped() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
