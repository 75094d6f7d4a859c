//! Deletion on a real kubelet (issue 38, item 3): the container gets SIGTERM and its grace
//! period, and the Slurm job ends only once the container has stopped; a kubelet stopped under
//! a running pod (a lost node) releases the pod and its job as the node-lost rules say.

use crate::e2e::controllers::disruption;
use crate::e2e::{job_field, job_id_of, wait_some};
use crate::support::{
    WAIT, container_running, logs, phase, real_pod, start_external, terminated, wait_logs,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use slurm_bridge::wellknown::holds_finalizer;
use std::time::{Duration, Instant};

/// The container traps SIGTERM, says so, takes 3 s to leave and exits 0: deleted with a grace
/// of 30 s, it stops after its 3 s (SIGTERM came at once, no SIGKILL at the end of the grace).
/// Its Slurm job runs until the container has stopped, then ends; then the pod goes.
#[tokio::test]
async fn a_deleted_pod_gets_sigterm_and_its_grace_and_its_job_ends_after_the_container() {
    let started = Instant::now();
    let (env, _controllers) = start_external(1, 1, |_| {}).await;
    env.create_pod(real_pod(
        &env,
        "trap",
        json!({}),
        "100m",
        30,
        "trap 'echo got-TERM; sleep 3; echo leaving; exit 0' TERM; echo started; \
         while true; do sleep 0.2; done",
    ))
    .await;
    wait_logs(&env, "trap", "started").await;
    let pod = env
        .wait_pod("trap", "container running", WAIT, |p| {
            p.is_some_and(container_running)
        })
        .await
        .unwrap();
    let id = job_id_of(&pod);
    assert!(env.job_running(id).await);

    // Deleted: at each poll the job is read before the pod, so a job seen ended and then a
    // container seen still running is a job ended under a running container.
    let deleted_at = Instant::now();
    env.pods()
        .delete("trap", &DeleteParams::default())
        .await
        .unwrap();
    let mut seen_logs = String::new();
    let (stopped_after, last) = loop {
        let running = env.job_running(id).await;
        let p = env.pods().get_opt("trap").await.unwrap();
        if let Some(l) = logs(&env, "trap").await {
            seen_logs = l;
        }
        let still_running = p.as_ref().is_some_and(container_running);
        if !still_running {
            break (deleted_at.elapsed(), p);
        }
        assert!(
            running,
            "Slurm job {id} ended while the container still ran, {:?} after the deletion",
            deleted_at.elapsed()
        );
        assert!(
            deleted_at.elapsed() < WAIT,
            "the container still runs {WAIT:?} after the deletion"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "the container stopped {stopped_after:?} after the deletion (its trap takes 3 s, grace \
         30 s); logs: {seen_logs:?}"
    );
    assert!(
        seen_logs.contains("got-TERM"),
        "no SIGTERM in the logs: {seen_logs:?}"
    );
    assert!(
        stopped_after >= Duration::from_secs(3),
        "stopped {stopped_after:?} after the deletion, before its trap's 3 s"
    );
    assert!(
        stopped_after < Duration::from_secs(25),
        "stopped {stopped_after:?} after the deletion: killed at the end of the 30 s grace?"
    );
    // Exit 0 from the trap (not 137 from a SIGKILL), when the pod was still there to show it.
    if let Some(p) = &last
        && let Some(t) = terminated(p)
    {
        assert_eq!(t, (0, "Completed".into()), "{:?}", phase(p));
    }
    let job_ended = env.wait_job_ended(id, WAIT).await;
    eprintln!("its Slurm job ended {job_ended:?} after the container was seen stopped");
    env.wait_pod("trap", "gone", WAIT, |p| p.is_none()).await;
    // The kubelet's own word that it stopped the container (SIGTERM, then the grace).
    let events = env.wait_event("trap", "Killing").await;
    eprintln!("events of trap: {events:?}");
    env.assert_invariants().await;
    eprintln!("test done in {:?}", started.elapsed());
}

fn ready(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// The kubelet of node-1 dies under a running pod: its container runs on, the node goes
/// Ready=Unknown after the node monitor's grace (16 s here), and after the bridge's lost-node
/// grace (3 s in these tests) the pod is removed (`DisruptionTarget` NodeLost, an Event), its
/// Slurm job cancelled and its finalizer dropped; never before the node is NotReady.
#[tokio::test]
async fn a_pod_on_a_stopped_kubelet_is_released_by_the_node_lost_rules() {
    let started = Instant::now();
    let (mut env, _controllers) = start_external(1, 1, |o| {
        o.node_monitor_grace_period = Some(Duration::from_secs(16));
    })
    .await;
    env.create_pod(real_pod(
        &env,
        "stranded",
        json!({}),
        "100m",
        5,
        "echo started; sleep 3600",
    ))
    .await;
    wait_logs(&env, "stranded", "started").await;
    let pod = env
        .wait_pod("stranded", "container running", WAIT, |p| {
            p.is_some_and(container_running)
        })
        .await
        .unwrap();
    let id = job_id_of(&pod);

    env.kube_env
        .stop_kubelet("node-1")
        .expect("stop node-1's kubelet");
    let stopped_at = Instant::now();
    let nodes: Api<Node> = Api::all(env.kube.clone());
    // Until the node is NotReady the pod and its job stay as they are.
    let not_ready_after = wait_some("node-1 not Ready", WAIT, async || {
        let n = nodes.get("node-1").await.unwrap();
        let p = env.pods().get("stranded").await.unwrap();
        if ready(&n).as_deref() == Some("True") {
            assert!(
                disruption(&p).is_none() && holds_finalizer(&p),
                "pod released while its node was Ready"
            );
            assert!(
                env.job_running(id).await,
                "job {id} ended while node-1 was Ready"
            );
            return None;
        }
        Some(stopped_at.elapsed())
    })
    .await;
    assert_eq!(job_field(&env, id, "JobState"), "RUNNING");
    let not_ready_at = Instant::now();

    // Then the lost-node rules: NodeLost on the pod, the job cancelled, the finalizer dropped.
    let p = env
        .wait_pod("stranded", "DisruptionTarget NodeLost", WAIT, |p| {
            p.is_some_and(|p| disruption(p).is_some())
        })
        .await
        .unwrap();
    let released_after = not_ready_at.elapsed();
    let (reason, message) = disruption(&p).unwrap();
    assert_eq!(reason, "NodeLost", "{message}");
    assert!(message.contains(&id.to_string()), "{message}");
    env.wait_job_ended(id, WAIT).await;
    assert_eq!(job_field(&env, id, "JobState"), "CANCELLED");
    env.wait_pod("stranded", "finalizer released", WAIT, |p| {
        p.is_none_or(|p| !holds_finalizer(p))
    })
    .await;
    let events = env.wait_event("stranded", "NodeLost").await;
    // The grace counts from the Ready condition's transition (whole seconds on the API server):
    // the DisruptionTarget condition is written at least 3 s after it, give or take a second.
    let not_ready_since = nodes
        .get("node-1")
        .await
        .unwrap()
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time)
        .expect("Ready's transition time")
        .0;
    let removed_at = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
        .and_then(|c| c.last_transition_time.clone())
        .expect("DisruptionTarget's transition time")
        .0;
    let gap = removed_at.duration_since(not_ready_since);
    eprintln!(
        "node-1 NotReady {not_ready_after:?} after its kubelet stopped (monitor grace 16 s); \
         the pod released {gap:#} after the Ready transition, {released_after:?} after NotReady \
         was seen (lost-node grace 3 s); events {events:?}"
    );
    assert!(
        gap >= k8s_openapi::jiff::SignedDuration::from_secs(2),
        "released {gap:#} after the node went NotReady, within the 3 s grace"
    );
    // The pod stays Terminating: no kubelet will confirm its end (the taint manager or an admin
    // deletes it); it holds nothing and its job is gone.
    env.assert_invariants().await;
    assert!(env.active_job_ids().is_empty());
    eprintln!("test done in {:?}", started.elapsed());
}
