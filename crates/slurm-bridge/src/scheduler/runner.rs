//! Runs the passes the queue hands out ([`PodQueue`]), as kube-runtime's `Controller` would but
//! without a second queue behind ours: the requeues live in the queue beside the requests, under
//! the same shared key. The passes run in this one task, so dropping it aborts them at their next
//! await (leadership lost); a stop lets the running ones finish and starts no more.

use super::queue::{PodKey, PodQueue};
use crate::k8s::slim_pod::Pod;
use crate::sync::until_true;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What a pass asks for next: a pass again after a delay, or none until something changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Pass the pod again after `after` unless a change triggers a pass sooner.
    pub const fn requeue(after: Duration) -> Self {
        Action {
            requeue_after: Some(after),
        }
    }

    /// No pass until the pod, its group, its job or its nodes change.
    pub const fn await_change() -> Self {
        Action {
            requeue_after: None,
        }
    }

    /// The delay of the requeue asked for, if any.
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// Runs `pass` for each pod `queue` hands out, at most `max_running` at once (the queue limits
/// the ones deciding to its workers), until `stop` reads true and the running passes ended.
pub(super) async fn run<F, Fut>(
    queue: Arc<PodQueue>,
    max_running: usize,
    pass: F,
    stop: watch::Receiver<bool>,
) where
    F: Fn(Arc<Pod>) -> Fut,
    Fut: Future<Output = Action>,
{
    let mut running = FuturesUnordered::new();
    let stopping = until_true(stop.clone());
    tokio::pin!(stopping);
    let mut stopped = false;
    loop {
        // A stop seen here starts nothing more, whatever woke the loop.
        stopped |= *stop.borrow();
        if !stopped {
            while let Some((key, pod)) = queue.next_ready(Instant::now(), max_running) {
                let fut = pass(pod);
                running.push(async move { (key, fut.await) });
            }
        }
        if stopped && running.is_empty() {
            return;
        }
        let due = queue.next_due();
        let changed = queue.changed();
        tokio::select! {
            biased;
            _ = &mut stopping, if !stopped => stopped = true,
            Some((key, action)) = running.next(), if !running.is_empty() => {
                let key: PodKey = key;
                queue.finish(&key, &action, Instant::now());
            }
            _ = changed, if !stopped => {}
            _ = sleep_until(due), if !stopped && due.is_some() => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::{self, ObjectRef};
    use serde_json::json;
    use tokio::sync::{mpsc, oneshot};

    async fn within<T>(f: impl Future<Output = T>) -> Result<T, tokio::time::error::Elapsed> {
        tokio::time::timeout(Duration::from_secs(5), f).await
    }

    fn pod(name: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [{"name": "c"}]},
        }))
        .unwrap()
    }

    /// Passes run for what is pushed, a requeue runs the pod again, and a stop lets the pass
    /// in flight finish, starts no other, and ends the runner.
    #[tokio::test]
    async fn runs_requeues_and_stops_after_the_passes_in_flight() {
        let (store, mut writer) = reflector::store::<Pod>();
        for name in ["requeued", "held", "late"] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(pod(name)));
        }
        let queue = PodQueue::new(store, 2);
        let (started_tx, mut started) = mpsc::unbounded_channel::<String>();
        let (release_tx, release_rx) = oneshot::channel::<()>();
        let release = Arc::new(std::sync::Mutex::new(Some(release_rx)));
        let (finished_tx, mut finished) = mpsc::unbounded_channel::<String>();
        let (stop_tx, stop) = watch::channel(false);
        let runner = tokio::spawn(run(
            queue.clone(),
            6,
            move |pod: Arc<Pod>| {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let started = started_tx.clone();
                let finished = finished_tx.clone();
                let release = release.clone();
                async move {
                    started.send(name.clone()).unwrap();
                    if name == "held" {
                        let rx = release.lock().unwrap().take();
                        if let Some(rx) = rx {
                            let _ = rx.await;
                        }
                    }
                    finished.send(name.clone()).unwrap();
                    if name == "requeued" {
                        Action::requeue(Duration::from_millis(20))
                    } else {
                        Action::await_change()
                    }
                }
            },
            stop,
        ));
        queue.push(ObjectRef::new("requeued").within("ns"));
        assert_eq!(within(started.recv()).await.unwrap().unwrap(), "requeued");
        assert_eq!(
            within(started.recv()).await.unwrap().unwrap(),
            "requeued",
            "the requeue did not run"
        );
        queue.push(ObjectRef::new("held").within("ns"));
        let mut next = within(started.recv()).await.unwrap().unwrap();
        while next == "requeued" {
            next = within(started.recv()).await.unwrap().unwrap();
        }
        assert_eq!(next, "held");
        stop_tx.send_replace(true);
        queue.push(ObjectRef::new("late").within("ns"));
        release_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), runner)
            .await
            .expect("the runner ended after its pass in flight")
            .unwrap();
        let mut ended = Vec::new();
        while let Ok(name) = finished.try_recv() {
            ended.push(name);
        }
        assert!(
            ended.contains(&"held".to_string()),
            "the pass in flight was cut: {ended:?}"
        );
        while let Ok(name) = started.try_recv() {
            assert_ne!(name, "late", "a pass started after the stop");
        }
    }
}
