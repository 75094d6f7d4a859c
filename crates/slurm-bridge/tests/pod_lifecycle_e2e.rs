//! The pod lifecycle after binding, end to end on real Slurm and the real control plane: the
//! scheduler binds, the controllers end jobs with their pods and pods with their jobs.

mod e2e;

use e2e::controllers::{Controllers, disruption};
use e2e::{Env, job_id_of, pod, sleeper};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use slurm_bridge::wellknown::holds_finalizer;
use std::time::{Duration, Instant};

const BIND: Duration = Duration::from_secs(60);

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

#[tokio::test]
async fn pods_and_jobs_end_together() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    // No safety-net resync during the test: the pod passes counted below are the triggered ones.
    let controllers = Controllers::start(&env, |o| o.resync = Duration::from_secs(3600)).await;

    env.create_pod(sleeper("finishes", "2", 1)).await;
    env.create_pod(sleeper("deleted", "infinity", 3)).await;
    env.create_pod(sleeper("cancelled", "infinity", 1)).await;
    let names: Vec<String> = ["finishes", "deleted", "cancelled"]
        .map(String::from)
        .to_vec();
    let bound = env.wait_bound(&names, BIND).await;
    let ids: Vec<u32> = bound.iter().map(job_id_of).collect();
    let (finishes, deleted, cancelled) = (ids[0], ids[1], ids[2]);
    for p in &bound {
        assert!(
            holds_finalizer(p),
            "{} bound without the finalizer",
            p.name_any()
        );
    }

    // A pod that finishes: its job ends, then its finalizer goes.
    let done = env
        .wait_pod("finishes", "Succeeded", Duration::from_secs(30), |p| {
            p.is_some_and(|p| phase(p) == Some("Succeeded"))
        })
        .await;
    let after_finish = env.wait_job_ended(finishes, Duration::from_secs(10)).await;
    eprintln!("job of a finished pod ended {after_finish:?} after the pod was seen Succeeded");
    env.wait_pod(
        "finishes",
        "finalizer released",
        Duration::from_secs(10),
        |p| p.is_some_and(|p| !holds_finalizer(p)),
    )
    .await;
    assert!(done.is_some());

    // A running pod deleted: its job runs on while the containers stop (grace 3 s), is cancelled
    // after, and the pod disappears. Until the node agent reports the containers stopped (the
    // pod terminal, at the end of the grace), the job runs: checked at every poll, the job read
    // before the pod, so a job seen not running and then a pod seen still running is a job
    // cancelled under running containers. The controller's pod passes are counted meanwhile: a
    // pass ends after the deletion and before the containers stop. The counter is the pod
    // controller's, not this pod's (the controller has no per-pod observable for a pass that
    // keeps a pod): the deletion is the one change the test makes in that window, and the job
    // ending only after the containers (below) shows the controller did act on it.
    let pod_passes = || controllers.handle.metrics.reconcile.reconciles("pod");
    let passes_before = pod_passes();
    let mut passed_while_running = false;
    let deleted_at = Instant::now();
    env.pods()
        .delete("deleted", &DeleteParams::default())
        .await
        .unwrap();
    loop {
        let passes = pod_passes();
        let running = env.job_running(deleted).await;
        let p = env.pods().get_opt("deleted").await.unwrap();
        let stopped = p
            .as_ref()
            .is_none_or(|p| matches!(phase(p), Some("Succeeded" | "Failed")));
        if stopped {
            break;
        }
        assert!(
            running,
            "job {deleted} was cancelled while its pod's containers still ran"
        );
        passed_while_running |= passes > passes_before;
        assert!(
            deleted_at.elapsed() < Duration::from_secs(30),
            "the containers of the deleted pod still run after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopped_after = deleted_at.elapsed();
    eprintln!(
        "containers of the deleted pod stopped {stopped_after:?} after the deletion (grace 3 s); \
         its job ran until then; {} pod passes in between",
        pod_passes() - passes_before
    );
    assert!(
        stopped_after >= Duration::from_secs(3),
        "the containers stopped {stopped_after:?} after the deletion, within the 3 s grace"
    );
    assert!(
        passed_while_running,
        "no pod pass ended between the deletion and the end of the containers"
    );
    env.wait_pod("deleted", "gone", Duration::from_secs(30), |p| p.is_none())
        .await;
    env.wait_job_ended(deleted, Duration::from_secs(10)).await;

    // scancel of a running job: the pod is removed with the condition and the Event.
    let started = Instant::now();
    env.slurm.run(&["scancel", &cancelled.to_string()]).unwrap();
    let marked = env
        .wait_pod(
            "cancelled",
            "DisruptionTarget",
            Duration::from_secs(10),
            |p| p.is_none_or(|p| disruption(p).is_some()),
        )
        .await;
    eprintln!("scancel reached the pod in {:?}", started.elapsed());
    if let Some(p) = &marked {
        let (reason, message) = disruption(p).unwrap();
        assert_eq!(reason, "SlurmJobCancelled");
        assert!(
            message.contains(&cancelled.to_string()) && message.contains("CANCELLED"),
            "{message}"
        );
    }
    env.wait_pod("cancelled", "gone", Duration::from_secs(30), |p| {
        p.is_none()
    })
    .await;
    let events = env.event_reasons("cancelled").await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "SlurmJobCancelled" && n.contains("CANCELLED")),
        "{events:?}"
    );

    env.assert_invariants().await;
    assert!(
        env.active_job_ids().is_empty(),
        "{:?}",
        env.active_job_ids()
    );
}

