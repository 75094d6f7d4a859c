//! The scheduler end to end: real Slurm (slurm-testenv) and a real Kubernetes control plane
//! (kube-testenv), through the kube-rs client. Each test checks the invariants of `Env::assert_consistent`.

mod e2e;

use e2e::{Env, job_id_of, pod};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use prometheus_client::registry::Registry;
use serde_json::json;
use slurm_bridge::caches::{CacheTasks, Caches};
use slurm_bridge::scheduler;
use slurm_bridge::slurm::Instrumented;
use slurm_bridge::slurm::Slurm;
use slurm_bridge::slurm::instrumented::RequestLabels;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const BIND_TIMEOUT: Duration = Duration::from_secs(60);

/// A scheduler started as [`Env::start_scheduler_opts`] starts it (job poll 200 ms, node poll
/// and sweep 2 s, shutdown grace 200 ms), on caches the test keeps, so the test sees what the
/// scheduler's own pod cache holds. Its handle and stop signal are the Env's; dropping this
/// stops the caches.
struct Watched<S: Slurm> {
    caches: Arc<Caches<Instrumented<S>>>,
    _tasks: CacheTasks,
}

async fn start_watched<S: Slurm>(env: &mut Env, slurm: S) -> Watched<S> {
    let opts = e2e::scheduler_options(&env.slurm);
    let mut registry = Registry::default();
    let slurm = Arc::new(Instrumented::new(slurm, &mut registry));
    let (caches, tasks) = Caches::start(env.kube.clone(), slurm, &opts.cache_options());
    let (stop, mut stop_rx) = watch::channel(false);
    let (ready_tx, _ready_rx) = watch::channel(false);
    let handle = scheduler::run_with(
        env.kube.clone(),
        caches.clone(),
        opts,
        &mut registry,
        watch::channel(true).1,
        ready_tx,
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    )
    .await;
    env.adopt_scheduler(handle, stop).await;
    Watched {
        caches,
        _tasks: tasks,
    }
}

/// Changes the pod's annotation `e2e.test/poke` to `value`: a scheduling input (a pass follows)
/// that goes into no job description.
async fn poke(env: &Env, name: &str, value: u64) {
    env.pods()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"e2e.test/poke": value.to_string()}}}),
            ),
        )
        .await
        .unwrap();
}

/// Proof that the scheduler has made, and ended, a pass over the pod `name` that read it as
/// `seen` accepts it, and ended every pass before that one. Only for a test whose one pod it is:
/// the scheduler's pass counter then counts this pod's passes alone, and the controller runs one
/// pass per pod at a time.
///
/// Waits until the scheduler's own pod cache holds a version `seen` accepts; every pass that
/// starts after that reads it or a later one. Then the pod is poked twice: the first poke brings
/// a pass that starts after the cache was seen, the second, sent once that pass has started,
/// brings another after it; when the second has started, the first has ended.
async fn passes_over_alone<S: Slurm>(
    env: &Env,
    watched: &Watched<S>,
    name: &str,
    what: &str,
    seen: impl Fn(&Pod) -> bool,
) {
    let key = ObjectRef::<Pod>::new(name).within(e2e::NS);
    wait_for(
        &format!("the scheduler's pod cache holds {name} {what}"),
        BIND_TIMEOUT,
        || {
            watched
                .caches
                .handles
                .pods
                .get(&key)
                .is_some_and(|p| seen(&p))
        },
    )
    .await;
    let passes = env.handle().reconcile_passes.clone();
    let seen_at = passes.get();
    for i in 1..=2 {
        poke(env, name, i).await;
        wait_for(
            &format!("pass {i} over {name} after its cache held it {what}"),
            Duration::from_secs(30),
            || passes.get() >= seen_at + i,
        )
        .await;
    }
}

/// Proof that the scheduler has made a whole pass over the unbound pod `name` after every change
/// made to it so far, for a pod whose passes end by showing `reason` (nothing follows the report
/// in such a pass): its PodScheduled condition, overwritten by the test, is written back with
/// `reason`. The pass that writes it back read the overwritten condition, so the pod as it is
/// after every earlier change (the scheduler's cache takes a pod's changes in order).
async fn pass_over_reported(env: &Env, name: &str, reason: &str) {
    env.pods()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "E2EOverwritten",
                "message": "overwritten by the test"}]}})),
        )
        .await
        .unwrap();
    env.wait_condition(name, reason, BIND_TIMEOUT).await;
}

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
}

