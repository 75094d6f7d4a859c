//! What starts a pass: pod changes, Slurm node listings and job changes from the shared caches,
//! sent to the running term's queue while this replica leads.

use super::context::{Ctx, Slurm};
use super::metrics::Metrics;
use super::queue::PodQueue;
use super::siblings::SiblingIndex;
use crate::caches::Change;
use crate::k8s::slim_pod::Pod;
use crate::sync::MutexExt;
use kube::runtime::reflector::ObjectRef;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where reconcile requests go: the running term's queue ([`PodQueue`]) while this replica
/// leads, nowhere while it stands by (a term starts with a pass for every cached pod).
#[derive(Default)]
pub(super) struct Triggers(Mutex<Option<Arc<PodQueue>>>);

impl Triggers {
    pub(super) fn send(&self, pod: ObjectRef<Pod>) {
        if let Some(q) = self.0.locked().as_ref() {
            q.push(pod);
        }
    }

    /// Sends a pass for a pod whose job was just allocated ([`PodQueue::push_allocated`]).
    pub(super) fn send_allocated(&self, pod: ObjectRef<Pod>) {
        if let Some(q) = self.0.locked().as_ref() {
            q.push_allocated(pod);
        }
    }

    /// Sends a pass for each of `pods` (the queue ranks them).
    pub(super) fn send_all(&self, pods: &[Arc<Pod>]) {
        if let Some(q) = self.0.locked().as_ref() {
            for pod in pods {
                q.push(crate::k8s::pod_ref(pod));
            }
        }
    }

    /// `pod` is gone from the cache: the queue may forget it.
    pub(super) fn forget(&self, pod: &Pod) {
        if let Some(q) = self.0.locked().as_ref() {
            q.forget(&crate::k8s::pod_ref(pod));
        }
    }

    /// Requests go to `queue` from now on.
    pub(super) fn open(&self, queue: Arc<PodQueue>) {
        *self.0.locked() = Some(queue);
    }

    pub(super) fn close(&self) {
        *self.0.locked() = None;
    }

    /// The pass of `pod` enters its binding stage ([`PodQueue::binding_stage`]); the permit is
    /// held while its Bindings are sent. Nothing to wait for while no term runs (unit tests).
    pub(super) async fn binding_stage(
        &self,
        pod: &Pod,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let queue = self.0.locked().clone()?;
        queue.binding_stage(&crate::k8s::pod_ref(pod)).await
    }
}

/// Pod changes: per-pod state is kept in step, and a pod is reconciled (while leading) when what
/// a pass reads of it changed, or the reason of its `PodScheduled` condition did (a pass that
/// reported from a stale view, e.g. a gang member counted before its siblings were seen, runs
/// once more). A new message under the same reason starts no pass: a failure whose message
/// differs each time (naming a generated object, say) would otherwise retry at once, never
/// backing off.
pub(super) async fn follow_pods<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<Change<Pod>>,
    triggers: Arc<Triggers>,
) {
    let mut seen = SeenInputs::default();
    let mut siblings = SiblingIndex::default();
    while let Some(first) = changes.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = changes.try_recv() {
            batch.push(more);
        }
        let mut to_send: Vec<Arc<Pod>> = Vec::new();
        for change in batch {
            follow_one(
                &ctx,
                change,
                &mut seen,
                &mut siblings,
                &mut to_send,
                &triggers,
            );
        }
        triggers.send_all(&to_send);
    }
}

