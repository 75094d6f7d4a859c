//! What the scheduler tests share: a scheduler on caches the test keeps (`start_watched`),
//! proofs that a pass over a pod has run (`passes_over_alone`, `pass_over_reported`) or that the
//! passes over a bound pod have ended (`passes_ended_once_cached`), the pods
//! of a workload by label, and coscheduling PodGroups with their members.

use crate::e2e::{self, Env, pod};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use prometheus_client::registry::Registry;
use serde_json::json;
use slurm_bridge::caches::{CacheTasks, Caches};
use slurm_bridge::scheduler;
use slurm_bridge::slurm::Instrumented;
use slurm_bridge::slurm::Slurm;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub const BIND_TIMEOUT: Duration = Duration::from_secs(60);

/// A scheduler started as [`Env::start_scheduler_opts`] starts it (job poll 200 ms, node poll
/// and sweep 2 s, shutdown grace 200 ms), on caches the test keeps, so the test sees what the
/// scheduler's own pod cache holds. Its handle and stop signal are the Env's; dropping this
/// stops the caches.
pub struct Watched<S: Slurm> {
    caches: Arc<Caches<Instrumented<S>>>,
    _tasks: CacheTasks,
}

pub async fn start_watched<S: Slurm>(env: &mut Env, slurm: S) -> Watched<S> {
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
pub async fn poke(env: &Env, name: &str, value: u64) {
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

/// Waits until the scheduler's own pod cache holds a version of the pod `name` that `seen`
/// accepts: every pass that starts after that reads it or a later one.
async fn cache_holds<S: Slurm>(
    watched: &Watched<S>,
    name: &str,
    what: &str,
    seen: impl Fn(&Pod) -> bool,
) {
    let key = ObjectRef::<slurm_bridge::k8s::slim_pod::Pod>::new(name).within(e2e::NS);
    e2e::wait_until(
        &format!("the scheduler's pod cache holds {name} {what}"),
        BIND_TIMEOUT,
        async || {
            watched
                .caches
                .handles
                .pods
                .get(&key)
                .is_some_and(|p| seen(&as_full(&p)))
        },
    )
    .await;
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
pub async fn passes_over_alone<S: Slurm>(
    env: &Env,
    watched: &Watched<S>,
    name: &str,
    what: &str,
    seen: impl Fn(&Pod) -> bool,
) {
    cache_holds(watched, name, what, seen).await;
    let passes = env.handle().reconcile_passes.clone();
    let seen_at = passes.get();
    for i in 1..=2 {
        poke(env, name, i).await;
        e2e::wait_until(
            &format!("pass {i} over {name} after its cache held it {what}"),
            Duration::from_secs(30),
            async || passes.get() >= seen_at + i,
        )
        .await;
    }
}

/// Proof that every pass over the bound pod `name` that could have read it otherwise has ended,
/// for a test whose one pod it is. A bound pod's changes start no pass (pokes bring none, unlike
/// [`passes_over_alone`]'s unbound pods), and a pass that reads it bound writes nothing. Waits
/// until the scheduler's own pod cache holds a version `seen` accepts, so every pass that starts
/// later reads it or a later one, then until as many passes have ended
/// (`reconcile_duration_seconds`' count) as had started by then.
pub async fn passes_ended_once_cached<S: Slurm>(
    env: &Env,
    watched: &Watched<S>,
    name: &str,
    what: &str,
    seen: impl Fn(&Pod) -> bool,
) {
    cache_holds(watched, name, what, seen).await;
    let handle = env.handle();
    let started = handle.reconcile_passes.get();
    e2e::wait_until(
        &format!("the {started} passes started once the cache held {name} {what} have ended"),
        Duration::from_secs(30),
        async || handle.reconcile_duration.count() >= started,
    )
    .await;
}

/// Proof that the scheduler has made a whole pass over the unbound pod `name` after every change
/// made to it so far, for a pod whose passes end by showing `reason` (nothing follows the report
/// in such a pass): its PodScheduled condition, overwritten by the test, is written back with
/// `reason`. The pass that writes it back read the overwritten condition, so the pod as it is
/// after every earlier change (the scheduler's cache takes a pod's changes in order).
pub async fn pass_over_reported(env: &Env, name: &str, reason: &str) {
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

pub async fn wait_pod_names(env: &Env, selector: &str, n: usize) -> Vec<String> {
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

pub fn coscheduling_api(env: &Env) -> kube::Api<kube::api::DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    kube::Api::namespaced_with(env.kube.clone(), e2e::NS, &ar)
}

pub async fn coscheduling_group(env: &Env, name: &str, min_member: u32) {
    env.create(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name}, "spec": {"minMember": min_member}
    }))
    .await;
}

/// A pod of the coscheduling PodGroup `group` running `command` (forever by default).
pub fn member(name: &str, group: &str, command: Option<&[&str]>) -> serde_json::Value {
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

pub async fn label_of(env: &Env, name: &str) -> Option<u32> {
    let p = env.pods().get(name).await.unwrap();
    kube::ResourceExt::labels(&p)
        .get(slurm_bridge::wellknown::LABEL_SLURM_JOBID)
        .and_then(|l| l.parse().ok())
}

/// A cached pod as k8s-openapi's type, for the checks the e2e helpers make on live pods.
fn as_full(p: &slurm_bridge::k8s::slim_pod::Pod) -> Pod {
    serde_json::to_value(p)
        .and_then(serde_json::from_value)
        .expect("a cached pod decodes as a full one")
}
