//! The simulated kubelet at scale: many bound pods on many nodes all start and finish.
//! Prints figures (no timing assertions). Size from `KUBE_SIM_SCALE_PODS` (default 2000) and
//! `KUBE_SIM_SCALE_NODES` (default 200); the benchmark size is 10000 pods on 1000 nodes:
//! `KUBE_SIM_SCALE_PODS=10000 KUBE_SIM_SCALE_NODES=1000 cargo test --release -p kube-sim
//! --test sim_scale -- --nocapture`.

mod sim_common;

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sim_common::*;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_bound_pods_run_and_succeed() {
    let n_pods = env_usize("KUBE_SIM_SCALE_PODS", 2000);
    let n_nodes = env_usize("KUBE_SIM_SCALE_NODES", 200);
    let t0 = std::time::Instant::now();
    let sim = start(n_nodes).await;
    let t_nodes = t0.elapsed();
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // Count phases from one watch, as a controller would.
    let counter = {
        let pods = pods.clone();
        tokio::spawn(async move {
            let mut phases: HashMap<String, String> = HashMap::new();
            let mut first_all_running = None;
            let start = std::time::Instant::now();
            let mut stream = std::pin::pin!(
                watcher(pods, watcher::Config::default())
                    .applied_objects()
                    .default_backoff()
            );
            let (mut started, mut succeeded) = (0usize, 0usize);
            while let Some(Ok(p)) = stream.next().await {
                let ph = phase(&p);
                let old = phases.insert(p.metadata.name.clone().unwrap_or_default(), ph.clone());
                for (v, d) in [(old.as_deref(), -1i64), (Some(ph.as_str()), 1)] {
                    let Some(v) = v else { continue };
                    if v == "Running" || v == "Succeeded" {
                        started = (started as i64 + d) as usize;
                    }
                    if v == "Succeeded" {
                        succeeded = (succeeded as i64 + d) as usize;
                    }
                }
                if first_all_running.is_none() && started == n_pods {
                    first_all_running = Some(start.elapsed());
                }
                if succeeded == n_pods {
                    return (first_all_running, start.elapsed());
                }
            }
            (first_all_running, start.elapsed())
        })
    };

    let t1 = std::time::Instant::now();
    futures::stream::iter(0..n_pods)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let p: Pod = from_json(json!({
                    "metadata": {"name": format!("p-{i}")},
                    "spec": {
                        "nodeName": format!("node-{}", i % n_nodes + 1),
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}],
                    },
                }));
                pods.create(&PostParams::default(), &p).await.map(|_| ())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .expect("all pods created");
    let t_create = t1.elapsed();

    let (all_running, all_done) =
        tokio::time::timeout(std::time::Duration::from_secs(600), counter)
            .await
            .expect("all pods succeed within 10 minutes")
            .unwrap();
    assert!(
        all_running.is_some(),
        "every pod was seen Running or Succeeded"
    );
    println!(
        "kube-sim scale: {n_nodes} nodes registered in {t_nodes:?}; {n_pods} pods created in {t_create:?}; \
         all Running/Succeeded after {all_running:?}; all Succeeded (sleep 1) after {all_done:?} (from watch start)"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_job_creates_exactly_its_pods_and_completes() {
    let n = env_usize("KUBE_SIM_SCALE_JOB_PODS", 300);
    let nodes = 50;
    let sim = start(nodes).await;
    let client = sim.client();
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let job: k8s_openapi::api::batch::v1::Job = from_json(json!({
        "metadata": {"name": "big"},
        "spec": {
            "parallelism": n,
            "completions": n,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}],
            }},
        },
    }));
    let t0 = std::time::Instant::now();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let lp = kube::api::ListParams::default().labels("job-name=big");
    wait_list(&pods, &lp, "all pods created", |ps| ps.len() == n).await;
    let t_pods = t0.elapsed();
    let sched = scheduler(client.clone(), "default", nodes);
    let done = wait_for(&jobs, "big", "Complete", |j| {
        j.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            })
    })
    .await;
    sched.abort();
    assert_eq!(done.status.unwrap().succeeded, Some(n as i32));
    // Never more pods than completions: no duplicate creations.
    assert_eq!(pods.list(&lp).await.unwrap().items.len(), n);
    println!(
        "kube-sim scale: Job of {n} pods: all created after {t_pods:?}, Complete after {:?}",
        t0.elapsed()
    );
    sim.stop().await;
}