/// One pod change: a pod to reconcile goes to `to_send`; siblings are woken at once.
fn follow_one<S: Slurm>(
    ctx: &Ctx<S>,
    change: Change<Pod>,
    seen: &mut SeenInputs,
    siblings: &mut SiblingIndex,
    to_send: &mut Vec<Arc<Pod>>,
    triggers: &Triggers,
) {
    ctx.pod_change(&change);
    match &change {
        Change::Applied(pod) => {
            siblings.applied(pod);
            let applied = seen.applied(pod);
            if applied.pass {
                if applied.new {
                    tracing::trace!(pod = %crate::k8s::pod_key(pod), "new pod queued");
                }
                to_send.push(pod.clone());
            }
            if applied.new {
                wake_siblings(siblings, pod, triggers);
            }
        }
        Change::Deleted(pod) => {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            seen.forget(uid);
            siblings.remove(uid);
            triggers.forget(pod);
            wake_siblings(siblings, pod, triggers);
        }
        Change::Relisted => {
            let cached = ctx.pods.state();
            let live: std::collections::HashSet<String> = cached
                .iter()
                .filter_map(|p| p.metadata.uid.clone())
                .collect();
            seen.keep_only(&live);
            siblings.retain(|uid| live.contains(uid));
            // The watch was broken: a change may have been missed, or a pass may have run while
            // the store lacked its pod. Every waiting pod gets a pass, whatever `seen` says.
            to_send.extend(cached.into_iter().filter(|p| is_waiting(p)));
        }
    }
}

/// What a pod change asks of the scheduler ([`SeenInputs::applied`]): a pass, and whether the
/// pod was not cached before (its siblings are woken).
#[derive(Debug)]
struct Applied {
    pass: bool,
    new: bool,
}

/// Each cached pod's scheduling inputs ([`scheduling_inputs`]) by uid, `None` once it is bound.
#[derive(Default)]
struct SeenInputs(std::collections::HashMap<String, Option<u64>>);

impl SeenInputs {
    /// A pod is passed when it is new or what a pass reads of it changed. A bound pod's node is
    /// set for good and its pass would do nothing (the pod controller follows it from there), so
    /// its changes (the Binding's echo, each status write) are neither hashed nor passed.
    fn applied(&mut self, pod: &Pod) -> Applied {
        let key = pod.metadata.uid.clone().unwrap_or_default();
        let now = (!crate::k8s::is_bound(pod)).then(|| scheduling_inputs(pod));
        let before = self.0.insert(key, now);
        Applied {
            pass: now.is_some() && before != Some(now),
            new: before.is_none(),
        }
    }

    fn forget(&mut self, uid: &str) {
        self.0.remove(uid);
    }

    /// Forgets the pods whose uids `live` lacks (gone while a watch was broken).
    fn keep_only(&mut self, live: &std::collections::HashSet<String>) {
        self.0.retain(|uid, _| live.contains(uid));
    }
}

/// A pod a scheduling pass may still act for: not bound, and not terminal (a pod deleted before
/// binding included: its pass releases it).
pub(super) fn is_waiting(pod: &Pod) -> bool {
    !crate::k8s::is_bound(pod) && !crate::workload::kinds::is_terminal(pod)
}

/// The scheduler's safety net: every `interval` until `stop` reads true, a pass for every
/// waiting pod ([`is_waiting`]), as the pod controller's resync does for bound pods. Changes are
/// handled at once; this catches what a broken watch or a dropped request may have missed.
pub(super) async fn resync_until(
    pods: kube::runtime::reflector::Store<Pod>,
    triggers: Arc<Triggers>,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let waiting: Vec<Arc<Pod>> = pods.state().into_iter().filter(|p| is_waiting(p)).collect();
        tracing::debug!(pods = waiting.len(), "scheduler resync");
        triggers.send_all(&waiting);
    }
}

/// A pod that appears or goes may complete or shrink a gang: the unbound pods of its namespace
/// that wait for their gang, or share its Slurm job, are reconciled now rather than at their
/// next requeue (their own condition writes start no pass). Found through the index, not by a
/// scan of every cached pod ([`SiblingIndex`]).
fn wake_siblings(siblings: &SiblingIndex, pod: &Pod, triggers: &Triggers) {
    for other in siblings.siblings(pod) {
        triggers.send(other);
    }
}

