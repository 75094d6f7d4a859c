//! Submit N external jobs through slurm-rest on N external nodes of a fresh slurm-testenv
//! instance and print the submit rate and the time until all are RUNNING.
//!
//! `cargo run --release -p slurm-rest --example submit_bench -- --jobs 1000 [--concurrency 4]`
//! (needs root, like every slurm-testenv instance).

use slurm_rest::models::{JobDescMsg, JobFlag, JobState, Shared};
use slurm_rest::{Client, TokenProvider};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Args {
    jobs: usize,
    concurrency: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        jobs: 100,
        concurrency: 4,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("{name} needs a positive number"))
        };
        match a.as_str() {
            "--jobs" => args.jobs = value("--jobs")?,
            "--concurrency" => args.concurrency = value("--concurrency")?,
            "-h" | "--help" => {
                return Err("usage: submit_bench [--jobs N] [--concurrency C]".into());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

fn job(i: usize) -> JobDescMsg {
    JobDescMsg {
        flags: Some(vec![JobFlag::ExternalJob]),
        admin_comment: Some(format!(r#"{{"pods":["bench/pod-{i}"]}}"#)),
        name: Some(format!("bench-{i}")),
        partition: Some("slurm-bridge".into()),
        nodes: Some("1".into()),
        shared: Some(vec![Shared::None]),
        user_id: Some("0".into()),
        group_id: Some("0".into()),
        current_working_directory: Some("/tmp".into()),
        ..Default::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let n = args.jobs;
    println!("starting slurm-testenv with {n} external nodes ...");
    let t = Instant::now();
    let nodes = u32::try_from(n)?;
    let inst = tokio::task::spawn_blocking(move || {
        slurm_testenv::Instance::start(slurm_testenv::InstanceOptions {
            nodes,
            ..Default::default()
        })
    })
    .await??;
    println!(
        "instance up in {:.1} s at {}",
        t.elapsed().as_secs_f64(),
        inst.rest_url()
    );

    let client = Client::builder(inst.rest_url())
        .token(TokenProvider::file(inst.token_file()))
        .timeout(Duration::from_secs(60))
        .build()?;
    let ready = client.nodes().await?.len();
    println!("{ready} nodes registered");

    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.concurrency.min(n) {
        let client = client.clone();
        let next = next.clone();
        workers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, slurm_rest::Error>(ids);
                }
                ids.push(client.submit_job(&job(i)).await?.job_id);
            }
        }));
    }
    let mut ids = HashSet::new();
    for w in workers {
        ids.extend(w.await??);
    }
    let submit = start.elapsed();
    println!(
        "submitted {} jobs in {:.2} s: {:.0} jobs/s ({} concurrent clients)",
        ids.len(),
        submit.as_secs_f64(),
        ids.len() as f64 / submit.as_secs_f64(),
        args.concurrency
    );

    let deadline = Instant::now() + Duration::from_secs(600);
    let mut polls = 0u32;
    loop {
        let states = client.job_states().await?;
        polls += 1;
        let running = states
            .iter()
            .filter(|s| ids.contains(&s.job_id) && s.state.contains(&JobState::Running))
            .count();
        if running == ids.len() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("only {running} of {} jobs RUNNING after 600 s", ids.len()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = start.elapsed();
    println!(
        "all {} jobs RUNNING {:.2} s after the first submit ({:.2} s after the last; {polls} polls of /jobs/state/)",
        ids.len(),
        all.as_secs_f64(),
        (all - submit).as_secs_f64()
    );
    let t = Instant::now();
    let states = client.job_states().await?;
    let t_states = t.elapsed();
    let t = Instant::now();
    let jobs = client.jobs(None).await?;
    let t_jobs = t.elapsed();
    println!(
        "with {} jobs: GET /jobs/state/ {:.3} s, GET /jobs/ {:.3} s ({} jobs decoded)",
        states.len(),
        t_states.as_secs_f64(),
        t_jobs.as_secs_f64(),
        jobs.jobs.len()
    );
    let stats = client.stats();
    println!(
        "slurm-rest: {} requests ({} retries, {} failed attempts)",
        stats.requests, stats.retries, stats.failures
    );
    drop(inst);
    Ok(())
}
