//! High availability on real Slurm and the real control plane, with `slurm-bridge` processes as
//! an admin runs them, two replicas each under leader election:
//! - fencing: the leader is paused (SIGSTOP) past its Lease, the standby takes over and acts,
//!   the old leader is resumed and sends nothing (its own write counter, Slurm's job list, the
//!   API server's Events), for `run` and for the split mode (`scheduler` and `controllers`, each
//!   with its Lease);
//! - failover: the leader is killed (SIGKILL) during a churn of pods, again and again; no pod is
//!   ever in two live Slurm jobs, and the failover times are printed (`HA_KILLS=10` for the full
//!   run, see the README);
//! - admission: two replicas serve the webhooks with certificates of one CA shared through a
//!   Secret, and the API server calls both with the one caBundle.

mod e2e;

use e2e::{Env, NS, free_port, pod};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use slurm_bridge::slurm::SlurmJobs;
use slurm_bridge::workload::admin_comment::AdminComment;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

/// A fresh folder for one test's replicas.
fn temp_dir(tag: &str) -> PathBuf {
    e2e::temp_dir(&format!("sb-ha-{tag}"))
}

/// One `slurm-bridge` process under leader election.
struct Replica {
    identity: String,
    child: Child,
    probe: SocketAddr,
    log: PathBuf,
}

impl Drop for Replica {
    /// A replica left running by a failed test is killed, so it cannot act on a later one.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Writes the config file every replica of a test reads.
fn write_config(env: &Env, dir: &Path, extra: &str) -> PathBuf {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "schedulerName: {}\nslurmRestApi: {}\npartition: slurm-bridge\n{extra}",
            e2e::SCHEDULER,
            env.slurm.rest_url()
        ),
    )
    .unwrap();
    config
}

/// The `slurm-bridge` binary: cargo's, or `SLURM_BRIDGE_BIN` (a copy kept apart, when other
/// builds share the target directory and may replace cargo's meanwhile).
fn bridge_binary() -> PathBuf {
    std::env::var_os("SLURM_BRIDGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_slurm-bridge")))
}

/// Starts `slurm-bridge <subcommand>` as `identity` (POD_NAME), competing for `lease`.
fn spawn(
    env: &Env,
    dir: &Path,
    config: &Path,
    subcommand: &str,
    identity: &str,
    lease: &str,
    extra: &[String],
) -> Replica {
    let log = dir.join(format!("{identity}.log"));
    let child = Command::new(bridge_binary())
        .arg(subcommand)
        .arg("--config")
        .arg(config)
        .args([
            "--leader-elect=true",
            "--leader-elect-namespace",
            NS,
            "--leader-elect-name",
            lease,
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--slurm-poll-interval",
            "200ms",
        ])
        .args(extra)
        .env("POD_NAME", identity)
        .env("KUBECONFIG", env.kube_env.kubeconfig())
        .env("SLURM_JWT_FILE", env.slurm.token_file())
        .env("RUST_LOG", "info,kube_client=warn,kube_runtime=warn")
        .env_remove("SLURM_JWT")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start slurm-bridge");
    // The probe port the process bound, as it logs it (a port picked here could be taken).
    let deadline = Instant::now() + Duration::from_secs(60);
    let probe = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(addr) = text
            .lines()
            .find(|l| l.contains("serving /healthz, /readyz and /metrics"))
            .and_then(|l| l.split("addr=").nth(1))
            .and_then(|a| a.split_whitespace().next())
            .and_then(|a| a.parse::<SocketAddr>().ok())
        {
            break addr;
        }
        assert!(
            Instant::now() < deadline,
            "{identity} serves no probes; log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    Replica {
        identity: identity.into(),
        child,
        probe,
        log,
    }
}

fn signal(r: &Replica, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &r.child.id().to_string()])
            .status()
            .unwrap()
            .success(),
        "kill {sig} {}",
        r.identity
    );
}

fn log_of(r: &Replica) -> String {
    std::fs::read_to_string(&r.log).unwrap_or_default()
}

/// Stops every replica with SIGTERM; each must exit cleanly.
async fn terminate_all<'a>(replicas: impl IntoIterator<Item = &'a mut Replica>) {
    for r in replicas {
        let status = e2e::terminate(&mut r.child).await;
        assert!(
            status.success(),
            "{}: {status:?}; log:\n{}",
            r.identity,
            log_of(r)
        );
    }
}

/// GET /metrics of a replica (plain HTTP/1.0), with a timeout.
async fn scrape(addr: SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: probe\r\n\r\n")
            .await
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        Some(out)
    };
    tokio::time::timeout(Duration::from_secs(5), get)
        .await
        .ok()
        .flatten()
}

