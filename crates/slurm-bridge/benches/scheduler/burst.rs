//! Burst: N pods waiting, then the scheduler starts; beside raw Slurm, the bind floor and
//! kube-scheduler.

use crate::BRIDGE;
use crate::args::Args;
use crate::bridge::{profile, settled_metrics, spawn_scheduler};
use crate::env::{
    control_plane, create_pods, last, namespace, start_slurm, temp_dir, watch_bound, watch_running,
};
use crate::kube_line::{bind_floor, kube_scheduler_burst, scheduled_events};
use crate::metrics::{
    apiserver_requests, apiserver_requests_by_kind, cpu_beyond_idle, cpu_by_daemon, cpu_of,
    cpu_total, idle_rates, print_apiserver_requests, print_cpu, print_per_pod, slurm_cpu,
    vm_hwm_kib,
};
use crate::raw::raw_burst;
use std::process::Command;
use std::time::{Duration, Instant};

/// What one burst run measured.
pub(crate) struct Figures {
    bridge: f64,
    floor_or_raw: f64,
    kube_scheduler: f64,
    /// The bridge's line over raw Slurm's plus the bind floor's; `None` without the raw line.
    over_sum: Option<OverSum>,
    /// slurmctld's and slurmrestd's CPU seconds per pod in the bridge's line over theirs per
    /// job in raw Slurm's (target 1.2).
    slurm_over_raw: Option<f64>,
}

/// The bridge's line over the sum of the reference lines (raw Slurm + bind floor).
#[derive(Clone, Copy)]
struct OverSum {
    time: f64,
    cpu: f64,
    /// CPU seconds beyond each daemon's idle use over its line.
    beyond_idle: f64,
    /// CPU seconds with kube-scheduler's Events added to the sum (for information: the
    /// targets' sum has the floor's Bindings only).
    cpu_with_events: f64,
}

/// How long the daemons' idle use is measured before the bridge's line.
const IDLE_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// `--runs` bursts in a row, then the median of each figure and ratio.
pub(crate) async fn bursts(a: &Args) {
    let mut runs = Vec::new();
    for i in 1..=a.runs {
        if a.runs > 1 {
            println!("-- run {i} of {}", a.runs);
        }
        runs.push(burst(a).await);
    }
    if runs.len() < 2 {
        return;
    }
    let median = |f: &dyn Fn(&Figures) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    report!(
        "median of {} runs: bridge {:.2} s, max(raw Slurm, bind floor) {:.2} s, kube-scheduler {:.2} s; bridge / max(raw, floor) = {:.2}, bridge / kube-scheduler = {:.2}",
        runs.len(),
        median(&|f| f.bridge),
        median(&|f| f.floor_or_raw),
        median(&|f| f.kube_scheduler),
        median(&|f| f.bridge / f.floor_or_raw),
        median(&|f| f.bridge / f.kube_scheduler),
    );
    if runs.iter().all(|f| f.over_sum.is_some()) {
        report!(
            "median of {} runs: bridge / (raw Slurm + bind floor) = {:.2} in time, {:.2} in CPU seconds (targets 1.10), {:.2} in CPU seconds beyond the daemons' idle use",
            runs.len(),
            median(&|f| f.over_sum.map_or(0.0, |s| s.time)),
            median(&|f| f.over_sum.map_or(0.0, |s| s.cpu)),
            median(&|f| f.over_sum.map_or(0.0, |s| s.beyond_idle)),
        );
        report!(
            "median of {} runs: bridge / (raw Slurm + bind floor + Scheduled Events) = {:.2} in CPU seconds; Slurm's CPU per pod in the bridge's line / per job in raw Slurm's = {:.2} (target 1.2)",
            runs.len(),
            median(&|f| f.over_sum.map_or(0.0, |s| s.cpu_with_events)),
            median(&|f| f.slurm_over_raw.unwrap_or(0.0)),
        );
    }
}

