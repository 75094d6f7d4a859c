//! Arrival: pods created at a steady rate; created -> bound per pod, beside kube-scheduler and
//! raw Slurm at the same rate.

use crate::BRIDGE;
use crate::args::Args;
use crate::bridge::{settled_metrics, spawn_scheduler, wait_ready};
use crate::env::{control_plane, namespace, pod_object, start_slurm, temp_dir, watch_bound};
use crate::metrics::{apiserver_requests, cpu_by_daemon, print_cpu, print_per_pod};
use crate::raw::{paced, raw_arrival};
use crate::report::percentiles;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Creates `n` pods at `rate` per second for `scheduler`; created (the create's answer) ->
/// bound per pod.
pub(crate) async fn arrival_latencies(
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
    if scheduler == BRIDGE {
        write_times(&created, &bound);
    }
    created
        .iter()
        .filter_map(|(name, at)| bound.get(name).map(|b| b.saturating_duration_since(*at)))
        .collect()
}

pub(crate) async fn arrival(a: &Args) {
    let n = (a.rate * a.seconds).round() as u32;
    let nodes = a.nodes.unwrap_or(n).max(n);
    println!(
        "== arrival: {n} pods at {}/s for {} s on {nodes} nodes",
        a.rate, a.seconds
    );
    if !a.skip_raw {
        let (raw, cpu) = raw_arrival(n, a.rate).await;
        report!("raw Slurm:      submit -> RUNNING {}", percentiles(raw));
        print_cpu(&cpu.0, &cpu.1);
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
    let cpu_before = cpu_by_daemon();
    let bridge = arrival_latencies(&pods, "bench", n, a.rate, BRIDGE).await;
    let cpu_after = cpu_by_daemon();
    report!("bridge:         created -> bound {}", percentiles(bridge));
    let metrics = settled_metrics(&s).await;
    print_per_pod(&metrics, n, apiserver_requests(&kube).await - before);
    print_cpu(&cpu_before, &cpu_after);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
}

/// With `BENCH_TIMES=<file>`, one line per pod: its name, when its create was answered and when
/// its binding was seen, as Unix seconds (to set beside the scheduler's log, `BENCH_LOG`, in
/// `hack/bench-phases.py`).
fn write_times(created: &HashMap<String, Instant>, bound: &HashMap<String, Instant>) {
    let Some(path) = std::env::var_os("BENCH_TIMES") else {
        return;
    };
    let (now, wall) = (Instant::now(), std::time::SystemTime::now());
    let unix = |at: &Instant| {
        let wall_at = wall - now.saturating_duration_since(*at);
        wall_at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
    };
    let mut lines: Vec<String> = created
        .iter()
        .map(|(name, at)| {
            let b = bound
                .get(name)
                .map_or("-".into(), |b| format!("{:.6}", unix(b)));
            format!("{name} {:.6} {b}", unix(at))
        })
        .collect();
    lines.sort();
    std::fs::write(path, lines.join("\n") + "\n").expect("BENCH_TIMES");
}
