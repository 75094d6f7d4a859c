//! Leader election on a Lease (real kube-apiserver from kube-testenv), the scheduler's lifecycle on
//! real Slurm (standby, leadership lost mid-pass, graceful shutdown of the process), and the
//! /healthz, /readyz and /metrics endpoints.

mod e2e;

use e2e::{Env, Gated, SlurmWrites, pod};
use kube::runtime::reflector::ObjectRef;
use prometheus_client::registry::Registry;
use serde_json::json;
use slurm_bridge::scheduler::SchedulerOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_candidates_leads_and_a_released_lease_passes_on() {
    let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions::default())
        .await
        .unwrap();
    let a = slurm_bridge::leader::elect(env.client(), "default", "sched", "replica-a")
        .await
        .unwrap();
    let b = slurm_bridge::leader::elect(env.client(), "default", "sched", "replica-b")
        .await
        .unwrap();
    let (ra, rb) = (a.receiver(), b.receiver());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(*ra.borrow() || *rb.borrow()) {
        assert!(Instant::now() < deadline, "nobody became leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Stable: never both, for a few renewals.
    for _ in 0..30 {
        assert!(!(*ra.borrow() && *rb.borrow()), "two leaders at once");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (holder, leader, mut standby) = if *ra.borrow() {
        ("replica-a", a, rb)
    } else {
        ("replica-b", b, ra)
    };
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client(), "default");
    let holder_of = || async {
        leases
            .get("sched")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.holder_identity)
    };
    assert_eq!(
        holder_of().await.as_deref(),
        Some(holder),
        "the Lease names the leader"
    );
    // A leader that stops gives the Lease up (rather than let it expire), and the standby leads.
    let mut leading = leader.receiver();
    leader.release().await;
    assert!(!*leading.borrow_and_update());
    assert_ne!(holder_of().await.as_deref(), Some(holder));
    tokio::time::timeout(Duration::from_secs(60), standby.wait_for(|l| *l))
        .await
        .expect("the standby leads")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stands_down_when_its_lease_is_taken() {
    let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions::default())
        .await
        .unwrap();
    let me = slurm_bridge::leader::elect(env.client(), "default", "taken", "replica-a")
        .await
        .unwrap();
    let mut leading = me.receiver();
    tokio::time::timeout(Duration::from_secs(30), leading.wait_for(|l| *l))
        .await
        .expect("leads")
        .unwrap();
    // Another identity takes the Lease (as a replica would after a partition).
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client(), "default");
    let now = k8s_openapi::jiff::Timestamp::now();
    leases
        .patch(
            "taken",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {
                "holderIdentity": "intruder",
                "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
                "leaseDurationSeconds": 15,
            }})),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), leading.wait_for(|l| !*l))
        .await
        .expect("stands down")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_scheduler_does_not_act_until_it_leads() {
    let mut env = Env::start(1).await;
    let (lead_tx, lead_rx) = watch::channel(false);
    let writes = SlurmWrites::open();
    let slurm = Gated {
        inner: e2e::rest_client(&env.slurm),
        writes: writes.clone(),
    };
    let caches = env.start_scheduler_opts(slurm, lead_rx, |_| {}).await;
    let created = env.create_pod(pod("patient", json!({}), json!({}))).await;
    // The standby has seen the pod (its own pod cache holds it), and had the time to act on
    // it: its job watcher has polled Slurm 5 times since (1 s at 200 ms a poll), where a
    // leader's pass starts on the pod's change within milliseconds.
    let key = ObjectRef::<slurm_bridge::k8s::slim_pod::Pod>::new("patient").within(e2e::NS);
    e2e::wait_until(
        "the standby's pod cache holds the pod",
        Duration::from_secs(60),
        async || caches.handles.pods.get(&key).is_some(),
    )
    .await;
    wait_advance(
        "polls of the job watcher",
        &caches.handles.jobs.stats.polls,
        5,
    )
    .await;
    let handle = env.handle().clone();
    assert!(!*handle.leading.borrow());
    // No pass at all (no polling), no Slurm write, no Kubernetes write...
    assert_eq!(handle.reconcile_passes.get(), 0, "a standby ran passes");
    assert_eq!(writes.writes(), 0, "a standby wrote to Slurm");
    assert_eq!(*writes.submits_entered.borrow(), 0);
    assert!(env.slurm_job_ids().is_empty(), "a standby submitted a job");
    let p = env.pods().get("patient").await.unwrap();
    assert!(!e2e::node_name_is_set(&p));
    assert_eq!(
        p.metadata.resource_version, created.metadata.resource_version,
        "a standby wrote to the pod"
    );
    assert!(env.event_reasons("patient").await.is_empty());
    // ... but warm caches: the job watcher keeps polling Slurm.
    assert!(handle.metrics.slurm_calls.load(Ordering::Relaxed) > 0);

    lead_tx.send(true).unwrap();
    env.wait_bound(&["patient".into()], Duration::from_secs(60))
        .await;
    assert_eq!(writes.submitted.load(Ordering::SeqCst), 1);
    env.assert_consistent().await;
    env.assert_invariants().await;
}

