//! The bridge under test: a `slurm-bridge scheduler` process, its readiness, metrics and profile.

use crate::BRIDGE;
use crate::args::Args;
use crate::env::{Killed, free_port, http_get};
use crate::metrics::kube_writes;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `slurm-bridge scheduler` (or `run`) process and its metrics port.
pub(crate) struct Scheduler {
    pub(crate) _child: Killed,
    pub(crate) pid: u32,
    pub(crate) port: u16,
}

/// Starts `slurm-bridge scheduler` on these instances with the bench's flags.
pub(crate) fn spawn_scheduler(
    kube: &kube_testenv::Instance,
    slurm: &slurm_testenv::Instance,
    dir: &std::path::Path,
    a: &Args,
) -> Scheduler {
    spawn_bridge("scheduler", kube, slurm, dir, a)
}

/// Starts `slurm-bridge <command>` (`scheduler`, or `run`: every component in one process)
/// with the bench's flags, logging warnings only.
pub(crate) fn spawn_bridge(
    command: &str,
    kube: &kube_testenv::Instance,
    slurm: &slurm_testenv::Instance,
    dir: &std::path::Path,
    a: &Args,
) -> Scheduler {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "schedulerName: {BRIDGE}\nslurmRestApi: {}\npartition: slurm-bridge\n",
            slurm.rest_url()
        ),
    )
    .unwrap();
    let port = free_port();
    // BENCH_LOG=<file>: the process's log goes there, at BENCH_RUST_LOG (default info): the
    // per-pod phase timestamps of a run (scheduling_pass, submitted, labelled, job changed,
    // bound) for hack/bench-phases.py.
    let log = std::env::var_os("BENCH_LOG").map(|p| std::fs::File::create(p).expect("BENCH_LOG"));
    let level = match &log {
        Some(_) => std::env::var("BENCH_RUST_LOG").unwrap_or_else(|_| "info".into()),
        // `run`'s node controller warns once per Kubernetes node it leaves alone (the bench's
        // Slurm nodes are slurm-testenv's, not registered by the bridge).
        None if command == "run" => "warn,slurm_bridge::controllers::node=error".into(),
        None => "warn".into(),
    };
    let stderr = log.map_or_else(Stdio::inherit, Stdio::from);
    // BENCH_HEAPTRACK=<prefix>: the process runs under heaptrack, its profile in
    // `<prefix>-<n>-<command>` (n counts the processes of the run); the peak RSS printed is then
    // heaptrack's wrapper's, not the bridge's.
    let heaptrack = std::env::var_os("BENCH_HEAPTRACK");
    let wrapped = heaptrack.is_some();
    // BENCH_BRIDGE_BIN=<file>: another build of the bridge (a copy of an earlier one), so two
    // builds compare in one bench build, run after run.
    let bin = std::env::var_os("BENCH_BRIDGE_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_slurm-bridge").into());
    // The CPU tally finds the bridge by its process name, the file's: under another name its
    // CPU would read 0 and the line's total would be too low.
    assert!(
        std::path::Path::new(&bin).file_name() == Some("slurm-bridge".as_ref()),
        "BENCH_BRIDGE_BIN={}: the file must be named slurm-bridge (the CPU tally finds the \
         bridge by its process name); copy it as <folder>/slurm-bridge",
        std::path::Path::new(&bin).display()
    );
    let mut cmd = match heaptrack {
        Some(prefix) => {
            static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut out = prefix;
            out.push(format!("-{n}-{command}"));
            let mut c = Command::new("heaptrack");
            c.arg("-o").arg(out).arg(&bin);
            // A process group of its own, in which `Killed` finds the bridge.
            std::os::unix::process::CommandExt::process_group(&mut c, 0);
            c
        }
        None => Command::new(&bin),
    };
    // BENCH_BRIDGE_ENV="K=V K2=V2": more environment for the bridge alone (allocator settings,
    // `LD_PRELOAD` of another allocator), not for the bench or the control plane.
    for kv in std::env::var("BENCH_BRIDGE_ENV")
        .unwrap_or_default()
        .split_whitespace()
    {
        let (k, v) = kv
            .split_once('=')
            .expect("BENCH_BRIDGE_ENV: K=V pairs, space-separated");
        cmd.env(k, v);
    }
    let child = cmd
        .args([
            command,
            "--leader-elect=false",
            "--slurm-poll-interval",
            &a.poll,
        ])
        .arg(format!("--workers={}", a.workers))
        .args(
            a.slurm_in_flight
                .map(|n| format!("--slurm-requests-in-flight={n}")),
        )
        .args(
            a.node_poll
                .as_ref()
                .map(|d| format!("--slurm-node-poll-interval={d}")),
        )
        .arg(format!("--kube-api-qps={}", a.qps))
        .arg(format!("--kube-api-burst={}", a.burst))
        .arg("--config")
        .arg(&config)
        .arg("--health-probe-bind-address")
        .arg(format!("127.0.0.1:{port}"))
        .env("KUBECONFIG", kube.kubeconfig())
        .env("SLURM_JWT_FILE", slurm.token_file())
        .env("RUST_LOG", level)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("start slurm-bridge {command}: {e}"));
    Scheduler {
        pid: child.id(),
        _child: Killed { child, wrapped },
        port,
    }
}

/// With `BENCH_PERF=<file>`, `perf record -g` of the scheduler process into that file until the
/// caller stops it (a profile of the burst).
pub(crate) fn profile(s: &Scheduler) -> Option<Child> {
    let out = std::env::var_os("BENCH_PERF")?;
    let child = Command::new("perf")
        .args(["record", "-F", "499", "-g", "-p", &s.pid.to_string(), "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start perf record (BENCH_PERF)");
    Some(child)
}

/// Waits for the process's /readyz to answer 200.
pub(crate) async fn wait_ready(s: &Scheduler) {
    while !matches!(http_get(s.port, "/readyz").await, Some((200, _))) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The scheduler's metrics once its write count has settled (unchanged for 0.5 s, 10 s at most):
/// the last pods' Scheduled Events follow their bindings. With `BENCH_METRICS=<file>` they are
/// also written there (every family, e.g. the Slurm requests by endpoint).
pub(crate) async fn settled_metrics(s: &Scheduler) -> String {
    let metrics = settle(s).await;
    if let Some(path) = std::env::var_os("BENCH_METRICS") {
        std::fs::write(path, &metrics).expect("BENCH_METRICS");
    }
    metrics
}

async fn settle(s: &Scheduler) -> String {
    let mut metrics = String::new();
    let mut last = None;
    for _ in 0..20 {
        metrics = http_get(s.port, "/metrics")
            .await
            .map(|x| x.1)
            .unwrap_or_default();
        let total: f64 = kube_writes(&metrics).iter().map(|w| w.1).sum();
        if last == Some(total) {
            break;
        }
        last = Some(total);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    metrics
}
