//! Chaos end to end: `slurm-bridge run` as a process, through fault proxies to slurmrestd and
//! kube-apiserver (a share of its requests delayed, reset, answered 5xx or 429, stalled, or
//! forwarded and their answers lost),
//! while a churn of bare pods, Jobs and gangs runs and the suite SIGKILLs the bridge and
//! restarts, stops or pauses kube-apiserver, etcd, slurmctld and slurmrestd. After a settle
//! period every workload not deleted has completed and the lifecycle invariants hold.
//!
//! The short run (100 s of churn, each fault kind at least once) runs by default; the full
//! one (500 pods over 5 minutes, 20 kills, …: see `chaos::plan::Plan::full`) with
//! `CHAOS_FULL=1 cargo test -p slurm-bridge --test chaos_e2e -- --nocapture`.

mod chaos;
mod e2e;

use chaos::bridge::Bridge;
use chaos::churn::{self, Churn, Kind};
use chaos::observe::{self, Observed};
use chaos::plan::{Fault, Plan};
use chaos::report::{Figures, Injected};
use e2e::{Env, NS};
use fault_proxy::{FaultProxy, Faults, ProxyOptions, Upstream};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube_testenv::Daemon;
use slurm_bridge::wellknown::LABEL_SLURM_JOBID;
use slurm_bridge::workload::admin_comment::AdminComment;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[tokio::test]
async fn churn_survives_kills_restarts_outages_and_faulted_requests() {
    let plan = Plan::from_env();
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .map(|s| s.parse().expect("CHAOS_SEED: expected a number"))
        .unwrap_or(20261201);
    let mut env = Env::start(plan.nodes).await;
    let dir = std::env::temp_dir().join(format!("slurm-bridge-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // The proxies: plain HTTP to slurmrestd; TLS with kube-testenv's serving certificate to
    // kube-apiserver, re-originated with the admin's client certificate.
    let mut slurm_opts = ProxyOptions::new(Upstream::plain(env.slurm.rest_url()).unwrap());
    slurm_opts.seed = Some(seed);
    let slurm_proxy = FaultProxy::start(slurm_opts).await.unwrap();
    let (kube_proxy, proxied) = e2e::kube_proxy::start(&env, |o| o.seed = Some(seed + 1)).await;
    // The five kinds the proxy answers itself, and as often an answer lost after the server
    // acted (a submit whose job exists, a Binding that landed): a retry must not double it.
    let faults = Faults {
        latency_ms: 300,
        stall_ms: 3_000,
        lost_answer: plan.proxy_rate / 5.0,
        ..Faults::uniform(plan.proxy_rate)
    };
    slurm_proxy.set_faults(faults.clone()).unwrap();
    kube_proxy.set_faults(faults).unwrap();

    let mut bridge = Bridge::start(&dir, slurm_proxy.url(), &proxied, env.slurm.token_file());

    let (stop_tx, stop_rx) = watch::channel(false);
    let observed = Arc::new(Mutex::new(Observed::default()));
    let observer = tokio::spawn(observe::run(
        env.kube.clone(),
        env.rest.clone(),
        observed.clone(),
        stop_rx,
    ));
    let churned = Arc::new(Mutex::new(Churn::default()));
    let started = Instant::now();
    let churn = tokio::spawn(churn::run(
        env.kube.clone(),
        plan.pods,
        plan.churn,
        seed,
        churned.clone(),
    ));

    // The faults, one after another at even intervals over the churn.
    let schedule = plan.schedule();
    let gap = plan.churn / (schedule.len() as u32 + 1);
    let mut injected = Vec::new();
    for (i, fault) in schedule.into_iter().enumerate() {
        tokio::time::sleep_until((started + gap * (i as u32 + 1)).into()).await;
        bridge.check_alive();
        let start = Instant::now();
        tracing::info!(fault = fault.name(), n = i + 1, "chaos: injecting");
        inject(&mut env, &mut bridge, &plan, fault).await;
        injected.push(Injected {
            fault,
            start,
            end: Instant::now(),
        });
    }
    tokio::time::timeout(plan.churn + plan.settle, churn)
        .await
        .expect("the churn created its pods")
        .unwrap();
    let churn_took = started.elapsed();

    // Settle: every workload not deleted completes, nothing is left live or being deleted.
    let settle_start = Instant::now();
    let mut unfinished;
    loop {
        bridge.check_alive();
        unfinished = unfinished_work(&env, &churned).await;
        if unfinished.is_empty() || settle_start.elapsed() > plan.settle {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let settle_took = settle_start.elapsed();
    let _ = stop_tx.send(true);
    observer.await.unwrap();

    let mut violations = invariant_violations(&env).await;
    if violations.is_empty() && unfinished.is_empty() {
        // The harness's own check of the lifecycle invariants, as every e2e test runs it.
        env.assert_invariants().await;
    }
    violations.extend(unfinished.iter().cloned());
    let lost = unfinished
        .iter()
        .filter(|u| u.starts_with("unfinished"))
        .count();
    let log = std::fs::read_to_string(bridge.log_path()).unwrap_or_default();
    let panics = log.matches("panicked").count();
    let duplicates_cancelled = log.matches("cancelling a duplicate external job").count();
    let (kills, crashes) = (bridge.kills, bridge.crashes.clone());
    let exit = bridge.terminate().await;
    let c = churned.lock().unwrap();
    let o = observed.lock().unwrap();
    let report = Figures {
        plan: &plan,
        seed,
        faults: &injected,
        observed: &o,
        slurm_proxy: slurm_proxy.stats(),
        kube_proxy: kube_proxy.stats(),
        kills,
        crashes: crashes.len(),
        panics,
        pods_created: c.pods_created,
        workloads: c.workloads.len(),
        deleted: c.deleted,
        churn_api_errors: c.api_errors,
        churn_took,
        settle_took,
        lost,
        duplicates_cancelled,
        violations: &violations,
    }
    .render();
    eprintln!("{report}");
    let _ = std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chaos-{}.txt", plan.name)),
        &report,
    );

    // What the run must show.
    assert!(c.pods_created >= plan.pods, "{report}");
    assert!(
        injected.iter().all(|f| o.recovery(f.end).is_some()),
        "a pod was bound after every fault:\n{report}"
    );
    let total = |s: &fault_proxy::Stats| (s.requests, s.injected());
    for (name, (req, inj)) in [
        ("slurmrestd", total(&slurm_proxy.stats())),
        ("kube-apiserver", total(&kube_proxy.stats())),
    ] {
        assert!(
            req > 100 && inj > 0,
            "proxy to {name}: {inj} of {req} faulted:\n{report}"
        );
    }
    assert_eq!(o.duplicated.len(), 0, "{report}");
    assert_eq!(
        duplicates_cancelled, 0,
        "no job made twice for a group:\n{report}"
    );
    assert!(violations.is_empty(), "{report}");
    assert!(
        crashes.is_empty() && panics == 0,
        "bridge crashed: {crashes:?}\n{report}"
    );
    assert!(exit.success(), "bridge exit after SIGTERM: {exit:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

async fn inject(env: &mut Env, bridge: &mut Bridge, plan: &Plan, fault: Fault) {
    let slurm = env.slurm.clone();
    let blocking = |f: Box<dyn FnOnce() -> slurm_testenv::Result<()> + Send>| async move {
        tokio::task::spawn_blocking(f)
            .await
            .unwrap()
            .expect("Slurm fault")
    };
    match fault {
        Fault::KillBridge => bridge.kill_and_restart(),
        Fault::RestartApiserver => env
            .kube_env
            .restart_daemon(Daemon::KubeApiserver)
            .await
            .expect("restart kube-apiserver"),
        Fault::RestartEtcd => env
            .kube_env
            .restart_daemon(Daemon::Etcd)
            .await
            .expect("restart etcd"),
        Fault::CompactWhilePaused => {
            bridge.pause();
            // The churn goes on meanwhile: changes the bridge's watches must catch up on.
            tokio::time::sleep(Duration::from_secs(3)).await;
            env.kube_env.compact_etcd().expect("compact etcd");
            env.kube_env
                .restart_daemon(Daemon::KubeApiserver)
                .await
                .expect("restart kube-apiserver");
            bridge.resume();
        }
        Fault::RestartSlurmctld => {
            blocking(Box::new(move || slurm.restart_slurmctld())).await;
        }
        Fault::SlurmrestdOutage => {
            let s = slurm.clone();
            blocking(Box::new(move || s.stop_slurmrestd())).await;
            tokio::time::sleep(plan.outage).await;
            blocking(Box::new(move || slurm.start_slurmrestd())).await;
        }
        Fault::PauseApiserver => {
            env.kube_env
                .pause_daemon(Daemon::KubeApiserver)
                .expect("pause kube-apiserver");
            tokio::time::sleep(plan.apiserver_pause).await;
            env.kube_env
                .resume_daemon(Daemon::KubeApiserver)
                .expect("resume kube-apiserver");
        }
    }
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// What is not settled yet: `unfinished ...` for a workload neither deleted nor completed,
/// `stuck ...` for a pod being deleted, `live job ...` for a Slurm job still pending or running.
async fn unfinished_work(env: &Env, churned: &Mutex<Churn>) -> Vec<String> {
    let Ok(pods) = chaos::within(10, env.pods().list(&ListParams::default())).await else {
        return vec!["pods unlisted".into()];
    };
    let Ok(jobs) = chaos::within(
        10,
        Api::<Job>::namespaced(env.kube.clone(), NS).list(&ListParams::default()),
    )
    .await
    else {
        return vec!["Jobs unlisted".into()];
    };
    let by_name: BTreeMap<String, &Pod> = pods.items.iter().map(|p| (p.name_any(), p)).collect();
    let done = |name: &str| by_name.get(name).is_some_and(|p| phase(p) == "Succeeded");
    let mut out = Vec::new();
    for w in churned
        .lock()
        .unwrap()
        .workloads
        .iter()
        .filter(|w| !w.deleted)
    {
        let ok = match w.kind {
            Kind::Bare => done(&w.name),
            Kind::Gang => (0..w.pods).all(|i| done(&format!("{}-{i}", w.name))),
            Kind::Job => jobs.items.iter().any(|j| {
                j.name_any() == w.name
                    && j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) as usize >= w.pods
            }),
        };
        // A delete whose answer was lost may have gone through: then nothing of it is left.
        // Its pods: the pod itself, a gang's `name-i`, a Job's `name-xxxxx`.
        let of_it = |n: &str| n == w.name || n.starts_with(&format!("{}-", w.name));
        let gone = w.maybe_deleted
            && !by_name.keys().any(|n| of_it(n))
            && !jobs.items.iter().any(|j| j.name_any() == w.name);
        if !ok && !gone {
            let state: Vec<String> = by_name
                .iter()
                .filter(|(n, _)| of_it(n))
                .map(|(_, p)| e2e::describe(p) + " phase=" + phase(p))
                .collect();
            out.push(format!("unfinished {:?} {}: {state:?}", w.kind, w.name));
        }
    }
    for p in pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
    {
        out.push(format!(
            "stuck deletion of {} (finalizers {:?}, phase {})",
            p.name_any(),
            p.finalizers(),
            phase(p)
        ));
    }
    // A pod that has just finished holds the finalizer until the pod controller's pass: the
    // settle waits for it (the invariant check after the settle then finds none, or reports it).
    for p in pods.items.iter().filter(|p| finished_with_finalizer(p)) {
        out.push(format!(
            "finished pod {} still holds the finalizer",
            p.name_any()
        ));
    }
    for id in env.active_job_ids() {
        out.push(format!("live job {id}: {}", env.scontrol_job(id)));
    }
    out
}

/// A finished pod that still holds the bridge's finalizer (the pod controller releases it).
fn finished_with_finalizer(p: &Pod) -> bool {
    matches!(phase(p), "Succeeded" | "Failed") && slurm_bridge::wellknown::holds_finalizer(p)
}

/// The invariants after the settle, as messages: no pod in two live jobs, no live job
/// without a live pod, every bound pod on its job's nodes, no finished pod holding the
/// finalizer, every waiting pod with a live job or a reason. (No stuck deletion is
/// [`unfinished_work`]'s.)
async fn invariant_violations(env: &Env) -> Vec<String> {
    let mut out = Vec::new();
    let pods = env.pods().list(&ListParams::default()).await.unwrap().items;
    let active = env.active_job_ids();
    let mut in_jobs: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for id in &active {
        let job = env.rest.job(*id).await.unwrap();
        let mut uids = Vec::new();
        if let Ok(c) = AdminComment::decode(job.admin_comment.as_deref().unwrap_or("")) {
            for p in c.pods {
                in_jobs.entry(p).or_default().push(*id);
            }
            uids = c.uids;
        }
        let live = pods.iter().any(|p| {
            !matches!(phase(p), "Succeeded" | "Failed") && e2e::is_pod_of_job(p, *id, &uids)
        });
        if !live {
            out.push(format!("live job {id} without a live pod"));
        }
    }
    for (p, ids) in in_jobs.iter().filter(|(_, ids)| ids.len() > 1) {
        out.push(format!("pod {p} in live jobs {ids:?}"));
    }
    let slurm_names = env.slurm_names().await;
    for p in &pods {
        let finished = matches!(phase(p), "Succeeded" | "Failed");
        if finished_with_finalizer(p) {
            out.push(format!("finished pod {} holds the finalizer", p.name_any()));
        }
        let job: Option<u32> = p
            .labels()
            .get(LABEL_SLURM_JOBID)
            .and_then(|j| j.parse().ok());
        match (p.spec.as_ref().and_then(|s| s.node_name.as_deref()), job) {
            (Some(node), Some(id)) if !finished => {
                let j = env.rest.job(id).await.unwrap();
                let nodes = slurm_rest::hostlist::expand(j.nodes.as_deref().unwrap_or("")).unwrap();
                let want = slurm_names.get(node).map_or(node, String::as_str);
                if !nodes.iter().any(|n| n == want) {
                    out.push(format!(
                        "pod {} on {node}, not on job {id}'s nodes {nodes:?}",
                        p.name_any()
                    ));
                }
            }
            (Some(node), None) if !finished => {
                out.push(format!(
                    "bound pod {} on {node} has no job label",
                    p.name_any()
                ));
            }
            (None, job) if !finished => {
                let has_live_job = job.is_some_and(|j| active.contains(&j));
                let reason =
                    e2e::scheduled_condition(p).is_some_and(|c| c.0 == "False" && !c.1.is_empty());
                if !has_live_job && !reason {
                    out.push(format!(
                        "waiting pod {} has neither a live job nor a reason",
                        p.name_any()
                    ));
                }
            }
            _ => {}
        }
    }
    out
}
