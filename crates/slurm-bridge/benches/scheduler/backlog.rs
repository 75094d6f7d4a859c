//! Backlog (upstream issue 45, starvation): Slurm jobs that cannot start and pods waiting on
//! Slurm capacity, then one pod that fits an idle node: time to bound, beside raw Slurm's own
//! figure for one external job that fits, submitted behind the same backlog.
//!
//! The layout: `nodes - 2` busy nodes (labelled [`POOL`]) and 2 idle ones. `busy + pods` pods
//! select the busy nodes: `busy` of them are bound and hold them, the other `pods` wait with a
//! pending Slurm job each (their jobs exclude the idle nodes). Then `--backlog` jobs that cannot
//! start go straight to slurmrestd, a third of each kind: held (`hold`), another user's (uid
//! 64030, `slurm`) that needs a busy node, and too big (every node of the partition). Then raw
//! Slurm's fitting job (takes one idle node) and the bridge's fitting pod (the other).

use crate::BRIDGE;
use crate::JOB_LABEL;
use crate::args::Args;
use crate::bridge::{spawn_scheduler, wait_ready};
use crate::env::{
    client, control_plane, create_pods_with, http_get, namespace, pod_object, start_slurm_with,
    temp_dir, watch_bound,
};
use crate::metrics::{counter, vm_hwm_kib};
use crate::raw::bare_job;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use slurm_rest::models::{JobDescMsg, JobState};
use std::time::{Duration, Instant};

/// The node label the waiting pods select: only the busy nodes carry it.
const POOL: (&str, &str) = ("bench.slurm-bridge/pool", "busy");
/// How long the fitting pod or job may take before the bench says it was held.
const FIT_TIMEOUT: Duration = Duration::from_secs(120);

/// The three kinds of Slurm jobs that cannot start, in the order they are submitted (round robin).
const KINDS: [&str; 3] = [
    "held",
    "another user's on a busy node",
    "too big (every node)",
];

fn backlog_job(kind: usize, i: u32, nodes: u32, busy: u32) -> JobDescMsg {
    let mut job = bare_job();
    job.name = Some(format!("backlog-{i}"));
    match kind {
        0 => job.hold = Some(true),
        1 => {
            job.user_id = Some("64030".into());
            job.group_id = Some("64030".into());
            job.required_nodes = Some(vec![format!("node-{}", i % busy + 1)]);
        }
        _ => job.nodes = Some(nodes.to_string()),
    }
    job
}

