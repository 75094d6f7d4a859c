//! End-to-end benchmark on real Slurm and a real Kubernetes control plane (kube-testenv):
//! N external jobs submitted straight to slurmrestd (raw); N pods bound by kube-scheduler alone on
//! the control plane (the floor for any scheduler there); and N pods bound by the
//! `slurm-bridge scheduler` process on the same control plane (bridge).
//!
//! `cargo bench -p slurm-bridge --bench scheduler -- --pods 1000 [--nodes N] [--poll 1s] [--skip-raw]`
//!
//! Prints the three times and their ratios, Slurm REST calls and Kubernetes writes per pod (from
//! the scheduler's /metrics; writes also by kind) and the scheduler's peak RSS (VmHWM of its
//! process). With more pods than nodes (`--nodes`), the bridge phase waits until every node holds
//! a pod and every other pod has its pending external job, then reports memory: the "10,000 pods
//! on 1,000 nodes" case. `BENCH_WORKERS=N` sets the scheduler's `--workers` (default 64).

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use slurm_rest::models::{JobDescMsg, JobFlag, JobState, Shared};
use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Args {
    pods: u32,
    nodes: Option<u32>,
    poll: String,
    skip_raw: bool,
}

fn args() -> Args {
    let mut a = Args {
        pods: 1000,
        nodes: None,
        poll: "1s".into(),
        skip_raw: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--pods" => a.pods = it.next().and_then(|v| v.parse().ok()).expect("--pods N"),
            "--nodes" => a.nodes = it.next().and_then(|v| v.parse().ok()),
            "--poll" => a.poll = it.next().expect("--poll DURATION"),
            "--skip-raw" => a.skip_raw = true,
            "--bench" => {}
            other => panic!(
                "unknown argument {other}: use --pods N [--nodes N] [--poll 1s] [--skip-raw]"
            ),
        }
    }
    a
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

async fn wait_all_running(rest: &slurm_rest::Client, n: usize) {
    loop {
        let states = rest.job_states().await.unwrap();
        let running = states
            .iter()
            .filter(|s| s.state.contains(&JobState::Running))
            .count();
        if running >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// N external jobs of one node each, submitted by 4 concurrent clients.
async fn raw(n: u32) -> (Duration, f64) {
    let slurm = tokio::task::spawn_blocking(move || start_slurm(n))
        .await
        .unwrap();
    let rest = client(&slurm);
    let started = Instant::now();
    let submits = futures::stream::iter(0..n)
        .map(|i| {
            let rest = rest.clone();
            async move {
                let desc = JobDescMsg {
                    flags: Some(vec![JobFlag::ExternalJob]),
                    nodes: Some("1".into()),
                    partition: Some("slurm-bridge".into()),
                    admin_comment: Some(format!("{{\"pods\":[\"bench/raw-{i}\"]}}")),
                    current_working_directory: Some("/tmp".into()),
                    user_id: Some("0".into()),
                    group_id: Some("0".into()),
                    shared: Some(vec![Shared::None]),
                    ..Default::default()
                };
                rest.submit_job(&desc).await.expect("submit")
            }
        })
        .buffer_unordered(4)
        .count()
        .await;
    let submit_rate = submits as f64 / started.elapsed().as_secs_f64();
    wait_all_running(&rest, n as usize).await;
    let elapsed = started.elapsed();
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
    (elapsed, submit_rate)
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

/// What the bridge phase measured.
struct BridgeRun {
    elapsed: Duration,
    calls_per_pod: f64,
    /// Kubernetes writes per pod, by kind.
    writes_per_pod: Vec<(String, f64)>,
    rss_kib: u64,
    rate: f64,
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The control plane both Kubernetes phases share: `nodes` nodes, kube-scheduler running.
async fn control_plane(nodes: u32) -> kube_testenv::Instance {
    let mut opts = kube_testenv::InstanceOptions::with_nodes(nodes as usize);
    opts.kube_scheduler = true;
    kube_testenv::Instance::start(opts)
        .await
        .expect("start the Kubernetes control plane")
}

/// Creates `n` pods named `{prefix}-{i}` for `scheduler` (16 creations in flight) and prints how
/// long that took.
async fn create_pods(pods: &Api<Pod>, prefix: &str, n: u32, scheduler: &str) {
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("{prefix}-{i}")},
                    "spec": {"schedulerName": scheduler,
                             "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}]}
                }))
                .unwrap();
                pods.create(&PostParams::default(), &pod).await.expect("create pod");
            }
        })
        .buffer_unordered(16)
        .count()
        .await;
    println!(
        "        all {n} pods created after {:.2} s (16 creations in flight)",
        started.elapsed().as_secs_f64()
    );
}

