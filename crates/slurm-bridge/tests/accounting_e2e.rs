//! What Slurm's accounting policies do to pods, on real Slurm with slurmdbd (associations, limits
//! and QoS enforced, multifactor priority with fairshare, `PreemptType=preempt/qos`), real slurmd
//! nodes that are also the Kubernetes nodes (hybrid: batch jobs and pods on the same hosts), a
//! real control plane, and the scheduler and controllers under tenants:
//! - QoS preemption both ways: a pod of a preempting QoS requeues a batch job of a lower one and
//!   is bound on its node; a batch job of a higher QoS preempts a pod's job, and the pod is
//!   removed as preemption does (`DisruptionTarget`), its Job's replacement waiting its turn.
//! - Fairshare: pods and batch jobs of one Slurm association add to one usage; with both
//!   tenants' pods waiting, the tenant without usage starts first, and `sprio` shows why.
//!
//! Every test waits on what it observes, with deadlines, and checks the lifecycle invariants.

mod e2e;

use e2e::controllers::{Controllers, disruption};
use e2e::tenants::sacctmgr;
use e2e::wait_for;
use e2e::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use slurm_testenv::conf::{Policy, PreemptMode, PreemptType};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
/// How long Slurm may take to fold usage into fairshare: a job's usage reaches `sshare` seconds
/// after it ends, the factors in `sprio` at the next priority calculation (`PriorityCalcPeriod`
/// is one minute at least).
const FAIRSHARE_WAIT: Duration = Duration::from_secs(120);

/// Two tenants, one Slurm account and user each; team-a may ask for QoS `high`.
const TENANTS: &str = "\
tenants:
  - name: team-a
    namespaces: [team-a]
    account: team-a
    user: alice
    qos: [normal, high]
  - name: team-b
    namespaces: [team-b]
    account: team-b
    user: bob
    qos: [normal]
";

