//! Real containers (issue 38, item 1): a pod scheduled through Slurm onto a kubelet node runs
//! its container: its output is in its logs, a Job completes on exit 0, a non-zero exit fails
//! the pod with its code, and the Slurm job ends with the pod every time.

use crate::e2e::{NS, SCHEDULER, job_id_of, node_of, wait_some};
use crate::support::{
    WAIT, logs, real_pod, shared, start_external, terminated, wait_logs, wait_no_external_job,
    wait_phase, wait_released,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;
use slurm_bridge::wellknown::holds_finalizer;
use std::time::Instant;

#[tokio::test]
async fn pods_scheduled_through_slurm_run_their_containers_and_end_their_jobs() {
    let started = Instant::now();
    let (env, _controllers) = start_external(1, 1, |_| {}).await;
    eprintln!("environment ready in {:?}", started.elapsed());
    let image = env.kube_env.image().unwrap();

    // A pod printing its answer and exiting 0, one exiting 3, and a Job's pod: all through
    // Slurm onto node-1, the real kubelet (not exclusive: they share its 2 CPUs).
    env.create_pod(real_pod(
        &env,
        "answer",
        shared(),
        "100m",
        5,
        "echo answer=42",
    ))
    .await;
    env.create_pod(real_pod(
        &env,
        "fails",
        shared(),
        "100m",
        5,
        "echo failing; exit 3",
    ))
    .await;
    env.create(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        // A Job's pods take their slurmjob.* annotations from the Job.
        "metadata": {"name": "done", "namespace": NS, "annotations": shared()},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", "echo job-ran-in-$(hostname)"],
                                    "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}],
                },
            },
        },
    }))
    .await;

    // Exit 0: Succeeded, its output read back through kube-rs and kubectl.
    let answer = wait_phase(&env, "answer", "Succeeded").await;
    assert_eq!(node_of(&answer), "node-1");
    assert_eq!(terminated(&answer), Some((0, "Completed".into())));
    assert_eq!(
        logs(&env, "answer").await.as_deref().map(str::trim),
        Some("answer=42")
    );
    let via_kubectl = env
        .kube_env
        .kubectl(&["logs", "answer"])
        .expect("kubectl logs");
    assert_eq!(via_kubectl.trim(), "answer=42");
    let id = job_id_of(&answer);
    let ended = env.wait_job_ended(id, WAIT).await;
    eprintln!("answer: Slurm job {id} ended {ended:?} after the pod was seen Succeeded");
    wait_released(&env, "answer").await;

    // Exit 3: Failed with exit code 3 (reason Error), its output kept, its job ended.
    let fails = wait_phase(&env, "fails", "Failed").await;
    assert_eq!(terminated(&fails), Some((3, "Error".into())));
    assert_eq!(wait_logs(&env, "fails", "failing").await.trim(), "failing");
    env.wait_job_ended(job_id_of(&fails), WAIT).await;
    wait_released(&env, "fails").await;

    // The Job completes; its pod printed its own name, and its job ended.
    let jobs: Api<Job> = Api::namespaced(env.kube.clone(), NS);
    wait_some("Job done Complete", WAIT, async || {
        let j = jobs.get("done").await.unwrap();
        j.status
            .and_then(|s| s.conditions)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            })
            .then_some(())
    })
    .await;
    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=done");
    let job_pods: Vec<Pod> = env.pods().list(&lp).await.unwrap().items;
    assert_eq!(job_pods.len(), 1, "one pod, not retried");
    let p = &job_pods[0];
    let name = p.metadata.name.clone().unwrap();
    assert_eq!(node_of(p), "node-1");
    assert_eq!(terminated(p), Some((0, "Completed".into())));
    assert_eq!(
        logs(&env, &name).await.as_deref().map(str::trim),
        Some(format!("job-ran-in-{name}").as_str())
    );
    env.wait_job_ended(job_id_of(p), WAIT).await;
    wait_released(&env, &name).await;

    // Three pods, three Slurm jobs, none left running; every finalizer gone.
    wait_no_external_job(&env).await;
    for p in env.pods().list(&ListParams::default()).await.unwrap().items {
        assert!(
            !holds_finalizer(&p),
            "{:?} keeps the finalizer",
            p.metadata.name
        );
    }
    assert_eq!(env.slurm_job_ids().len(), 3, "{:?}", env.slurm_job_ids());
    env.assert_invariants().await;
    env.assert_consistent().await;
    eprintln!("test done in {:?}", started.elapsed());
}
