//! The kubelet refusing what Slurm placed (issue 38, item 4). On a hybrid node Slurm's CPUs are
//! slurm.conf's (8 here) while the kubelet admits pods within its allocatable (the host's 2): a
//! pod Slurm places beside another is refused by the kubelet (OutOfcpu). The bridge must not
//! loop: the pod is Failed, its job cancelled, the pod told why, and it is never submitted again.
//! On an external node the node controller registers the kubelet's allocatable, so Slurm itself
//! keeps the second pod waiting and the kubelet never refuses one.

use crate::e2e::{NS, SCHEDULER, job_field, job_id_of, node_of, wait_some};
use crate::support::{
    WAIT, container_running, kubelet_allocatable, node_field, phase, real_pod, shared,
    start_external, start_hybrid, wait_logs, wait_phase, wait_released,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;
use slurm_bridge::wellknown::holds_finalizer;
use std::collections::BTreeMap;
use std::time::Instant;

/// Pod `first` (1500m) runs on node-1 until told to leave (`kubectl exec` touching a file);
/// pod `refused` (1500m) is placed by Slurm beside it on the 8 Slurm CPUs, and the kubelet,
/// with 2 CPUs, refuses it: Failed with reason OutOfcpu. Its job is cancelled (cause
/// `kubelet_rejected`), its finalizer released, and a Warning Event `KubeletRejected` names the
/// node and the kubelet's reason. Then `first` leaves and `third` (1500m) runs through Slurm:
/// by then the scheduler has had every chance to submit `refused` again, and Slurm lists
/// exactly one job per pod. A Job's refused pod is replaced by its controller until its
/// backoffLimit, each replacement refused and released alike.
#[tokio::test]
async fn a_pod_the_kubelet_refuses_ends_its_job_says_why_and_is_not_submitted_again() {
    let started = Instant::now();
    let (env, _controllers) = start_hybrid(1).await;
    assert_eq!(node_field(&env, "node-1", "CPUTot"), "8");
    let (kubelet_cpus, _) = kubelet_allocatable(&env, "node-1").await;
    assert!(kubelet_cpus < 3, "the kubelet admits {kubelet_cpus} CPUs");

    let waits = "echo ran; while [ ! -e /tmp/leave ]; do sleep 0.2; done";
    env.create_pod(real_pod(&env, "first", shared(), "1500m", 1, waits))
        .await;
    wait_logs(&env, "first", "ran").await;
    env.create_pod(real_pod(&env, "refused", shared(), "1500m", 1, waits))
        .await;

    let refused = wait_phase(&env, "refused", "Failed").await;
    let status = refused.status.clone().unwrap();
    assert_eq!(node_of(&refused), "node-1");
    assert_eq!(status.reason.as_deref(), Some("OutOfcpu"), "{status:?}");
    let kubelet_says = status.message.clone().unwrap_or_default();
    assert!(
        kubelet_says.starts_with("Pod was rejected"),
        "{kubelet_says}"
    );
    assert!(!container_running(&refused));
    let id = job_id_of(&refused);
    env.wait_job_ended(id, WAIT).await;
    assert_eq!(job_field(&env, id, "JobState"), "CANCELLED");
    wait_released(&env, "refused").await;
    let events = env.wait_event("refused", "KubeletRejected").await;
    let (_, note) = events.iter().find(|(r, _)| r == "KubeletRejected").unwrap();
    for part in ["node-1", "OutOfcpu", &id.to_string(), "allocatable"] {
        assert!(note.contains(part), "{part:?} not in {note:?}");
    }
    // `first` kept running throughout: the refusal touched only its own pod and job.
    let first = env.pods().get("first").await.unwrap();
    assert!(container_running(&first));
    assert!(env.job_running(job_id_of(&first)).await);
    env.assert_invariants().await;

    // A Job's pods are new pods: its controller replaces a refused one, and each replacement is
    // refused and released the same way, until the Job's backoffLimit (1) ends it. The bridge
    // adds no loop of its own: one Slurm job per pod, each cancelled.
    let image = env.kube_env.image().unwrap();
    env.create(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        // A Job's pods take their slurmjob.* annotations from the Job.
        "metadata": {"name": "retried", "namespace": NS, "annotations": shared()},
        "spec": {
            "backoffLimit": 1,
            "template": {
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", "echo never"],
                                    "resources": {"requests": {"cpu": "1500m", "memory": "32Mi"}}}],
                },
            },
        },
    }))
    .await;
    let jobs: Api<Job> = Api::namespaced(env.kube.clone(), NS);
    let failed = wait_some("Job retried Failed", WAIT, async || {
        let j = jobs.get("retried").await.unwrap();
        j.status.and_then(|s| s.conditions).and_then(|c| {
            c.into_iter()
                .find(|c| c.type_ == "Failed" && c.status == "True")
        })
    })
    .await;
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=retried");
    let retried: Vec<Pod> = env.pods().list(&lp).await.unwrap().items;
    assert_eq!(retried.len(), 2, "a pod and its one replacement");
    for p in &retried {
        let name = p.name_any();
        let s = p.status.as_ref().unwrap();
        assert_eq!(s.reason.as_deref(), Some("OutOfcpu"), "{name}: {s:?}");
        env.wait_job_ended(job_id_of(p), WAIT).await;
        assert_eq!(job_field(&env, job_id_of(p), "JobState"), "CANCELLED");
        wait_released(&env, &name).await;
        env.wait_event(&name, "KubeletRejected").await;
    }
    env.assert_invariants().await;

    // `first` leaves; `third` gets the CPUs through Slurm and runs.
    env.kube_env
        .kubectl(&["exec", "first", "--", "touch", "/tmp/leave"])
        .expect("kubectl exec");
    wait_phase(&env, "first", "Succeeded").await;
    env.create_pod(real_pod(
        &env,
        "third",
        shared(),
        "1500m",
        1,
        "echo third-ran",
    ))
    .await;
    let third = wait_phase(&env, "third", "Succeeded").await;
    wait_logs(&env, "third", "third-ran").await;
    for name in ["first", "third"] {
        wait_released(&env, name).await;
    }
    env.wait_job_ended(job_id_of(&third), WAIT).await;

    // Never submitted again: three pods, three Slurm jobs, `refused` still naming its first.
    let refused = env.pods().get("refused").await.unwrap();
    assert_eq!(job_id_of(&refused), id);
    assert_eq!(phase(&refused), Some("Failed"));
    assert!(!holds_finalizer(&refused));
    let slurm_jobs = env.slurm_job_ids();
    assert_eq!(
        slurm_jobs.len(),
        5,
        "first, refused, the Job's two pods and third: {slurm_jobs:?}"
    );
    env.assert_invariants().await;
    env.assert_consistent().await;
    eprintln!(
        "refused by the kubelet ({kubelet_says}); test done in {:?}",
        started.elapsed()
    );
}