/// One hybrid node (`node-1`: a real slurmd, and the Kubernetes node of the same name) on Slurm
/// with accounting and QoS preemption (slurm.conf changed by `extra_lines`); accounts team-a and
/// team-b with equal shares, users alice (team-a, QoS normal and high) and bob (team-b), QoS
/// `high` preempting `normal` by requeue; the tenants' namespaces; the scheduler and controllers.
async fn start(extra_lines: &[&str]) -> (Env, Controllers) {
    let slurm_opts = slurm_testenv::InstanceOptions {
        slurmd_nodes: 1,
        accounting: true,
        policy: Policy {
            preempt: Some(PreemptMode::Requeue),
            preempt_type: PreemptType::Qos,
            extra_lines: extra_lines.iter().map(|l| l.to_string()).collect(),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut env = Env::start_with(slurm_opts, kube_testenv::InstanceOptions::with_nodes(1)).await;
    for (user, uid) in [("alice", 2001), ("bob", 2002)] {
        env.slurm.add_unix_user(user, uid).expect("unix user");
    }
    for cmd in [
        "add qos high",
        "modify qos high set Preempt=normal PreemptMode=requeue Priority=1000",
        "add account team-a,team-b Fairshare=10",
        "add user alice account=team-a qos=normal,high defaultqos=normal",
        "add user bob account=team-b qos=normal defaultqos=normal",
        // root's batch jobs (sbatch here runs as root) may use `high` too.
        "modify user root set qos+=high",
    ] {
        sacctmgr(&env, cmd);
    }
    e2e::helm::create_namespaces(&env, &["team-a", "team-b"]).await;
    env.start_scheduler_with_tenants(rest_client(&env.slurm), TENANTS)
        .await;
    let controllers = Controllers::start(&env, |_| {}).await;
    (env, controllers)
}

/// Submits a batch job with `sbatch --parsable ARGS` (as root; `--uid=alice` for alice), its
/// output discarded; returns its id.
fn sbatch(env: &Env, args: &[&str]) -> String {
    let mut argv = vec![
        "sbatch",
        "--parsable",
        "--chdir=/slurm-testenv/work",
        "--output=/dev/null",
    ];
    argv.extend_from_slice(args);
    env.slurm.run(&argv).expect("sbatch").trim().to_string()
}

async fn wait_batch_state(env: &Env, id: &str, state: &str) {
    wait_some(&format!("batch job {id} {state}"), WAIT, async || {
        (job_field(env, id, "JobState") == state).then_some(())
    })
    .await;
}

fn pods(env: &Env, ns: &str) -> Api<Pod> {
    Api::namespaced(env.kube.clone(), ns)
}

/// A bridge pod in `ns` running `sleep SECS` (`infinity`: until deleted), stopped 1 s after its
/// deletion.
fn pod_in(ns: &str, name: &str, secs: &str, annotations: Value) -> Pod {
    let mut p = pod(
        name,
        annotations,
        json!({
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", secs],
                            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
        }),
    );
    p["metadata"]["namespace"] = json!(ns);
    serde_json::from_value(p).unwrap()
}

async fn create_pod(env: &Env, ns: &str, name: &str, secs: &str, annotations: Value) {
    pods(env, ns)
        .create(&PostParams::default(), &pod_in(ns, name, secs, annotations))
        .await
        .unwrap();
}

/// Waits until `check` holds for pod `ns/name` (`None` once it is gone).
async fn wait_pod(
    env: &Env,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(Option<&Pod>) -> bool,
) -> Option<Pod> {
    let api = pods(env, ns);
    wait_for(&format!("pod {ns}/{name}: {what}"), WAIT, || {
        let api = api.clone();
        let check = &check;
        async move {
            let p = api.get_opt(name).await.map_err(|e| e.to_string())?;
            if check(p.as_ref()) {
                Ok(p)
            } else {
                Err(p.as_ref().map_or("gone".into(), describe))
            }
        }
    })
    .await
}

/// The pod's PodScheduled=False message once its reason is `reason`.
async fn wait_reason(env: &Env, ns: &str, name: &str, reason: &str) -> String {
    wait_pod(env, ns, name, &format!("PodScheduled={reason}"), |p| {
        p.and_then(scheduled_condition)
            .is_some_and(|c| c.0 == "False" && c.1 == reason)
    })
    .await
    .and_then(|p| scheduled_condition(&p))
    .unwrap()
    .2
}

fn pending_reason(message: &str) -> bool {
    message.contains("Resources") || message.contains("Priority")
}

/// Deletes pod `ns/name` and waits until it is gone (its finalizer released).
async fn delete_pod(env: &Env, ns: &str, name: &str) {
    pods(env, ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    wait_pod(env, ns, name, "gone", |p| p.is_none()).await;
}

/// The reasons of the Events regarding pod `ns/name`.
async fn event_reasons_in(env: &Env, ns: &str, name: &str) -> Vec<String> {
    let gvk = kube::api::GroupVersionKind::gvk("events.k8s.io", "v1", "Event");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "events");
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(env.kube.clone(), ns, &ar);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.data["regarding"]["name"] == name)
        .map(|e| e.data["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A `batch/v1` Job in `ns` of one pod running `sleep infinity` for the bridge.
fn k8s_job(ns: &str, name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 6,
            "template": {
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "main", "image": "busybox",
                                    "command": ["sleep", "infinity"],
                                    "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
                },
            },
        },
    }))
    .unwrap()
}

/// The one live (not being deleted, not finished) pod of Job `ns/job`, once there is one.
async fn job_pod(env: &Env, ns: &str, job: &str) -> Pod {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    wait_some(&format!("a live pod of Job {ns}/{job}"), WAIT, async || {
        let mut live: Vec<Pod> = pods(env, ns)
            .list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !is_terminal(p))
            .collect();
        (live.len() == 1).then(|| live.remove(0))
    })
    .await
}

/// `sshare -a -n -P`'s RawUsage of `account`/`user` (the association both a user's batch jobs
/// and a tenant's pods charge).
fn raw_usage(env: &Env, account: &str, user: &str) -> (u64, String) {
    let out = env
        .slurm
        .run(&["sshare", "-a", "-n", "-P"])
        .expect("sshare");
    // Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare
    let usage = out
        .lines()
        .map(|l| l.trim().split('|').collect::<Vec<_>>())
        .find(|f| f.len() > 4 && f[0] == account && f[1] == user)
        .unwrap_or_else(|| panic!("sshare has no {account}/{user} row: {out}"))[4]
        .parse()
        .expect("RawUsage");
    (usage, out)
}

/// Waits until `account`/`user`'s RawUsage exceeds `above`; returns it and the time it took.
async fn wait_usage_above(env: &Env, account: &str, user: &str, above: u64) -> (u64, Duration) {
    let start = Instant::now();
    let usage = wait_for(
        &format!("sshare RawUsage of {account}/{user} above {above}"),
        FAIRSHARE_WAIT,
        || async {
            let (usage, out) = raw_usage(env, account, user);
            if usage > above { Ok(usage) } else { Err(out) }
        },
    )
    .await;
    (usage, start.elapsed())
}

