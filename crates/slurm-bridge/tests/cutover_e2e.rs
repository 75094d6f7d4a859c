//! Cutover from the Go original (docs/migration.md): pods and Slurm jobs exactly as the original
//! leaves them when it is stopped, then `slurm-bridge run` starts against the same real Slurm and
//! control plane. The original's traces, written as it writes them (reference §5.8.3, §5.8.4,
//! §5.9.3, §5.9.6, §1.5): external jobs submitted with its request body (admin_comment
//! `{"pods":["ns/name"]}`, no group key, `required_nodes`), the job id label, the finalizer, the
//! `slinky.slurm.net/slurm-node` annotation, the bridge toleration, and a plain Binding.
//!
//! Left behind: a pod running on its job's node; a pod that finished while nobody watched (job
//! still running, finalizer held); a finished pod whose job already ended (finalizer held); a pod
//! whose job Slurm allocated but which was never bound; a pod whose job was submitted but which
//! was never labelled; a pod nobody submitted yet. After the start: the running pod and its job
//! are adopted (left running, then ended when the pod ends), the finished ones are cleaned up (job
//! ended, finalizer released), the allocated and the unlabelled ones are bound to their jobs'
//! nodes, the new one gets one job, and Slurm's job list before and after shows nothing submitted
//! twice.

mod e2e;

use e2e::{Env, NS, SCHEDULER, job_id_of, sleeper};
use k8s_openapi::api::core::v1::{Binding, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slurm_bridge::wellknown::holds_finalizer;
use slurm_bridge::wellknown::{
    ANNOTATION_SLURM_NODE, FINALIZER, LABEL_SLURM_JOBID, TAINT_EFFECT, TAINT_MANAGED_NODE,
};
use slurm_bridge::workload::admin_comment::AdminComment;
use slurm_rest::models::{JobDescMsg, JobState};
use std::collections::BTreeSet;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

/// The original's submit body for one pod (reference §5.9.3, its example with this test's
/// partition and no MCS label): `required_nodes` are its feasible nodes.
fn original_job(pod: &str, node: &str) -> JobDescMsg {
    serde_json::from_value(json!({
        "admin_comment": format!("{{\"pods\":[\"{NS}/{pod}\"]}}"),
        "cpus_per_task": 1,
        "current_working_directory": "/tmp",
        "flags": ["EXTERNAL_JOB"],
        "maximum_nodes": 1,
        "mcs_label": "",
        "memory_per_node": {"infinite": false, "number": 100, "set": true},
        "name": pod,
        "nodes": "1",
        "required_nodes": [node],
        "priority": {"set": false},
        "partition": "slurm-bridge",
        "shared": ["none"],
        "tasks_per_node": 1,
        "time_limit": {"set": false},
    }))
    .expect("the original's job description parses")
}

/// A pod for the bridge scheduler running `sleep seconds`, with the toleration the original's
/// PreEnqueue adds (reference §1.5).
fn original_pod(name: &str, seconds: u32) -> Value {
    let mut p = sleeper(name, &seconds.to_string(), 1);
    p["spec"]["tolerations"] = json!([{"key": TAINT_MANAGED_NODE, "operator": "Equal",
                                       "value": SCHEDULER, "effect": TAINT_EFFECT}]);
    p
}

/// Polls `probe` until it returns `Some` (see [`e2e::wait_some`]), for up to [`WAIT`].
async fn wait_until<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
    e2e::wait_some(what, WAIT, probe).await
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// How far the original got with a pod before it stopped.
#[derive(PartialEq)]
enum Got {
    /// Submitted, then stopped before the pod writes (its submit reported a failure: quirk 17).
    Submitted,
    /// Submitted, labelled, finalizer and node annotation written: not bound.
    Labelled,
    /// All of that, and bound.
    Bound,
}

/// What the original does for a pod: submit its job pinned to `node`, wait until Slurm allocates
/// it, label the pod with the job id, add the finalizer and the node annotation, bind it
/// (DefaultBinder), as far as `got` says. Returns the job id.
async fn as_the_original(env: &Env, name: &str, node: &str, got: Got) -> u32 {
    let id = env
        .rest
        .submit_job(&original_job(name, node))
        .await
        .expect("submit the original's job")
        .job_id;
    wait_until(&format!("job {id} running"), async || {
        let job = env.rest.job(id).await.ok()?;
        job.job_state.contains(&JobState::Running).then_some(())
    })
    .await;
    if got == Got::Submitted {
        return id;
    }
    let patch = json!({"metadata": {
        "labels": {LABEL_SLURM_JOBID: id.to_string()},
        "annotations": {ANNOTATION_SLURM_NODE: node},
        "finalizers": [FINALIZER],
    }});
    env.pods()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label the pod as the original does");
    if got == Got::Bound {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            target: k8s_openapi::api::core::v1::ObjectReference {
                kind: Some("Node".into()),
                api_version: Some("v1".into()),
                name: Some(node.into()),
                ..Default::default()
            },
        };
        env.pods()
            .create_subresource::<Binding, Value>("binding", name, &PostParams::default(), &binding)
            .await
            .expect("bind as the original does");
    }
    id
}