/// A bound pod costs at most 3 Kubernetes writes: the label/finalizer/toleration patch, the
/// Binding (carrying the node annotation, which kube-apiserver copies onto the pod while it sets
/// PodScheduled=True) and the Scheduled Event; the result on the pod is the full one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_costs_at_most_three_kubernetes_writes() {
    use slurm_bridge::k8s::writes::write_kind;
    use slurm_bridge::wellknown::{ANNOTATION_SLURM_NODE, FINALIZER, merge_toleration};
    let mut env = Env::start(2).await;
    let rest = e2e::rest_client(&env.slurm);
    let watched = start_watched(&mut env, rest).await;
    env.create_pod(pod("thrifty", json!({}), json!({}))).await;
    env.wait_bound(&["thrifty".into()], BIND_TIMEOUT).await;
    // The Event is the pass's last write.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let events = loop {
        let events = env.event_reasons("thrifty").await;
        if events.iter().any(|(r, _)| r == "Scheduled") {
            break events;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no Scheduled event: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Passes the binding triggers write nothing more: every pass up to one that read the pod
    // bound has ended.
    passes_over_alone(&env, &watched, "thrifty", "bound", e2e::node_name_is_set).await;
    let writes = &env.handle().metrics.kube_writes;
    let kinds = [
        write_kind::LABEL,
        write_kind::BINDING,
        write_kind::EVENT,
        write_kind::CONDITION,
        write_kind::UNLABEL,
        write_kind::FINALIZER,
        write_kind::PODGROUP,
    ];
    let by_kind: Vec<(&str, u64)> = kinds.iter().map(|k| (*k, writes.of(k))).collect();
    println!(
        "Kubernetes writes for one bound pod: {} {by_kind:?}",
        writes.total()
    );
    assert!(
        writes.total() <= 3,
        "{} writes: {by_kind:?}",
        writes.total()
    );
    assert_eq!(writes.of(write_kind::BINDING), 1, "{by_kind:?}");

    let p = env.pods().get("thrifty").await.unwrap();
    let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
    let id = job_id_of(&p);
    assert_eq!(
        kube::ResourceExt::annotations(&p).get(ANNOTATION_SLURM_NODE),
        Some(&node),
        "the node annotation, carried by the Binding"
    );
    assert!(
        kube::ResourceExt::finalizers(&p)
            .iter()
            .any(|f| f == FINALIZER)
    );
    let mut tolerations = p
        .spec
        .as_ref()
        .unwrap()
        .tolerations
        .clone()
        .unwrap_or_default();
    assert!(
        !merge_toleration(&mut tolerations, e2e::SCHEDULER),
        "the bridge toleration is there"
    );
    assert_eq!(
        e2e::scheduled_condition(&p).map(|c| c.0),
        Some("True".to_string()),
        "PodScheduled=True, set by kube-apiserver on binding"
    );
    let scheduled: Vec<&String> = events
        .iter()
        .filter(|(r, _)| r == "Scheduled")
        .map(|(_, note)| note)
        .collect();
    assert_eq!(scheduled.len(), 1, "{events:?}");
    assert!(
        scheduled[0].contains(&node) && scheduled[0].contains(&format!("Slurm job {id}")),
        "{scheduled:?}"
    );
    env.assert_consistent().await;
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coscheduling_gang_is_submitted_only_when_complete() {
    let mut env = Env::start(4).await;
    env.start_scheduler().await;
    env.create(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "gang"}, "spec": {"minMember": 4}
    }))
    .await;
    let member = |i: usize| {
        let mut p = pod(&format!("gang-{i}"), json!({}), json!({}));
        p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "gang"});
        p
    };
    for i in 0..3 {
        env.create_pod(member(i)).await;
    }
    // The scheduler may see gang-0 before the other members exist: wait for the count to reach 3.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let message = env
            .wait_condition("gang-0", "WaitingForGang", Duration::from_secs(30))
            .await;
        if message.contains("3 of 4") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{message}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        env.slurm_job_ids().is_empty(),
        "nothing submitted for an incomplete gang"
    );
    env.create_pod(member(3)).await;
    let names: Vec<String> = (0..4).map(|i| format!("gang-{i}")).collect();
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let ids: std::collections::BTreeSet<u32> = pods.iter().map(job_id_of).collect();
    assert_eq!(ids.len(), 1, "one job for the gang");
    let nodes: std::collections::BTreeSet<String> = pods
        .iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
        .collect();
    assert_eq!(nodes.len(), 4, "one node per pod");
    env.assert_consistent().await;
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_reach_slurm() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    env.create_pod(pod(
        "annotated",
        json!({
            "slurmjob.slinky.slurm.net/partition": "slurm-bridge",
            "slurmjob.slinky.slurm.net/timelimit": "7",
            "slurmjob.slinky.slurm.net/priority": "4242",
            "slurmjob.slinky.slurm.net/account": "root",
        }),
        json!({}),
    ))
    .await;
    let pods = env.wait_bound(&["annotated".into()], BIND_TIMEOUT).await;
    let job = env.scontrol_job(job_id_of(&pods[0]));
    for want in [
        "Partition=slurm-bridge",
        "TimeLimit=00:07:00",
        "Priority=4242",
        "Account=root",
    ] {
        assert!(job.contains(want), "missing {want} in {job}");
    }
    env.assert_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_annotation_is_reported_and_nothing_is_submitted() {
    let mut env = Env::start(1).await;
    env.start_scheduler().await;
    env.create_pod(pod(
        "bad",
        json!({"slurmjob.slinky.slurm.net/timelimit": "soon"}),
        json!({}),
    ))
    .await;
    let message = env
        .wait_condition("bad", "InvalidAnnotation", Duration::from_secs(30))
        .await;
    assert!(
        message.contains("slurmjob.slinky.slurm.net/timelimit"),
        "{message}"
    );
    assert!(message.contains("soon"), "{message}");
    let events = env.wait_event("bad", "InvalidAnnotation").await;
    assert!(
        events.iter().any(|(r, _)| r == "InvalidAnnotation"),
        "{events:?}"
    );
    assert!(env.slurm_job_ids().is_empty());
    env.assert_consistent().await;
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
}

