//! End-to-end benchmark of the scheduler on real Slurm (slurm-testenv) and a real Kubernetes
//! control plane (kube-testenv), in modes (docs/performance.md):
//!
//! - `--mode burst` (default): N pods already waiting, then the scheduler starts; time to all
//!   bound. Beside it, from the same run: raw Slurm (N external jobs straight to slurmrestd ->
//!   all RUNNING), the bind floor (the bench itself posting the N Bindings, `--workers` in
//!   flight: the one write every scheduler must make) and kube-scheduler binding N waiting pods
//!   with its client limits raised to the bridge's (`--kube-api-qps`, `--kube-api-burst`).
//! - `--mode arrival`: pods created at `--rate` per second for `--seconds`; created -> bound
//!   p50/p99/max for the bridge and kube-scheduler, and raw Slurm's submit -> RUNNING at that rate.
//! - `--mode scale`: `--pods` pods on `--nodes` nodes (fewer): the scheduler's peak RSS, and the
//!   first pass over every pod after a restart.
//!
//! Every mode prints the load average beside its figures, and for the bridge the Kubernetes
//! writes per pod by kind and the Slurm REST calls per pod (from the scheduler's /metrics) and
//! kube-apiserver requests per pod (apiserver_request_total over the phase, every client).
//!
//! `BENCH_PERF=<file>` records a `perf record -g` profile of the scheduler during the burst;
//! `BENCH_LOG=<file>` keeps the scheduler's log (at `BENCH_RUST_LOG`, default `info`) for
//! `hack/bench-phases.py`, and `BENCH_METRICS=<file>` its last `/metrics`.
//!
//! `cargo bench -p slurm-bridge --bench scheduler -- [--mode burst|arrival|scale] [--pods N]
//! [--nodes N] [--rate R] [--seconds S] [--workers W] [--kube-api-qps Q] [--kube-api-burst B]
//! [--poll 1s] [--skip-raw]`; the defaults are small (100 pods; arrival 50/s for 4 s).

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use slurm_rest::models::{JobDescMsg, JobFlag, JobState, Shared};
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BRIDGE: &str = "slurm-bridge-scheduler";
const JOB_LABEL: &str = "scheduler.slinky.slurm.net/slurm-jobid";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Burst,
    Arrival,
    Scale,
}

struct Args {
    mode: Mode,
    pods: u32,
    nodes: Option<u32>,
    rate: f64,
    seconds: f64,
    workers: u32,
    qps: f64,
    burst: u32,
    poll: String,
    skip_raw: bool,
}

const USAGE: &str = "use --mode burst|arrival|scale, --pods N, --nodes N, --rate R, --seconds S, --workers W, --kube-api-qps Q, --kube-api-burst B, --poll DURATION, --skip-raw";

fn args() -> Args {
    let mut a = Args {
        mode: Mode::Burst,
        pods: 100,
        nodes: None,
        rate: 50.0,
        seconds: 4.0,
        workers: 64,
        qps: 1000.0,
        burst: 2000,
        poll: "1s".into(),
        skip_raw: false,
    };
    let mut it = std::env::args().skip(1);
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> T {
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} needs a number; {USAGE}"))
    }
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--mode" => {
                a.mode = match it.next().as_deref() {
                    Some("burst") => Mode::Burst,
                    Some("arrival") => Mode::Arrival,
                    Some("scale") => Mode::Scale,
                    other => panic!("--mode {other:?}: {USAGE}"),
                }
            }
            "--pods" => a.pods = num("--pods", it.next()),
            "--nodes" => a.nodes = Some(num("--nodes", it.next())),
            "--rate" => a.rate = num("--rate", it.next()),
            "--seconds" => a.seconds = num("--seconds", it.next()),
            "--workers" => a.workers = num("--workers", it.next()),
            "--kube-api-qps" => a.qps = num("--kube-api-qps", it.next()),
            "--kube-api-burst" => a.burst = num("--kube-api-burst", it.next()),
            "--poll" => a.poll = it.next().expect("--poll DURATION"),
            "--skip-raw" => a.skip_raw = true,
            "--bench" => {}
            other => panic!("unknown argument {other}: {USAGE}"),
        }
    }
    a
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// One line of figures, with the load average beside it.
macro_rules! report {
    ($($t:tt)*) => { println!("{}   [load {}]", format!($($t)*), loadavg()) };
}

