//! Memory: a pod over its limit is OOM-killed while the batch job beside it runs on; a batch job
//! over its `--mem` ends OUT_OF_MEMORY while the pod beside it runs on; a pod's job asks Slurm
//! the memory of the pod's limits, and a pod that sets none the configured default per CPU.

use crate::e2e::{job_field, job_id_of, terminated, wait_some};
use crate::support::{NodeAgent, WAIT, pod, sbatch, start, wait_output};
use kube::api::DeleteParams;
use serde_json::json;

/// Grows one line of zero bytes until killed: busybox `tail` keeps the last line whole.
const HOG: &str = "head -c 400m /dev/zero | tail";

fn restarts(p: &k8s_openapi::api::core::v1::Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map(|c| c.restart_count)
        .unwrap_or_default()
}

#[tokio::test]
async fn a_memory_overrun_ends_only_the_one_that_overran() {
    let (env, _controllers) = start(Some(64)).await;
    let _agent = NodeAgent::start(&env).await;

    // A batch job that waits, and a pod over its 48Mi limit beside it.
    let quiet = sbatch(&env, "100", "echo started; sleep 3600");
    wait_output(&env, &quiet, "started", |l| l == "started").await;
    let limits = json!({"requests": {"cpu": "1", "memory": "48Mi"}, "limits": {"memory": "48Mi"}});
    env.create_pod(pod(&env, "hog", limits, HOG)).await;
    let p = env.wait_bound(&["hog".into()], WAIT).await.remove(0);
    let hog_job = job_id_of(&p);
    // The pod's job asked Slurm the pod's memory.
    assert_eq!(job_field(&env, hog_job, "MinMemoryNode"), "48M");
    let p = env
        .wait_pod("hog", "OOM-killed", WAIT, |p| {
            p.and_then(terminated).is_some()
        })
        .await
        .unwrap();
    assert_eq!(
        terminated(&p).unwrap(),
        (137, "OOMKilled".to_string()),
        "the pod over its limit is OOM-killed"
    );
    env.wait_job_ended(hog_job, WAIT).await;
    assert_eq!(job_field(&env, &quiet, "JobState"), "RUNNING");
    env.assert_invariants().await;
    env.pods()
        .delete("hog", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("hog", "gone", WAIT, |p| p.is_none()).await;

    // A pod that sets no memory: its job asks the default per CPU, not the node's memory.
    let cpu_only = json!({"requests": {"cpu": "1"}});
    env.create_pod(pod(&env, "steady", cpu_only, "echo up; sleep 3600"))
        .await;
    let p = env.wait_bound(&["steady".into()], WAIT).await.remove(0);
    let steady_job = job_id_of(&p);
    assert_eq!(job_field(&env, steady_job, "MinMemoryCPU"), "64M");
    env.slurm.run(&["scancel", &quiet]).unwrap();
    let p = env
        .wait_pod("steady", "running", WAIT, |p| {
            p.is_some_and(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        })
        .await
        .unwrap();
    assert_eq!(restarts(&p), 0);

    // A batch job over its --mem beside the running pod: OUT_OF_MEMORY; the pod runs on.
    let greedy = sbatch(&env, "40", HOG);
    wait_some("the greedy batch job OUT_OF_MEMORY", WAIT, async || {
        (job_field(&env, &greedy, "JobState") == "OUT_OF_MEMORY").then_some(())
    })
    .await;
    let p = env.pods().get("steady").await.unwrap();
    assert!(terminated(&p).is_none(), "the pod beside it still runs");
    assert_eq!(restarts(&p), 0);
    assert_eq!(job_field(&env, steady_job, "JobState"), "RUNNING");
    env.assert_invariants().await;

    env.pods()
        .delete("steady", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("steady", "gone", WAIT, |p| p.is_none()).await;
    env.wait_job_ended(steady_job, WAIT).await;
    env.assert_invariants().await;
}