/// kube-scheduler alone: `n` pods for `default-scheduler` in their own namespace, time until all
/// are bound.
async fn kube_scheduler_floor(kube: &kube_testenv::Instance, n: u32) -> Duration {
    let ns = "kube-scheduler-floor";
    kube.kubectl(&["create", "namespace", ns])
        .expect("create namespace");
    // Pods need the namespace's default ServiceAccount, which the controller manager creates.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(kube.client(), ns);
    while sas.get_opt("default").await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pods: Api<Pod> = Api::namespaced(kube.client(), ns);
    let watch_pods = pods.clone();
    let total = n as usize;
    let bound = tokio::spawn(async move {
        let mut bound = HashSet::new();
        let stream = watcher(watch_pods, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(p)) = stream.next().await {
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                bound.insert(p.metadata.name.clone().unwrap_or_default());
            }
            if bound.len() >= total {
                break;
            }
        }
        Instant::now()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    create_pods(&pods, "floor", n, "default-scheduler").await;
    bound.await.unwrap().duration_since(started)
}

async fn bridge(kube: &kube_testenv::Instance, n: u32, nodes: u32, poll: &str) -> BridgeRun {
    let slurm = tokio::task::spawn_blocking(move || start_slurm(nodes))
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("slurm-bridge-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = kube.kubeconfig();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "schedulerName: slurm-bridge-scheduler\nslurmRestApi: {}\npartition: slurm-bridge\n",
            slurm.rest_url()
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
        .args([
            "scheduler",
            "--leader-elect=false",
            "--slurm-poll-interval",
            poll,
        ])
        .arg("--config")
        .arg(&config)
        .arg("--health-probe-bind-address")
        .arg(format!("127.0.0.1:{port}"))
        .env("KUBECONFIG", &kubeconfig)
        .env("SLURM_JWT_FILE", slurm.token_file())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start slurm-bridge scheduler");
    let pid = child.id();
    let _guard = Killed(child);
    loop {
        if let Some((200, _)) = http_get(port, "/readyz").await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pods: Api<Pod> = Api::namespaced(kube.client(), "default");
    // Watch for bound pods before creating any.
    let watch_pods = pods.clone();
    let total = n as usize;
    let bindable = n.min(nodes) as usize;
    // Done when every pod that can run is bound and every other one is labelled with its
    // (pending) job.
    let bound = tokio::spawn(async move {
        let mut bound = HashSet::new();
        let mut labelled = HashSet::new();
        let stream = watcher(watch_pods, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(p)) = stream.next().await {
            let name = p.metadata.name.clone().unwrap_or_default();
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                bound.insert(name.clone());
            }
            if p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("scheduler.slinky.slurm.net/slurm-jobid"))
            {
                labelled.insert(name);
            }
            if bound.len() >= bindable && labelled.len() >= total {
                return Instant::now();
            }
        }
        Instant::now()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    create_pods(&pods, "bench", n, "slurm-bridge-scheduler").await;
    let done = bound.await.unwrap();
    let elapsed = done.duration_since(started);
    // The last pods' Scheduled Events follow their bindings: read the metrics once the write
    // count has settled (unchanged for 1 s, 10 s at most).
    let mut metrics = String::new();
    let mut last = None;
    for _ in 0..20 {
        metrics = http_get(port, "/metrics")
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
    let calls = slurm_requests(&metrics);
    let writes_per_pod = kube_writes(&metrics)
        .into_iter()
        .map(|(kind, w)| (kind, w / n as f64))
        .collect();
    println!(
        "        mean submit->allocation {:.3} s, allocation->bound {:.3} s (scheduler histograms)",
        histogram_mean(
            &metrics,
            "slurm_bridge_scheduler_submit_to_allocation_seconds"
        ),
        histogram_mean(
            &metrics,
            "slurm_bridge_scheduler_allocation_to_bound_seconds"
        ),
    );
    let rss = vm_hwm_kib(pid);
    let _ = std::fs::remove_dir_all(&dir);
    drop(_guard);
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
    BridgeRun {
        elapsed,
        calls_per_pod: calls / n as f64,
        writes_per_pod,
        rss_kib: rss,
        rate: n as f64 / elapsed.as_secs_f64(),
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = args();
    let nodes = a.nodes.unwrap_or(a.pods);
    println!(
        "slurm-bridge scheduler benchmark: {} pods on {} nodes, job poll {}",
        a.pods, nodes, a.poll
    );
    let raw_time = if a.skip_raw || nodes != a.pods {
        None
    } else {
        let (t, rate) = raw(a.pods).await;
        println!(
            "raw:    {} external jobs straight to slurmrestd -> all RUNNING in {:.2} s (submit rate {:.0}/s)",
            a.pods,
            t.as_secs_f64(),
            rate
        );
        Some(t)
    };
    let kube = control_plane(nodes).await;
    println!(
        "control plane: kube-testenv with {nodes} nodes ready in {:.1} s",
        kube.startup().as_secs_f64()
    );
    let floor = kube_scheduler_floor(&kube, a.pods).await;
    println!(
        "kube-scheduler: {} pods created -> all bound by kube-scheduler alone in {:.2} s ({:.0} pods/s)",
        a.pods,
        floor.as_secs_f64(),
        f64::from(a.pods) / floor.as_secs_f64()
    );
    let run = bridge(&kube, a.pods, nodes, &a.poll).await;
    let (t, rate) = (run.elapsed, run.rate);
    println!(
        "bridge: {} pods created -> {} bound, the rest pending in Slurm, in {:.2} s ({:.0} pods/s, {:.2} ms per pod)",
        a.pods,
        a.pods.min(nodes),
        t.as_secs_f64(),
        rate,
        t.as_secs_f64() * 1000.0 / f64::from(a.pods)
    );
    if let Some(raw) = raw_time {
        println!(
            "ratio bridge/raw: {:.2}",
            t.as_secs_f64() / raw.as_secs_f64()
        );
        println!(
            "ratio kube-scheduler/raw: {:.2}",
            floor.as_secs_f64() / raw.as_secs_f64()
        );
    }
    println!(
        "ratio bridge/kube-scheduler: {:.2}",
        t.as_secs_f64() / floor.as_secs_f64()
    );
    println!(
        "Slurm REST calls per pod (scheduler): {:.2}",
        run.calls_per_pod
    );
    let by_kind: Vec<String> = run
        .writes_per_pod
        .iter()
        .map(|(kind, w)| format!("{kind} {w:.2}"))
        .collect();
    println!(
        "Kubernetes writes per pod (scheduler): {:.2} ({})",
        run.writes_per_pod.iter().map(|w| w.1).sum::<f64>(),
        by_kind.join(", ")
    );
    println!("scheduler peak RSS: {:.1} MiB", run.rss_kib as f64 / 1024.0);
}