fn start_slurm(nodes: u32) -> slurm_testenv::Instance {
    slurm_testenv::Instance::start(slurm_testenv::InstanceOptions {
        nodes,
        ..Default::default()
    })
    .expect("start Slurm")
}

fn client(slurm: &slurm_testenv::Instance) -> slurm_rest::Client {
    slurm_rest::Client::builder(slurm.rest_url())
        .token(slurm_rest::TokenProvider::file(slurm.token_file()))
        .build()
        .unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|x| x.1.to_string())?;
    Some((code, body))
}

/// Mean of a histogram from its `_sum` and `_count` lines.
fn histogram_mean(metrics: &str, name: &str) -> f64 {
    let value = |suffix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{suffix} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let count = value("_count");
    if count > 0.0 {
        value("_sum") / count
    } else {
        0.0
    }
}

/// Sum of `slurm_bridge_scheduler_slurm_requests_total` over all labels.
fn slurm_requests(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("slurm_bridge_scheduler_slurm_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `slurm_bridge_scheduler_kube_writes_total` by kind, sorted by kind.
fn kube_writes(metrics: &str) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("slurm_bridge_scheduler_kube_writes_total{kind=\""))
        .filter_map(|l| {
            let (kind, rest) = l.split_once('"')?;
            Some((kind.to_string(), rest.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn external_job(name: &str) -> JobDescMsg {
    JobDescMsg {
        flags: Some(vec![JobFlag::ExternalJob]),
        nodes: Some("1".into()),
        partition: Some("slurm-bridge".into()),
        admin_comment: Some(format!("{{\"pods\":[\"bench/{name}\"]}}")),
        current_working_directory: Some("/tmp".into()),
        user_id: Some("0".into()),
        group_id: Some("0".into()),
        shared: Some(vec![Shared::None]),
        ..Default::default()
    }
}

/// Polls GET /jobs/state/ every 20 ms and records when each job is first seen RUNNING, until
/// `n` are.
async fn watch_running(rest: slurm_rest::Client, n: usize) -> HashMap<u32, Instant> {
    let mut running = HashMap::new();
    while running.len() < n {
        for s in rest.job_states().await.unwrap() {
            if s.state.contains(&JobState::Running) {
                running.entry(s.job_id).or_insert_with(Instant::now);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running
}

/// Raw Slurm, burst: N external jobs of one node each, 4 submits in flight -> all RUNNING.
async fn raw_burst(n: u32) -> Duration {
    let slurm = tokio::task::spawn_blocking(move || start_slurm(n))
        .await
        .unwrap();
    let rest = client(&slurm);
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let rest = rest.clone();
            async move {
                rest.submit_job(&external_job(&format!("raw-{i}")))
                    .await
                    .expect("submit")
            }
        })
        .buffer_unordered(4)
        .count()
        .await;
    watch_running(rest, n as usize).await;
    let elapsed = started.elapsed();
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
    elapsed
}

/// Raw Slurm, arrival: one external job every 1/rate s; submit -> RUNNING per job.
async fn raw_arrival(n: u32, rate: f64) -> Vec<Duration> {
    let slurm = tokio::task::spawn_blocking(move || start_slurm(n))
        .await
        .unwrap();
    let rest = client(&slurm);
    let watch = tokio::spawn(watch_running(rest.clone(), n as usize));
    let submitted: Arc<Mutex<HashMap<u32, Instant>>> = Default::default();
    paced(n, rate, |i| {
        let (rest, submitted) = (rest.clone(), submitted.clone());
        async move {
            let at = Instant::now();
            let r = rest
                .submit_job(&external_job(&format!("raw-{i}")))
                .await
                .expect("submit");
            submitted.lock().unwrap().insert(r.job_id, at);
        }
    })
    .await;
    let running = watch.await.unwrap();
    let submitted = submitted.lock().unwrap().clone();
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
    submitted
        .iter()
        .filter_map(|(id, at)| running.get(id).map(|r| r.saturating_duration_since(*at)))
        .collect()
}

/// Runs `f(i)` for i in 0..n, starting one every 1/rate s (each in its own task).
async fn paced<F, Fut>(n: u32, rate: f64, f: F)
where
    F: Fn(u32) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(f64::from(i) / rate)).await;
        tasks.push(tokio::spawn(f(i)));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

fn pod_object(name: &str, scheduler: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler,
                 "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}]}
    }))
    .unwrap()
}

/// A namespace with its default ServiceAccount (which the controller manager creates).
async fn namespace(kube: &kube_testenv::Instance, ns: &str) -> Api<Pod> {
    if ns != "default" {
        kube.kubectl(&["create", "namespace", ns])
            .expect("create namespace");
    }
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(kube.client(), ns);
    while sas.get_opt("default").await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Api::namespaced(kube.client(), ns)
}

/// Creates `n` pods named `{prefix}-{i}` for `scheduler`, 16 creations in flight.
async fn create_pods(pods: &Api<Pod>, prefix: &str, n: u32, scheduler: &str) {
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            let pod = pod_object(&format!("{prefix}-{i}"), scheduler);
            async move {
                pods.create(&PostParams::default(), &pod)
                    .await
                    .expect("create pod")
            }
        })
        .buffer_unordered(16)
        .count()
        .await;
    println!(
        "        {n} pods created in {:.2} s (16 in flight)",
        started.elapsed().as_secs_f64()
    );
}

