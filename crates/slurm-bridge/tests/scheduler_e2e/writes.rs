//! What the scheduler writes: at most three Kubernetes writes per bound pod, and annotations
//! that reach the Slurm job.

use crate::e2e::{self, Env, job_id_of, pod};
use crate::support::{BIND_TIMEOUT, passes_ended_once_cached, start_watched};
use serde_json::json;
use std::time::Duration;

/// A bound pod costs at most 3 Kubernetes writes: the label/finalizer/toleration patch, the
/// Binding (carrying the node annotation, which kube-apiserver copies onto the pod while it sets
/// PodScheduled=True) and the Scheduled Event; the result on the pod is the full one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_costs_at_most_three_kubernetes_writes() {
    use slurm_bridge::k8s::writes::write_kind;
    use slurm_bridge::wellknown::{ANNOTATION_SLURM_NODE, merge_toleration};
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
    // Every pass that may have read the pod unbound has ended; later ones read it bound and
    // write nothing.
    passes_ended_once_cached(&env, &watched, "thrifty", "bound", e2e::node_name_is_set).await;
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
    assert!(slurm_bridge::wellknown::holds_finalizer(&p));
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
    env.assert_invariants().await;
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
    env.assert_invariants().await;
}

/// The real API server (Kubernetes 1.36) copies a Binding's labels onto the pod, which the
/// writer counts on when a pod's label patch has not gone out before its bind: the Binding
/// carries the job id label, and label, node, node annotation and PodScheduled=True land in
/// that one write. The pod is released and deleted again; nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_api_server_copies_the_bindings_job_id_label() {
    use k8s_openapi::api::core::v1::Node;
    use slurm_bridge::k8s::PodWriter;
    use slurm_bridge::k8s::writes::{KubeWrites, write_kind};
    use slurm_bridge::wellknown::{
        ANNOTATION_SLURM_NODE, FINALIZER, LABEL_SLURM_JOBID, managed_node_toleration,
    };
    let env = Env::start(1).await;
    let nodes = kube::Api::<Node>::all(env.kube.clone())
        .list(&Default::default())
        .await
        .unwrap();
    let node = kube::ResourceExt::name_any(&nodes.items[0]);
    // As the admission webhook creates it: the label is all the scheduler's patch would set.
    let mut manifest = pod(
        "carried",
        json!({}),
        json!({"tolerations": [managed_node_toleration(e2e::SCHEDULER)]}),
    );
    manifest["metadata"]["finalizers"] = json!([FINALIZER]);
    let created = env.create_pod(manifest).await;
    let slim = slurm_bridge::k8s::slim_pod::Pod::from(&created);
    let writes = KubeWrites::default();
    let writer = PodWriter::new(env.kube.clone(), e2e::SCHEDULER);
    let label = writer
        .label_for_binding(&writes, &slim, 4242)
        .await
        .unwrap();
    assert!(
        writer
            .bind_carrying(&writes, &slim, &node, label)
            .await
            .unwrap()
    );
    assert_eq!(writes.of(write_kind::LABEL), 0, "no label patch");
    assert_eq!(writes.total(), 1, "the Binding alone");
    let p = env.pods().get("carried").await.unwrap();
    assert_eq!(
        kube::ResourceExt::labels(&p).get(LABEL_SLURM_JOBID),
        Some(&"4242".to_string()),
        "the Binding's label, copied by kube-apiserver"
    );
    assert_eq!(e2e::node_of(&p), node);
    assert_eq!(
        kube::ResourceExt::annotations(&p).get(ANNOTATION_SLURM_NODE),
        Some(&node)
    );
    assert_eq!(
        e2e::scheduled_condition(&p).map(|c| c.0),
        Some("True".to_string())
    );
    // Deleted and released (the node agent writes the pod's status meanwhile: the release,
    // guarded by the resourceVersion, is retried on a fresh copy): no pod and no Slurm job left.
    env.pods()
        .delete(
            "carried",
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await
        .unwrap();
    e2e::wait_until("the pod gone", Duration::from_secs(60), async || {
        let Some(p) = env.pods().get_opt("carried").await.unwrap() else {
            return true;
        };
        let slim = slurm_bridge::k8s::slim_pod::Pod::from(&p);
        let _ = writer.remove_finalizer(&writes, &slim).await;
        false
    })
    .await;
    env.assert_consistent().await;
    env.assert_invariants().await;
}