/// `sprio`'s weighted FAIRSHARE factor of each pending job in `ids`, once it lists them all.
fn fairshare_factors(env: &Env, ids: &[u32]) -> Option<Vec<u64>> {
    let out = env
        .slurm
        .run(&["sprio", "-h", "-o", "%i %u %F"])
        .expect("sprio");
    ids.iter()
        .map(|id| {
            out.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|f| f.len() == 3 && f[0] == id.to_string())
                .and_then(|f| f[2].parse().ok())
        })
        .collect()
}

/// 1. QoS preemption both ways, on one hybrid node: (a) a pod of tenant team-a asking QoS
///    `high` requeues bob's batch job of QoS `normal` running there, and is bound on the node;
///    (b) a batch job of QoS `high` preempts the pod of a team-a Job (QoS `normal`, the tenant's
///    default): the pod gets `DisruptionTarget` and is deleted, its job ends, and the Job's
///    replacement waits with Slurm's reason until the batch job ends, then is bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_preemption_both_ways_between_pods_and_batch_jobs() {
    let (env, controllers) = start(&[]).await;

    // (a) bob's batch job holds the node; team-a's urgent pod takes it.
    let batch = sbatch(
        &env,
        &[
            "--uid=bob",
            "--account=team-b",
            "--qos=normal",
            "--exclusive",
            "--requeue",
            "--wrap",
            "sleep 300",
        ],
    );
    wait_batch_state(&env, &batch, "RUNNING").await;
    let created = Instant::now();
    create_pod(
        &env,
        "team-a",
        "urgent",
        "infinity",
        json!({"slurmjob.slinky.slurm.net/qos": "high"}),
    )
    .await;
    // Watch both sides: when the batch job is seen requeued, when the pod is bound.
    let (mut requeued, mut bound) = (None, None);
    wait_some(
        "the batch job requeued and the urgent pod bound",
        WAIT,
        async || {
            if requeued.is_none() && job_field(&env, &batch, "JobState") == "PENDING" {
                requeued = Some(created.elapsed());
            }
            if bound.is_none()
                && pods(&env, "team-a")
                    .get("urgent")
                    .await
                    .is_ok_and(|p| node_name_is_set(&p))
            {
                bound = Some(created.elapsed());
            }
            requeued.zip(bound)
        },
    )
    .await;
    let (requeued, bound) = (requeued.unwrap(), bound.unwrap());
    eprintln!(
        "figure: urgent pod created -> batch job requeued {requeued:?}, -> pod bound {bound:?} \
         ({:?} after the requeue)",
        bound.saturating_sub(requeued)
    );
    let urgent = pods(&env, "team-a").get("urgent").await.unwrap();
    assert_eq!(node_of(&urgent), "node-1");
    let job = env.scontrol_job(job_id_of(&urgent));
    for want in [
        "UserId=alice(",
        "Account=team-a ",
        "QOS=high",
        "JobState=RUNNING",
    ] {
        assert!(job.contains(want), "missing {want} in {job}");
    }
    assert_eq!(job_field(&env, &batch, "Restarts"), "1");
    assert_eq!(job_field(&env, &batch, "QOS"), "normal");
    env.assert_invariants().await;

    // The pod leaves and its job ends; the requeued batch job waits out the delay Slurm gives
    // a requeued job (reason BeginTime) before it runs again.
    delete_pod(&env, "team-a", "urgent").await;
    env.wait_job_ended(job_id_of(&urgent), WAIT).await;
    assert_eq!(job_field(&env, &batch, "JobState"), "PENDING");
    assert_eq!(job_field(&env, &batch, "Reason"), "BeginTime");
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &batch]).unwrap();
    wait_batch_state(&env, &batch, "CANCELLED").await;

    // (b) A team-a Job's pod (QoS normal) runs; a batch job of QoS high takes the node.
    let jobs: Api<Job> = Api::namespaced(env.kube.clone(), "team-a");
    jobs.create(&PostParams::default(), &k8s_job("team-a", "steady"))
        .await
        .unwrap();
    let first = job_pod(&env, "team-a", "steady").await.name_any();
    let first = env
        .wait_bound_in("team-a", std::slice::from_ref(&first), WAIT)
        .await
        .remove(0);
    let first_job = job_id_of(&first);
    assert_eq!(job_field(&env, first_job, "QOS"), "normal");
    let submitted = Instant::now();
    let high = sbatch(&env, &["--qos=high", "--exclusive", "--wrap", "sleep 300"]);
    wait_batch_state(&env, &high, "RUNNING").await;
    let removed = wait_pod(
        &env,
        "team-a",
        &first.name_any(),
        "DisruptionTarget and deletion",
        |p| p.is_some_and(|p| disruption(p).is_some() && p.metadata.deletion_timestamp.is_some()),
    )
    .await
    .unwrap();
    let disrupted = submitted.elapsed();
    // Under preempt/qos with PreemptMode=requeue an external job is not requeued: Slurm 26.05
    // ends it PREEMPTED (docs/hybrid.md).
    let (reason, message) = disruption(&removed).unwrap();
    assert_eq!(reason, "SlurmJobPreempted", "{message}");
    assert!(message.contains(&first_job.to_string()), "{message}");
    let events = event_reasons_in(&env, "team-a", &first.name_any()).await;
    assert!(
        events.iter().any(|r| r == "SlurmJobPreempted"),
        "no SlurmJobPreempted Event: {events:?}"
    );
    assert_eq!(removed.metadata.deletion_grace_period_seconds, Some(2));
    wait_pod(&env, "team-a", &first.name_any(), "gone", |p| p.is_none()).await;
    env.wait_job_ended(first_job, WAIT).await;
    eprintln!(
        "figure: batch job of QoS high submitted -> preempted pod marked DisruptionTarget and \
         deleted {disrupted:?}, gone {:?}",
        submitted.elapsed()
    );
    assert_eq!(job_field(&env, first_job, "JobState"), "PREEMPTED");

    // The Job's replacement waits for the node with Slurm's reason, then runs when it frees.
    let replacement = job_pod(&env, "team-a", "steady").await.name_any();
    assert_ne!(replacement, first.name_any());
    let msg = wait_reason(&env, "team-a", &replacement, "SlurmJobPending").await;
    assert!(pending_reason(&msg), "{msg}");
    env.assert_invariants().await;
    env.slurm.run(&["scancel", &high]).unwrap();
    let bound = env
        .wait_bound_in("team-a", std::slice::from_ref(&replacement), WAIT)
        .await;
    assert_eq!(node_of(&bound[0]), "node-1");
    assert_ne!(job_id_of(&bound[0]), first_job, "a new job, not the old");
    env.assert_invariants().await;

    jobs.delete("steady", &DeleteParams::background())
        .await
        .unwrap();
    // The job is cancelled as its pod goes, and the pod controller releases the pod after (a
    // conflict may retry it): the invariants hold once both are done.
    let pods = Api::<Pod>::namespaced(env.kube.clone(), "team-a");
    wait_some(
        "no live external job and no pod of team-a holding the finalizer",
        WAIT,
        async || {
            let held = pods
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .any(slurm_bridge::wellknown::holds_finalizer);
            (env.active_job_ids().is_empty() && !held).then_some(())
        },
    )
    .await;
    env.assert_invariants().await;
    controllers.stop().await;
}