/// Waits until `counter` has advanced by `n` from now: proof that what counts it (the job
/// watcher's polls, the scheduler's Slurm calls: every 200 ms, leading or not) has run since.
async fn wait_advance(what: &str, counter: &AtomicU64, n: u64) {
    let target = counter.load(Ordering::Relaxed) + n;
    e2e::wait_until(
        &format!("{n} more {what}"),
        Duration::from_secs(60),
        async || counter.load(Ordering::Relaxed) >= target,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_that_loses_leadership_mid_pass_aborts_it() {
    let mut env = Env::start(1).await;
    let (lead_tx, lead_rx) = watch::channel(true);
    let writes = SlurmWrites::closed();
    let slurm = Gated {
        inner: e2e::rest_client(&env.slurm),
        writes: writes.clone(),
    };
    env.start_scheduler_led(slurm, lead_rx).await;
    let mut leading = env.handle().leading.clone();
    tokio::time::timeout(Duration::from_secs(30), leading.wait_for(|l| *l))
        .await
        .expect("leads")
        .unwrap();
    env.create_pod(pod("contested", json!({}), json!({}))).await;
    // A pass is in flight, held at its submit.
    writes.wait_entered(1, Duration::from_secs(60)).await;

    lead_tx.send(false).unwrap();
    tokio::time::timeout(Duration::from_secs(30), leading.wait_for(|l| !*l))
        .await
        .expect("the controller stops")
        .unwrap();
    let before = env.pods().get("contested").await.unwrap();
    // A pass still running would now submit, label and bind; an aborted one never resumes. The
    // gate is a fair semaphore: a permit added while a submit waits at it goes to that submit at
    // once, so a permit still free now proves that no submit waits there.
    writes.let_through(1);
    assert_eq!(
        writes.gate.available_permits(),
        1,
        "a pass still waits at its submit after leadership was lost"
    );
    // Nor did anything else start since: the scheduler has polled Slurm 5 more times (1 s at its
    // 200 ms job poll) with nothing written.
    wait_advance(
        "Slurm calls of the scheduler",
        &env.handle().metrics.slurm_calls,
        5,
    )
    .await;
    assert_eq!(
        *writes.submits_entered.borrow(),
        1,
        "a submit after leadership was lost"
    );
    assert_eq!(
        writes.writes(),
        0,
        "a pass submitted after leadership was lost"
    );
    assert!(env.slurm_job_ids().is_empty());
    let after = env.pods().get("contested").await.unwrap();
    assert!(
        !e2e::node_name_is_set(&after),
        "bound after leadership was lost"
    );
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the pod was written after leadership was lost"
    );

    // Leading again: the pod is scheduled, with one job.
    lead_tx.send(true).unwrap();
    env.wait_bound(&["contested".into()], Duration::from_secs(60))
        .await;
    assert_eq!(writes.submitted.load(Ordering::SeqCst), 1);
    assert_eq!(env.slurm_job_ids().len(), 1);
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_pass_in_flight_finish_with_readiness_false_first() {
    let mut env = Env::start(1).await;
    let writes = SlurmWrites::closed();
    let slurm = Gated {
        inner: e2e::rest_client(&env.slurm),
        writes: writes.clone(),
    };
    let mut opts = SchedulerOptions::new(e2e::config(&env.slurm));
    opts.job_poll_interval = Duration::from_millis(200);
    // Far longer than the test needs: the pass is let through right after the signal.
    opts.shutdown_grace = Duration::from_secs(300);
    let listener = slurm_bridge::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let (signal, signals) = futures::channel::mpsc::unbounded::<()>();
    // As `--leader-elect=false`: nothing may end at start.
    let process = tokio::spawn(slurm_bridge::cli::scheduler::serve(
        env.kube.clone(),
        slurm,
        opts,
        None,
        listener,
        signals,
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(port, "/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "ready within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.create_pod(pod("inflight", json!({}), json!({}))).await;
    writes.wait_entered(1, Duration::from_secs(60)).await;

    signal.unbounded_send(()).unwrap();
    // Readiness goes false while the pass is still in flight; liveness stays.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(port, "/readyz").await.0 != 503 {
        assert!(
            Instant::now() < deadline,
            "not ready within 30 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get(port, "/healthz").await.0, 200);
    assert!(!process.is_finished(), "exited with a pass in flight");

    // The pass finishes, then the process exits.
    writes.let_through(1);
    tokio::time::timeout(Duration::from_secs(120), process)
        .await
        .expect("exits once the pass is done")
        .unwrap()
        .unwrap();
    assert_eq!(writes.submitted.load(Ordering::SeqCst), 1);
    let ids = env.slurm_job_ids();
    assert_eq!(ids.len(), 1, "one job: {ids:?}");
    let p = env.pods().get("inflight").await.unwrap();
    assert_eq!(e2e::job_id_of(&p), ids[0], "the pass labelled the pod");
    env.assert_consistent().await;
    // No new pass started after the signal, so nothing bound it; the next scheduler does, with
    // the same job.
    env.start_scheduler().await;
    env.wait_bound(&["inflight".into()], Duration::from_secs(60))
        .await;
    assert_eq!(env.slurm_job_ids(), ids);
    env.assert_consistent().await;
    env.assert_invariants().await;
}

/// GET `path` of the probe port: status and body (slurm-testenv's blocking client, off the
/// runtime, which serves the probes too).
async fn get(port: u16, path: &str) -> (u16, String) {
    let path = path.to_string();
    let r = tokio::task::spawn_blocking(move || {
        slurm_testenv::http::get(slurm_testenv::http::local(port), &path, &[])
    })
    .await
    .unwrap()
    .unwrap();
    (r.status, r.text())
}

#[tokio::test]
async fn probes_report_readiness_and_metrics() {
    let mut registry = Registry::default();
    let metrics = slurm_bridge::scheduler::metrics::Metrics::new(&mut registry);
    metrics.pods_bound.inc_by(3);
    let (ready_tx, ready_rx) = watch::channel(false);
    let listener = slurm_bridge::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let server = tokio::spawn(slurm_bridge::server::serve(
        listener,
        ready_rx,
        Arc::new(registry),
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    ));
    assert_eq!(get(port, "/healthz").await.0, 200);
    let (code, body) = get(port, "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("not synced"), "{body}");
    ready_tx.send(true).unwrap();
    assert_eq!(get(port, "/readyz").await.0, 200);
    let (code, body) = get(port, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        body.contains("slurm_bridge_scheduler_pods_bound_total 3"),
        "{body}"
    );
    assert!(
        body.contains("slurm_bridge_scheduler_submit_to_allocation_seconds_bucket"),
        "{body}"
    );
    stop_tx.send(true).unwrap();
    server.await.unwrap().unwrap();
    // The taken port is reported with its address.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = slurm_bridge::server::bind(addr)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&addr.to_string()), "{err}");
}
