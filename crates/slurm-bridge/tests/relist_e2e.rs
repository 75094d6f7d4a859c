//! Pods created while the bridge's watches relist are all bound (issue 21). kube-runtime's store
//! takes a relist's objects in only when the relist completes; the caches forwarded them at
//! once, so a pass could start before the store held its pod (`ObjectNotFound`, not retried),
//! and the scheduler's filter of repeated pod changes dropped the later identical events.
//!
//! The relist is forced as in production after an outage: etcd compacted, then kube-apiserver
//! restarted, so every watch resumes from a compacted resourceVersion, gets 410 Gone and lists
//! anew. The pods are created right after the restart, while the bridge's watches are still in
//! their reconnect backoff, so those created before the relist's list are new to the store and
//! reach it only through the relist. The scheduler's own resync is set to 10 minutes so it
//! cannot hide a lost pass. Real Slurm, the real control plane, the scheduler in-process.
//!
//! `RELIST_PODS=N` sets the number of pods (default 1,000; one node per pod).

mod e2e;

use e2e::Env;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use kube_testenv::faults::Daemon;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const LABEL: &str = "relist-e2e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_created_while_the_watches_relist_are_all_bound() {
    let n: usize = std::env::var("RELIST_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // Each external job here holds a whole node: one node per pod.
    let nodes = n as u32 + 5;
    let mut env = Env::start(nodes).await;
    let slurm = e2e::rest_client(&env.slurm);
    env.start_scheduler_opts(slurm, watch::channel(true).1, |o| {
        o.resync = Duration::from_secs(600);
    })
    .await;
    // The watches work before the fault.
    env.create_pod(e2e::pod("before", json!({}), json!({})))
        .await;
    env.wait_bound(&["before".into()], Duration::from_secs(60))
        .await;

    let revision = env.kube_env.compact_etcd().expect("compact etcd");
    let restart = Instant::now();
    env.kube_env
        .restart_daemon(Daemon::KubeApiserver)
        .await
        .expect("restart kube-apiserver");
    println!(
        "etcd compacted at revision {revision}; kube-apiserver restarted in {:.1} s",
        restart.elapsed().as_secs_f64()
    );

    let created_from = Instant::now();
    let api = env.pods();
    let names: Vec<String> = (0..n).map(|i| format!("relist-{i}")).collect();
    futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(32, |name| {
            let api = api.clone();
            async move {
                let mut p = e2e::pod(&name, json!({}), json!({}));
                p["metadata"]["labels"] = json!({LABEL: "yes"});
                let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(p).unwrap();
                // The restarted API server may still refuse a request or two.
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    match api.create(&PostParams::default(), &p).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 409 => break,
                        Err(e) if Instant::now() < deadline => {
                            tracing::debug!(pod = %name, error = %e, "create retried");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e) => panic!("create {name}: {e}"),
                    }
                }
            }
        })
        .await;
    let created = created_from.elapsed();

    // Every pod ends bound.
    let deadline = Instant::now() + Duration::from_secs(180);
    let bound_after = loop {
        let pods = api
            .list(&ListParams::default().labels(&format!("{LABEL}=yes")))
            .await
            .unwrap()
            .items;
        let bound = pods.iter().filter(|p| e2e::node_name_is_set(p)).count();
        if pods.len() == n && bound == n {
            break created_from.elapsed();
        }
        if Instant::now() > deadline {
            let unbound: Vec<String> = pods
                .iter()
                .filter(|p| !e2e::node_name_is_set(p))
                .take(10)
                .map(e2e::describe)
                .collect();
            panic!(
                "{bound} of {n} pods bound {:?} after the restart; unbound (first 10): {unbound:#?}",
                created_from.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "{n} pods created in {:.1} s after the restart; all bound {:.1} s after the first create",
        created.as_secs_f64(),
        bound_after.as_secs_f64()
    );
    let passes = env.handle().reconcile_passes.get();
    println!("scheduler passes: {passes}");
    let before = api.get("before").await.unwrap();
    assert!(e2e::node_name_is_set(&before), "{}", before.name_any());
    env.assert_consistent().await;
    env.assert_invariants().await;
}