/// When each pod of `pods` was first seen bound (and, with `labelled`, when all `total` carry
/// the job id label too), from a watch started now; ends once `bindable` are bound.
fn watch_bound(
    pods: &Api<Pod>,
    bindable: usize,
    labelled_total: Option<usize>,
) -> tokio::task::JoinHandle<HashMap<String, Instant>> {
    let pods = pods.clone();
    tokio::spawn(async move {
        let mut bound = HashMap::new();
        let mut labelled = std::collections::HashSet::new();
        let stream = watcher(pods, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(p)) = stream.next().await {
            let name = p.metadata.name.clone().unwrap_or_default();
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                bound.entry(name.clone()).or_insert_with(Instant::now);
            }
            if p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(JOB_LABEL))
            {
                labelled.insert(name);
            }
            if bound.len() >= bindable && labelled_total.is_none_or(|t| labelled.len() >= t) {
                break;
            }
        }
        bound
    })
}

/// The latest instant of a map (when the last pod was bound).
fn last(bound: &HashMap<String, Instant>) -> Instant {
    *bound.values().max().expect("pods bound")
}

/// The control plane: `nodes` nodes, kube-scheduler with these client limits.
async fn control_plane(nodes: u32, qps: f64, burst: u32) -> kube_testenv::Instance {
    let mut opts = kube_testenv::InstanceOptions::with_nodes(nodes as usize);
    opts.kube_scheduler = true;
    opts.kube_scheduler_args = vec![
        format!("--kube-api-qps={qps}"),
        format!("--kube-api-burst={burst}"),
    ];
    let kube = kube_testenv::Instance::start(opts)
        .await
        .expect("start the Kubernetes control plane");
    report!(
        "control plane: kube-testenv with {nodes} nodes ready in {:.1} s",
        kube.startup().as_secs_f64()
    );
    kube
}

/// Sum of kube-apiserver's `apiserver_request_total` (every client).
async fn apiserver_requests(kube: &kube_testenv::Instance) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = kube.client().request_text(req).await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// kube-scheduler, burst: stopped while N pods are created, then started; time to all bound.
async fn kube_scheduler_burst(kube: &mut kube_testenv::Instance, n: u32) -> Duration {
    use kube_testenv::Daemon;
    kube.stop_daemon(Daemon::KubeScheduler)
        .expect("stop kube-scheduler");
    let pods = namespace(kube, "ks-burst").await;
    create_pods(&pods, "ks", n, "default-scheduler").await;
    let bound = watch_bound(&pods, n as usize, None);
    let started = Instant::now();
    kube.start_daemon(Daemon::KubeScheduler)
        .await
        .expect("start kube-scheduler");
    last(&bound.await.unwrap()).duration_since(started)
}

/// The bind floor: N waiting pods that no scheduler serves, bound by the bench itself,
/// `workers` Bindings in flight, pod i to node i mod nodes.
async fn bind_floor(kube: &kube_testenv::Instance, n: u32, nodes: u32, workers: u32) -> Duration {
    let pods = namespace(kube, "bind-floor").await;
    create_pods(&pods, "floor", n, "nobody").await;
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let name = format!("floor-{i}");
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    target: ObjectReference {
                        kind: Some("Node".into()),
                        api_version: Some("v1".into()),
                        name: Some(format!("node-{}", i % nodes + 1)),
                        ..Default::default()
                    },
                };
                pods.create_subresource::<Binding, serde_json::Value>(
                    "binding",
                    &name,
                    &PostParams::default(),
                    &binding,
                )
                .await
                .expect("bind");
            }
        })
        .buffer_unordered(workers as usize)
        .count()
        .await;
    started.elapsed()
}

