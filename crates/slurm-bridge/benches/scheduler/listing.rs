//! Listing: what the job watcher's first listing costs slurmrestd at `--pods` jobs, Slurm only.
//!
//! `--pods` external jobs naming one pod each (as the bridge's) on `--nodes` nodes, most of them
//! pending; then, one after the other: `GET /jobs/state/`, `GET /job/{id}` for every job at 16
//! in flight (the watcher's first listing since issue 22), then at 4 and at 64, and the one
//! `GET /jobs/` it made before (no client timeout, no retries); each with slurmrestd's RSS after.
//! First, before any job: what the node cache's listing costs, whole (`GET /nodes/`) and when
//! no node changed since the last one (`?update_time=`, slurmrestd's 304).

use crate::args::Args;
use crate::env::start_slurm;
use crate::raw::external_job;
use futures::StreamExt;
use std::time::{Duration, Instant};

pub(crate) async fn listing(a: &Args) {
    let n = a.pods;
    let nodes = a.nodes.unwrap_or((n / 10).max(1));
    println!("== listing: {n} jobs on {nodes} nodes");
    let slurm = tokio::task::spawn_blocking(move || start_slurm(nodes))
        .await
        .unwrap();
    let rest = slurm_rest::Client::builder(slurm.rest_url())
        .token(slurm_rest::TokenProvider::file(slurm.token_file()))
        .timeout(Duration::from_secs(3600))
        .retry(slurm_rest::RetryPolicy::none())
        .build()
        .unwrap();
    let port = slurm.rest_url().rsplit(':').next().unwrap().to_string();
    node_listings(&rest, nodes).await;
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let rest = rest.clone();
            async move {
                rest.submit_job(&external_job(&format!("list-{i}")))
                    .await
                    .expect("submit")
            }
        })
        .buffer_unordered(4)
        .count()
        .await;
    report!(
        "{n} jobs submitted in {:.1} s; slurmrestd RSS {:.0} MiB",
        started.elapsed().as_secs_f64(),
        slurmrestd_rss_mib(&port)
    );
    let t = Instant::now();
    let states = rest.job_states().await.expect("GET /jobs/state/");
    report!(
        "GET /jobs/state/: {} jobs in {:.3} s; slurmrestd RSS {:.0} MiB",
        states.len(),
        t.elapsed().as_secs_f64(),
        slurmrestd_rss_mib(&port)
    );
    // The watcher's 16 in flight, and more: what slurmrestd's threads make of more at once.
    for in_flight in [16, 4, 64] {
        let t = Instant::now();
        let fetched = futures::stream::iter(states.iter().map(|s| s.job_id))
            .map(|id| {
                let rest = rest.clone();
                async move { rest.job(id).await.is_ok() }
            })
            .buffer_unordered(in_flight)
            .filter(|ok| std::future::ready(*ok))
            .count()
            .await;
        let took = t.elapsed().as_secs_f64();
        report!(
            "GET /job/{{id}} x {fetched}, {in_flight} in flight: {took:.2} s ({:.0}/s); slurmrestd RSS {:.0} MiB",
            fetched as f64 / took,
            slurmrestd_rss_mib(&port)
        );
    }
    let t = Instant::now();
    let jobs = rest.jobs(None).await.expect("GET /jobs/").jobs;
    report!(
        "GET /jobs/: {} jobs in {:.2} s; slurmrestd RSS {:.0} MiB",
        jobs.len(),
        t.elapsed().as_secs_f64(),
        slurmrestd_rss_mib(&port)
    );
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
}

/// `GET /nodes/` whole, then conditional (`?update_time=`) once the nodes are quiet: seconds and
/// slurmctld + slurmrestd CPU seconds per request, 10 requests each.
async fn node_listings(rest: &slurm_rest::Client, nodes: u32) {
    use slurm_rest::models::NodeListing;
    const TIMES: u32 = 10;
    let cpu = crate::metrics::cpu_by_daemon;
    let (before, t) = (cpu(), Instant::now());
    let mut since = None;
    for _ in 0..TIMES {
        if let NodeListing::Nodes { last_update, .. } = rest.nodes_since(None).await.unwrap() {
            since = last_update;
        }
    }
    let (whole, whole_cpu) = (t.elapsed(), crate::metrics::cpu_total(&before, &cpu()));
    // Quiet: a node change within the second of `since` lists again (slurmctld's seconds).
    let deadline = Instant::now() + Duration::from_secs(30);
    while let NodeListing::Nodes { last_update, .. } = rest.nodes_since(since).await.unwrap() {
        since = last_update;
        assert!(Instant::now() < deadline, "the nodes never went quiet");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (before, t) = (cpu(), Instant::now());
    for _ in 0..TIMES {
        let l = rest.nodes_since(since).await.unwrap();
        assert_eq!(l, NodeListing::Unchanged, "no node changed since {since:?}");
    }
    let (unchanged, unchanged_cpu) = (t.elapsed(), crate::metrics::cpu_total(&before, &cpu()));
    let per = |d: Duration, c: f64| {
        format!(
            "{:.1} ms, {:.1} ms of CPU",
            d.as_secs_f64() * 1000.0 / f64::from(TIMES),
            c * 1000.0 / f64::from(TIMES)
        )
    };
    report!(
        "GET /nodes/ of {nodes} nodes: whole {} (slurmctld + slurmrestd, each); unchanged since the last (304) {}",
        per(whole, whole_cpu),
        per(unchanged, unchanged_cpu)
    );
}

/// The resident memory of the slurmrestd serving `port` (MiB; 0 when not found).
fn slurmrestd_rss_mib(port: &str) -> f64 {
    let listen = format!(":{port}");
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd);
        let mut argv = cmd.split('\0');
        if argv.next().is_some_and(|a| a.ends_with("slurmrestd"))
            && argv.any(|a| a.ends_with(&listen))
        {
            let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
            return status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
                .map_or(0.0, |kib| kib / 1024.0);
        }
    }
    0.0
}
