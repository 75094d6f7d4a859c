//! Pods and workloads bound to their Slurm allocations: a bare pod, a Job, a JobSet, a built-in
//! Workload gang, LeaderWorkerSet groups, node selectors, and pods waiting while Slurm is full.

use crate::e2e::{self, Env, job_id_of, pod};
use crate::support::{BIND_TIMEOUT, wait_pod_names};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_pod_is_bound_to_its_slurm_allocation() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    env.create_pod(pod(
        "solo",
        json!({"slurmjob.slinky.slurm.net/job-name": "solo-job"}),
        json!({}),
    ))
    .await;
    let pods = env.wait_bound(&["solo".into()], BIND_TIMEOUT).await;
    let id = job_id_of(&pods[0]);
    let job = env.scontrol_job(id);
    assert!(job.contains("JobName=solo-job"), "{job}");
    assert!(job.contains("JobState=RUNNING"), "{job}");
    let flags = env.rest.job(id).await.unwrap().flags;
    assert!(
        flags.contains(&slurm_rest::models::JobFlag::ExternalJob),
        "{flags:?}"
    );
    // One Event for a pod bound at once: Scheduled, naming the node and the Slurm job.
    let events = env.event_reasons("solo").await;
    let node = pods[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    assert!(
        events.iter().any(|(r, note)| r == "Scheduled"
            && note.contains(&node)
            && note.contains(&format!("Slurm job {id}"))),
        "{events:?}"
    );
    assert_eq!(env.slurm_job_ids(), [id], "exactly one Slurm job");
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_with_parallelism_three_gets_one_external_job_per_pod() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    env.create(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "par", "annotations": {"slurmjob.slinky.slurm.net/timelimit": "5"}},
        "spec": {"parallelism": 3, "completions": 3, "template": {"spec": {
            "schedulerName": e2e::SCHEDULER, "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}]}}}
    }))
    .await;
    let names = wait_pod_names(&env, "batch.kubernetes.io/job-name=par", 3).await;
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let mut ids: Vec<u32> = pods.iter().map(job_id_of).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "one external job per Job pod");
    for id in ids {
        assert!(env.scontrol_job(id).contains("TimeLimit=00:05:00"));
    }
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selector_restricts_slurm_to_matching_nodes() {
    let mut env = Env::start(4).await;
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, Patch, PatchParams};
    let nodes: Api<Node> = Api::all(env.kube.clone());
    for n in ["node-2", "node-4"] {
        nodes
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": {"rack": "blue"}}})),
            )
            .await
            .unwrap();
    }
    env.start_scheduler().await;
    for i in 0..2 {
        env.create_pod(pod(
            &format!("blue-{i}"),
            json!({}),
            json!({"nodeSelector": {"rack": "blue"}}),
        ))
        .await;
    }
    let pods = env
        .wait_bound(&["blue-0".into(), "blue-1".into()], BIND_TIMEOUT)
        .await;
    let mut got: Vec<String> = pods
        .iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, ["node-2", "node-4"]);
    let job = env.scontrol_job(job_id_of(&pods[0]));
    assert!(job.contains("ExcNodeList=node-[1,3]"), "{job}");
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_slurm_makes_pods_wait_until_a_job_ends() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    for i in 0..3 {
        env.create_pod(pod(&format!("w-{i}"), json!({}), json!({})))
            .await;
    }
    // Two bind, one waits with Slurm's reason.
    let deadline = std::time::Instant::now() + BIND_TIMEOUT;
    let (bound, waiting) = loop {
        let pods = env.pods().list(&Default::default()).await.unwrap().items;
        let (b, w): (Vec<_>, Vec<_>) = pods.into_iter().partition(e2e::node_name_is_set);
        if b.len() == 2 && w.len() == 1 {
            break (b, w);
        }
        assert!(std::time::Instant::now() < deadline, "two pods never bound");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waiting_name = kube::ResourceExt::name_any(&waiting[0]);
    let message = env
        .wait_condition(&waiting_name, "SlurmJobPending", Duration::from_secs(30))
        .await;
    assert!(
        message.contains("Resources") || message.contains("Priority"),
        "{message}"
    );
    // A job ends: the waiting pod gets its node.
    let first = job_id_of(&bound[0]);
    env.slurm.run(&["scancel", &first.to_string()]).unwrap();
    let pods = env.wait_bound(&[waiting_name], BIND_TIMEOUT).await;
    assert_eq!(
        pods[0].spec.as_ref().unwrap().node_name,
        bound[0].spec.as_ref().unwrap().node_name,
        "the freed node"
    );
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_pods_get_one_external_job_each() {
    let mut env = Env::start_with_workload_controllers(2).await;
    env.start_scheduler().await;
    env.create(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "annotations": {"slurmjob.slinky.slurm.net/job-name": "from-jobset"}},
        "spec": {"replicatedJobs": [{"name": "worker", "replicas": 2, "template": {"spec": {
            "parallelism": 1, "completions": 1,
            "template": {"spec": {"schedulerName": e2e::SCHEDULER, "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}]}}}}}]}
    }))
    .await;
    let names = wait_pod_names(&env, "jobset.sigs.k8s.io/jobset-name=js", 2).await;
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let ids: std::collections::BTreeSet<u32> = pods.iter().map(job_id_of).collect();
    assert_eq!(ids.len(), 2);
    for id in ids {
        assert!(env.scontrol_job(id).contains("JobName=from-jobset"));
    }
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_workload_gang_is_one_job_and_marks_the_podgroup_scheduled() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    env.create(json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
        "metadata": {"name": "training", "annotations": {"slurmjob.slinky.slurm.net/job-name": "training-gang"}},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]}
    }))
    .await;
    env.create(json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
        "metadata": {"name": "training-workers"},
        "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "training", "podGroupTemplateName": "workers"}},
                 "schedulingPolicy": {"gang": {"minCount": 2}}}
    }))
    .await;
    // Another writer's condition on the PodGroup: the scheduler's write must leave it.
    let gvk = kube::api::GroupVersionKind::gvk("scheduling.k8s.io", "v1alpha2", "PodGroup");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(env.kube.clone(), e2e::NS, &ar);
    api.patch_status(
        "training-workers",
        &kube::api::PatchParams {
            field_manager: Some("someone-else".into()),
            ..Default::default()
        },
        &kube::api::Patch::Merge(json!({"status": {"conditions": [{
            "type": "ExampleCondition", "status": "True", "reason": "Example",
            "message": "set by another writer", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
    )
    .await
    .unwrap();
    for i in 0..2 {
        env.create_pod(pod(
            &format!("training-{i}"),
            json!({}),
            json!({"schedulingGroup": {"podGroupName": "training-workers"}}),
        ))
        .await;
    }
    let pods = env
        .wait_bound(&["training-0".into(), "training-1".into()], BIND_TIMEOUT)
        .await;
    let ids: std::collections::BTreeSet<u32> = pods.iter().map(job_id_of).collect();
    assert_eq!(ids.len(), 1);
    let id = *ids.first().unwrap();
    let job = env.scontrol_job(id);
    assert!(job.contains("JobName=training-gang"), "{job}");
    assert!(job.contains("NumNodes=2"), "{job}");
    // The PodGroup is marked scheduled.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let pg = api.get("training-workers").await.unwrap();
        let scheduled = pg.data["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "PodGroupScheduled" && c["status"] == "True")
        });
        if scheduled {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "PodGroup not marked: {:?}",
            pg.data["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Item 6: applied (server-side, status subresource) under the scheduler's field manager,
    // with the other writer's condition left in place, and written once.
    let pg = api.get("training-workers").await.unwrap();
    let conditions = pg.data["status"]["conditions"].as_array().unwrap().clone();
    assert!(
        conditions.iter().any(|c| c["type"] == "ExampleCondition"),
        "{conditions:?}"
    );
    let managed = pg.metadata.managed_fields.clone().unwrap_or_default();
    assert!(
        managed
            .iter()
            .any(|m| m.manager.as_deref() == Some(e2e::SCHEDULER)
                && m.operation.as_deref() == Some("Apply")
                && m.subresource.as_deref() == Some("status")),
        "{managed:?}"
    );
    assert_eq!(
        env.handle()
            .metrics
            .kube_writes
            .of(slurm_bridge::k8s::writes::write_kind::PODGROUP),
        1,
        "one PodGroup write"
    );
    env.assert_consistent().await;
    env.assert_invariants().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaderworkerset_groups_are_one_job_each() {
    let mut env = Env::start_with_workload_controllers(6).await;
    env.start_scheduler().await;
    env.create(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": {"spec": {
            "schedulerName": e2e::SCHEDULER,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}]}}}}
    }))
    .await;
    let names = wait_pod_names(&env, "leaderworkerset.sigs.k8s.io/name=lws", 6).await;
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let mut by_job: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    for p in &pods {
        let group = kube::ResourceExt::labels(p)["leaderworkerset.sigs.k8s.io/group-index"].clone();
        by_job.entry(job_id_of(p)).or_default().push(group);
    }
    assert_eq!(by_job.len(), 2, "one job per LWS group");
    for groups in by_job.values() {
        assert_eq!(groups.len(), 3);
        assert!(
            groups.iter().all(|g| *g == groups[0]),
            "a job holds one group: {groups:?}"
        );
    }
    env.assert_consistent().await;
    env.assert_invariants().await;
}
