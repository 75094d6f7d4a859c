//! Scale: many pods on fewer nodes: peak RSS, and the first pass over every pod after a restart.

use crate::BRIDGE;
use crate::args::Args;
use crate::bridge::{Scheduler, settled_metrics, spawn_bridge, spawn_scheduler};
use crate::env::{
    control_plane, create_pods, http_get, last, namespace, start_slurm, temp_dir, watch_bound,
};
use crate::metrics::{
    apiserver_requests, counter, kube_writes, print_per_pod, rss_parts, slurm_requests_by_endpoint,
    vm_hwm_kib,
};
use std::time::{Duration, Instant};

pub(crate) async fn scale(a: &Args) {
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
    let labelled = started.elapsed();
    let metrics = settled_metrics(&s).await;
    let api = apiserver_requests(&kube).await - before;
    report!(
        "bridge: {n} pods -> {} bound in {:.2} s, all {n} labelled with their job in {:.2} s, from the start; peak RSS {:.1} MiB",
        n.min(nodes),
        t.as_secs_f64(),
        labelled.as_secs_f64(),
        vm_hwm_kib(s.pid) as f64 / 1024.0
    );
    println!("  {}", rss_parts(s.pid));
    print_per_pod(&metrics, n, api);
    drop(s);
    if !a.first_run_only {
        // A restart: every pod (bound ones end at once) gets a pass.
        first_pass(spawn_scheduler(&kube, &slurm, &dir, a), n, "restart").await;
        // The same restart as `slurm-bridge run`: the scheduler and the controllers in one process.
        first_pass(spawn_bridge("run", &kube, &slurm, &dir, a), n, "run").await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
}

/// Waits for `s`'s first pass over all `n` pods (`reconcile_passes_total` >= n) and prints how
/// long that took from its start, when it was ready (its caches synced: the first Slurm listing
/// read) and its peak RSS; then when the writes its passes queued (reports) were all sent.
async fn first_pass(s: Scheduler, n: u32, what: &str) {
    let started = Instant::now();
    let mut ready = None;
    let m = loop {
        if ready.is_none() && matches!(http_get(s.port, "/readyz").await, Some((200, _))) {
            ready = Some(started.elapsed());
        }
        let m = http_get(s.port, "/metrics")
            .await
            .map(|x| x.1)
            .unwrap_or_default();
        if counter(&m, "slurm_bridge_scheduler_reconcile_passes_total") >= f64::from(n) {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let done = started.elapsed();
    let ready = ready.unwrap_or(done);
    report!(
        "{what}: first pass over all {n} pods done {:.2} s after the start (ready, its caches synced, at {:.2} s); peak RSS {:.1} MiB",
        done.as_secs_f64(),
        ready.as_secs_f64(),
        vm_hwm_kib(s.pid) as f64 / 1024.0
    );
    println!("  {}", rss_parts(s.pid));
    let list = |v: Vec<(String, f64)>| {
        v.iter()
            .map(|(k, c)| format!("{k} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "  until then: Slurm REST calls {}; Kubernetes writes {}",
        list(slurm_requests_by_endpoint(&m)),
        list(kube_writes(&m))
    );
    // The writes still queued then (reports and their Events): the time of the last one, once
    // the count has not moved for 2 s (at most 5 minutes).
    let total = |m: &str| kube_writes(m).iter().map(|w| w.1).sum::<f64>();
    let (at_pass, mut last, mut last_at) = (total(&m), total(&m), started.elapsed());
    while started.elapsed() < last_at + Duration::from_secs(2)
        && started.elapsed() < Duration::from_secs(300)
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = http_get(s.port, "/metrics")
            .await
            .map(|x| total(&x.1))
            .unwrap_or(last);
        if now != last {
            (last, last_at) = (now, started.elapsed());
        }
    }
    println!(
        "  then {} more writes (queued reports and their Events), the last {:.2} s after the start",
        last - at_pass,
        last_at.as_secs_f64()
    );
}
