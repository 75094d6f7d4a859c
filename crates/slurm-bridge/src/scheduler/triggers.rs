//! What starts a pass: pod changes, Slurm node listings and job changes from the shared caches,
//! sent to the running controller's queue while this replica leads.

use super::context::{Ctx, Slurm};
use super::metrics::Metrics;
use super::reconcile;
use crate::caches::Change;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where reconcile requests go: the running controller's queue while this replica leads,
/// nowhere while it stands by (the controller starts with a pass for every cached pod).
#[derive(Default)]
pub(super) struct Triggers(Mutex<Option<mpsc::UnboundedSender<ObjectRef<Pod>>>>);

impl Triggers {
    pub(super) fn slot(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<mpsc::UnboundedSender<ObjectRef<Pod>>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn send(&self, pod: ObjectRef<Pod>) {
        if let Some(tx) = self.slot().as_ref() {
            let _ = tx.unbounded_send(pod);
        }
    }

    /// A new queue; requests go there from now on.
    pub(super) fn open(&self) -> mpsc::UnboundedReceiver<ObjectRef<Pod>> {
        let (tx, rx) = mpsc::unbounded();
        *self.slot() = Some(tx);
        rx
    }

    pub(super) fn close(&self) {
        *self.slot() = None;
    }
}

/// Pod changes: per-pod state is kept in step, and a changed pod is reconciled (while leading).
pub(super) async fn follow_pods<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<Change<Pod>>,
    triggers: Arc<Triggers>,
) {
    while let Some(change) = changes.recv().await {
        ctx.pod_change(&change);
        if let Change::Applied(pod) = &change {
            triggers.send(ObjectRef::from_obj(&**pod));
        }
    }
}

/// Slurm node listings: when the set of Slurm nodes changes (a node registered or removed), every
/// unbound pod is reconciled, so a pod that found no node is placed at once, not at its retry.
pub(super) async fn follow_slurm_nodes<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<Arc<Vec<String>>>,
    triggers: Arc<Triggers>,
) {
    let mut generation = ctx.slurm_nodes.snapshot().generation;
    while changes.recv().await.is_some() {
        let now = ctx.slurm_nodes.snapshot().generation;
        if now == generation {
            continue;
        }
        generation = now;
        for pod in ctx.pods.state() {
            let bound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            if !bound && !crate::workload::kinds::is_terminal(&pod) {
                triggers.send(ObjectRef::from_obj(&*pod));
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
    let mut gauge_at: Option<std::time::Instant> = None;
    while let Some(event) = job_events.recv().await {
        ctx.job_event(&event);
        // Counting scans the index: at most once a second, not per event.
        if gauge_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            gauge_at = Some(std::time::Instant::now());
            let pending = ctx
                .watcher
                .index()
                .jobs()
                .filter(|j| j.is_pending())
                .count();
            metrics.pending_groups.set(pending as i64);
        }
        for (ns, name) in reconcile::comment_pods(&event.job().comment) {
            triggers.send(ObjectRef::new(name).within(ns));
        }
    }
}
