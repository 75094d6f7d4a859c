//! The leadership lifecycle: stand by, lead (the passes and the sweep run), stop when
//! leadership is lost (passes in flight aborted) or at shutdown (passes in flight may finish).

use super::context::{Ctx, Slurm};
use super::metrics::LifecycleMetrics;
use super::queue::PodQueue;
use super::triggers::Triggers;
use super::{SchedulerOptions, reconcile};
use crate::leader::until_leadership;
use crate::slurm::Instrumented;
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
    /// The passes stopped by itself (not expected); it is started again.
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
                TermEnd::Ended => {
                    tracing::warn!("the scheduling passes stopped; starting them again")
                }
                TermEnd::Shutdown => {
                    // Readiness first, then no new pass; the passes in flight may finish.
                    self.ready.send_replace(false);
                    self.ctx.stopping.store(true, Ordering::SeqCst);
                    let _ = stop_tx.send(true);
                    let grace = self.opts.shutdown_grace;
                    tracing::info!(?grace, "shutting down: letting the passes in flight finish");
                    let started = tokio::time::Instant::now();
                    tokio::select! {
                        done = tokio::time::timeout(grace, &mut term) => if done.is_err() {
                            tracing::warn!(?grace, "shutdown grace over: aborting the passes still in flight");
                        },
                        _ = until_leadership(&mut self.leader, false) => {
                            tracing::warn!("leadership lost while shutting down: aborting the passes in flight");
                        }
                    }
                    // The label patches still queued (young ones wait `LABEL_MIN_AGE`) go out
                    // now, within the rest of the grace, while this replica still leads.
                    if self.ctx.leader.load(Ordering::SeqCst) && *self.leader.borrow() {
                        self.ctx.writer.flush_labels();
                        let rest = grace.saturating_sub(started.elapsed());
                        tokio::select! {
                            _ = tokio::time::timeout(rest, self.ctx.writer.background_done()) => {}
                            _ = until_leadership(&mut self.leader, false) => {}
                        }
                    }
                }
            }
            // Stop: a pass that starts now does nothing, and dropping the runner aborts the
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

    /// One term of leadership: the passes (one for every cached pod first, then pod and
    /// job triggers) and the sweep, until `stop` reads true and the passes in flight are done.
    pub(super) fn term(
        &self,
        stop: tokio_watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send + use<S> {
        let pod_queue = PodQueue::new(self.ctx.pods.clone(), usize::from(self.opts.concurrency));
        self.triggers.open(pod_queue.clone());
        // A pass for every cached pod first, in the queue's order.
        self.triggers.send_all(&self.ctx.pods.state());
        let passes = self.metrics.passes.clone();
        let pass_duration = self.metrics.pass_duration.clone();
        let ctx = self.ctx.clone();
        // The workers decide (the queue hands out no more than they are); as many passes again
        // may be in their binding stage sending Bindings, and as many waiting for their turn to
        // ([`PodQueue::binding_stage`]).
        let passes_run = super::runner::run(
            pod_queue,
            usize::from(self.opts.concurrency).saturating_mul(3),
            move |pod| {
                passes.inc();
                let ctx = ctx.clone();
                let pass_duration = pass_duration.clone();
                let started = std::time::Instant::now();
                async move {
                    let action = match reconcile::reconcile(pod.clone(), ctx.clone()).await {
                        Ok(action) => action,
                        Err(e) => {
                            tracing::debug!(error = %e, "reconcile error");
                            reconcile::error_policy(pod, &e, ctx)
                        }
                    };
                    pass_duration.observe(started.elapsed().as_secs_f64());
                    action
                }
            },
            stop.clone(),
        );
        let resync = super::triggers::resync_until(
            self.ctx.pods.clone(),
            self.triggers.clone(),
            self.opts.resync,
            stop.clone(),
        );
        let sweep = sweep_until(self.ctx.clone(), self.opts.sweep_interval, stop);
        async move {
            futures::future::join3(passes_run, sweep, resync).await;
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