/// 2. Fairshare, one tree for batch jobs and pods: a team-a pod that ran to completion and a
///    batch job of alice (account team-a) both add to the usage of association team-a/alice;
///    then, with the node busy and a team-a pod waiting before a team-b pod, `sprio` gives
///    team-b's job the larger FAIRSHARE factor and team-b's pod starts first when the node frees.
///    Usage does not decay here (`PriorityDecayHalfLife=0`, which Slurm accepts only with a
///    `PriorityUsageResetPeriod`), so each job's usage only adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_without_usage_starts_first_and_batch_jobs_and_pods_share_one_fairshare_tree() {
    let (env, controllers) =
        start(&["PriorityDecayHalfLife=0", "PriorityUsageResetPeriod=YEARLY"]).await;
    assert_eq!(raw_usage(&env, "team-a", "alice").0, 0);
    assert_eq!(raw_usage(&env, "team-b", "bob").0, 0);

    // A team-a pod runs to completion: its job's usage is team-a/alice's.
    create_pod(&env, "team-a", "warmup", "3", json!({})).await;
    let warmup = env
        .wait_bound_in("team-a", &["warmup".into()], WAIT)
        .await
        .remove(0);
    wait_phase(&pods(&env, "team-a"), "warmup", "Succeeded", WAIT).await;
    env.wait_job_ended(job_id_of(&warmup), WAIT).await;
    let ended = Instant::now();
    let (from_pod, took) = wait_usage_above(&env, "team-a", "alice", 0).await;
    eprintln!(
        "figure: team-a pod's job usage {from_pod} in sshare {took:?} after the job ended ({:?})",
        ended.elapsed()
    );

    // alice's batch job, charged to team-a, adds to the same association's usage.
    let batch = sbatch(
        &env,
        &[
            "--uid=alice",
            "--account=team-a",
            "--exclusive",
            "--wrap",
            "sleep 3",
        ],
    );
    wait_batch_state(&env, &batch, "COMPLETED").await;
    let (with_batch, took) = wait_usage_above(&env, "team-a", "alice", from_pod).await;
    eprintln!("figure: with alice's batch job {with_batch} in sshare {took:?} after it completed");
    assert_eq!(raw_usage(&env, "team-b", "bob").0, 0, "team-b used nothing");
    let acct = env
        .slurm
        .run(&[
            "sacct",
            "-X",
            "-n",
            "-P",
            "-j",
            &format!("{},{batch}", job_id_of(&warmup)),
            "-o",
            "JobID,User,Account",
        ])
        .unwrap();
    for id in [job_id_of(&warmup).to_string(), batch.clone()] {
        assert!(
            acct.lines().any(|l| l == format!("{id}|alice|team-a")),
            "{acct}"
        );
    }

    // The node is busy; team-a's pod waits first, then team-b's.
    let busy = sbatch(&env, &["--exclusive", "--wrap", "sleep 300"]);
    wait_batch_state(&env, &busy, "RUNNING").await;
    create_pod(&env, "team-a", "a-waits", "infinity", json!({})).await;
    let a_msg = wait_reason(&env, "team-a", "a-waits", "SlurmJobPending").await;
    create_pod(&env, "team-b", "b-waits", "infinity", json!({})).await;
    let b_msg = wait_reason(&env, "team-b", "b-waits", "SlurmJobPending").await;
    assert!(
        pending_reason(&a_msg) && pending_reason(&b_msg),
        "{a_msg} / {b_msg}"
    );
    let job_of = async |ns: &str, name: &str| {
        pods(&env, ns)
            .get(name)
            .await
            .unwrap()
            .labels()
            .get(slurm_bridge::wellknown::LABEL_SLURM_JOBID)
            .expect("job id label")
            .parse::<u32>()
            .unwrap()
    };
    let (a_job, b_job) = (
        job_of("team-a", "a-waits").await,
        job_of("team-b", "b-waits").await,
    );
    assert!(a_job < b_job, "team-a's job was submitted first");

    // sprio shows why team-b goes first, once Slurm's priority calculation has run.
    let waited = Instant::now();
    let factors = wait_for(
        "sprio: team-b's FAIRSHARE factor above team-a's",
        FAIRSHARE_WAIT,
        || async {
            match fairshare_factors(&env, &[a_job, b_job]) {
                Some(f) if f[1] > f[0] => Ok(f),
                f => Err(format!(
                    "{f:?}; {}",
                    env.slurm.run(&["sprio", "-l"]).unwrap_or_default()
                )),
            }
        },
    )
    .await;
    eprintln!(
        "figure: sprio FAIRSHARE team-a {} < team-b {} after {:?}",
        factors[0],
        factors[1],
        waited.elapsed()
    );
    let sshare = env.slurm.run(&["sshare", "-a", "-P"]).unwrap();
    eprintln!("{sshare}");

    // The node frees: team-b's pod is bound, team-a's still waits.
    env.slurm.run(&["scancel", &busy]).unwrap();
    let freed = Instant::now();
    let b = env
        .wait_bound_in("team-b", &["b-waits".into()], WAIT)
        .await
        .remove(0);
    eprintln!(
        "figure: team-b's pod bound {:?} after the node freed",
        freed.elapsed()
    );
    assert_eq!(node_of(&b), "node-1");
    let a = pods(&env, "team-a").get("a-waits").await.unwrap();
    assert!(
        !node_name_is_set(&a),
        "team-a's pod bound too: {}",
        describe(&a)
    );
    assert_eq!(job_field(&env, a_job, "JobState"), "PENDING");
    env.assert_invariants().await;

    // Then team-a's, when team-b's pod leaves.
    delete_pod(&env, "team-b", "b-waits").await;
    env.wait_bound_in("team-a", &["a-waits".into()], WAIT).await;
    env.assert_invariants().await;
    delete_pod(&env, "team-a", "a-waits").await;
    env.wait_job_ended(a_job, WAIT).await;
    env.wait_job_ended(b_job, WAIT).await;
    env.assert_invariants().await;
    controllers.stop().await;
}
