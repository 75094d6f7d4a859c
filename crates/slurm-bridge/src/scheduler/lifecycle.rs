//! The leadership lifecycle: stand by, lead (the controller and the sweep run), stop when
//! leadership is lost (passes in flight aborted) or at shutdown (passes in flight may finish).

use super::context::{Ctx, Slurm};
use super::metrics::LifecycleMetrics;
use super::queue::PodQueue;
use super::triggers::Triggers;
use super::{SchedulerOptions, reconcile};
use crate::k8s::slim_pod::Pod;
use crate::leader::until_leadership;
use crate::slurm::Instrumented;
use crate::sync::until_true;
use futures::StreamExt;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch as tokio_watch;

/// How a term of leadership ended.
pub(super) enum TermEnd {
    Lost,
    Shutdown,
    /// The controller stopped by itself (not expected); it is started again.
    Ended,
}

/// What the leadership loop needs.
pub(super) struct Lifecycle<S: Slurm> {
    pub(super) ctx: Arc<Ctx<Instrumented<S>>>,
    pub(super) triggers: Arc<Triggers>,
    pub(super) opts: SchedulerOptions,
    pub(super) leader: tokio_watch::Receiver<bool>,
    pub(super) ready: tokio_watch::Sender<bool>,
    pub(super) leading: tokio_watch::Sender<bool>,
    pub(super) metrics: LifecycleMetrics,
}

impl<S: Slurm> Lifecycle<S> {
    /// Stands by, leads while the leader signal says so, and stops at `shutdown`.
    pub(super) async fn lead_until(
        &mut self,
        mut shutdown: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
    ) {
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = until_leadership(&mut self.leader, true) => {}
            }
            tracing::info!("leading: scheduling");
            self.ctx.stopping.store(false, Ordering::SeqCst);
            self.ctx.leader.store(true, Ordering::SeqCst);
            self.leading.send_replace(true);
            self.metrics.leader.set(1);
            let (stop_tx, stop_rx) = tokio_watch::channel(false);
            let mut term = Box::pin(self.term(stop_rx));
            let end = tokio::select! {
                _ = &mut term => TermEnd::Ended,
                _ = until_leadership(&mut self.leader, false) => TermEnd::Lost,
                _ = &mut shutdown => TermEnd::Shutdown,
            };
            match end {
                TermEnd::Lost => {
                    tracing::warn!("leadership lost: aborting the passes in flight");
                }
                TermEnd::Ended => tracing::warn!("the controller stopped; starting it again"),
                TermEnd::Shutdown => {
                    // Readiness first, then no new pass; the passes in flight may finish.
                    self.ready.send_replace(false);
                    self.ctx.stopping.store(true, Ordering::SeqCst);
                    let _ = stop_tx.send(true);
                    let grace = self.opts.shutdown_grace;
                    tracing::info!(?grace, "shutting down: letting the passes in flight finish");
                    tokio::select! {
                        done = tokio::time::timeout(grace, &mut term) => if done.is_err() {
                            tracing::warn!(?grace, "shutdown grace over: aborting the passes still in flight");
                        },
                        _ = until_leadership(&mut self.leader, false) => {
                            tracing::warn!("leadership lost while shutting down: aborting the passes in flight");
                        }
                    }
                }
            }
            // Stop: a pass that starts now does nothing, and dropping the controller aborts the
            // passes still running at their next await.
            self.ctx.leader.store(false, Ordering::SeqCst);
            self.triggers.close();
            drop(term);
            self.metrics.leader.set(0);
            self.leading.send_replace(false);
            if matches!(end, TermEnd::Shutdown) {
                return;
            }
        }
    }

    /// One term of leadership: the controller (a pass for every cached pod first, then pod and
    /// job triggers) and the sweep, until `stop` reads true and the passes in flight are done.
    pub(super) fn term(
        &self,
        stop: tokio_watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send + use<S> {
        let (tx, queue) = futures::channel::mpsc::unbounded();
        let pod_queue = PodQueue::new(
            self.ctx.pods.clone(),
            usize::from(self.opts.concurrency),
            tx,
        );
        self.triggers.open(pod_queue.clone());
        // A pass for every cached pod first, in the queue's order.
        self.triggers.send_all(&self.ctx.pods.state());
        let feed = pod_queue.clone().feed();
        let passes = self.metrics.passes.clone();
        let controller = Controller::for_stream(
            futures::stream::empty::<Result<Pod, watcher::Error>>(),
            self.ctx.pods.clone(),
        )
        // The workers decide (the queue hands out no more than they are); as many passes again
        // may be in their binding stage sending Bindings, and as many waiting for their turn to
        // ([`PodQueue::binding_stage`]).
        .with_config(
            ControllerConfig::default().concurrency(self.opts.concurrency.saturating_mul(3)),
        )
        .reconcile_on(queue)
        .graceful_shutdown_on(until_true(stop.clone()))
        .run(
            move |pod, ctx| {
                passes.inc();
                reconcile::reconcile(pod, ctx)
            },
            reconcile::error_policy,
            self.ctx.clone(),
        )
        .for_each(move |res| {
            // Every request the queue handed out ends here: passed, failed, or for a pod
            // gone from the cache meanwhile.
            use kube::runtime::controller::Error;
            match &res {
                Ok((pod, _)) => pod_queue.done(pod),
                Err(Error::ObjectNotFound(r) | Error::ReconcilerFailed(_, r)) => pod_queue.done(
                    &ObjectRef::new(&r.name).within(r.namespace.as_deref().unwrap_or_default()),
                ),
                Err(_) => {}
            }
            if let Err(e) = res {
                tracing::debug!(error = %e, "reconcile error");
            }
            futures::future::ready(())
        });
        let resync = super::triggers::resync_until(
            self.ctx.pods.clone(),
            self.triggers.clone(),
            self.opts.resync,
            stop.clone(),
        );
        let sweep = sweep_until(self.ctx.clone(), self.opts.sweep_interval, stop);
        async move {
            // The feed lives as long as the controller, the sweep and the resync.
            tokio::select! {
                _ = futures::future::join3(controller, sweep, resync) => {}
                _ = feed => {}
            }
        }
    }
}

/// The sweep ([`crate::slurm::sweep`]) every `interval` until `stop` reads true (a sweep in
/// flight finishes first).
pub(super) async fn sweep_until<S: Slurm>(
    ctx: Arc<Ctx<S>>,
    interval: Duration,
    stop: tokio_watch::Receiver<bool>,
) {
    let sweep = crate::slurm::sweep::Sweep {
        client: ctx.client.clone(),
        slurm: ctx.slurm.clone(),
        watcher: ctx.watcher.clone(),
        pods: ctx.pods.clone(),
    };
    sweep.every(interval, stop).await
}