async fn wait_pod_names(env: &Env, selector: &str, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let pods = env
            .pods()
            .list(&kube::api::ListParams::default().labels(selector))
            .await
            .unwrap()
            .items;
        if pods.len() >= n {
            return pods.iter().map(kube::ResourceExt::name_any).collect();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{selector}: {} pods",
            pods.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
}

/// Wraps the real client; `submit` submits, then hangs, as if the scheduler died right after
/// Slurm accepted the job and before the pods were labelled.
struct DieAfterSubmit {
    inner: slurm_rest::Client,
    submitted: tokio::sync::mpsc::UnboundedSender<u32>,
}

impl slurm_bridge::slurm::JobControl for DieAfterSubmit {
    async fn submit(
        &self,
        desc: &slurm_rest::models::JobDescMsg,
    ) -> Result<u32, slurm_rest::Error> {
        let id = slurm_bridge::slurm::JobControl::submit(&self.inner, desc).await?;
        let _ = self.submitted.send(id);
        std::future::pending().await
    }
    async fn update(
        &self,
        id: u32,
        d: &slurm_rest::models::JobDescMsg,
    ) -> Result<(), slurm_rest::Error> {
        slurm_bridge::slurm::JobControl::update(&self.inner, id, d).await
    }
    async fn cancel(&self, id: u32) -> Result<(), slurm_rest::Error> {
        slurm_bridge::slurm::JobControl::cancel(&self.inner, id).await
    }
}

impl slurm_bridge::slurm::SlurmJobs for DieAfterSubmit {
    async fn list_jobs(&self) -> Result<Vec<slurm_rest::models::JobInfo>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmJobs::list_jobs(&self.inner).await
    }
    async fn job_states(
        &self,
    ) -> Result<Vec<slurm_rest::models::JobStateEntry>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmJobs::job_states(&self.inner).await
    }
    async fn job(&self, id: u32) -> Result<Option<slurm_rest::models::JobInfo>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmJobs::job(&self.inner, id).await
    }
}

