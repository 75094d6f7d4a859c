//! Fencing: a leader paused past its Lease sends nothing once it resumes (for `run` and for the
//! split mode), and a write decided before the fence's deadline is not sent after it.

use crate::checks::{assert_one_job_per_pod_ever, event_times_by};
use crate::e2e::{self, Env, pod, write_config};
use crate::replicas::{
    Replica, holder, log_of, quiet_writes, signal, spawn, temp_dir, terminate_all, wait_holder,
    wait_stood_down, writes,
};
use kube::api::DeleteParams;
use serde_json::json;
use slurm_bridge::slurm::SlurmJobs;
use std::time::{Duration, Instant, SystemTime};

/// The fencing scenario for one set of leaders (one per Lease) and their standbys: a pod bound
/// by the leaders; the leaders paused past their Leases; meanwhile a pod created and the first
/// deleted, which the standbys, once leading, bind and clean up; the old leaders resumed, a
/// pod created after; the old leaders sent nothing after the pause and the invariants hold.
async fn pause_leaders_past_their_leases(
    env: &Env,
    leases: &[&str],
    leaders: &[&Replica],
    standbys: &[&Replica],
) {
    for (lease, r) in leases.iter().zip(leaders) {
        wait_holder(env, lease, &r.identity, Duration::from_secs(60)).await;
    }
    env.create_pod(pod("before", json!({}), json!({}))).await;
    env.wait_bound(&["before".into()], Duration::from_secs(90))
        .await;
    // The leaders are done with `before` once their write counters stand still.
    let before = quiet_writes(leaders).await;
    assert!(
        before.iter().map(|w| w.kube_sent).sum::<f64>() > 0.0,
        "the leaders' counters show no write for the bound pod: {before:?}"
    );
    let paused_at = SystemTime::now();
    for r in leaders {
        signal(r, "-STOP");
    }
    let pods = env.pods();
    // What the old leaders would act on if they believed they still led.
    env.create_pod(pod("during", json!({}), json!({}))).await;
    pods.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    for (lease, r) in leases.iter().zip(standbys) {
        wait_holder(env, lease, &r.identity, Duration::from_secs(90)).await;
    }
    env.wait_bound(&["during".into()], Duration::from_secs(90))
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while pods.get_opt("before").await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the deleted pod was not released"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The standbys lead; the old leaders resume and find their Leases gone.
    for r in leaders {
        signal(r, "-CONT");
    }
    env.create_pod(pod("after", json!({}), json!({}))).await;
    for r in leaders {
        wait_stood_down(r, Duration::from_secs(30)).await;
    }
    env.wait_bound(&["after".into()], Duration::from_secs(90))
        .await;
    for (lease, r) in leases.iter().zip(standbys) {
        assert_eq!(
            holder(env, lease).await.as_deref(),
            Some(r.identity.as_str()),
            "the standby still leads"
        );
    }
    // Watched for 3 s more, so late passes of the old leaders run into their fence too: at
    // no scrape has an old leader sent a write since its pause.
    let watch_until = Instant::now() + Duration::from_secs(3);
    let mut after = Vec::new();
    loop {
        after.clear();
        for (r, b) in leaders.iter().zip(&before) {
            let now = writes(r).await;
            assert_eq!(
                (now.kube_sent, now.slurm_sent),
                (b.kube_sent, b.slurm_sent),
                "{} sent writes after it lost its Lease; log:\n{}",
                r.identity,
                log_of(r)
            );
            after.push(now);
        }
        if Instant::now() > watch_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for ((r, b), a) in leaders.iter().zip(&before).zip(&after) {
        println!(
            "{}: writes before the pause {b:?}, after the resume {a:?}",
            r.identity
        );
        let late: Vec<_> = event_times_by(env, &r.identity)
            .await
            .into_iter()
            .filter(|t| *t > paused_at)
            .collect();
        assert!(
            late.is_empty(),
            "{} wrote Events after its pause: {late:?}",
            r.identity
        );
    }
    assert_one_job_per_pod_ever(env).await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_leader_paused_past_its_lease_sends_nothing_after_it_resumes() {
    let env = Env::start(2).await;
    let dir = temp_dir("fence-run");
    let config = write_config(&env, &dir, "");
    let mut a = spawn(&env, &dir, &config, "run", "run-a", "ha-run", &[]);
    wait_holder(&env, "ha-run", "run-a", Duration::from_secs(60)).await;
    let mut b = spawn(&env, &dir, &config, "run", "run-b", "ha-run", &[]);
    pause_leaders_past_their_leases(&env, &["ha-run"], &[&a], &[&b]).await;
    terminate_all([&mut a, &mut b]).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_mode_leaders_paused_past_their_leases_send_nothing_after_they_resume() {
    let env = Env::start(2).await;
    let dir = temp_dir("fence-split");
    let config = write_config(&env, &dir, "");
    let (ls, lc) = ("ha-sched", "ha-ctrl");
    let mut sa = spawn(&env, &dir, &config, "scheduler", "sched-a", ls, &[]);
    let mut ca = spawn(&env, &dir, &config, "controllers", "ctrl-a", lc, &[]);
    wait_holder(&env, ls, "sched-a", Duration::from_secs(60)).await;
    wait_holder(&env, lc, "ctrl-a", Duration::from_secs(60)).await;
    let mut sb = spawn(&env, &dir, &config, "scheduler", "sched-b", ls, &[]);
    let mut cb = spawn(&env, &dir, &config, "controllers", "ctrl-b", lc, &[]);
    pause_leaders_past_their_leases(&env, &[ls, lc], &[&sa, &ca], &[&sb, &cb]).await;
    terminate_all([&mut sa, &mut ca, &mut sb, &mut cb]).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Real Slurm behind the fence, with each submit held at a gate before it reaches the fence:
/// the order of a process whose pass was paused between its decision and its write.
struct HeldThenFenced {
    inner: slurm_bridge::slurm::Fenced<slurm_rest::Client>,
    gate: std::sync::Arc<tokio::sync::Semaphore>,
    entered: tokio::sync::watch::Sender<usize>,
    /// Submits that came back from the fence (sent or refused).
    returned: tokio::sync::watch::Sender<usize>,
}

impl slurm_bridge::slurm::JobControl for HeldThenFenced {
    async fn submit(
        &self,
        desc: &slurm_rest::models::JobDescMsg,
    ) -> Result<u32, slurm_rest::Error> {
        self.entered.send_modify(|n| *n += 1);
        self.gate.acquire().await.expect("open gate").forget();
        let result = self.inner.submit(desc).await;
        self.returned.send_modify(|n| *n += 1);
        result
    }
    async fn update(
        &self,
        id: u32,
        desc: &slurm_rest::models::JobDescMsg,
    ) -> Result<(), slurm_rest::Error> {
        self.inner.update(id, desc).await
    }
    async fn cancel(&self, id: u32) -> Result<(), slurm_rest::Error> {
        self.inner.cancel(id).await
    }
}

impl SlurmJobs for HeldThenFenced {
    async fn list_jobs(&self) -> Result<Vec<slurm_rest::models::JobInfo>, slurm_rest::Error> {
        self.inner.list_jobs().await
    }
    async fn job_states(
        &self,
    ) -> Result<Vec<slurm_rest::models::JobStateEntry>, slurm_rest::Error> {
        self.inner.job_states().await
    }
    async fn job_states_of(
        &self,
        ids: &[u32],
    ) -> Result<Vec<slurm_rest::models::JobStateEntry>, slurm_rest::Error> {
        self.inner.job_states_of(ids).await
    }
    async fn job(&self, id: u32) -> Result<Option<slurm_rest::models::JobInfo>, slurm_rest::Error> {
        self.inner.job(id).await
    }
}

impl slurm_bridge::slurm::SlurmNodes for HeldThenFenced {
    async fn list_nodes(&self) -> Result<Vec<slurm_rest::models::Node>, slurm_rest::Error> {
        self.inner.list_nodes().await
    }
}

/// The fence itself, deterministically: the scheduler still believes it leads (its leadership
/// signal stays true, as in a resumed process whose tasks run before the Lease watch), a pass is
/// held right before its submit, and the fence's deadline passes meanwhile. Nothing reaches
/// Slurm or the API server (the submit and every later write of the retried passes are
/// refused); once the fence opens again the pod is bound with one job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_decided_before_the_deadline_is_not_sent_after_it() {
    let mut env = Env::start(1).await;
    let fence = slurm_bridge::leader::Fence::closed();
    fence.set(Some(Instant::now() + Duration::from_secs(3600)));
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let (entered, _) = tokio::sync::watch::channel(0usize);
    let (returned, _) = tokio::sync::watch::channel(0usize);
    let slurm = HeldThenFenced {
        inner: slurm_bridge::slurm::Fenced::new(e2e::rest_client(&env.slurm), fence.clone()),
        gate: gate.clone(),
        entered: entered.clone(),
        returned: returned.clone(),
    };
    let client = slurm_bridge::k8s::fenced::client(&env.kube, fence.clone());
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let mut registry = prometheus_client::registry::Registry::default();
    let handle = slurm_bridge::scheduler::run(
        client,
        slurm,
        e2e::scheduler_options(&env.slurm),
        &mut registry,
        tokio::sync::watch::channel(true).1,
        tokio::sync::watch::channel(false).0,
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    )
    .await;
    env.adopt_scheduler(handle, stop_tx).await;

    let created = env.create_pod(pod("stale", json!({}), json!({}))).await;
    let mut seen = entered.subscribe();
    tokio::time::timeout(Duration::from_secs(60), seen.wait_for(|n| *n >= 1))
        .await
        .expect("a pass reaches its submit")
        .unwrap();
    // The deadline passes while the pass is held; then every submit may go on to the fence.
    fence.set(Some(Instant::now()));
    gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS);
    let mut back = returned.subscribe();
    tokio::time::timeout(Duration::from_secs(30), back.wait_for(|n| *n >= 1))
        .await
        .expect("the held submit comes back")
        .unwrap();
    // Watched for 3 s while the pass is retried: no job, no write to the pod, no Event.
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        assert!(
            env.slurm_job_ids().is_empty(),
            "a job was submitted past the deadline"
        );
        let p = env.pods().get("stale").await.unwrap();
        assert_eq!(
            p.metadata.resource_version, created.metadata.resource_version,
            "the pod was written past the deadline"
        );
        assert!(
            env.event_reasons("stale").await.is_empty(),
            "an Event past the deadline"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(fence.sent("slurm"), 0);
    assert!(
        fence.refused("slurm") >= 1,
        "the held submit was not refused"
    );
    println!(
        "refused: {} Slurm and {} Kubernetes writes",
        fence.refused("slurm"),
        fence.refused("kubernetes")
    );

    // Leading again (a newer renewal seen): the pod is scheduled, with one job.
    fence.set(Some(Instant::now() + Duration::from_secs(3600)));
    env.wait_bound(&["stale".into()], Duration::from_secs(90))
        .await;
    assert_eq!(env.slurm_job_ids().len(), 1);
    env.assert_consistent().await;
    env.assert_invariants().await;
}
