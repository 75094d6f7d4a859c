//! The scheduler's reads for translation (`caches::reader`) against a real kube-apiserver whose
//! JobSet, LeaderWorkerSet, Job and StatefulSet controllers make the pods: every pod translates
//! as through live reads (`KubeReader`); once the per-kind caches are in, a pass makes no request
//! at all; what the caches cannot answer yet is read live. Prints the API server's GET and LIST
//! requests per pass, live against cached (docs/performance.md).

#[allow(dead_code)]
#[path = "e2e/poll.rs"]
mod poll;
#[path = "e2e/prometheus.rs"]
mod prometheus;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use slurm_bridge::caches::objects::ObjectCaches;
use slurm_bridge::caches::pod_groups::PodGroupIndex;
use slurm_bridge::caches::reader::{CachedReader, PodReads};
use slurm_bridge::k8s::slim_pod::Pod;
use slurm_bridge::workload::kube_reader::KubeReader;
use slurm_bridge::workload::{ObjectRef, ReadError, Translation, WorkloadReader, translate};

const SCHEDULER: &str = "slurm-bridge-scheduler";
const NS: &str = "default";
/// The resources translation reads.
const READ: [&str; 7] = [
    "pods",
    "jobs",
    "jobsets",
    "leaderworkersets",
    "statefulsets",
    "podgroups",
    "workloads",
];

/// kube-apiserver's GET and LIST requests on the resources translation reads, every client.
async fn reads(client: &kube::Client) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    let mut reads = 0.0;
    for verb in ["GET", "LIST"] {
        for resource in READ {
            reads += prometheus::sample(
                &text,
                "apiserver_request_total",
                &[("verb", verb), ("resource", resource)],
            );
        }
    }
    reads
}

async fn create(client: &kube::Client, obj: serde_json::Value) {
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    let types = obj.types.clone().unwrap();
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    let (ar, _) =
        kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, &types.kind))
            .await
            .unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", types.kind));
}

fn container() -> serde_json::Value {
    json!([{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}])
}

/// The workloads: a JobSet of 2 Jobs, a LeaderWorkerSet group of 3, a built-in PodGroup gang of 3
/// with its Workload.
async fn create_workloads(client: &kube::Client) {
    create(client, json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [{"name": "worker", "replicas": 2, "template": {"spec": {
            "parallelism": 1, "completions": 1, "template": {"spec": {"schedulerName": SCHEDULER,
                "restartPolicy": "Never", "containers": container()}}}}}]}
    }))
    .await;
    create(
        client,
        json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3, "workerTemplate": {"spec": {
                "schedulerName": SCHEDULER, "containers": container()}}}}
        }),
    )
    .await;
    create(client, json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
        "metadata": {"name": "training", "annotations": {"slurmjob.slinky.slurm.net/job-name": "gang"}},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}}}]}
    }))
    .await;
    create(client, json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
        "metadata": {"name": "training-workers"},
        "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "training", "podGroupTemplateName": "workers"}},
                 "schedulingPolicy": {"gang": {"minCount": 3}}}
    }))
    .await;
    for i in 0..3 {
        create(
            client,
            json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("training-{i}")},
                "spec": {"schedulerName": SCHEDULER, "containers": container(),
                    "schedulingGroup": {"podGroupName": "training-workers"}}
            }),
        )
        .await;
    }
}