/// The sum of the samples of `name` whose labels include every `labels` pair.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next().is_some_and(|n| n == name))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Writes of a replica that passed its fence, by target, and those refused.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Writes {
    kube_sent: f64,
    slurm_sent: f64,
    fenced: f64,
}

async fn writes(r: &Replica) -> Writes {
    let text = scrape(r.probe)
        .await
        .unwrap_or_else(|| panic!("metrics of {}", r.identity));
    let m = "slurm_bridge_leader_writes_total";
    if std::env::var("HA_DEBUG").is_ok() {
        for l in text.lines().filter(|l| l.contains("leader")) {
            eprintln!("{}: {l}", r.identity);
        }
    }
    Writes {
        kube_sent: sample(&text, m, &[("target", "kubernetes"), ("outcome", "sent")]),
        slurm_sent: sample(&text, m, &[("target", "slurm"), ("outcome", "sent")]),
        fenced: sample(&text, m, &[("outcome", "fenced")]),
    }
}

async fn holder(env: &Env, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(env.kube.clone(), NS)
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// Waits until `lease` is held by `who`; returns when.
async fn wait_holder(env: &Env, lease: &str, who: &str, timeout: Duration) -> Instant {
    let deadline = Instant::now() + timeout;
    loop {
        if holder(env, lease).await.as_deref() == Some(who) {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "Lease {lease} not held by {who} within {timeout:?} (holder {:?})",
            holder(env, lease).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the log of `r` says it stopped leading.
async fn wait_stood_down(r: &Replica, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !log_of(r).contains("leadership changed leader=false") {
        assert!(
            Instant::now() < deadline,
            "{} did not stand down within {timeout:?}; log:\n{}",
            r.identity,
            log_of(r)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The write counters of `replicas` once they have not moved for a second (at most 30 s).
async fn quiet_writes(replicas: &[&Replica]) -> Vec<Writes> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = Vec::new();
    let mut still_since = Instant::now();
    loop {
        let mut now = Vec::new();
        for r in replicas {
            now.push(writes(r).await);
        }
        if now != last {
            (last, still_since) = (now, Instant::now());
        } else if still_since.elapsed() >= Duration::from_secs(1) {
            return last;
        }
        assert!(
            Instant::now() < deadline,
            "the leaders never stopped writing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Pods (`ns/name`) in bridge jobs (live ones only: pending or running), each with the jobs
/// listing it.
async fn pods_in_jobs(env: &Env, live_only: bool) -> BTreeMap<String, BTreeSet<u32>> {
    let live: BTreeSet<u32> = env.active_job_ids().into_iter().collect();
    let mut by_pod: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let Ok(jobs) = env.rest.list_jobs().await else {
        return by_pod;
    };
    for j in jobs
        .iter()
        .filter(|j| !live_only || live.contains(&j.job_id))
    {
        let Ok(c) = AdminComment::decode(j.admin_comment.as_deref().unwrap_or("")) else {
            continue;
        };
        for p in c.pods {
            by_pod.entry(p).or_default().insert(j.job_id);
        }
    }
    by_pod
}

/// No pod is in two live Slurm jobs.
async fn assert_no_duplicate_job(env: &Env) {
    for (p, jobs) in pods_in_jobs(env, true).await {
        assert!(
            jobs.len() <= 1,
            "pod {p} is in {} live jobs: {jobs:?}",
            jobs.len()
        );
    }
}

/// No pod was ever submitted twice: each is in at most one Slurm job of any state (the tests
/// never reuse a pod name).
async fn assert_one_job_per_pod_ever(env: &Env) {
    for (p, jobs) in pods_in_jobs(env, false).await {
        assert!(
            jobs.len() <= 1,
            "pod {p} was submitted {} times: {jobs:?}",
            jobs.len()
        );
    }
}

/// Events of the bridge written by `instance` (events.k8s.io reportingInstance): their times.
async fn event_times_by(env: &Env, instance: &str) -> Vec<SystemTime> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.kube.clone());
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reporting_instance.as_deref() == Some(instance))
        .filter_map(|e| {
            e.event_time
                .map(|t| SystemTime::from(t.0))
                .or_else(|| e.metadata.creation_timestamp.map(|t| SystemTime::from(t.0)))
        })
        .collect()
}

fn sleeper(name: &str, seconds: u32) -> serde_json::Value {
    pod(
        name,
        json!({}),
        json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", seconds.to_string()],
                            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
        }),
    )
}

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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

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
                env.create_pod(sleeper(&name, 2)).await;
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
            ) && p
                .finalizers()
                .iter()
                .any(|f| f == slurm_bridge::wellknown::FINALIZER)
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

/// Two `run` replicas with self-managed certificates and the CA in one Secret: the first
/// creates it, the second takes it; both serve certificates the one caBundle verifies, and the
/// API server calls both (a webhook configuration with one webhook per replica, failurePolicy
/// Fail) while only one of them leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_serve_admission_with_one_shared_ca() {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let env = Env::start(2).await;
    let client = env.kube.clone();
    let managed = "hpc";
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": managed}}),
    )
    .unwrap();
    Api::all(client.clone())
        .create(&Default::default(), &ns)
        .await
        .unwrap();
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap())
        .collect();
    // One webhook per replica in each configuration; the caBundle is left for the bridge.
    let hooks = |path: &str, resources: serde_json::Value| -> Vec<serde_json::Value> {
        addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                json!({
                    "name": format!("replica{i}.pods.slinky.slurm.net"),
                    "clientConfig": {"url": format!("https://{a}{path}")},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": resources, "scope": "Namespaced"}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": managed}},
                    "failurePolicy": "Fail", "sideEffects": "None",
                    "admissionReviewVersions": ["v1"], "timeoutSeconds": 10,
                })
            })
            .collect()
    };
    let name = "ha-admission";
    let mc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name}, "webhooks": hooks("/mutate--v1-pod", json!(["pods"])),
    }))
    .unwrap();
    let vc: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name}, "webhooks": hooks("/validate--v1-pod", json!(["pods"])),
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&Default::default(), &mc)
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&Default::default(), &vc)
        .await
        .unwrap();

    let dir = temp_dir("admission");
    let config = write_config(&env, &dir, &format!("managedNamespaces: [{managed}]\n"));
    let webhook_args = |i: usize| -> Vec<String> {
        let certs = dir.join(format!("certs-{i}"));
        [
            "--listen",
            &addrs[i].to_string(),
            "--cert-dir",
            certs.to_str().unwrap(),
            "--self-signed-names",
            "127.0.0.1",
            "--webhook-configurations",
            name,
            "--self-signed-ca-secret",
            "ha-admission-ca",
            "--self-signed-ca-secret-namespace",
            NS,
            "--self-signed-check-interval",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // Both start at once: they race to create the Secret; one wins, the other takes its CA.
    let mut replicas = vec![
        spawn(
            &env,
            &dir,
            &config,
            "run",
            "adm-a",
            "ha-adm",
            &webhook_args(0),
        ),
        spawn(
            &env,
            &dir,
            &config,
            "run",
            "adm-b",
            "ha-adm",
            &webhook_args(1),
        ),
    ];
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ca_pem = loop {
        if let Some(s) = secrets.get_opt("ha-admission-ca").await.unwrap()
            && let Some(crt) = s.data.as_ref().and_then(|d| d.get("ca.crt"))
        {
            break String::from_utf8(crt.0.clone()).unwrap();
        }
        assert!(Instant::now() < deadline, "no CA Secret");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Both replicas serve a certificate the shared CA verifies.
    for (i, a) in addrs.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match e2e::admission::tls_connect(*a, &ca_pem).await {
                Ok(_) => break,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "replica {i} serves no certificate of the shared CA: {e}; log:\n{}",
                        log_of(&replicas[i])
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
    // The leader fills every webhook's caBundle with that CA.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get(name)
            .await
            .unwrap();
        let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .get(name)
            .await
            .unwrap();
        let bundles: Vec<Option<Vec<u8>>> = m
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.client_config.ca_bundle.map(|b| b.0))
            .chain(
                v.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| w.client_config.ca_bundle.map(|b| b.0)),
            )
            .collect();
        if bundles.len() == 4
            && bundles
                .iter()
                .all(|b| b.as_deref() == Some(ca_pem.as_bytes()))
        {
            break;
        }
        assert!(Instant::now() < deadline, "caBundles not all the shared CA");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The API server calls both replicas for each pod (each webhook once): pods are created.
    let pods: Api<Pod> = Api::namespaced(client.clone(), managed);
    for i in 0..3 {
        let p: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("admitted-{i}"), "namespace": managed},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                                     "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]},
        }))
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let created = loop {
            match pods.create(&Default::default(), &p).await {
                Ok(p) => break p,
                Err(e) => {
                    assert!(Instant::now() < deadline, "pod refused: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        };
        assert_eq!(
            created
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.as_deref()),
            Some(e2e::SCHEDULER),
            "mutated by the webhooks"
        );
    }
    for r in &replicas {
        let text = scrape(r.probe).await.expect("metrics");
        let served = sample(&text, "slurm_bridge_admission_requests_total", &[]);
        assert!(
            served >= 6.0,
            "{} answered {served} admission requests",
            r.identity
        );
    }
    // Each replica's cert dir holds the shared CA: one CA, whichever replica made it.
    for i in 0..2 {
        let crt = std::fs::read_to_string(dir.join(format!("certs-{i}/ca.crt"))).unwrap();
        assert_eq!(crt, ca_pem, "replica {i} keeps another CA");
    }
    terminate_all(&mut replicas).await;
    env.assert_invariants().await;
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
}