/// CPU seconds used so far by the processes of each daemon that matters here, by command name
/// (every instance on the machine: other users' runs count too).
fn cpu_by_daemon() -> Vec<(&'static str, f64)> {
    const DAEMONS: [&str; 7] = [
        "kube-apiserver",
        "etcd",
        "slurmrestd",
        "slurmctld",
        "slurm-bridge",
        "kube-controller",
        "kube-scheduler",
    ];
    let ticks = 100.0; // USER_HZ on Linux
    let mut out: Vec<(&'static str, f64)> = DAEMONS.iter().map(|d| (*d, 0.0)).collect();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let (Some(u), Some(s)) = (fields.get(11), fields.get(12)) else {
            continue;
        };
        let secs = (u.parse::<f64>().unwrap_or(0.0) + s.parse::<f64>().unwrap_or(0.0)) / ticks;
        if let Some(slot) = out.iter_mut().find(|(d, _)| comm.starts_with(d)) {
            slot.1 += secs;
        }
    }
    out
}

fn print_cpu(before: &[(&'static str, f64)], after: &[(&'static str, f64)]) {
    let parts: Vec<String> = after
        .iter()
        .zip(before)
        .map(|((d, a), (_, b))| (d, a - b))
        .filter(|(_, c)| *c > 0.05)
        .map(|(d, c)| format!("{d} {c:.1}"))
        .collect();
    println!(
        "  CPU seconds during the phase (every process of that name): {}",
        parts.join(", ")
    );
}

/// A running `slurm-bridge scheduler` process and its metrics port.
struct Scheduler {
    _child: Killed,
    pid: u32,
    port: u16,
}

fn spawn_scheduler(
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
    // BENCH_LOG=<file>: the scheduler's log goes there, at BENCH_RUST_LOG (default info) — the
    // per-pod phase timestamps of a run (scheduling_pass, submitted, labelled, job changed, bound).
    let log = std::env::var_os("BENCH_LOG").map(|p| std::fs::File::create(p).expect("BENCH_LOG"));
    let level = match &log {
        Some(_) => std::env::var("BENCH_RUST_LOG").unwrap_or_else(|_| "info".into()),
        None => "warn".into(),
    };
    let stderr = log.map_or_else(Stdio::inherit, Stdio::from);
    let child = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
        .args([
            "scheduler",
            "--leader-elect=false",
            "--slurm-poll-interval",
            &a.poll,
        ])
        .arg(format!("--workers={}", a.workers))
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
        .expect("start slurm-bridge scheduler");
    Scheduler {
        pid: child.id(),
        _child: Killed(child),
        port,
    }
}