#[tokio::test]
async fn a_job_with_completions_3_and_parallelism_2_runs_to_completion() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    let _controllers = Controllers::start(&env, |_| {}).await;
    env.create(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "three", "namespace": e2e::NS},
        "spec": {
            "completions": 3,
            "parallelism": 2,
            "template": {"spec": {
                "schedulerName": e2e::SCHEDULER,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "2"],
                                "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
            }},
        },
    }))
    .await;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(env.kube.clone(), e2e::NS);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let job = jobs.get("three").await.unwrap();
        let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
        if succeeded == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Job not complete within 120 s: {:?}",
            job.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every pod's job ends and every finalizer goes.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pods = env.pods().list(&Default::default()).await.unwrap().items;
        if env.active_job_ids().is_empty() && pods.iter().all(|p| !holds_finalizer(p)) {
            assert_eq!(pods.len(), 3);
            break;
        }
        assert!(Instant::now() < deadline, "jobs or finalizers left");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.assert_invariants().await;
}

#[tokio::test]
async fn a_node_deleted_under_a_running_pod_releases_its_job_after_the_grace() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    let _controllers =
        Controllers::start(&env, |o| o.lost_node_grace = Duration::from_secs(3)).await;
    env.create_pod(sleeper("orphan", "infinity", 1)).await;
    let bound = env.wait_bound(&["orphan".into()], BIND).await;
    let id = job_id_of(&bound[0]);
    let node = bound[0].spec.as_ref().unwrap().node_name.clone().unwrap();

    let started = Instant::now();
    env.kube_env.kubectl(&["delete", "node", &node]).unwrap();
    env.wait_job_ended(id, Duration::from_secs(30)).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(3),
        "released after {took:?}, before the 3 s grace"
    );
    eprintln!("job of a pod on a deleted node released after {took:?} (grace 3 s)");
    env.wait_pod(
        "orphan",
        "finalizer released",
        Duration::from_secs(10),
        |p| p.is_none_or(|p| !holds_finalizer(p)),
    )
    .await;
    env.assert_invariants().await;
}

#[tokio::test]
async fn controllers_restarted_mid_run_leave_no_pod_stuck_and_no_job_behind() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    let controllers = Controllers::start(&env, |_| {}).await;
    env.create_pod(sleeper("short-1", "3", 1)).await;
    env.create_pod(sleeper("short-2", "3", 1)).await;
    env.create_pod(sleeper("long", "infinity", 1)).await;
    let names: Vec<String> = ["short-1", "short-2", "long"].map(String::from).to_vec();
    env.wait_bound(&names, BIND).await;

    // The controllers die; meanwhile pods finish and one is deleted.
    controllers.stop().await;
    env.pods()
        .delete("long", &DeleteParams::default())
        .await
        .unwrap();
    for name in ["short-1", "short-2"] {
        env.wait_pod(name, "Succeeded", Duration::from_secs(30), |p| {
            p.is_some_and(|p| phase(p) == Some("Succeeded"))
        })
        .await;
    }
    let stuck = env.pods().get("long").await.unwrap();
    assert!(
        stuck.metadata.deletion_timestamp.is_some() && holds_finalizer(&stuck),
        "without the controllers the deleted pod waits"
    );
    assert_eq!(
        env.active_job_ids().len(),
        3,
        "without the controllers the jobs live on"
    );

    let _controllers = Controllers::start(&env, |_| {}).await;
    env.wait_pod("long", "gone", Duration::from_secs(30), |p| p.is_none())
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !env.active_job_ids().is_empty() {
        assert!(
            Instant::now() < deadline,
            "jobs left: {:?}",
            env.active_job_ids()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for name in ["short-1", "short-2"] {
        env.wait_pod(name, "finalizer released", Duration::from_secs(10), |p| {
            p.is_none_or(|p| !holds_finalizer(p))
        })
        .await;
    }
    env.assert_invariants().await;
}

#[tokio::test]
async fn a_lost_kubelet_releases_its_pods_job_after_the_grace() {
    // The node lifecycle controller marks a node NotReady 16 s after its last heartbeat.
    let mut env = Env::start_configured(2, |o| {
        o.node_monitor_grace_period = Some(Duration::from_secs(16))
    })
    .await;
    env.start_scheduler().await;
    let _controllers =
        Controllers::start(&env, |o| o.lost_node_grace = Duration::from_secs(5)).await;
    env.create_pod(sleeper("stranded", "infinity", 1)).await;
    let bound = env.wait_bound(&["stranded".into()], BIND).await;
    let id = job_id_of(&bound[0]);
    let node = bound[0].spec.as_ref().unwrap().node_name.clone().unwrap();

    let started = Instant::now();
    env.kube_env.lose_kubelet(&node).unwrap();
    // NotReady within about 16-26 s, then 5 s of grace.
    env.wait_job_ended(id, Duration::from_secs(90)).await;
    let took = started.elapsed();
    eprintln!("job of a pod on a NotReady node released {took:?} after the kubelet was lost");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.kube.clone());
    let n = nodes.get(&node).await.unwrap();
    let ready = n
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        .unwrap();
    assert_ne!(ready.status, "True", "released while the node was Ready");
    let p = env
        .wait_pod(
            "stranded",
            "finalizer released",
            Duration::from_secs(10),
            |p| p.is_none_or(|p| !holds_finalizer(p)),
        )
        .await;
    if let Some(p) = p {
        assert_eq!(
            disruption(&p).map(|d| d.0).as_deref(),
            Some("NodeLost"),
            "removed for its lost node"
        );
    }
    env.assert_invariants().await;
}