/// A hash of what a scheduling pass reads of a pod (labels, annotations, owners, finalizers,
/// deletion, spec, phase, claim status) and of its `PodScheduled` reason; not the condition's
/// message, the other conditions or the resource version.
fn scheduling_inputs(pod: &Pod) -> u64 {
    use std::hash::{Hash, Hasher};
    let m = &pod.metadata;
    let status = pod.status.as_ref();
    let inputs = serde_json::to_vec(&(
        &m.labels,
        &m.annotations,
        &m.owner_references,
        &m.finalizers,
        &m.deletion_timestamp,
        &pod.spec,
        status.and_then(|s| s.phase.as_ref()),
        status.and_then(|s| s.extended_resource_claim_status.as_ref()),
        status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .and_then(|c| c.reason.as_ref()),
    ))
    .unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    inputs.hash(&mut h);
    h.finish()
}

/// Slurm node listings: when the set of Slurm nodes changes (a node registered or removed) or a
/// node's configuration does (registered anew with GPUs, say), every unbound pod is reconciled,
/// so a pod that found no node, or whose job Slurm refused for the nodes' configuration, is
/// placed at once, not at its retry.
pub(super) async fn follow_slurm_nodes<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<Arc<Vec<String>>>,
    triggers: Arc<Triggers>,
) {
    let current = |ctx: &Ctx<S>| {
        (
            ctx.slurm_nodes.snapshot().generation,
            ctx.slurm_nodes.config_generation(),
        )
    };
    let mut generation = current(&ctx);
    while changes.recv().await.is_some() {
        let now = current(&ctx);
        if now == generation {
            continue;
        }
        generation = now;
        for pod in ctx.pods.state() {
            if !crate::k8s::is_bound(&pod) && !crate::workload::kinds::is_terminal(&pod) {
                triggers.send(crate::k8s::pod_ref(&pod));
            }
        }
    }
}

/// PVC, PV and StorageClass changes: the unbound pods with claims that the change may concern
/// (for a PVC, those of its namespace naming it; for a PV or class, all) are reconciled, so a pod
/// waiting for a claim is submitted, and a pod waiting for its claims' binding is bound, at once.
pub(super) async fn follow_volumes<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<crate::caches::VolumeChange>,
    triggers: Arc<Triggers>,
) {
    use crate::caches::VolumeChange;
    while let Some(change) = changes.recv().await {
        for pod in ctx.pods.state() {
            if crate::k8s::is_bound(&pod)
                || crate::workload::kinds::is_terminal(&pod)
                || !crate::volumes::has_claims(&pod)
            {
                continue;
            }
            let concerned = match &change {
                VolumeChange::Pool => true,
                VolumeChange::Claim { namespace, name } => {
                    pod.metadata.namespace.as_deref() == Some(namespace.as_str())
                        && crate::volumes::pod_claims(&pod)
                            .iter()
                            .any(|c| c.claim == *name)
                }
            };
            if concerned {
                triggers.send(crate::k8s::pod_ref(&pod));
            }
        }
    }
}