/// With `BENCH_PERF=<file>`, `perf record -g` of the scheduler process into that file until the
/// caller stops it (a profile of the burst).
fn profile(s: &Scheduler) -> Option<Child> {
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

async fn wait_ready(s: &Scheduler) {
    while !matches!(http_get(s.port, "/readyz").await, Some((200, _))) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The scheduler's metrics once its write count has settled (unchanged for 0.5 s, 10 s at most):
/// the last pods' Scheduled Events follow their bindings. With `BENCH_METRICS=<file>` they are
/// also written there (every family, e.g. the Slurm requests by endpoint).
async fn settled_metrics(s: &Scheduler) -> String {
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

/// Per-pod writes (by kind) and Slurm calls of the bridge, from its metrics.
fn print_per_pod(metrics: &str, n: u32, apiserver: f64) {
    let n = f64::from(n);
    let writes = kube_writes(metrics);
    let by_kind: Vec<String> = writes
        .iter()
        .map(|(k, w)| format!("{k} {:.3}", w / n))
        .collect();
    report!(
        "  per pod: Kubernetes writes {:.3} ({}), Slurm REST calls {:.2}, kube-apiserver requests (all clients) {:.1}",
        writes.iter().map(|w| w.1).sum::<f64>() / n,
        by_kind.join(", "),
        slurm_requests(metrics) / n,
        apiserver / n
    );
    println!(
        "  mean submit->allocation {:.3} s, allocation->bound {:.3} s (scheduler histograms)",
        histogram_mean(
            metrics,
            "slurm_bridge_scheduler_submit_to_allocation_seconds"
        ),
        histogram_mean(
            metrics,
            "slurm_bridge_scheduler_allocation_to_bound_seconds"
        ),
    );
}

fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("slurm-bridge-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn burst(a: &Args) {
    let n = a.pods;
    let nodes = a.nodes.unwrap_or(n);
    println!(
        "== burst: {n} pods waiting on {nodes} nodes, then the scheduler starts; client limits qps {} burst {}, {} workers",
        a.qps, a.burst, a.workers
    );
    let raw = if a.skip_raw || nodes != n {
        None
    } else {
        let t = raw_burst(n).await;
        report!(
            "raw Slurm:      {n} external jobs -> all RUNNING in {:.2} s",
            t.as_secs_f64()
        );
        Some(t)
    };
    let mut kube = control_plane(nodes, a.qps, a.burst).await;
    let floor = bind_floor(&kube, n, nodes, a.workers).await;
    report!(
        "bind floor:     {n} Bindings posted by the bench ({} in flight) in {:.2} s",
        a.workers,
        floor.as_secs_f64()
    );
    let ks = kube_scheduler_burst(&mut kube, n).await;
    report!(
        "kube-scheduler: {n} waiting pods -> all bound in {:.2} s (--kube-api-qps={} --kube-api-burst={})",
        ks.as_secs_f64(),
        a.qps,
        a.burst
    );

    let slurm = tokio::task::spawn_blocking(move || start_slurm(nodes))
        .await
        .unwrap();
    let dir = temp_dir();
    let pods = namespace(&kube, "default").await;
    create_pods(&pods, "bench", n, BRIDGE).await;
    let bound = watch_bound(&pods, n.min(nodes) as usize, Some(n as usize));
    let before = apiserver_requests(&kube).await;
    let cpu_before = cpu_by_daemon();
    let started = Instant::now();
    let s = spawn_scheduler(&kube, &slurm, &dir, a);
    let profile = profile(&s);
    let done = last(&bound.await.unwrap());
    if let Some(mut p) = profile {
        // SIGINT: perf writes its data and exits.
        let _ = Command::new("kill")
            .args(["-INT", &p.id().to_string()])
            .status();
        let _ = p.wait();
    }
    let t = done.duration_since(started);
    let cpu_after = cpu_by_daemon();
    let metrics = settled_metrics(&s).await;
    let api = apiserver_requests(&kube).await - before;
    report!(
        "bridge:         {n} waiting pods -> {} bound in {:.2} s ({:.2} ms per pod), from the scheduler's start",
        n.min(nodes),
        t.as_secs_f64(),
        t.as_secs_f64() * 1000.0 / f64::from(n)
    );
    let floor_or_raw = raw.map_or(floor, |r| r.max(floor));
    report!(
        "  bridge / max(raw Slurm, bind floor) = {:.2}; bridge / kube-scheduler = {:.2}",
        t.as_secs_f64() / floor_or_raw.as_secs_f64(),
        t.as_secs_f64() / ks.as_secs_f64()
    );
    print_per_pod(&metrics, n, api);
    print_cpu(&cpu_before, &cpu_after);
    println!(
        "  scheduler peak RSS {:.1} MiB",
        vm_hwm_kib(s.pid) as f64 / 1024.0
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
}

/// p50, p99 and max of latencies, in seconds.
fn percentiles(mut l: Vec<Duration>) -> String {
    l.sort();
    if l.is_empty() {
        return "no samples".into();
    }
    let at = |q: f64| l[((l.len() as f64 * q).ceil() as usize).clamp(1, l.len()) - 1].as_secs_f64();
    format!(
        "p50 {:.3} s, p99 {:.3} s, max {:.3} s ({} pods)",
        at(0.5),
        at(0.99),
        at(1.0),
        l.len()
    )
}

/// Creates `n` pods at `rate` per second for `scheduler`; created (the create's answer) ->
/// bound per pod.
async fn arrival_latencies(
    pods: &Api<Pod>,
    prefix: &str,
    n: u32,
    rate: f64,
    scheduler: &str,
) -> Vec<Duration> {
    let bound = watch_bound(pods, n as usize, None);
    let created: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
    paced(n, rate, |i| {
        let (pods, created) = (pods.clone(), created.clone());
        let name = format!("{prefix}-{i}");
        let pod = pod_object(&name, scheduler);
        async move {
            pods.create(&PostParams::default(), &pod)
                .await
                .expect("create pod");
            created.lock().unwrap().insert(name, Instant::now());
        }
    })
    .await;
    let bound = bound.await.unwrap();
    let created = created.lock().unwrap().clone();
    created
        .iter()
        .filter_map(|(name, at)| bound.get(name).map(|b| b.saturating_duration_since(*at)))
        .collect()
}

async fn arrival(a: &Args) {
    let n = (a.rate * a.seconds).round() as u32;
    let nodes = a.nodes.unwrap_or(n).max(n);
    println!(
        "== arrival: {n} pods at {}/s for {} s on {nodes} nodes",
        a.rate, a.seconds
    );
    if !a.skip_raw {
        let raw = raw_arrival(n, a.rate).await;
        report!("raw Slurm:      submit -> RUNNING {}", percentiles(raw));
    }
    let kube = control_plane(nodes, a.qps, a.burst).await;
    let ks_pods = namespace(&kube, "ks-arrival").await;
    let ks = arrival_latencies(&ks_pods, "ks", n, a.rate, "default-scheduler").await;
    report!("kube-scheduler: created -> bound {}", percentiles(ks));
    let slurm = tokio::task::spawn_blocking(move || start_slurm(nodes))
        .await
        .unwrap();
    let dir = temp_dir();
    let s = spawn_scheduler(&kube, &slurm, &dir, a);
    wait_ready(&s).await;
    let pods = namespace(&kube, "default").await;
    let before = apiserver_requests(&kube).await;
    let bridge = arrival_latencies(&pods, "bench", n, a.rate, BRIDGE).await;
    report!("bridge:         created -> bound {}", percentiles(bridge));
    let metrics = settled_metrics(&s).await;
    print_per_pod(&metrics, n, apiserver_requests(&kube).await - before);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
}

/// The value of a counter without labels in a metrics text.
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

async fn scale(a: &Args) {
    let n = a.pods;
    let nodes = a.nodes.unwrap_or((n / 10).max(1));
    println!("== scale: {n} pods on {nodes} nodes");
    let kube = control_plane(nodes, a.qps, a.burst).await;
    let slurm = tokio::task::spawn_blocking(move || start_slurm(nodes))
        .await
        .unwrap();
    let dir = temp_dir();
    let pods = namespace(&kube, "default").await;
    create_pods(&pods, "bench", n, BRIDGE).await;
    let bound = watch_bound(&pods, n.min(nodes) as usize, Some(n as usize));
    let before = apiserver_requests(&kube).await;
    let started = Instant::now();
    let s = spawn_scheduler(&kube, &slurm, &dir, a);
    let t = last(&bound.await.unwrap()).duration_since(started);
    let metrics = settled_metrics(&s).await;
    let api = apiserver_requests(&kube).await - before;
    report!(
        "bridge: {n} pods -> {} bound, the rest labelled with their pending job, in {:.2} s from the start; peak RSS {:.1} MiB",
        n.min(nodes),
        t.as_secs_f64(),
        vm_hwm_kib(s.pid) as f64 / 1024.0
    );
    print_per_pod(&metrics, n, api);
    drop(s);
    // A restart: every pod (bound ones end at once) gets a pass.
    let started = Instant::now();
    let s = spawn_scheduler(&kube, &slurm, &dir, a);
    loop {
        let m = http_get(s.port, "/metrics")
            .await
            .map(|x| x.1)
            .unwrap_or_default();
        if counter(&m, "slurm_bridge_scheduler_reconcile_passes_total") >= f64::from(n) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report!(
        "restart: first pass over all {n} pods done {:.2} s after the start; peak RSS {:.1} MiB",
        started.elapsed().as_secs_f64(),
        vm_hwm_kib(s.pid) as f64 / 1024.0
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = args();
    match a.mode {
        Mode::Burst => burst(&a).await,
        Mode::Arrival => arrival(&a).await,
        Mode::Scale => scale(&a).await,
    }
}