pub(crate) async fn backlog(a: &Args) {
    let waiting = a.pods;
    let jobs = a.backlog.unwrap_or(waiting * 2 / 5);
    let nodes = a.nodes.unwrap_or(12);
    assert!(
        nodes >= 3,
        "--nodes {nodes}: backlog mode needs at least 3 nodes (busy ones and 2 idle)"
    );
    let busy = nodes - 2;
    println!(
        "== backlog: {jobs} Slurm jobs that cannot start (a third each, about {}: {}), {waiting} pods waiting on Slurm capacity ({busy} busy nodes, 2 idle), then one pod that fits an idle node",
        jobs / 3,
        KINDS.join(", ")
    );
    let kube = control_plane(nodes, a.qps, a.burst).await;
    let names: Vec<String> = (1..=busy).map(|i| format!("node-{i}")).collect();
    let mut label = vec!["label", "node"];
    label.extend(names.iter().map(String::as_str));
    let pool = format!("{}={}", POOL.0, POOL.1);
    label.push(&pool);
    kube.kubectl(&label).expect("label the busy nodes");
    let extra = a.sched_params.clone();
    let slurm = tokio::task::spawn_blocking(move || start_slurm_with(nodes, extra.as_deref()))
        .await
        .unwrap();
    let conf = std::fs::read_to_string(slurm.slurm_conf()).unwrap_or_default();
    for l in conf.lines().filter(|l| l.starts_with("Scheduler")) {
        println!("        slurm.conf: {l}");
    }
    let rest = client(&slurm);
    let dir = temp_dir();
    let s = spawn_scheduler(&kube, &slurm, &dir, a);
    wait_ready(&s).await;
    let pods = namespace(&kube, "default").await;

    let started = Instant::now();
    let watch = watch_bound(&pods, busy as usize, Some((busy + waiting) as usize));
    create_pods_with(&pods, "wait", busy + waiting, BRIDGE, Some(POOL)).await;
    let bound = watch.await.unwrap();
    assert_eq!(bound.len(), busy as usize, "only the busy nodes' pods bind");
    report!(
        "backlog: {busy} pods bound on the busy nodes, {waiting} waiting with a pending job each, {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let ids: Vec<(usize, u32)> = futures::stream::iter(0..jobs)
        .map(|i| {
            let rest = rest.clone();
            let kind = (i % 3) as usize;
            async move {
                let job = backlog_job(kind, i, nodes, busy);
                let r = rest.submit_job(&job).await.expect("submit a backlog job");
                (kind, r.job_id)
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let mut reasons = Vec::new();
    for (k, kind) in KINDS.iter().enumerate() {
        if let Some((_, id)) = ids.iter().find(|(kk, _)| *kk == k) {
            let j = rest.job(*id).await.expect("read a backlog job");
            reasons.push(format!(
                "{kind}: {:?} {}",
                j.job_state,
                j.state_reason.unwrap_or_default()
            ));
        }
    }
    let pending = rest
        .job_states()
        .await
        .expect("job states")
        .iter()
        .filter(|j| j.state.contains(&JobState::Pending))
        .count();
    report!(
        "backlog: {jobs} Slurm jobs submitted in {:.1} s; {pending} jobs pending in Slurm; reasons {}",
        started.elapsed().as_secs_f64(),
        reasons.join("; ")
    );

    // Raw Slurm: one external job that fits, behind the same backlog.
    let mut fit = bare_job();
    fit.name = Some("raw-fit".into());
    let at = Instant::now();
    let id = rest
        .submit_job(&fit)
        .await
        .expect("submit the fitting job")
        .job_id;
    match running_within(&rest, id, at, FIT_TIMEOUT).await {
        Some(t) => report!(
            "raw Slurm:      a fitting job behind {pending} pending -> RUNNING in {:.2} s",
            t.as_secs_f64()
        ),
        None => report!(
            "raw Slurm:      a fitting job behind {pending} pending: not RUNNING within {} s (Slurm itself holds it)",
            FIT_TIMEOUT.as_secs()
        ),
    }

    // The bridge: one pod that fits the other idle node.
    let metrics = |s: &crate::bridge::Scheduler| {
        let port = s.port;
        async move {
            http_get(port, "/metrics")
                .await
                .map(|x| x.1)
                .unwrap_or_default()
        }
    };
    let passes_before = counter(
        &metrics(&s).await,
        "slurm_bridge_scheduler_reconcile_passes_total",
    );
    let fit = fitting_pod(&pods, &rest).await;
    let passes = counter(
        &metrics(&s).await,
        "slurm_bridge_scheduler_reconcile_passes_total",
    ) - passes_before;
    let secs =
        |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
    match fit.bound {
        Some(b) => report!(
            "bridge:         the fitting pod behind {waiting} waiting pods and {pending} pending jobs -> bound in {:.2} s (created -> submitted {}, -> its job RUNNING {}); {passes} passes meanwhile",
            b.as_secs_f64(),
            secs(fit.labelled),
            secs(fit.running)
        ),
        None => report!(
            "bridge:         the fitting pod: not bound within {} s (created -> submitted {}, -> its job RUNNING {}); {passes} passes meanwhile",
            FIT_TIMEOUT.as_secs(),
            secs(fit.labelled),
            secs(fit.running)
        ),
    }
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

/// When a job was first seen RUNNING after `since` (a 20 ms poll), within `timeout`.
async fn running_within(
    rest: &slurm_rest::Client,
    id: u32,
    since: Instant,
    timeout: Duration,
) -> Option<Duration> {
    while since.elapsed() < timeout {
        if let Ok(s) = rest.job_state(id).await
            && s.state.contains(&JobState::Running)
        {
            return Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The fitting pod's timeline from its creation (the create's answer).
struct Fit {
    labelled: Option<Duration>,
    running: Option<Duration>,
    bound: Option<Duration>,
}

/// Creates the fitting pod (no node selector: only an idle node has room) and times it:
/// labelled with its job (submitted), its job RUNNING, bound; [`FIT_TIMEOUT`] at most.
async fn fitting_pod(pods: &Api<Pod>, rest: &slurm_rest::Client) -> Fit {
    let name = "fit";
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (job_tx, job_rx) = tokio::sync::oneshot::channel::<u32>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let stream = watcher(pods.clone(), cfg);
    // Shared, so a pod labelled but never bound still reports when it was submitted.
    let labelled = std::sync::Arc::new(std::sync::Mutex::new(None::<Instant>));
    let labelled_ = labelled.clone();
    let watch = tokio::spawn(async move {
        let (mut job_tx, mut ready_tx) = (Some(job_tx), Some(ready_tx));
        futures::pin_mut!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            let p = match ev {
                watcher::Event::InitDone => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => p,
                _ => continue,
            };
            let job = p.metadata.labels.as_ref().and_then(|l| l.get(JOB_LABEL));
            if let Some(id) = job.and_then(|j| j.parse().ok())
                && let Some(tx) = job_tx.take()
            {
                *labelled_.lock().unwrap() = Some(Instant::now());
                let _ = tx.send(id);
            }
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                return Some(Instant::now());
            }
        }
        None
    });
    // The watch has listed (nothing yet) before the pod exists: no change is missed.
    ready_rx.await.expect("the fitting pod's watch lists");
    pods.create(&PostParams::default(), &pod_object(name, BRIDGE))
        .await
        .expect("create the fitting pod");
    let created = Instant::now();
    let rest = rest.clone();
    let running = tokio::spawn(async move {
        let id = tokio::time::timeout(FIT_TIMEOUT, job_rx).await.ok()?.ok()?;
        running_within(&rest, id, created, FIT_TIMEOUT).await
    });
    let bound = tokio::time::timeout(FIT_TIMEOUT, watch)
        .await
        .ok()
        .and_then(|r| r.unwrap());
    let labelled = *labelled.lock().unwrap();
    let running = if bound.is_some() {
        running.await.unwrap()
    } else {
        running.abort();
        None
    };
    let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(created));
    Fit {
        labelled: since(labelled),
        running,
        bound: since(bound),
    }
}