async fn burst(a: &Args) -> Figures {
    let n = a.pods;
    let nodes = a.nodes.unwrap_or(n);
    println!(
        "== burst: {n} pods waiting on {nodes} nodes, then the scheduler starts; client limits qps {} burst {}, {} workers",
        a.qps, a.burst, a.workers
    );
    let raw = if a.skip_raw || nodes != n {
        None
    } else {
        let (t, cpu) = raw_burst(n).await;
        report!(
            "raw Slurm:      {n} external jobs -> all RUNNING in {:.2} s",
            t.as_secs_f64()
        );
        print_cpu(&cpu.0, &cpu.1);
        Some((t, cpu))
    };
    let mut kube = control_plane(nodes, a.qps, a.burst).await;
    // Its CPU counts from its first Binding, not from the pods' creation (until 2026-12-05
    // evening it counted 5,000 creations too, and the sum of references was that much larger).
    let (floor, floor_settled, floor_span) = bind_floor(&kube, n, nodes, a.workers).await;
    report!(
        "bind floor:     {n} Bindings posted by the bench ({} in flight) in {:.2} s; every pod reported Running by the node agent at {:.2} s (CPU until then)",
        a.workers,
        floor.as_secs_f64(),
        floor_settled.as_secs_f64()
    );
    print_cpu(&floor_span.0, &floor_span.1);
    let floor_cpu = cpu_total(&floor_span.0, &floor_span.1);
    let (events, events_span) = scheduled_events(&kube, a.workers).await;
    report!(
        "Scheduled Events: {n} posted by the bench ({} in flight) in {:.2} s, kube-scheduler's and the bridge's other write per pod (not in the targets' sum)",
        a.workers,
        events.as_secs_f64()
    );
    print_cpu(&events_span.0, &events_span.1);
    let events_cpu = cpu_total(&events_span.0, &events_span.1);
    let (ks, ks_cpu) = kube_scheduler_burst(&mut kube, n).await;
    report!(
        "kube-scheduler: {n} waiting pods -> all bound in {:.2} s (--kube-api-qps={} --kube-api-burst={})",
        ks.as_secs_f64(),
        a.qps,
        a.burst
    );
    print_cpu(&ks_cpu.0, &ks_cpu.1);
    if a.kube_scheduler_beside {
        report!("  kube-scheduler keeps running (idle) during the bridge's line");
    } else {
        // Each scheduler alone in its line: the bridge is not running in kube-scheduler's.
        kube.stop_daemon(kube_testenv::Daemon::KubeScheduler)
            .expect("stop kube-scheduler");
    }

    let slurm = tokio::task::spawn_blocking(move || start_slurm(nodes))
        .await
        .unwrap();
    let dir = temp_dir();
    let pods = namespace(&kube, "default").await;
    create_pods(&pods, "bench", n, BRIDGE).await;
    let bound = watch_bound(&pods, n.min(nodes) as usize, Some(n as usize));
    let running = watch_running(&pods, n.min(nodes) as usize);
    // What the control plane and Slurm spend on their own (Leases, node status, timers), so
    // the CPU of lines of different lengths can be compared beyond it.
    let idle = idle_rates(IDLE_WINDOW).await;
    report!(
        "  idle use over {} s before the bridge's line (CPU s a second): {}",
        IDLE_WINDOW.as_secs(),
        idle.iter()
            .filter(|(_, r)| *r >= 0.005)
            .map(|(d, r)| format!("{d} {r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let requests_before = apiserver_requests_by_kind(&kube).await;
    let before: f64 = requests_before.values().sum();
    let cpu_before = cpu_by_daemon();
    let started = Instant::now();
    let pprof = crate::apiserver_pprof::start(&kube, "bridge");
    let s = spawn_scheduler(&kube, &slurm, &dir, a);
    let profile = profile(&s);
    let slurm_profile = crate::slurm_perf::start(&slurm, "bridge");
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
    if let Some(p) = slurm_profile {
        p.finish();
    }
    // As the floor's: the line's CPU until the node agent reported every bound pod Running, and
    // (unlike the floor's) until the API server has served the bridge's Scheduled Events: they
    // give way to Bindings, so in a burst half of them go out after the last bind, and until
    // 2026-12-06 their CPU was left out of the line.
    running.await.unwrap();
    let running_at = started.elapsed();
    let events_at = events_served(&kube, &requests_before, n.min(nodes)).await;
    let settled = started.elapsed();
    let cpu_settled = cpu_by_daemon();
    let requests_done = apiserver_requests_by_kind(&kube).await;
    if let Some(p) = pprof {
        p.await.unwrap();
    }
    let metrics = settled_metrics(&s).await;
    let api = apiserver_requests(&kube).await - before;
    report!(
        "bridge:         {n} waiting pods -> {} bound in {:.2} s ({:.2} ms per pod), from the scheduler's start",
        n.min(nodes),
        t.as_secs_f64(),
        t.as_secs_f64() * 1000.0 / f64::from(n)
    );
    let floor_or_raw = raw.as_ref().map_or(floor, |(r, _)| (*r).max(floor));
    report!(
        "  bridge / max(raw Slurm, bind floor) = {:.2}; bridge / kube-scheduler = {:.2}",
        t.as_secs_f64() / floor_or_raw.as_secs_f64(),
        t.as_secs_f64() / ks.as_secs_f64()
    );
    let bridge_cpu = cpu_total(&cpu_before, &cpu_settled);
    report!(
        "  every pod reported Running by the node agent at {:.2} s, the last of its Scheduled Events served at {}; CPU seconds until both {:.1} (until the last bind {:.1})",
        running_at.as_secs_f64(),
        events_at.map_or("(not all within 120 s)".into(), |e| format!(
            "{:.2} s",
            e.duration_since(started).as_secs_f64()
        )),
        bridge_cpu,
        cpu_total(&cpu_before, &cpu_after)
    );
    // The fair bound on a machine whose cores run Slurm and the API server both: their sum.
    let slurm_over_raw = raw.as_ref().map(|(_, raw_span)| {
        let (bridge_slurm, raw_slurm) = (
            slurm_cpu(&cpu_before, &cpu_settled),
            slurm_cpu(&raw_span.0, &raw_span.1),
        );
        report!(
            "  Slurm's CPU (slurmctld + slurmrestd): bridge's line {:.1} s, raw Slurm's {:.1} s for as many jobs: {:.2} x (target 1.2)",
            bridge_slurm,
            raw_slurm,
            bridge_slurm / raw_slurm
        );
        bridge_slurm / raw_slurm
    });
    let over_sum = raw.map(|(r, raw_span)| {
        let raw_cpu = cpu_total(&raw_span.0, &raw_span.1);
        let (sum, sum_cpu) = (r + floor, raw_cpu + floor_cpu);
        report!(
            "  sum of references (raw Slurm + bind floor): {:.2} s, {:.1} CPU s; bridge {:.2} s, {:.1} CPU s: bridge / sum = {:.2} in time, {:.2} in CPU (targets 1.10)",
            sum.as_secs_f64(),
            sum_cpu,
            t.as_secs_f64(),
            bridge_cpu,
            t.as_secs_f64() / sum.as_secs_f64(),
            bridge_cpu / sum_cpu
        );
        // Raw Slurm's line runs without Kubernetes and the floor's is short: a longer line
        // pays more of the control plane's idle use (0.3-0.4 CPU s a second at 5,000 nodes).
        let sum_work = cpu_beyond_idle(&raw_span.0, &raw_span.1, r, &idle)
            + cpu_beyond_idle(&floor_span.0, &floor_span.1, floor_settled, &idle);
        let bridge_work = cpu_beyond_idle(&cpu_before, &cpu_settled, settled, &idle);
        report!(
            "  beyond each daemon's idle use over its line: references {:.1} CPU s, bridge {:.1}: bridge / sum = {:.2}",
            sum_work,
            bridge_work,
            bridge_work / sum_work
        );
        report!(
            "  with the Scheduled Events added to the sum ({:.1} CPU s): bridge / (raw Slurm + bind floor + Events) = {:.2} in CPU",
            sum_cpu + events_cpu,
            bridge_cpu / (sum_cpu + events_cpu)
        );
        // Where the CPU beyond the sum goes (docs/performance.md, "What a bridge that cost
        // nothing would measure"); the parts add up to the difference.
        const KUBE: [&str; 3] = ["kube-apiserver", "etcd", "kube-controller"];
        let longer = settled.saturating_sub(floor_settled).as_secs_f64();
        let idle_extra = longer
            * idle
                .iter()
                .filter(|(d, _)| KUBE.contains(d))
                .map(|x| x.1)
                .sum::<f64>();
        let kube_beyond = cpu_of(&cpu_before, &cpu_settled, &KUBE)
            - cpu_of(&floor_span.0, &floor_span.1, &KUBE)
            - events_cpu
            - idle_extra;
        let kube_scheduler = cpu_of(&floor_span.0, &floor_span.1, &["kube-scheduler"])
            - cpu_of(&cpu_before, &cpu_settled, &["kube-scheduler"]);
        report!(
            "  the bridge's {:.1} CPU s over the sum: Scheduled Events {:.1}; the control plane's idle use over the {:.1} s its line outlasts the floor's {:.1}; Slurm beyond raw's {:.1}; its own process {:.1}; Kubernetes beyond the floor, the Events and idle use {:.1}; less the floor's kube-scheduler {:.1}",
            bridge_cpu - sum_cpu,
            events_cpu,
            longer,
            idle_extra,
            slurm_cpu(&cpu_before, &cpu_settled) - slurm_cpu(&raw_span.0, &raw_span.1),
            cpu_of(&cpu_before, &cpu_settled, &["slurm-bridge"]),
            kube_beyond,
            kube_scheduler
        );
        OverSum {
            time: t.as_secs_f64() / sum.as_secs_f64(),
            cpu: bridge_cpu / sum_cpu,
            beyond_idle: bridge_work / sum_work,
            cpu_with_events: bridge_cpu / (sum_cpu + events_cpu),
        }
    });
    print_per_pod(&metrics, n, api);
    print_apiserver_requests(
        &requests_before,
        &requests_done,
        n,
        "every pod ran and every Event was served",
    );
    print_cpu(&cpu_before, &cpu_settled);
    println!(
        "  scheduler peak RSS {:.1} MiB",
        vm_hwm_kib(s.pid) as f64 / 1024.0
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
    Figures {
        bridge: t.as_secs_f64(),
        floor_or_raw: floor_or_raw.as_secs_f64(),
        kube_scheduler: ks.as_secs_f64(),
        over_sum,
        slurm_over_raw,
    }
}

/// Waits until kube-apiserver has served `n` Event creations since `before` (the bridge's
/// Scheduled Events: nothing else posts Events in its line), at most 120 s; when it had.
async fn events_served(
    kube: &kube_testenv::Instance,
    before: &std::collections::BTreeMap<String, f64>,
    n: u32,
) -> Option<Instant> {
    let posted =
        |m: &std::collections::BTreeMap<String, f64>| m.get("POST events").copied().unwrap_or(0.0);
    let (base, deadline) = (posted(before), Instant::now() + Duration::from_secs(120));
    while Instant::now() < deadline {
        if posted(&apiserver_requests_by_kind(kube).await) - base >= f64::from(n) {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}
