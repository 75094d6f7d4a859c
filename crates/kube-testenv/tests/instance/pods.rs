//! The node agent as the pods' kubelet: pods run, end, fail and are deleted with a grace period;
//! a Job's pods are bound by kube-scheduler and completed.

use crate::support::{PhaseLog, eventually, object, phase, pod, start, termination};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_testenv::InstanceOptions;
use serde_json::json;
use std::time::Duration;

/// Pods bound at creation run, end, fail and go away as the agent plays their kubelet; a Job's
/// pods are bound by kube-scheduler and the Job controller completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_runs_pods_through_their_lifecycle() {
    let inst = start(InstanceOptions {
        kube_scheduler: true,
        ..InstanceOptions::with_nodes(2)
    })
    .await;
    let client = inst.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let log = PhaseLog::start(pods.clone()).await;
    let pp = PostParams::default();
    let exit_code = json!({"kube-testenv/exit-code": "3"});
    for p in [
        pod("two-seconds", Some("node-1"), &["sleep", "2"], json!({})),
        pod("exit-three", Some("node-2"), &["sleep", "1"], exit_code),
        pod("forever", Some("node-1"), &["sleep", "infinity"], json!({})),
    ] {
        pods.create(&pp, &p).await.expect("create pod");
    }
    let job: Job = object(json!({
        "metadata": {"name": "batch"},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "1"]}],
            }},
        },
    }));
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&pp, &job).await.expect("create Job");

    let ended = |name: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(&format!("pod {name} to end"), || {
                let pods = pods.clone();
                async move {
                    let p = pods.get(name).await.ok()?;
                    matches!(phase(&p).as_str(), "Succeeded" | "Failed").then_some(p)
                }
            })
            .await
        }
    };

    // sleep 2: Running, then Succeeded no sooner than 2 s later.
    let p = ended("two-seconds").await;
    assert_eq!(phase(&p), "Succeeded");
    let (code, reason, ran) = termination(&p).expect("container terminated");
    assert_eq!((code, reason.as_str()), (0, "Completed"));
    assert!(ran >= Duration::from_secs(2), "sleep 2 ended after {ran:?}");
    let status = p.status.as_ref().unwrap();
    assert!(
        status
            .pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.")),
        "{status:?}"
    );
    assert_eq!(
        log.phases("two-seconds"),
        ["Pending", "Running", "Succeeded"]
    );

    // The exit-code annotation: Failed with exit code 3.
    let p = ended("exit-three").await;
    assert_eq!(phase(&p), "Failed");
    let (code, reason, _) = termination(&p).expect("container terminated");
    assert_eq!((code, reason.as_str()), (3, "Error"));
    assert_eq!(log.phases("exit-three"), ["Pending", "Running", "Failed"]);

    // Deletion with a grace period: the API server marks the pod, the agent kills it (137)
    // when the grace period is over and removes it.
    eventually("pod forever to run", || {
        let pods = pods.clone();
        async move { (phase(&pods.get("forever").await.ok()?) == "Running").then_some(()) }
    })
    .await;
    let dp = DeleteParams {
        grace_period_seconds: Some(1),
        ..Default::default()
    };
    let marked = pods
        .delete("forever", &dp)
        .await
        .expect("delete pod")
        .left()
        .expect("a pod on a node is deleted gracefully, by its kubelet");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(1));
    eventually("pod forever to be gone", || {
        let pods = pods.clone();
        async move { pods.get_opt("forever").await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert_eq!(log.phases("forever"), ["Pending", "Running", "Failed"]);

    // The Job: pods created without a node, bound by kube-scheduler, completed.
    let job = eventually("Job batch to complete", || {
        let jobs = jobs.clone();
        async move {
            let j = jobs.get("batch").await.ok()?;
            let done = j
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True");
            done.then_some(j)
        }
    })
    .await;
    assert_eq!(job.status.as_ref().unwrap().succeeded, Some(2));
    let job_pods = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=batch"))
        .await
        .expect("list the Job's pods");
    assert_eq!(job_pods.items.len(), 2);
    for p in &job_pods.items {
        assert_eq!(phase(p), "Succeeded");
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        assert!(
            matches!(node.as_deref(), Some("node-1" | "node-2")),
            "{:?} bound to {node:?}",
            p.metadata.name
        );
    }
}
