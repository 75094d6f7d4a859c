//! Answers lost after the request arrived: the fault proxy forwards the bridge's request, the
//! server acts (Slurm makes the job, kube-apiserver binds the pod, Slurm cancels the job), and
//! the answer never comes back. The bridge must neither make a second job for a group nor lose
//! a pod: every pod is bound once, to its one job, and the job ends with the pod.

mod e2e;

use e2e::controllers::Controllers;
use e2e::*;
use fault_proxy::{FaultProxy, Faults, ProxyOptions, Upstream};
use kube::api::DeleteParams;
use slurm_bridge::workload::admin_comment::AdminComment;
use std::collections::BTreeMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

/// The bridge's jobs Slurm knows (running, pending or ended), by pod.
async fn jobs_by_pod(env: &Env) -> BTreeMap<String, Vec<u32>> {
    let mut by_pod: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for j in env.rest.jobs(None).await.unwrap().jobs {
        let Some(c) = j
            .admin_comment
            .as_deref()
            .and_then(|c| AdminComment::decode(c).ok())
        else {
            continue;
        };
        for p in c.pods {
            by_pod.entry(p).or_default().push(j.job_id);
        }
    }
    by_pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_neither_double_a_job_nor_lose_a_pod() {
    let mut env = Env::start(4).await;

    // Slurm: every submit's and every cancel's answer lost after Slurm acted.
    let slurm_proxy = FaultProxy::start(ProxyOptions {
        faults: Faults::lost_answers(1.0, &["/job/submit", "DELETE /slurm/"]),
        ..ProxyOptions::new(Upstream::plain(env.slurm.rest_url()).unwrap())
    })
    .await
    .unwrap();
    // kube-apiserver: every Binding's answer lost after it landed.
    let (kube_proxy, proxied) =
        kube_proxy::through_proxy(&env, Faults::lost_answers(1.0, &["/binding"])).await;
    let direct = std::mem::replace(&mut env.kube, proxied);
    let slurm = slurm_rest::Client::builder(slurm_proxy.url())
        .token(slurm_rest::TokenProvider::file(env.slurm.token_file()))
        .build()
        .unwrap();
    // A slow job poll (3 s): a second submit would go out long before the watcher lists the
    // first job, unless the scheduler waits for that listing.
    env.start_scheduler_opts(slurm.clone(), tokio::sync::watch::channel(true).1, |o| {
        o.job_poll_interval = Duration::from_secs(3);
    })
    .await;
    let _controllers = Controllers::start_with(&env, slurm, |_| {}).await;
    env.kube = direct;

    let names: Vec<String> = (0..4).map(|i| format!("lost-{i}")).collect();
    for n in &names {
        env.create_pod(sleeper(n, "3600", 1)).await;
    }
    let pods = env.wait_bound(&names, WAIT).await;
    let by_pod = jobs_by_pod(&env).await;
    for p in &pods {
        let key = format!("{NS}/{}", kube::ResourceExt::name_any(p));
        assert_eq!(
            by_pod.get(&key).map(Vec::len),
            Some(1),
            "one Slurm job for {key}: {by_pod:?}"
        );
        assert_eq!(by_pod[&key], vec![job_id_of(p)]);
    }
    let s = slurm_proxy.stats();
    assert!(s.lost_answer >= 4, "every submit's answer was lost: {s:?}");
    assert!(
        kube_proxy.stats().lost_answer >= 4,
        "every Binding's answer was lost: {:?}",
        kube_proxy.stats()
    );
    env.assert_invariants().await;

    // The pods go: each cancel's answer is lost too; the jobs end, the finalizers go.
    for n in &names {
        env.pods()
            .delete(n, &DeleteParams::default())
            .await
            .unwrap();
    }
    for (p, n) in pods.iter().zip(&names) {
        env.wait_pod(n, "gone", WAIT, |p| p.is_none()).await;
        env.wait_job_ended(job_id_of(p), WAIT).await;
    }
    assert!(
        slurm_proxy.stats().lost_answer >= 5,
        "{:?}",
        slurm_proxy.stats()
    );
    assert_eq!(
        jobs_by_pod(&env).await.values().map(Vec::len).max(),
        Some(1)
    );
    env.assert_invariants().await;
}