/// The pod cache as `Caches::start` runs it: trimmed pods naming the scheduler, the group
/// index following the store.
fn pod_cache(client: &kube::Client) -> (Store<Pod>, PodGroupIndex, tokio::task::JoinHandle<()>) {
    let (store, writer) = reflector::store::<Pod>();
    let groups = PodGroupIndex::default();
    let (s, g) = (store.clone(), groups.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.schedulerName={SCHEDULER}"));
    let task = tokio::spawn(
        watcher(Api::<Pod>::all(client.clone()), cfg)
            .default_backoff()
            .modify(slurm_bridge::k8s::trim::pod)
            .reflect(writer)
            .for_each(move |e| {
                if let Ok(e) = e {
                    g.follow(&s, &e);
                }
                futures::future::ready(())
            }),
    );
    (store, groups, task)
}

async fn wait_until(what: &str, check: impl Fn() -> bool) {
    poll::wait_until(what, Duration::from_secs(90), async || check()).await
}

fn same(a: &Translation, b: &Translation, pod: &str) {
    assert_eq!(a.group_key, b.group_key, "{pod}");
    assert_eq!(a.ir.root, b.ir.root, "{pod}");
    assert_eq!(a.ir.pod_names(), b.ir.pod_names(), "{pod}");
    assert_eq!(a.ir.job, b.ir.job, "{pod}");
    assert_eq!(a.gang, b.gang, "{pod}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn translation_reads_come_from_the_caches() {
    let env = kube_testenv::Instance::start(kube_testenv::InstanceOptions {
        workload_controllers: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = env.client();
    create_workloads(&client).await;
    let (store, groups, pod_task) = pod_cache(&client);
    // 2 JobSet pods, 3 LeaderWorkerSet pods, 3 PodGroup pods.
    wait_until("the 8 pods in the cache", || store.len() == 8).await;
    let mut pods: Vec<Arc<Pod>> = store.state();
    pods.sort_by_key(|p| p.metadata.name.clone());

    let live = KubeReader::new(client.clone());
    let before = reads(&client).await;
    let mut expected = Vec::new();
    for p in &pods {
        expected.push(translate(&live, p).await.unwrap());
    }
    let live_requests = reads(&client).await - before;

    let objects = Arc::new(ObjectCaches::new(client.clone()));
    let cached = CachedReader::new(
        client.clone(),
        Some(PodReads {
            store: store.clone(),
            groups: groups.clone(),
        }),
        objects.clone(),
    );
    // The first pass over each kind starts its cache and reads live meanwhile.
    for (p, want) in pods.iter().zip(&expected) {
        let got = translate(&cached, p).await.unwrap();
        same(want, &got, p.metadata.name.as_deref().unwrap());
    }
    let kinds: BTreeSet<String> = [
        "Job.batch/v1",
        "JobSet.jobset.x-k8s.io/v1alpha2",
        "LeaderWorkerSet.leaderworkerset.x-k8s.io/v1",
        "PodGroup.scheduling.k8s.io/v1alpha2",
        "StatefulSet.apps/v1",
        "Workload.scheduling.k8s.io/v1alpha2",
    ]
    .map(String::from)
    .into();
    wait_until("every kind's cache in", || {
        objects.ready_kinds().into_iter().collect::<BTreeSet<_>>() == kinds
    })
    .await;

    // The steady state: no request.
    let live_before = cached.live_reads();
    let before = reads(&client).await;
    for (p, want) in pods.iter().zip(&expected) {
        let got = translate(&cached, p).await.unwrap();
        same(want, &got, p.metadata.name.as_deref().unwrap());
    }
    let cached_requests = reads(&client).await - before;
    assert_eq!(
        cached.live_reads(),
        live_before,
        "a pass over synced caches read live"
    );
    assert!(cached.cached_reads() > 0);
    println!(
        "translation of {} pods (2 JobSet, 3 LeaderWorkerSet, 3 PodGroup): kube-apiserver GET+LIST \
         per pass {:.2} live, {:.2} from the caches",
        pods.len(),
        live_requests / pods.len() as f64,
        cached_requests / pods.len() as f64
    );

    // A miss in a synced kind is read live: the object may be newer than the cache.
    let missing = ObjectRef::new("batch/v1", "Job", NS, "missing");
    assert_eq!(
        cached.get(&missing).await,
        Err(ReadError::NotFound(missing.clone()))
    );
    assert_eq!(cached.live_reads(), live_before + 1);

    // An owner created just now translates at once (from the cache or live, whichever has it).
    create(
        &client,
        json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "late",
                "annotations": {"slurmjob.slinky.slurm.net/timelimit": "7"}},
            "spec": {"activeDeadlineSeconds": 120, "template": {"spec": {"schedulerName": SCHEDULER,
                "restartPolicy": "Never", "containers": container()}}}
        }),
    )
    .await;
    wait_until("the late Job's pod", || store.len() == 9).await;
    let late = store
        .state()
        .into_iter()
        .find(|p| p.metadata.name.as_deref().unwrap().starts_with("late-"))
        .unwrap();
    let got = translate(&cached, &late).await.unwrap();
    let want = translate(&live, &late).await.unwrap();
    same(&want, &got, "late");
    assert_eq!(got.ir.job.time_limit_minutes, Some(7));

    // A kind the cluster does not serve is the live read's answer.
    let widget = ObjectRef::new("example.com/v1", "Widget", NS, "w");
    assert!(matches!(
        cached.get(&widget).await,
        Err(ReadError::NoKind { .. })
    ));
    objects.stop();
    pod_task.abort();
    drop(env);
}