impl slurm_bridge::slurm::SlurmNodes for DieAfterSubmit {
    async fn list_nodes(&self) -> Result<Vec<slurm_rest::models::Node>, slurm_rest::Error> {
        slurm_bridge::slurm::SlurmNodes::list_nodes(&self.inner).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_killed_right_after_submit_makes_no_second_job() {
    let mut env = Env::start(4).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    env.start_scheduler_with(DieAfterSubmit {
        inner: e2e::rest_client(&env.slurm),
        submitted: tx,
    })
    .await;
    // A gang of 3 (coscheduling PodGroup) and a bare pod.
    env.create(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "trio"}, "spec": {"minMember": 3}
    }))
    .await;
    for i in 0..3 {
        let mut p = pod(&format!("trio-{i}"), json!({}), json!({}));
        p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "trio"});
        env.create_pod(p).await;
    }
    env.create_pod(pod("single", json!({}), json!({}))).await;
    let mut submitted = Vec::new();
    for _ in 0..2 {
        let id = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("both groups submitted")
            .unwrap();
        submitted.push(id);
    }
    env.stop_scheduler().await;
    // Killed between submit and label: Slurm has the jobs, the pods know nothing of them.
    let pods = env.pods().list(&Default::default()).await.unwrap().items;
    assert!(pods.iter().all(|p| {
        !kube::ResourceExt::labels(p).contains_key("scheduler.slinky.slurm.net/slurm-jobid")
    }));
    submitted.sort();
    let mut before = env.slurm_job_ids();
    before.sort();
    assert_eq!(before, submitted);

    env.start_scheduler().await;
    let names: Vec<String> = ["trio-0", "trio-1", "trio-2", "single"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let mut after = env.slurm_job_ids();
    after.sort();
    assert_eq!(after, submitted, "no second job after the restart");
    let mut used: Vec<u32> = pods.iter().map(job_id_of).collect();
    used.sort();
    used.dedup();
    assert_eq!(used, submitted);
    env.assert_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmrestd_outage_is_reported_and_recovered() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    env.create_pod(pod("before", json!({}), json!({}))).await;
    env.wait_bound(&["before".into()], BIND_TIMEOUT).await;
    let slurm = env.slurm.clone();
    tokio::task::spawn_blocking(move || slurm.stop_slurmrestd())
        .await
        .unwrap()
        .unwrap();
    env.create_pod(pod("during", json!({}), json!({}))).await;
    let message = env
        .wait_condition("during", "SlurmUnavailable", Duration::from_secs(40))
        .await;
    assert!(!message.is_empty());
    // The outage lasts until the scheduler has retried the submit with backoff (0.5, 1, 2 s):
    // four submits slurmrestd did not answer.
    let failed_submits = env
        .handle()
        .metrics
        .slurm_requests
        .get_or_create(&RequestLabels {
            endpoint: "job_submit",
            outcome: "unavailable",
        })
        .clone();
    wait_for(
        "four submits during the outage",
        Duration::from_secs(40),
        || failed_submits.get() >= 4,
    )
    .await;
    let slurm = env.slurm.clone();
    tokio::task::spawn_blocking(move || slurm.start_slurmrestd())
        .await
        .unwrap()
        .unwrap();
    env.wait_bound(&["during".into()], BIND_TIMEOUT).await;
    assert_eq!(
        env.slurm_job_ids().len(),
        2,
        "one job per pod, nothing duplicated"
    );
    env.assert_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_waiting_pod_cancels_its_job_and_completes_the_deletion() {
    let mut env = Env::start(1).await;
    env.start_scheduler().await;
    env.create_pod(pod("runs", json!({}), json!({}))).await;
    env.wait_bound(&["runs".into()], BIND_TIMEOUT).await;
    env.create_pod(pod("waits", json!({}), json!({}))).await;
    env.wait_condition("waits", "SlurmJobPending", Duration::from_secs(30))
        .await;
    let waiting_job = job_id_of(&env.pods().get("waits").await.unwrap());
    assert!(env.active_job_ids().contains(&waiting_job));
    env.pods()
        .delete("waits", &Default::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while env.pods().get_opt("waits").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the deleted pod stayed (finalizer)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while env.active_job_ids().contains(&waiting_job) {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiting pod's job was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(env.scontrol_job(waiting_job).contains("JobState=CANCELLED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_job_cancelled_under_its_pod_is_replaced() {
    let mut env = Env::start(1).await;
    env.start_scheduler().await;
    env.create_pod(pod("first", json!({}), json!({}))).await;
    let first = env.wait_bound(&["first".into()], BIND_TIMEOUT).await;
    env.create_pod(pod("second", json!({}), json!({}))).await;
    env.wait_condition("second", "SlurmJobPending", Duration::from_secs(30))
        .await;
    let stale = job_id_of(&env.pods().get("second").await.unwrap());
    // An admin cancels the pending job: the pod is labelled with a job that no longer stands for it.
    env.slurm.run(&["scancel", &stale.to_string()]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let fresh = loop {
        let id = job_id_of(&env.pods().get("second").await.unwrap());
        if id != stale {
            break id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new job after the cancel"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(env.active_job_ids().contains(&fresh));
    // When the node frees up, the pod runs under the new job.
    env.slurm
        .run(&["scancel", &job_id_of(&first[0]).to_string()])
        .unwrap();
    let second = env.wait_bound(&["second".into()], BIND_TIMEOUT).await;
    assert_eq!(job_id_of(&second[0]), fresh);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_waits_for_its_gates_to_be_removed() {
    let mut env = Env::start(1).await;
    let rest = e2e::rest_client(&env.slurm);
    let watched = start_watched(&mut env, rest).await;
    env.create_pod(pod(
        "gated",
        json!({}),
        json!({"schedulingGates": [{"name": "example.com/quota"}]}),
    ))
    .await;
    // A whole pass over the gated pod has run.
    passes_over_alone(&env, &watched, "gated", "gated", |p| {
        p.spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty())
    })
    .await;
    assert!(
        env.slurm_job_ids().is_empty(),
        "no Slurm job for a gated pod"
    );
    let p = env.pods().get("gated").await.unwrap();
    assert!(!e2e::node_name_is_set(&p));
    assert_eq!(
        e2e::scheduled_condition(&p).map(|c| c.1),
        Some("SchedulingGated".to_string()),
        "kube-apiserver's own condition stays"
    );
    // Removing the gate (the only change the API allows to gates) lets it schedule.
    env.pods()
        .patch(
            "gated",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"schedulingGates": null}})),
        )
        .await
        .unwrap();
    env.wait_bound(&["gated".into()], BIND_TIMEOUT).await;
    env.assert_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_larger_than_every_node_is_not_submitted() {
    // Nodes have cpu 8 and memory 16000Mi allocatable.
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    let sized = |name: &str, cpu: &str| {
        pod(
            name,
            json!({}),
            json!({"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                                   "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]}),
        )
    };
    env.create_pod(sized("huge", "16")).await;
    let message = env
        .wait_condition("huge", "NoFeasibleNodes", Duration::from_secs(30))
        .await;
    assert!(
        message.contains("0/2 nodes are available")
            && message.contains("2 Insufficient cpu (requested 16, largest node allocatable 8)"),
        "{message}"
    );
    assert!(
        env.slurm_job_ids().is_empty(),
        "no Slurm job for a pod no node can hold"
    );
    // A pod that fits is scheduled beside it, through Slurm.
    env.create_pod(sized("fits", "2")).await;
    let pods = env.wait_bound(&["fits".into()], BIND_TIMEOUT).await;
    assert_eq!(env.slurm_job_ids(), [job_id_of(&pods[0])]);
    let huge = env.pods().get("huge").await.unwrap();
    assert!(!e2e::node_name_is_set(&huge));
    assert!(
        !huge
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(slurm_bridge::wellknown::LABEL_SLURM_JOBID),
        "no job label on the pod that does not fit"
    );
    env.assert_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_job_follows_a_node_that_becomes_schedulable() {
    let mut env = Env::start(2).await;
    env.kube_env
        .kubectl(&[
            "taint",
            "node",
            "node-2",
            "example.com/maintenance=yes:NoSchedule",
        ])
        .unwrap();
    env.start_scheduler().await;
    for i in 0..2 {
        env.create_pod(pod(&format!("m-{i}"), json!({}), json!({})))
            .await;
    }
    // node-2 is excluded: one pod binds to node-1, the other's job waits in Slurm.
    let deadline = std::time::Instant::now() + BIND_TIMEOUT;
    let waiting = loop {
        let pods = env.pods().list(&Default::default()).await.unwrap().items;
        let (bound, waiting): (Vec<_>, Vec<_>) = pods.into_iter().partition(e2e::node_name_is_set);
        if bound.len() == 1
            && waiting.len() == 1
            && kube::ResourceExt::labels(&waiting[0])
                .contains_key(slurm_bridge::wellknown::LABEL_SLURM_JOBID)
        {
            assert_eq!(
                bound[0].spec.as_ref().unwrap().node_name.as_deref(),
                Some("node-1")
            );
            break kube::ResourceExt::name_any(&waiting[0]);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pod bound to node-1"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    env.kube_env
        .kubectl(&["taint", "node", "node-2", "example.com/maintenance-"])
        .unwrap();
    let pods = env.wait_bound(&[waiting], BIND_TIMEOUT).await;
    assert_eq!(
        pods[0].spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-2")
    );
    env.assert_consistent().await;
}

// ---- Issue 10: gangs, partial allocations, permanent rejections, PodGroupScheduled ----

fn coscheduling_api(env: &Env) -> kube::Api<kube::api::DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    kube::Api::namespaced_with(env.kube.clone(), e2e::NS, &ar)
}

async fn coscheduling_group(env: &Env, name: &str, min_member: u32) {
    env.create(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name}, "spec": {"minMember": min_member}
    }))
    .await;
}

/// A pod of the coscheduling PodGroup `group` running `command` (forever by default).
fn member(name: &str, group: &str, command: Option<&[&str]>) -> serde_json::Value {
    let mut spec = json!({});
    if let Some(cmd) = command {
        spec = json!({
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": cmd,
                            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}],
        });
    }
    let mut p = pod(name, json!({}), spec);
    p["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": group});
    p
}

