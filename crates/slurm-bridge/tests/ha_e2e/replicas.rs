//! The `slurm-bridge` replicas a test runs under leader election, and what it reads of them:
//! their logs, their write counters (/metrics), the Lease each competes for.

use crate::e2e::prometheus::sample;
use crate::e2e::{self, Env, NS};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A fresh folder for one test's replicas.
pub fn temp_dir(tag: &str) -> PathBuf {
    e2e::temp_dir(&format!("sb-ha-{tag}"))
}

/// One `slurm-bridge` process under leader election.
pub struct Replica {
    pub identity: String,
    pub child: Child,
    pub probe: SocketAddr,
    pub log: PathBuf,
}

impl Drop for Replica {
    /// A replica left running by a failed test is killed, so it cannot act on a later one.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `slurm-bridge` binary: cargo's, or `SLURM_BRIDGE_BIN` (a copy kept apart, when other
/// builds share the target directory and may replace cargo's meanwhile).
pub fn bridge_binary() -> PathBuf {
    std::env::var_os("SLURM_BRIDGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_slurm-bridge")))
}

/// Starts `slurm-bridge <subcommand>` as `identity` (POD_NAME), competing for `lease`.
pub fn spawn(
    env: &Env,
    dir: &Path,
    config: &Path,
    subcommand: &str,
    identity: &str,
    lease: &str,
    extra: &[String],
) -> Replica {
    let log = dir.join(format!("{identity}.log"));
    let child = Command::new(bridge_binary())
        .arg(subcommand)
        .arg("--config")
        .arg(config)
        .args([
            "--leader-elect=true",
            "--leader-elect-namespace",
            NS,
            "--leader-elect-name",
            lease,
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--slurm-poll-interval",
            "200ms",
        ])
        .args(extra)
        .env("POD_NAME", identity)
        .env("KUBECONFIG", env.kube_env.kubeconfig())
        .env("SLURM_JWT_FILE", env.slurm.token_file())
        .env("RUST_LOG", "info,kube_client=warn,kube_runtime=warn")
        .env_remove("SLURM_JWT")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start slurm-bridge");
    // The probe port the process bound, as it logs it (a port picked here could be taken).
    let deadline = Instant::now() + Duration::from_secs(60);
    let probe = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(addr) = text
            .lines()
            .find(|l| l.contains("serving /healthz, /readyz and /metrics"))
            .and_then(|l| l.split("addr=").nth(1))
            .and_then(|a| a.split_whitespace().next())
            .and_then(|a| a.parse::<SocketAddr>().ok())
        {
            break addr;
        }
        assert!(
            Instant::now() < deadline,
            "{identity} serves no probes; log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    Replica {
        identity: identity.into(),
        child,
        probe,
        log,
    }
}

pub fn signal(r: &Replica, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &r.child.id().to_string()])
            .status()
            .unwrap()
            .success(),
        "kill {sig} {}",
        r.identity
    );
}

pub fn log_of(r: &Replica) -> String {
    std::fs::read_to_string(&r.log).unwrap_or_default()
}

/// Stops every replica with SIGTERM; each must exit cleanly.
pub async fn terminate_all<'a>(replicas: impl IntoIterator<Item = &'a mut Replica>) {
    for r in replicas {
        let status = e2e::terminate(&mut r.child).await;
        assert!(
            status.success(),
            "{}: {status:?}; log:\n{}",
            r.identity,
            log_of(r)
        );
    }
}

/// GET /metrics of a replica (slurm-testenv's blocking client, off the runtime): the body of
/// any answer, `None` when the request failed or took more than 5 s.
pub async fn scrape(addr: SocketAddr) -> Option<String> {
    let client =
        slurm_testenv::http::Client::with_timeouts(Duration::from_secs(5), Duration::from_secs(5));
    let get = tokio::task::spawn_blocking(move || client.get(addr, "/metrics", &[]));
    tokio::time::timeout(Duration::from_secs(5), get)
        .await
        .ok()?
        .ok()?
        .ok()
        .map(|r| r.text())
}

/// Writes of a replica that passed its fence, by target, and those refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Writes {
    pub kube_sent: f64,
    pub slurm_sent: f64,
    pub fenced: f64,
}

pub async fn writes(r: &Replica) -> Writes {
    let text = scrape(r.probe)
        .await
        .unwrap_or_else(|| panic!("metrics of {}", r.identity));
    let m = "slurm_bridge_leader_writes_total";
    if std::env::var("HA_DEBUG").is_ok() {
        for l in text.lines().filter(|l| l.contains("leader")) {
            eprintln!("{}: {l}", r.identity);
        }
    }
    Writes {
        kube_sent: sample(&text, m, &[("target", "kubernetes"), ("outcome", "sent")]),
        slurm_sent: sample(&text, m, &[("target", "slurm"), ("outcome", "sent")]),
        fenced: sample(&text, m, &[("outcome", "fenced")]),
    }
}

pub async fn holder(env: &Env, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(env.kube.clone(), NS)
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// Waits until `lease` is held by `who`; returns when.
pub async fn wait_holder(env: &Env, lease: &str, who: &str, timeout: Duration) -> Instant {
    let deadline = Instant::now() + timeout;
    loop {
        if holder(env, lease).await.as_deref() == Some(who) {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "Lease {lease} not held by {who} within {timeout:?} (holder {:?})",
            holder(env, lease).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the log of `r` says it stopped leading.
pub async fn wait_stood_down(r: &Replica, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !log_of(r).contains("leadership changed leader=false") {
        assert!(
            Instant::now() < deadline,
            "{} did not stand down within {timeout:?}; log:\n{}",
            r.identity,
            log_of(r)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The write counters of `replicas` once they have not moved for a second (at most 30 s).
pub async fn quiet_writes(replicas: &[&Replica]) -> Vec<Writes> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = Vec::new();
    let mut still_since = Instant::now();
    loop {
        let mut now = Vec::new();
        for r in replicas {
            now.push(writes(r).await);
        }
        if now != last {
            (last, still_since) = (now, Instant::now());
        } else if still_since.elapsed() >= Duration::from_secs(1) {
            return last;
        }
        assert!(
            Instant::now() < deadline,
            "the leaders never stopped writing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
