//! Failover: the leader killed again and again during a churn of pods never leaves a pod in
//! two live Slurm jobs; the failover times are printed.

use crate::checks::{assert_no_duplicate_job, assert_one_job_per_pod_ever};
use crate::e2e::{self, Env, percentile, sleeper, write_config};
use crate::replicas::{holder, signal, spawn, temp_dir, terminate_all, wait_holder};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use std::time::{Duration, Instant};

/// Two `run` replicas; the leader is killed with SIGKILL `HA_KILLS` times (default 3) during a
/// churn of short pods, and restarted as a new replica once the other leads. No pod is ever in
/// two live Slurm jobs (checked every 250 ms), every pod created is bound, and the invariants
/// hold at the end. Prints the failover times (kill -> the Lease held by the survivor, and
/// kill -> the next pod bound); they are figures, not assertions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_again_and_again_never_duplicates_a_job() {
    let kills: usize = std::env::var("HA_KILLS")
        .ok()
        .map(|k| k.parse().expect("HA_KILLS: a number of kills, e.g. 10"))
        .unwrap_or(3);
    let env = std::sync::Arc::new(Env::start(3).await);
    let dir = temp_dir("failover");
    let config = write_config(&env, &dir, "");
    let lease = "ha-failover";
    let mut serial = 0;
    let next = |serial: &mut usize| {
        *serial += 1;
        format!("replica-{serial}")
    };
    let first = next(&mut serial);
    let mut replicas = vec![spawn(&env, &dir, &config, "run", &first, lease, &[])];
    wait_holder(&env, lease, &first, Duration::from_secs(60)).await;
    let second = next(&mut serial);
    replicas.push(spawn(&env, &dir, &config, "run", &second, lease, &[]));

    // The churn: a short pod every 400 ms; the checker: no duplicate job, ever.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let created = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let churn = {
        let (env, created, stop) = (env.clone(), created.clone(), stop_rx.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !*stop.borrow() {
                let name = format!("churn-{i}");
                env.create_pod(sleeper(&name, "2", 1)).await;
                created.lock().unwrap().push(name);
                i += 1;
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        })
    };
    let checker = {
        let (env, stop) = (env.clone(), stop_rx.clone());
        tokio::spawn(async move {
            let mut samples = 0u64;
            while !*stop.borrow() {
                assert_no_duplicate_job(&env).await;
                samples += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            samples
        })
    };
    let bound_count = |env: std::sync::Arc<Env>| async move {
        env.pods()
            .list(&ListParams::default())
            .await
            .map(|l| l.items.iter().filter(|p| e2e::node_name_is_set(p)).count())
            .unwrap_or(0)
    };

    let (mut to_lease, mut to_bind) = (Vec::new(), Vec::new());
    for k in 0..kills {
        // The leader has bound pods in this term before it is killed.
        let leader = holder(&env, lease).await.expect("a leader");
        let b0 = bound_count(env.clone()).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while bound_count(env.clone()).await < b0 + 2 {
            assert!(Instant::now() < deadline, "no pod bound by {leader}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let i = replicas
            .iter()
            .position(|r| r.identity == leader)
            .expect("the leader is one of ours");
        let mut victim = replicas.remove(i);
        let survivor = replicas[0].identity.clone();
        let bound_before = bound_count(env.clone()).await;
        let killed = Instant::now();
        signal(&victim, "-KILL");
        let _ = victim.child.wait();
        let took = wait_holder(&env, lease, &survivor, Duration::from_secs(90)).await;
        let deadline = Instant::now() + Duration::from_secs(90);
        while bound_count(env.clone()).await <= bound_before {
            assert!(
                Instant::now() < deadline,
                "nothing bound after failover {k}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        to_lease.push(took - killed);
        to_bind.push(killed.elapsed());
        println!(
            "kill {}: {} killed; {} took the Lease after {:?}, next pod bound after {:?}",
            k + 1,
            victim.identity,
            survivor,
            took - killed,
            killed.elapsed()
        );
        let fresh = next(&mut serial);
        replicas.push(spawn(&env, &dir, &config, "run", &fresh, lease, &[]));
    }
    stop_tx.send_replace(true);
    churn.await.unwrap();
    let samples = checker.await.unwrap();

    // Every pod created was bound (or has run already), with one job.
    let names = created.lock().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pods: Vec<Pod> = env.pods().list(&ListParams::default()).await.unwrap().items;
        let unbound: Vec<String> = pods
            .iter()
            .filter(|p| names.contains(&p.name_any()) && !e2e::node_name_is_set(p))
            .map(|p| p.name_any())
            .collect();
        if unbound.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "pods never bound: {unbound:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_one_job_per_pod_ever(&env).await;
    let settle = Instant::now() + Duration::from_secs(60);
    loop {
        // Finished pods lose their finalizer once the leader's pod controller sees them.
        let pods: Vec<Pod> = env.pods().list(&ListParams::default()).await.unwrap().items;
        let held = pods.iter().any(|p| {
            matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            ) && slurm_bridge::wellknown::holds_finalizer(p)
        });
        if !held || Instant::now() > settle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.assert_invariants().await;

    to_lease.sort();
    to_bind.sort();
    println!(
        "failover over {kills} SIGKILLs, {} pods, {samples} duplicate checks (0 duplicates): \
         Lease taken p50 {:?} p99 {:?}; next pod bound p50 {:?} p99 {:?}",
        names.len(),
        percentile(&to_lease, 0.5),
        percentile(&to_lease, 0.99),
        percentile(&to_bind, 0.5),
        percentile(&to_bind, 0.99),
    );
    terminate_all(&mut replicas).await;
    let _ = std::fs::remove_dir_all(&dir);
}