/// Slurm's state of a job, as `JobState=...` in scontrol.
fn job_state(env: &Env, id: u32) -> String {
    let text = env.scontrol_job(id);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("JobState="))
        .unwrap_or("")
        .to_string()
}

async fn wait_for<F: Fn() -> bool>(what: &str, timeout: Duration, check: F) {
    let deadline = std::time::Instant::now() + timeout;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn label_of(env: &Env, name: &str) -> Option<u32> {
    let p = env.pods().get(name).await.unwrap();
    kube::ResourceExt::labels(&p)
        .get(slurm_bridge::wellknown::LABEL_SLURM_JOBID)
        .and_then(|l| l.parse().ok())
}

/// Item 1: a coscheduling PodGroup in phase Running refuses new pods, and its running gang keeps
/// its job and its labels (the original only refused to schedule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_podgroup_refuses_newcomers_and_keeps_its_running_gang() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    coscheduling_group(&env, "closed", 2).await;
    for i in 0..2 {
        env.create_pod(member(&format!("closed-{i}"), "closed", None))
            .await;
    }
    let names: Vec<String> = (0..2).map(|i| format!("closed-{i}")).collect();
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let id = job_id_of(&pods[0]);
    coscheduling_api(&env)
        .patch_status(
            "closed",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    // A replacement pod arrives: refused, with the reason.
    env.create_pod(member("closed-2", "closed", None)).await;
    let message = env
        .wait_condition("closed-2", "PodGroupClosed", BIND_TIMEOUT)
        .await;
    assert!(message.contains("Running"), "{message}");
    let events = env.wait_event("closed-2", "PodGroupClosed").await;
    assert!(
        events.iter().any(|(r, _)| r == "PodGroupClosed"),
        "{events:?}"
    );
    // Its passes go on: after a whole pass over it that read the refusal, the gang's job and
    // labels stay.
    pass_over_reported(&env, "closed-2", "PodGroupClosed").await;
    assert_eq!(job_state(&env, id), "RUNNING");
    for name in &names {
        assert_eq!(
            label_of(&env, name).await,
            Some(id),
            "{name} keeps its label"
        );
    }
    assert_eq!(
        env.slurm_job_ids(),
        [id],
        "no job cancelled, none submitted"
    );
    assert_eq!(label_of(&env, "closed-2").await, None);
}

/// Item 2: a gang that loses a member while its job is pending gets a new job once it is
/// complete again (the pending one is cancelled, its unbound pods unlabelled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_shrinks_while_pending_gets_a_new_job() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    // A pod holding node-1 keeps the gang's job pending.
    env.create_pod(pod("blocker", json!({}), json!({}))).await;
    let blocker = env.wait_bound(&["blocker".into()], BIND_TIMEOUT).await;
    let blocker_job = job_id_of(&blocker[0]);
    coscheduling_group(&env, "shrinks", 2).await;
    for i in 0..2 {
        env.create_pod(member(&format!("shrinks-{i}"), "shrinks", None))
            .await;
    }
    let mut first = None;
    for _ in 0..300 {
        if let Some(id) = label_of(&env, "shrinks-0").await {
            first = Some(id);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = first.expect("the gang's job");
    wait_for("the gang's job pending", BIND_TIMEOUT, || {
        job_state(&env, first) == "PENDING"
    })
    .await;
    // A member goes before the job runs.
    env.pods()
        .delete("shrinks-1", &Default::default())
        .await
        .unwrap();
    // Nothing triggers shrinks-0 when its sibling goes: its next pass comes with its requeue
    // (at most 30 s). The condition then says "1 of 2" (the next pass rewrites the cancel's
    // message); the Event keeps it.
    wait_for("the pending job cancelled", Duration::from_secs(90), || {
        job_state(&env, first) == "CANCELLED"
    })
    .await;
    let mut events = Vec::new();
    for _ in 0..50 {
        events = env.event_reasons("shrinks-0").await;
        if events
            .iter()
            .any(|(r, n)| r == "WaitingForGang" && n.contains("cancelled"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "WaitingForGang" && n.contains("1 of 2") && n.contains("cancelled")),
        "{events:?}"
    );
    let message = env
        .wait_condition("shrinks-0", "WaitingForGang", BIND_TIMEOUT)
        .await;
    assert!(message.contains("1 of 2"), "{message}");
    assert_eq!(label_of(&env, "shrinks-0").await, None, "label cleared");
    // The gang is complete again: a new job, which runs once node-1 is free.
    env.create_pod(member("shrinks-1", "shrinks", None)).await;
    let mut second = None;
    for _ in 0..300 {
        if let Some(id) = label_of(&env, "shrinks-1").await {
            second = Some(id);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let second = second.expect("a new job");
    assert_ne!(second, first);
    env.slurm
        .run(&["scancel", &blocker_job.to_string()])
        .unwrap();
    let names = ["shrinks-0".to_string(), "shrinks-1".to_string()];
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    assert!(pods.iter().all(|p| job_id_of(p) == second));
}

/// Item 2: a running gang below its minimum is left to the controllers: a new pod of the group
/// waits, the job keeps running and its pods their labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_gang_below_its_minimum_is_left_alone() {
    let mut env = Env::start(3).await;
    env.start_scheduler().await;
    coscheduling_group(&env, "runs", 3).await;
    env.create_pod(member("runs-0", "runs", None)).await;
    for i in 1..3 {
        env.create_pod(member(&format!("runs-{i}"), "runs", Some(&["sleep", "2"])))
            .await;
    }
    let names: Vec<String> = (0..3).map(|i| format!("runs-{i}")).collect();
    let pods = env.wait_bound(&names, BIND_TIMEOUT).await;
    let id = job_id_of(&pods[0]);
    for name in &names[1..] {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let p = env.pods().get(name).await.unwrap();
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{name} finishes");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // One live pod of 3; a new one makes 2.
    env.create_pod(member("runs-3", "runs", None)).await;
    let message = env
        .wait_condition("runs-3", "WaitingForGang", BIND_TIMEOUT)
        .await;
    assert!(message.contains("2 of 3"), "{message}");
    // After a whole pass over the waiting pod that read its report, the running job is untouched.
    pass_over_reported(&env, "runs-3", "WaitingForGang").await;
    assert_eq!(job_state(&env, id), "RUNNING");
    assert_eq!(label_of(&env, "runs-0").await, Some(id));
    assert_eq!(env.slurm_job_ids(), [id]);
}

/// Items 3 and 5: a coscheduling PodGroup with minMember 2 and 3 pods on 2 nodes is submitted
/// (Slurm may grant 2 to 3 nodes), the pods that fit are bound, and the one left over, like a
/// pod that joins after the allocation, is told so and gets a job of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_below_its_size_starts_its_minimum_and_the_rest_follow_alone() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    coscheduling_group(&env, "partial", 2).await;
    for i in 0..3 {
        env.create_pod(member(&format!("partial-{i}"), "partial", None))
            .await;
    }
    let placed = ["partial-0".to_string(), "partial-1".to_string()];
    let pods = env.wait_bound(&placed, BIND_TIMEOUT).await;
    let group_job = job_id_of(&pods[0]);
    assert_eq!(job_id_of(&pods[1]), group_job);
    assert!(env.scontrol_job(group_job).contains("NumNodes=2"));
    // The last pod by name was left over: told why, and submitted alone.
    env.wait_condition("partial-2", "OutsideGroupAllocation", BIND_TIMEOUT)
        .await;
    let events = env.wait_event("partial-2", "OutsideGroupAllocation").await;
    let note = events
        .iter()
        .find(|(r, _)| r == "OutsideGroupAllocation")
        .map(|(_, n)| n.clone())
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(note.contains("allocated 2 node(s)"), "{note}");
    let mut alone = None;
    for _ in 0..300 {
        alone = label_of(&env, "partial-2")
            .await
            .filter(|id| *id != group_job);
        if alone.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let alone = alone.expect("a job of its own");
    assert_eq!(job_state(&env, alone), "PENDING", "both nodes are taken");
    // A pod that joins the running group: told so, and submitted alone too.
    env.create_pod(member("partial-late", "partial", None))
        .await;
    env.wait_condition("partial-late", "OutsideGroupAllocation", BIND_TIMEOUT)
        .await;
    let events = env
        .wait_event("partial-late", "OutsideGroupAllocation")
        .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "OutsideGroupAllocation" && n.contains("joined")),
        "{events:?}"
    );
    // The group's job ends: the two followers run.
    env.slurm.run(&["scancel", &group_job.to_string()]).unwrap();
    let followers = ["partial-2".to_string(), "partial-late".to_string()];
    let pods = env.wait_bound(&followers, BIND_TIMEOUT).await;
    assert_eq!(job_id_of(&pods[0]), alone);
    assert_ne!(job_id_of(&pods[1]), group_job);
    assert_ne!(job_id_of(&pods[1]), alone);
}

/// Item 4: a job Slurm rejects for good is not sent again every few seconds: the pod shows
/// Slurm's text and waits until it (or its group, or the nodes) changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_slurm_rejection_waits_for_a_change() {
    let mut env = Env::start(1).await;
    let writes = e2e::SlurmWrites::open();
    let gated = e2e::Gated {
        inner: env.rest.clone(),
        writes: writes.clone(),
    };
    let watched = start_watched(&mut env, gated).await;
    env.create_pod(pod(
        "nowhere",
        json!({"slurmjob.slinky.slurm.net/partition": "nosuch"}),
        json!({}),
    ))
    .await;
    let message = env
        .wait_condition("nowhere", "SlurmSubmitFailed", BIND_TIMEOUT)
        .await;
    assert!(message.contains("Invalid partition name"), "{message}");
    // Passes after the rejection (the one its condition triggers, then two more) send nothing:
    // still one submit.
    passes_over_alone(&env, &watched, "nowhere", "rejected", |p| {
        e2e::scheduled_condition(p).is_some_and(|c| c.1 == "SlurmSubmitFailed")
    })
    .await;
    assert_eq!(*writes.submits_entered.borrow(), 1, "sent once");
    let events = env.event_reasons("nowhere").await;
    assert_eq!(
        events
            .iter()
            .filter(|(r, _)| r == "SlurmSubmitFailed")
            .count(),
        1,
        "{events:?}"
    );
    // The user fixes the pod: sent again at once, and it runs.
    env.pods()
        .patch(
            "nowhere",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "slurmjob.slinky.slurm.net/partition": "slurm-bridge"}}})),
        )
        .await
        .unwrap();
    env.wait_bound(&["nowhere".into()], BIND_TIMEOUT).await;
    assert_eq!(*writes.submits_entered.borrow(), 2);
    env.assert_consistent().await;
}

