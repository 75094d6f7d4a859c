//! The raw Slurm floor: external jobs straight to slurmrestd, timed to RUNNING.

use crate::env::{client, start_slurm};
use futures::StreamExt;
use slurm_rest::models::{JobDescMsg, JobFlag, JobState, Shared};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A one-node exclusive external job of root in the `slurm-bridge` partition that names no
/// pods: the bridge's job index keeps it as a foreign job and its sweep leaves it alone.
pub(crate) fn bare_job() -> JobDescMsg {
    JobDescMsg {
        flags: Some(vec![JobFlag::ExternalJob]),
        nodes: Some("1".into()),
        partition: Some("slurm-bridge".into()),
        current_working_directory: Some("/tmp".into()),
        user_id: Some("0".into()),
        group_id: Some("0".into()),
        shared: Some(vec![Shared::None]),
        ..Default::default()
    }
}

/// [`bare_job`] naming the pod `bench/{name}` in its admin_comment, as the bridge's jobs do.
pub(crate) fn external_job(name: &str) -> JobDescMsg {
    JobDescMsg {
        admin_comment: Some(format!("{{\"pods\":[\"bench/{name}\"]}}")),
        ..bare_job()
    }
}

/// Polls GET /jobs/state/ every 20 ms and records when each job is first seen RUNNING, until
/// `n` are.
pub(crate) async fn watch_running(rest: slurm_rest::Client, n: usize) -> HashMap<u32, Instant> {
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
pub(crate) async fn raw_burst(n: u32) -> (Duration, crate::metrics::CpuSpan) {
    let slurm = tokio::task::spawn_blocking(move || start_slurm(n))
        .await
        .unwrap();
    let rest = client(&slurm);
    let cpu_before = crate::metrics::cpu_by_daemon();
    let profile = crate::slurm_perf::start(&slurm, "raw");
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
    let cpu = (cpu_before, crate::metrics::cpu_by_daemon());
    if let Some(p) = profile {
        p.finish();
    }
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
    (elapsed, cpu)
}

/// Raw Slurm, arrival: one external job every 1/rate s; submit -> RUNNING per job, and the
/// daemons' CPU over the line.
pub(crate) async fn raw_arrival(n: u32, rate: f64) -> (Vec<Duration>, crate::metrics::CpuSpan) {
    let slurm = tokio::task::spawn_blocking(move || start_slurm(n))
        .await
        .unwrap();
    let rest = client(&slurm);
    let cpu_before = crate::metrics::cpu_by_daemon();
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
    let cpu = (cpu_before, crate::metrics::cpu_by_daemon());
    let submitted = submitted.lock().unwrap().clone();
    tokio::task::spawn_blocking(move || drop(slurm))
        .await
        .unwrap();
    let latencies = submitted
        .iter()
        .filter_map(|(id, at)| running.get(id).map(|r| r.saturating_duration_since(*at)))
        .collect();
    (latencies, cpu)
}

/// Runs `f(i)` for i in 0..n, starting one every 1/rate s (each in its own task).
pub(crate) async fn paced<F, Fut>(n: u32, rate: f64, f: F)
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
