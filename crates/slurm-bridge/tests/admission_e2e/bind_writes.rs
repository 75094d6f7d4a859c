//! Issue 22: the finalizer and toleration set by the mutating webhook at creation, so the
//! scheduler's bind-time write is the label only.

use crate::e2e::{self, Env, SCHEDULER};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::PostParams;
use serde_json::json;
use slurm_bridge::config::Config;
use std::time::Duration;

/// The fields `manager` set on `p`, as the API server tracks them (managedFields, all
/// subresources), as JSON text.
fn fields_of(p: &Pod, manager: &str) -> String {
    p.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(manager))
        .filter_map(|m| m.fields_v1.as_ref().map(|f| f.0.to_string()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Issue 22: the mutating webhook gives a pod the bridge finalizer and the managed-node
/// toleration at creation, so the scheduler's bind-time write is a label patch only; a pod
/// created before the webhook ran still gets both from the scheduler. Each ends bound with the
/// label, the finalizer and the toleration exactly once; managedFields show which writer set
/// the finalizer and the toleration.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_webhook_adds_finalizer_and_toleration_so_binding_writes_the_label_only() {
    use slurm_bridge::wellknown::{FINALIZER, LABEL_SLURM_JOBID, managed_node_toleration};
    let mut env = Env::start(2).await;
    env.start_scheduler().await;
    let pods = env.pods();
    let toleration = managed_node_toleration(SCHEDULER);
    let count = |p: &Pod| {
        let fins = p.finalizers().iter().filter(|f| *f == FINALIZER).count();
        let tols = p
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .map_or(0, |t| t.iter().filter(|t| **t == toleration).count());
        (fins, tols)
    };
    let prepared = |p: &Pod| count(p) == (1, 1);

    // Created before any webhook runs: the scheduler adds both with its label patch.
    let early: Pod =
        serde_json::from_value(e2e::pod("before-webhook", json!({}), json!({}))).unwrap();
    let early = pods.create(&PostParams::default(), &early).await.unwrap();
    assert_eq!(count(&early), (0, 0), "no webhook yet");
    env.wait_bound(&["before-webhook".to_string()], Duration::from_secs(60))
        .await;

    let cfg = Config {
        scheduler_name: SCHEDULER.into(),
        ..Default::default()
    };
    let _hooks = e2e::admission::start(&env.kube, cfg, "bind-ready").await;
    let pod: Pod =
        serde_json::from_value(e2e::pod("through-webhook", json!({}), json!({}))).unwrap();
    let created = e2e::admission::create_mutated(&pods, &pod, prepared).await;
    assert_eq!(
        count(&created),
        (1, 1),
        "finalizer and toleration at creation"
    );
    assert!(!created.labels().contains_key(LABEL_SLURM_JOBID));

    let names = ["before-webhook".to_string(), "through-webhook".to_string()];
    let bound = env.wait_bound(&names, Duration::from_secs(60)).await;
    for p in &bound {
        let name = p.name_any();
        assert_eq!(
            count(p),
            (1, 1),
            "{name}: finalizer and toleration exactly once"
        );
        assert!(
            p.labels().contains_key(LABEL_SLURM_JOBID),
            "{name}: job id label"
        );
        // The scheduler's patch, or its Binding (kube-apiserver copies a Binding's labels
        // onto the pod, outside managedFields): set by no one else.
        let label_field = format!("\"f:{LABEL_SLURM_JOBID}\"");
        let others: Vec<_> = p
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.manager.as_deref() != Some(SCHEDULER))
            .filter(|m| {
                m.fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.to_string().contains(&label_field))
            })
            .map(|m| m.manager.clone())
            .collect();
        assert!(others.is_empty(), "{name}: the label set by {others:?}");
        let by_scheduler = fields_of(p, SCHEDULER);
        let scheduler_set_both =
            by_scheduler.contains("\"f:finalizers\"") && by_scheduler.contains("\"f:tolerations\"");
        let want = name == "before-webhook";
        assert_eq!(
            scheduler_set_both, want,
            "{name}: finalizer and toleration set by the scheduler: {by_scheduler}"
        );
        if !want {
            assert!(
                !by_scheduler.contains("\"f:finalizers\"")
                    && !by_scheduler.contains("\"f:tolerations\""),
                "{name}: the scheduler set neither: {by_scheduler}"
            );
        }
    }
    env.assert_consistent().await;
    env.assert_invariants().await;
}
