//! The Kubernetes lines beside the bridge: kube-scheduler on the same pods, and the bind floor.

use crate::env::{create_pods, last, namespace, watch_bound, watch_running};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use std::time::{Duration, Instant};

/// kube-scheduler, burst: stopped while N pods are created, then started; time to all bound,
/// and the daemons' CPU seconds before and after it ([`crate::metrics::print_cpu`]); prints the
/// API server's requests per pod meanwhile.
pub(crate) async fn kube_scheduler_burst(
    kube: &mut kube_testenv::Instance,
    n: u32,
) -> (Duration, crate::metrics::CpuSpan) {
    use kube_testenv::Daemon;
    kube.stop_daemon(Daemon::KubeScheduler)
        .expect("stop kube-scheduler");
    let pods = namespace(kube, "ks-burst").await;
    create_pods(&pods, "ks", n, "default-scheduler").await;
    let bound = watch_bound(&pods, n as usize, None);
    let requests = crate::metrics::apiserver_requests_by_kind(kube).await;
    let cpu_before = crate::metrics::cpu_by_daemon();
    let started = Instant::now();
    let pprof = crate::apiserver_pprof::start(kube, "kube-scheduler");
    kube.start_daemon(Daemon::KubeScheduler)
        .await
        .expect("start kube-scheduler");
    let t = last(&bound.await.unwrap()).duration_since(started);
    let cpu_after = crate::metrics::cpu_by_daemon();
    let requests_after = crate::metrics::apiserver_requests_by_kind(kube).await;
    if let Some(p) = pprof {
        p.await.unwrap();
    }
    crate::metrics::print_apiserver_requests(&requests, &requests_after, n, "the last bind");
    (t, (cpu_before, cpu_after))
}

/// The bind floor's namespace, whose pods the Scheduled Events line reports on too.
const FLOOR_NAMESPACE: &str = "bind-floor";

/// The bind floor: N waiting pods that no scheduler serves, bound by the bench itself,
/// `workers` Bindings in flight, pod i to node i mod nodes. Returns the time to the last
/// Binding, the time until the node agent reported every pod Running, and the daemons' CPU
/// seconds from the first Binding until then (the pods' creation left out, as in the other
/// lines).
pub(crate) async fn bind_floor(
    kube: &kube_testenv::Instance,
    n: u32,
    nodes: u32,
    workers: u32,
) -> (Duration, Duration, crate::metrics::CpuSpan) {
    let pods = namespace(kube, FLOOR_NAMESPACE).await;
    create_pods(&pods, "floor", n, "nobody").await;
    let running = watch_running(&pods, n as usize);
    let cpu_before = crate::metrics::cpu_by_daemon();
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let name = format!("floor-{i}");
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    target: ObjectReference {
                        kind: Some("Node".into()),
                        api_version: Some("v1".into()),
                        name: Some(format!("node-{}", i % nodes + 1)),
                        ..Default::default()
                    },
                };
                pods.create_subresource::<Binding, serde_json::Value>(
                    "binding",
                    &name,
                    &PostParams::default(),
                    &binding,
                )
                .await
                .expect("bind");
            }
        })
        .buffer_unordered(workers as usize)
        .count()
        .await;
    let bound = started.elapsed();
    running.await.unwrap();
    let settled = started.elapsed();
    (
        bound,
        settled,
        (cpu_before, crate::metrics::cpu_by_daemon()),
    )
}

/// kube-scheduler's other write, apart from the floor: one `Scheduled` Event per pod the floor
/// bound (the shape kube-scheduler and the bridge post), `workers` in flight. Returns the time
/// and the daemons' CPU seconds from the first Event to the last answer.
pub(crate) async fn scheduled_events(
    kube: &kube_testenv::Instance,
    workers: u32,
) -> (Duration, crate::metrics::CpuSpan) {
    use slurm_bridge::k8s::events::{Note, Reporter, build};
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(kube.client(), FLOOR_NAMESPACE);
    let bound = pods.list(&ListParams::default()).await.expect("list");
    let reporter = Reporter {
        controller: "bench".into(),
        instance: "bench".into(),
    };
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(kube.client(), FLOOR_NAMESPACE);
    let cpu_before = crate::metrics::cpu_by_daemon();
    let started = Instant::now();
    futures::stream::iter(bound.items)
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            let note = format!(
                "Successfully assigned {FLOOR_NAMESPACE}/{} to {}",
                p.metadata.name.as_deref().unwrap_or_default(),
                node.unwrap_or_default()
            );
            let event = build(
                &reporter,
                &p,
                Note {
                    warning: false,
                    action: "Binding",
                    reason: "Scheduled",
                    note,
                },
            );
            let events = events.clone();
            async move {
                events
                    .create(&PostParams::default(), &event)
                    .await
                    .expect("post a Scheduled Event");
            }
        })
        .buffer_unordered(workers as usize)
        .count()
        .await;
    (
        started.elapsed(),
        (cpu_before, crate::metrics::cpu_by_daemon()),
    )
}