/// Issue 21: the controllers without the scheduler (split mode) cancel the Slurm job of a pod
/// that was force-deleted (the sweep runs wherever the pod controller runs without the
/// scheduler).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_alone_cancel_the_job_of_a_force_deleted_pod() {
    let env = Env::start(1).await;
    let ctrl = Controllers::start(&env, |o| o.sweep_interval = Some(Duration::from_secs(1))).await;
    env.create_pod(pod("forced", json!({}), json!({}))).await;
    // A job standing for it, as a scheduler in another process would have submitted.
    let desc = slurm_rest::models::JobDescMsg {
        flags: Some(vec![slurm_rest::models::JobFlag::ExternalJob]),
        nodes: Some("1".into()),
        partition: Some("slurm-bridge".into()),
        admin_comment: Some("{\"pods\":[\"default/forced\"]}".into()),
        current_working_directory: Some("/tmp".into()),
        user_id: Some("0".into()),
        group_id: Some("0".into()),
        ..Default::default()
    };
    let id = env.rest.submit_job(&desc).await.expect("submit").job_id;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.job_running(id).await {
        assert!(Instant::now() < deadline, "job {id} never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.pods()
        .delete("forced", &DeleteParams::default().grace_period(0))
        .await
        .expect("force delete");
    env.wait_job_ended(id, Duration::from_secs(30)).await;
    assert!(env.scontrol_job(id).contains("JobState=CANCELLED"));
    env.assert_invariants().await;
    ctrl.stop().await;
}

/// A pending pod the admission webhook gave the bridge finalizer at creation, deleted before
/// any scheduler labelled it, does not hang on the finalizer: with only the controllers and the
/// webhook running (no scheduler), the pod controller releases it while it is still Pending.
/// (Without that, kube-controller-manager's PodGC marks such a pod Failed some 20-40 s later and
/// the finished pod is released then: the watch below tells the two apart.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_pod_deleted_with_the_admission_finalizer_goes() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let env = Env::start(1).await;
    let ctrl = Controllers::start(&env, |_| {}).await;
    let cfg = slurm_bridge::config::Config {
        scheduler_name: e2e::SCHEDULER.into(),
        ..Default::default()
    };
    let _hooks = e2e::admission::start(&env.kube, cfg, "pending-deleted").await;
    let p: Pod = serde_json::from_value(sleeper("pending", "infinity", 30)).unwrap();
    let created = e2e::admission::create_mutated(&env.pods(), &p, holds_finalizer).await;
    assert!(holds_finalizer(&created), "the webhook added the finalizer");
    assert!(!e2e::node_name_is_set(&created));

    // Every version of the pod until it is gone.
    let mut versions = watcher(
        env.pods(),
        watcher::Config::default().fields("metadata.name=pending"),
    )
    .boxed();
    loop {
        match versions.next().await {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(Ok(_)) => {}
            other => panic!("watching the pod: {other:?}"),
        }
    }
    let deleting = env
        .pods()
        .delete("pending", &DeleteParams::default())
        .await
        .expect("delete");
    // The finalizer holds the deletion: the API server answers with the pod, not a Status.
    let held = deleting
        .left()
        .expect("the pod is kept while its finalizer is there");
    assert!(held.metadata.deletion_timestamp.is_some() && holds_finalizer(&held));
    let mut phases = Vec::new();
    let gone = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = versions.next().await {
            match ev {
                Ok(watcher::Event::Apply(p)) => phases.push(phase(&p).unwrap_or("").to_string()),
                Ok(watcher::Event::Delete(_)) => return,
                _ => {}
            }
        }
    })
    .await;
    assert!(
        gone.is_ok(),
        "the pod is still there after 60 s: {phases:?}"
    );
    assert!(
        phases.iter().all(|p| p == "Pending"),
        "released while Pending, not after PodGC failed it: {phases:?}"
    );
    env.assert_consistent().await;
    env.assert_invariants().await;
    ctrl.stop().await;
}
