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
//! - `--mode backlog`: `--backlog` Slurm jobs that cannot start and `--pods` pods waiting on
//!   Slurm capacity, then one pod that fits an idle node: time to bound; beside it raw Slurm's
//!   own figure (one external job that fits, behind the same backlog: time to RUNNING).
//! - `--mode scale`: `--pods` pods on `--nodes` nodes (fewer): the peak RSS of the scheduler and
//!   of `slurm-bridge run`, and the first pass over every pod after a restart.
//! - `--mode listing`: Slurm alone, `--pods` jobs: what the job watcher's first listing costs
//!   slurmrestd (`GET /jobs/state/` plus a `GET /job/{id}` per job, against one `GET /jobs/`).
//! - `--mode all`: every mode in turn (the CI smoke, with small sizes).
//!
//! Every mode prints the load average beside its figures, and for the bridge the Kubernetes
//! writes per pod by kind and the Slurm REST calls per pod (from the scheduler's /metrics) and
//! kube-apiserver requests per pod (apiserver_request_total over the phase, every client).
//!
//! `BENCH_APISERVER_PPROF=<prefix>` writes a CPU profile of kube-apiserver during the burst's
//! kube-scheduler and bridge lines ([`apiserver_pprof`]).
//! `BENCH_SLURM_PERF=<prefix>` records slurmctld and slurmrestd during the burst's raw Slurm
//! and bridge lines and prints their top symbols ([`slurm_perf`]).
//! `BENCH_PERF=<file>` records a `perf record -g` profile of the scheduler during the burst;
//! `BENCH_LOG=<file>` keeps the scheduler's log (at `BENCH_RUST_LOG`, default `info`) for
//! `hack/bench-phases.py`, and `BENCH_METRICS=<file>` its last `/metrics`.
//!
//! `cargo bench -p slurm-bridge --bench scheduler -- [--mode burst|arrival|backlog|scale|listing|all]
//! [--pods N] [--nodes N] [--backlog J] [--rate R] [--seconds S] [--workers W]
//! [--kube-api-qps Q] [--kube-api-burst B] [--poll 1s] [--skip-raw] [--bare-pods] [--runs N]`; the defaults are small
//! (100 pods; arrival 50/s for 4 s).

/// One line of figures, with the load average beside it.
macro_rules! report {
    ($($t:tt)*) => { println!("{}   [load {}]", format!($($t)*), $crate::report::loadavg()) };
}

mod apiserver_pprof;
mod args;
mod arrival;
mod backlog;
mod bridge;
mod burst;
mod env;
mod kube_line;
mod listing;
mod metrics;
mod raw;
mod report;
mod scale;
mod slurm_perf;

use args::{Args, Mode};
use std::time::{Duration, Instant};

/// The scheduler's name in the config the bench writes, and the pods' `schedulerName`.
pub(crate) const BRIDGE: &str = "slurm-bridge-scheduler";
/// The label the scheduler puts on a pod with its Slurm job id.
pub(crate) const JOB_LABEL: &str = "scheduler.slinky.slurm.net/slurm-jobid";

/// How long each mode of the smoke (`--mode all`) may take before the run fails.
const SMOKE_LIMIT: Duration = Duration::from_secs(300);

async fn run(a: &Args) {
    match a.mode {
        Mode::Burst => burst::bursts(a).await,
        Mode::Arrival => arrival::arrival(a).await,
        Mode::Backlog => backlog::backlog(a).await,
        Mode::Scale => scale::scale(a).await,
        Mode::Listing => listing::listing(a).await,
        Mode::All => all(a).await,
    }
}

/// The smoke: every mode at `--pods` pods (arrival at `--rate` for as long as that takes, scale
/// on a tenth as many nodes), each of which ends only once every pod it waits for is bound;
/// fails when one does not end within [`SMOKE_LIMIT`]. Figures are printed, never asserted.
async fn all(a: &Args) {
    let n = a.pods;
    let modes = [
        Args {
            mode: Mode::Burst,
            nodes: None,
            ..a.clone()
        },
        Args {
            mode: Mode::Arrival,
            nodes: None,
            seconds: f64::from(n) / a.rate,
            ..a.clone()
        },
        Args {
            mode: Mode::Backlog,
            nodes: None,
            ..a.clone()
        },
        Args {
            mode: Mode::Scale,
            nodes: None,
            ..a.clone()
        },
    ];
    let started = Instant::now();
    for m in &modes {
        if tokio::time::timeout(SMOKE_LIMIT, Box::pin(run(m)))
            .await
            .is_err()
        {
            panic!(
                "--mode {:?} did not complete within {} s",
                m.mode,
                SMOKE_LIMIT.as_secs()
            );
        }
    }
    report!(
        "all modes completed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = args::args();
    env::BARE_PODS.store(a.bare_pods, std::sync::atomic::Ordering::Relaxed);
    if !a.bare_pods {
        println!(
            "(the bridge's pods are created as its admission webhook admits them: with the finalizer and toleration; --bare-pods for without)"
        );
    }
    run(&a).await;
}