/// Item 13: a pending job whose nodes all become unusable is reported, not dropped silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_job_whose_nodes_become_unusable_is_reported() {
    let mut env = Env::start(1).await;
    env.start_scheduler().await;
    env.create_pod(pod("first", json!({}), json!({}))).await;
    let first = env.wait_bound(&["first".into()], BIND_TIMEOUT).await;
    env.create_pod(pod("second", json!({}), json!({}))).await;
    let mut id = None;
    for _ in 0..300 {
        id = label_of(&env, "second").await;
        if id.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(id.is_some(), "second submitted");
    let node = first[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(env.kube.clone());
    nodes
        .patch(
            &node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let message = env
        .wait_condition("second", "NoFeasibleNodes", Duration::from_secs(60))
        .await;
    assert!(message.contains("stays pending"), "{message}");
}

/// Issue 21: a job Slurm starts on a Slurm node whose Kubernetes node is gone (deleted while
/// the job was pending, its external node still IDLE) is cancelled with a reason on the pod and
/// the pod submitted again without that node, instead of waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_allocated_a_deleted_node_is_resubmitted_without_it() {
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    for n in ["a-1", "a-2"] {
        env.create_pod(pod(n, json!({}), json!({}))).await;
    }
    let busy = env
        .wait_bound(&["a-1".into(), "a-2".into()], BIND_TIMEOUT)
        .await;
    env.create_pod(pod("waits", json!({}), json!({}))).await;
    env.wait_condition("waits", "SlurmJobPending", Duration::from_secs(30))
        .await;
    let pending = job_id_of(&env.pods().get("waits").await.unwrap());
    // While the scheduler is down: node-1 is deleted from Kubernetes (its Slurm node stays, as
    // without a node controller), and freed in Slurm: Slurm starts the pending job there.
    env.stop_scheduler().await;
    let on = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let (gone, other): (Vec<&Pod>, Vec<&Pod>) = busy.iter().partition(|p| on(p) == "node-1");
    env.kube_env
        .kubectl(&["delete", "node", "node-1", "--wait=false"])
        .unwrap();
    env.slurm
        .run(&["scancel", &job_id_of(gone[0]).to_string()])
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let job = env.rest.job(pending).await.unwrap();
        if job.nodes.as_deref() == Some("node-1")
            && job
                .job_state
                .contains(&slurm_rest::models::JobState::Running)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job never ran on node-1"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.start_scheduler().await;
    // Cancelled, with the reason on the pod; a new job that excludes node-1.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !env.scontrol_job(pending).contains("JobState=CANCELLED") {
        assert!(
            std::time::Instant::now() < deadline,
            "the job on the deleted node was not cancelled: {}",
            env.scontrol_job(pending)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reasons = env.wait_event("waits", "SlurmAllocationUnmapped").await;
    assert!(
        reasons
            .iter()
            .any(|(_, m)| m.contains("submitted again without node-1")),
        "{reasons:?}"
    );
    // When node-2 frees up, the pod runs there under its new job.
    env.slurm
        .run(&["scancel", &job_id_of(other[0]).to_string()])
        .unwrap();
    let waits = env.wait_bound(&["waits".into()], BIND_TIMEOUT).await;
    assert_eq!(on(&waits[0]), "node-2");
    let fresh = job_id_of(&waits[0]);
    assert_ne!(fresh, pending);
    assert!(
        env.scontrol_job(fresh).contains("ExcNodeList=node-1"),
        "{}",
        env.scontrol_job(fresh)
    );
}