/// External nodes take the kubelet's allocatable: node-1's real kubelet (the host's 2 CPUs
/// and memory, not slurm-testenv's 8 CPUs and 16000 MB) and a simulated node-2 whose
/// allocatable (6 CPUs, 12000Mi) is below its capacity (8, 16000Mi). On node-1 two 1500m pods
/// need 2 Slurm CPUs each: Slurm runs them one after the other, and the kubelet refuses
/// neither.
#[tokio::test]
async fn external_nodes_are_registered_with_the_kubelets_allocatable() {
    let started = Instant::now();
    let (env, _controllers) = start_external(2, 1, |o| {
        o.nodes[1].allocatable = BTreeMap::from([
            ("cpu".into(), "6".into()),
            ("memory".into(), "12000Mi".into()),
        ]);
    })
    .await;
    // start_external waited for node-1 to match its kubelet's allocatable.
    let (cpus, mib) = kubelet_allocatable(&env, "node-1").await;
    assert_eq!(node_field(&env, "node-1", "CPUTot"), cpus.to_string());
    assert_eq!(node_field(&env, "node-1", "RealMemory"), mib.to_string());
    assert!(cpus < 8, "the host has {cpus} CPUs");
    crate::support::wait_slurm_node(&env, "node-2", 6, 12000).await;

    let on_node_1 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}});
    let waits = "echo ran; while [ ! -e /tmp/leave ]; do sleep 0.2; done";
    let mut a = real_pod(&env, "a", shared(), "1500m", 1, waits);
    let mut b = real_pod(&env, "b", shared(), "1500m", 1, "echo b-ran");
    for p in [&mut a, &mut b] {
        p["spec"]["nodeSelector"] = on_node_1["nodeSelector"].clone();
    }
    env.create_pod(a).await;
    wait_logs(&env, "a", "ran").await;
    env.create_pod(b).await;
    // `b` waits in Slurm (node-1's 2 CPUs are `a`'s), unbound: the kubelet never sees it.
    let message = env.wait_condition("b", "SlurmJobPending", WAIT).await;
    eprintln!("b pending: {message}");
    let b_pod = env.pods().get("b").await.unwrap();
    assert!(node_of(&b_pod).is_empty());
    env.kube_env
        .kubectl(&["exec", "a", "--", "touch", "/tmp/leave"])
        .expect("kubectl exec");
    wait_phase(&env, "a", "Succeeded").await;
    let b_pod = wait_phase(&env, "b", "Succeeded").await;
    assert_eq!(node_of(&b_pod), "node-1");
    wait_logs(&env, "b", "b-ran").await;
    for name in ["a", "b"] {
        wait_released(&env, name).await;
    }
    crate::support::wait_no_external_job(&env).await;
    for p in env.pods().list(&Default::default()).await.unwrap().items {
        assert_ne!(
            p.status.as_ref().and_then(|s| s.reason.as_deref()),
            Some("OutOfcpu"),
            "{}",
            p.name_any()
        );
    }
    env.assert_invariants().await;
    env.assert_consistent().await;
    eprintln!("test done in {:?}", started.elapsed());
}