/// Job changes seen by the job watcher: per-job state is kept in step, and every pod of the job
/// is reconciled (while leading), so an allocation binds at once.
pub(super) async fn forward_job_events<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut job_events: tokio::sync::mpsc::UnboundedReceiver<crate::slurm::JobEvent>,
    metrics: Arc<Metrics>,
    triggers: Arc<Triggers>,
) {
    // The gauge is counted once a second from the index, not per event: a count made only on
    // events stayed stale after the last one of a burst, and jobs recorded at submit send none
    // (the alert on waiting pods never resolved).
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let event = tokio::select! {
            event = job_events.recv() => match event {
                Some(e) => e,
                None => return,
            },
            _ = tick.tick() => {
                let pending = ctx
                    .watcher
                    .index()
                    .jobs()
                    .filter(|j| j.is_pending())
                    .count();
                metrics.pending_groups.set(pending as i64);
                continue;
            }
        };
        ctx.job_event(&event);
        let allocated =
            matches!(&event, crate::slurm::JobEvent::Changed(j) if j.allocated_nodes().is_some());
        for (ns, name) in event.job().comment.pod_names() {
            let pod = ObjectRef::new(name).within(ns);
            if allocated {
                triggers.send_allocated(pod);
            } else {
                triggers.send(pod);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};
    use serde_json::json;

    /// The resync hands out every waiting pod again and again, though no change came for it (a
    /// pass lost to a broken watch is made up for), and never a bound or finished pod.
    #[tokio::test]
    async fn the_resync_passes_every_waiting_pod_without_a_change() {
        let pod = |name: &str, node: Option<&str>, phase: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name},
                "spec": {"containers": [{"name": "c"}], "nodeName": node},
                "status": {"phase": phase},
            }))
            .unwrap()
        };
        let (store, mut writer) = reflector::store::<Pod>();
        for p in [
            pod("waiting", None, "Pending"),
            pod("bound", Some("node-1"), "Running"),
            pod("done", None, "Failed"),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        let queue = PodQueue::new(store.clone(), 4);
        let triggers = Arc::new(Triggers::default());
        triggers.open(queue.clone());
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let resync = tokio::spawn(resync_until(
            store,
            triggers,
            Duration::from_millis(20),
            stop,
        ));
        for round in 0..3 {
            let got = tokio::time::timeout(Duration::from_secs(5), async {
                loop {
                    let changed = queue.changed();
                    if let Some((key, _)) = queue.next_ready(tokio::time::Instant::now(), 4) {
                        break key;
                    }
                    changed.await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("no pass in round {round}"));
            assert_eq!(got.name, "waiting", "round {round}");
            queue.finish(
                &got,
                &crate::scheduler::runner::Action::await_change(),
                tokio::time::Instant::now(),
            );
        }
        stop_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), resync)
            .await
            .expect("the resync stops")
            .unwrap();
    }

    /// An unbound pod is passed when it comes and when what a pass reads changes; from its
    /// Binding on, none of its changes is (status writes, the Binding's echo), and a pod first
    /// seen bound is new (its siblings are woken) but not passed.
    #[test]
    fn a_bound_pods_changes_start_no_pass() {
        let pod = |node: Option<&str>, phase: &str, labels: serde_json::Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "uid": "u", "labels": labels},
                "spec": {"containers": [{"name": "c"}], "nodeName": node},
                "status": {"phase": phase},
            }))
            .unwrap()
        };
        // Each answer as (pass, new).
        let answer = |a: Applied| (a.pass, a.new);
        let mut seen = SeenInputs::default();
        let waiting = pod(None, "Pending", json!({}));
        assert_eq!(answer(seen.applied(&waiting)), (true, true));
        assert_eq!(answer(seen.applied(&waiting)), (false, false));
        let labelled = pod(None, "Pending", json!({"x": "1"}));
        assert_eq!(answer(seen.applied(&labelled)), (true, false));
        let bound = pod(Some("node-1"), "Pending", json!({"x": "1"}));
        assert_eq!(answer(seen.applied(&bound)), (false, false));
        let running = pod(Some("node-1"), "Running", json!({"x": "2"}));
        assert_eq!(answer(seen.applied(&running)), (false, false));
        let mut fresh = SeenInputs::default();
        assert_eq!(answer(fresh.applied(&running)), (false, true));
    }

    #[test]
    fn condition_messages_alone_start_no_pass() {
        let pod = |labels: serde_json::Value, reason: &str, message: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "uid": "u", "labels": labels, "resourceVersion": message},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}]},
            }))
            .unwrap()
        };
        let first = scheduling_inputs(&pod(json!({}), "DeviceClaimFailed", "claim a-1 failed"));
        assert_eq!(
            first,
            scheduling_inputs(&pod(json!({}), "DeviceClaimFailed", "claim a-2 failed")),
            "another condition message and resource version: same inputs"
        );
        assert_ne!(
            first,
            scheduling_inputs(&pod(
                json!({"x": "1"}),
                "DeviceClaimFailed",
                "claim a-1 failed"
            )),
            "a label is an input"
        );
        assert_ne!(
            first,
            scheduling_inputs(&pod(json!({}), "WaitingForGang", "claim a-1 failed")),
            "the PodScheduled reason is an input"
        );
    }
}