/// The jobs whose admin_comment names `ns/pod`, any state.
async fn jobs_naming(env: &Env, pod: &str) -> Vec<u32> {
    let key = format!("{NS}/{pod}");
    let mut out = Vec::new();
    for id in env.slurm_job_ids() {
        let job = env.rest.job(id).await.expect("job");
        let comment = AdminComment::decode(job.admin_comment.as_deref().unwrap_or(""));
        if comment.is_ok_and(|c| c.pods.contains(&key)) {
            out.push(id);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_adopts_what_the_go_original_left_and_submits_nothing_twice() {
    let env = Env::start(5).await;
    for (name, seconds) in [
        ("running", 40),
        ("finished", 1),
        ("finished-ended", 1),
        ("allocated", 5),
        ("unlabelled", 5),
        ("new", 5),
    ] {
        env.create_pod(original_pod(name, seconds)).await;
    }
    // The original at work, then stopped.
    let running = as_the_original(&env, "running", "node-1", Got::Bound).await;
    let finished = as_the_original(&env, "finished", "node-2", Got::Bound).await;
    let finished_ended = as_the_original(&env, "finished-ended", "node-3", Got::Bound).await;
    let allocated = as_the_original(&env, "allocated", "node-4", Got::Labelled).await;
    let unlabelled = as_the_original(&env, "unlabelled", "node-5", Got::Submitted).await;
    let pods = env.pods();
    wait_until("the running pod runs", async || {
        let p = pods.get("running").await.ok()?;
        (phase(&p) == Some("Running")).then_some(())
    })
    .await;
    for name in ["finished", "finished-ended"] {
        wait_until(&format!("{name} Succeeded"), async || {
            let p = pods.get(name).await.ok()?;
            (phase(&p) == Some("Succeeded")).then_some(())
        })
        .await;
    }
    // The original's pod controller cancelled this one's job, then stopped before the finalizer.
    env.rest
        .cancel_job(finished_ended, None, None)
        .await
        .expect("cancel");
    env.wait_job_ended(finished_ended, WAIT).await;
    let before: BTreeSet<u32> = env.slurm_job_ids().into_iter().collect();
    assert_eq!(
        before,
        BTreeSet::from([running, finished, finished_ended, allocated, unlabelled]),
        "Slurm's jobs as the original leaves them"
    );
    let running_uid = pods.get("running").await.unwrap().uid();

    // The cutover.
    let dir = std::env::temp_dir().join(format!("slurm-bridge-cutover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mut child, _config) = e2e::spawn_run(&env, &dir, "", std::iter::empty::<&str>());

    // The allocated pod is bound to its job's node, with the original's job.
    let bound = env.wait_bound(&["allocated".into()], WAIT).await;
    assert_eq!(job_id_of(&bound[0]), allocated);
    assert_eq!(
        bound[0].spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-4")
    );
    // The unlabelled pod is found through its job's admin_comment and bound with that job.
    let bound = env.wait_bound(&["unlabelled".into()], WAIT).await;
    assert_eq!(job_id_of(&bound[0]), unlabelled);
    assert_eq!(
        bound[0].spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-5")
    );
    // The new pod gets one job of its own.
    let bound = env.wait_bound(&["new".into()], WAIT).await;
    let new = job_id_of(&bound[0]);
    assert!(!before.contains(&new), "new pod put on an old job {new}");
    // The finished pods: the job that still ran is ended, both finalizers released.
    env.wait_job_ended(finished, WAIT).await;
    for name in ["finished", "finished-ended"] {
        let p = env
            .wait_pod(name, "finalizer released", WAIT, |p| {
                p.is_some_and(|p| !holds_finalizer(p))
            })
            .await
            .expect("finished pods are kept");
        assert_eq!(phase(&p), Some("Succeeded"), "{name}");
    }
    // The running pod is adopted: same pod, same job, still running there.
    let p = pods.get("running").await.unwrap();
    assert_eq!(p.uid(), running_uid);
    assert_eq!(phase(&p), Some("Running"), "the running pod was disturbed");
    assert_eq!(job_id_of(&p), running);
    assert_eq!(
        p.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-1")
    );
    assert!(env.job_running(running).await, "the adopted job was ended");
    env.assert_consistent().await;
    env.assert_invariants().await;

    // Slurm's list after: the original's jobs and the new pod's, each pod named by one job.
    let after: BTreeSet<u32> = env.slurm_job_ids().into_iter().collect();
    let mut expected = before.clone();
    expected.insert(new);
    assert_eq!(after, expected, "a job was submitted twice or lost");
    for name in [
        "running",
        "finished",
        "finished-ended",
        "allocated",
        "unlabelled",
        "new",
    ] {
        assert_eq!(jobs_naming(&env, name).await.len(), 1, "jobs naming {name}");
    }

    // The adopted pod runs to its end; then its job ends and its finalizer goes, as for a pod the
    // bridge scheduled itself.
    env.wait_pod("running", "Succeeded and released", WAIT, |p| {
        p.is_some_and(|p| phase(p) == Some("Succeeded") && !holds_finalizer(p))
    })
    .await;
    env.wait_job_ended(running, WAIT).await;
    for name in ["allocated", "unlabelled", "new"] {
        env.wait_pod(name, "Succeeded and released", WAIT, |p| {
            p.is_some_and(|p| phase(p) == Some("Succeeded") && !holds_finalizer(p))
        })
        .await;
    }
    env.assert_invariants().await;
    assert_eq!(
        env.slurm_job_ids().into_iter().collect::<BTreeSet<u32>>(),
        expected,
        "no job submitted after the pods ended"
    );
    assert!(env.active_job_ids().is_empty(), "a job outlived its pod");

    let status = e2e::terminate(&mut child).await;
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
