//! The scheduling queue in front of the controller, ordered as kube-scheduler's active queue:
//! higher `spec.priority` first, then the pod served least recently (a pod never passed before
//! first), then older pods, then the order of arrival. It hands the controller a pod only while
//! fewer passes are outstanding than the controller has workers, so when more pods wait than can
//! run (start-up, a burst) the higher ones start first; the controller's own queue orders by due
//! time, to the millisecond and not within one.
//!
//! "Least recently served" keeps a new pod from starving behind a backlog: thousands of pods
//! waiting on Slurm capacity are passed again and again (their condition writes, job changes, the
//! resync), and with age alone every such pass of an older pod would rank ahead of the new one
//! (kube-scheduler avoids it by parking tried pods in its unschedulable queue).
//!
//! Within a priority, a pass for a pod whose Slurm job was just allocated goes first
//! ([`PodQueue::push_allocated`]): Slurm holds the nodes for it from now on, and its pass only
//! binds (kube-scheduler's binding cycle, which waits for no scheduling queue). Allocations are
//! bounded by Slurm's capacity, so this cannot starve new pods; in a burst it lets the first
//! jobs' pods bind while later pods are still being submitted.

use crate::k8s::slim_pod::Pod;
use crate::sync::MutexExt;
use futures::channel::mpsc;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::{ObjectRef, Store};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Hand-outs between two prunes of `State::served` (records of pods gone from the cache).
const PRUNE_EVERY: u64 = 4096;

/// One request waiting in the queue.
struct Queued {
    priority: i32,
    /// Queued because the pod's job was allocated ([`PodQueue::push_allocated`]).
    allocated: bool,
    /// When the pod was last handed out (`State::handed`), 0 if never: smaller is sooner.
    served: u64,
    created: Option<Time>,
    seq: u64,
    pod: ObjectRef<Pod>,
}

impl Queued {
    fn rank(
        &self,
    ) -> (
        i32,
        bool,
        std::cmp::Reverse<u64>,
        std::cmp::Reverse<Option<&Time>>,
        std::cmp::Reverse<u64>,
    ) {
        (
            self.priority,
            self.allocated,
            std::cmp::Reverse(self.served),
            std::cmp::Reverse(self.created.as_ref()),
            std::cmp::Reverse(self.seq),
        )
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Greater is sooner: the heap pops it first.
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Queued>,
    /// Pods handed to the controller whose pass has not ended yet, nor entered its binding
    /// stage ([`PodQueue::binding_stage`]).
    outstanding: HashSet<ObjectRef<Pod>>,
    /// Pods handed out whose pass is in its binding stage: no longer counted as a worker.
    released: HashSet<ObjectRef<Pod>>,
    seq: u64,
    /// Hand-outs so far; `served` holds each cached pod's number at its last one.
    handed: u64,
    served: HashMap<ObjectRef<Pod>, u64>,
}

/// The queue of one term of leadership; see the module doc.
pub(super) struct PodQueue {
    state: Mutex<State>,
    wake: Notify,
    workers: usize,
    /// Passes in their binding stage at once: as many as the workers.
    binding: Arc<Semaphore>,
    pods: Store<Pod>,
    to_controller: mpsc::UnboundedSender<ObjectRef<Pod>>,
}

impl PodQueue {
    /// A queue feeding `to_controller` for a controller of `workers` concurrent passes.
    pub(super) fn new(
        pods: Store<Pod>,
        workers: usize,
        to_controller: mpsc::UnboundedSender<ObjectRef<Pod>>,
    ) -> Arc<Self> {
        Arc::new(PodQueue {
            state: Mutex::default(),
            wake: Notify::new(),
            workers: workers.max(1),
            binding: Arc::new(Semaphore::new(workers.max(1))),
            pods,
            to_controller,
        })
    }

    /// Queues a pass for `pod`, ranked by what the pod cache holds of it.
    pub(super) fn push(&self, pod: ObjectRef<Pod>) {
        self.push_ranked(pod, false);
    }

    /// Queues a pass for `pod`, whose Slurm job was just allocated: ahead of the other pods of
    /// its priority.
    pub(super) fn push_allocated(&self, pod: ObjectRef<Pod>) {
        self.push_ranked(pod, true);
    }

    fn push_ranked(&self, pod: ObjectRef<Pod>, allocated: bool) {
        let cached = self.pods.get(&pod);
        let priority = cached
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.priority)
            .unwrap_or(0);
        let created = cached.and_then(|p| p.metadata.creation_timestamp.clone());
        {
            let mut st = self.state.locked();
            st.seq += 1;
            let seq = st.seq;
            let served = st.served.get(&pod).copied().unwrap_or(0);
            st.heap.push(Queued {
                priority,
                allocated,
                served,
                created,
                seq,
                pod,
            });
        }
        self.wake.notify_one();
    }

    /// A pass for `pod` ended: a worker is free (unless it was freed when the pass entered its
    /// binding stage).
    pub(super) fn done(&self, pod: &ObjectRef<Pod>) {
        let mut st = self.state.locked();
        if st.released.remove(pod) {
            return;
        }
        if st.outstanding.remove(pod) {
            drop(st);
            self.wake.notify_one();
        }
    }

    /// The pass of `pod` has decided and only writes from now on (its Bindings: the binding
    /// cycle of kube-scheduler): it stops counting against the workers at once, so the next
    /// pod's pass starts while this one waits for its turn and the API server answers. At most
    /// `workers` passes write at once; the permit is held until the pass's writes are done
    /// (dropped with it).
    pub(super) async fn binding_stage(&self, pod: &ObjectRef<Pod>) -> Option<OwnedSemaphorePermit> {
        {
            let mut st = self.state.locked();
            if st.outstanding.remove(pod) {
                st.released.insert(pod.clone());
                drop(st);
                self.wake.notify_one();
            }
        }
        // The semaphore is never closed.
        self.binding.clone().acquire_owned().await.ok()
    }

    /// Hands queued pods to the controller, best first, while it has free workers; runs until
    /// the controller's end of the channel is gone.
    pub(super) async fn feed(self: Arc<Self>) {
        loop {
            let woken = self.wake.notified();
            let next = {
                let mut st = self.state.locked();
                if st.outstanding.len() < self.workers {
                    let next = st.heap.pop();
                    if let Some(q) = &next {
                        tracing::trace!(
                            pod = %format_args!("{}/{}", q.pod.namespace.as_deref().unwrap_or_default(), q.pod.name),
                            outstanding = st.outstanding.len(),
                            queued = st.heap.len(),
                            "pod handed out"
                        );
                        st.outstanding.insert(q.pod.clone());
                        st.handed += 1;
                        let handed = st.handed;
                        st.served.insert(q.pod.clone(), handed);
                        if handed % PRUNE_EVERY == 0 {
                            // A deleted pod is pushed no more, so its record would stay.
                            let pods = &self.pods;
                            st.served.retain(|r, _| pods.get(r).is_some());
                        }
                    }
                    next
                } else {
                    None
                }
            };
            match next {
                Some(q) => {
                    if self.to_controller.unbounded_send(q.pod).is_err() {
                        return;
                    }
                }
                None => {
                    if self.to_controller.is_closed() {
                        return;
                    }
                    woken.await
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use kube::runtime::reflector;
    use serde_json::json;

    fn pod(name: &str, priority: Option<i32>, created: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
            "spec": {"containers": [{"name": "c"}], "priority": priority},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn hands_out_the_best_first_and_no_more_than_the_workers() {
        let (store, mut writer) = reflector::store::<Pod>();
        let pods = [
            pod("low-old", Some(0), "2026-01-01T00:00:00Z"),
            pod("none", None, "2026-01-01T00:00:01Z"),
            pod("high-new", Some(1000), "2026-01-01T00:00:05Z"),
            pod("high-old", Some(1000), "2026-01-01T00:00:02Z"),
            pod("mid", Some(10), "2026-01-01T00:00:03Z"),
        ];
        for p in &pods {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(p.clone()));
        }
        let (tx, mut rx) = mpsc::unbounded();
        let queue = PodQueue::new(store, 2, tx);
        for p in &pods {
            queue.push(ObjectRef::from_obj(p));
        }
        tokio::spawn(queue.clone().feed());
        let name = |r: ObjectRef<Pod>| r.name;
        // Two workers: the two best, then nothing until a pass ends.
        assert_eq!(name(rx.next().await.unwrap()), "high-old");
        assert_eq!(name(rx.next().await.unwrap()), "high-new");
        let more = tokio::time::timeout(std::time::Duration::from_millis(100), rx.next()).await;
        assert!(
            more.is_err(),
            "a third was handed out with both workers busy"
        );
        queue.done(&ObjectRef::new("high-old").within("ns"));
        assert_eq!(name(rx.next().await.unwrap()), "mid");
        queue.done(&ObjectRef::new("mid").within("ns"));
        assert_eq!(name(rx.next().await.unwrap()), "low-old");
        queue.done(&ObjectRef::new("high-new").within("ns"));
        assert_eq!(name(rx.next().await.unwrap()), "none");
    }

    /// A backlog of pods passed again and again (old, same priority) does not hold back a pod
    /// never passed: it is handed out next, however many re-passes are queued; priority still
    /// comes first.
    #[tokio::test]
    async fn a_new_pod_goes_before_re_passes_of_older_ones() {
        let (store, mut writer) = reflector::store::<Pod>();
        let mut backlog: Vec<Pod> = (0..50)
            .map(|i| pod(&format!("old-{i:02}"), Some(0), "2026-01-01T00:00:00Z"))
            .collect();
        backlog.push(pod("high-old", Some(10), "2026-01-01T00:00:00Z"));
        for p in &backlog {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(p.clone()));
        }
        let (tx, mut rx) = mpsc::unbounded();
        let queue = PodQueue::new(store, 1, tx);
        tokio::spawn(queue.clone().feed());
        // Every backlog pod served once.
        for p in &backlog {
            queue.push(ObjectRef::from_obj(p));
        }
        for _ in 0..backlog.len() {
            let r = rx.next().await.unwrap();
            queue.done(&r);
        }
        // Hold the one worker, queue a re-pass of every backlog pod, then a new pod.
        queue.push(ObjectRef::from_obj(&backlog[0]));
        let held = rx.next().await.unwrap();
        for p in &backlog[1..] {
            queue.push(ObjectRef::from_obj(p));
        }
        let new = pod("new", Some(0), "2026-01-02T00:00:00Z");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(new.clone()));
        queue.push(ObjectRef::from_obj(&new));
        queue.done(&held);
        // The higher priority first (served before, but priority ranks above service), then the
        // new pod ahead of the 49 re-passes of its priority.
        let first = rx.next().await.unwrap();
        assert_eq!(first.name, "high-old");
        queue.done(&first);
        let second = rx.next().await.unwrap();
        assert_eq!(second.name, "new", "the new pod waited behind re-passes");
        queue.done(&second);
        // Then the re-passes, least recently served first (old-01 was served before old-02...).
        let third = rx.next().await.unwrap();
        assert_eq!(third.name, "old-01");
    }

    /// A pass for a pod whose job was just allocated goes before the first passes of new pods
    /// of its priority (in a burst, binds interleave with submits), never before a higher
    /// priority.
    #[tokio::test]
    async fn an_allocated_pod_goes_before_new_pods_of_its_priority() {
        let (store, mut writer) = reflector::store::<Pod>();
        let mut new: Vec<Pod> = (0..20)
            .map(|i| pod(&format!("new-{i:02}"), Some(0), "2026-01-01T00:00:00Z"))
            .collect();
        let allocated = pod("allocated", Some(0), "2026-01-02T00:00:00Z");
        let high = pod("high", Some(10), "2026-01-03T00:00:00Z");
        new.push(allocated.clone());
        new.push(high.clone());
        for p in &new {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(p.clone()));
        }
        let (tx, mut rx) = mpsc::unbounded();
        let queue = PodQueue::new(store, 1, tx);
        tokio::spawn(queue.clone().feed());
        // The allocated pod was passed once (its submit); hold the worker with it.
        queue.push(ObjectRef::from_obj(&allocated));
        let held = rx.next().await.unwrap();
        assert_eq!(held.name, "allocated");
        for p in &new[..20] {
            queue.push(ObjectRef::from_obj(p));
        }
        queue.push(ObjectRef::from_obj(&high));
        queue.push_allocated(ObjectRef::from_obj(&allocated));
        queue.done(&held);
        let order: Vec<String> = {
            let mut v = Vec::new();
            for _ in 0..3 {
                let r = rx.next().await.unwrap();
                queue.done(&r);
                v.push(r.name);
            }
            v
        };
        assert_eq!(order, ["high", "allocated", "new-00"]);
    }

    /// A pass in its binding stage frees its worker, before it waits for its turn to write: the
    /// next pod is handed out meanwhile; its end frees nothing more, and the writing part of
    /// the stage is bounded by the workers.
    #[tokio::test]
    async fn a_pass_binding_frees_its_worker_once() {
        let (store, mut writer) = reflector::store::<Pod>();
        let pods: Vec<Pod> = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, n)| pod(n, None, &format!("2026-01-01T00:00:0{i}Z")))
            .collect();
        for p in &pods {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(p.clone()));
        }
        let (tx, mut rx) = mpsc::unbounded();
        let queue = PodQueue::new(store, 1, tx);
        for p in &pods {
            queue.push(ObjectRef::from_obj(p));
        }
        tokio::spawn(queue.clone().feed());
        async fn quiet(rx: &mut mpsc::UnboundedReceiver<ObjectRef<Pod>>) -> bool {
            tokio::time::timeout(std::time::Duration::from_millis(100), rx.next())
                .await
                .is_err()
        }
        let a = rx.next().await.unwrap();
        assert_eq!(a.name, "a");
        assert!(
            quiet(&mut rx).await,
            "b handed out with the one worker busy"
        );
        let stage_a = queue.binding_stage(&a).await;
        assert!(stage_a.is_some());
        let b = rx.next().await.unwrap();
        assert_eq!(b.name, "b", "the worker went on while a binds");
        queue.done(&a);
        assert!(quiet(&mut rx).await, "a's end freed b's worker too");
        // b may not enter the binding stage while a still holds its one permit.
        let stage_b = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            queue.binding_stage(&b),
        )
        .await;
        assert!(stage_b.is_err(), "more passes binding than workers");
        // Waiting for the permit, b holds no worker: c's pass starts meanwhile.
        let c = tokio::time::timeout(std::time::Duration::from_secs(5), rx.next())
            .await
            .expect("a pass waiting to bind held its worker");
        assert_eq!(c.unwrap().name, "c");
        drop(stage_a);
        let _stage_b = queue.binding_stage(&b).await;
        queue.done(&b);
        assert!(quiet(&mut rx).await, "b's end freed a worker a second time");
    }

    /// The service records of pods gone from the cache do not pile up over a long term.
    #[tokio::test]
    async fn records_of_deleted_pods_are_pruned() {
        let (store, mut writer) = reflector::store::<Pod>();
        let gone = pod("gone", None, "2026-01-01T00:00:00Z");
        let stays = pod("stays", None, "2026-01-01T00:00:00Z");
        for p in [&gone, &stays] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(p.clone()));
        }
        let (tx, mut rx) = mpsc::unbounded();
        let queue = PodQueue::new(store, 1, tx);
        tokio::spawn(queue.clone().feed());
        queue.push(ObjectRef::from_obj(&gone));
        let r = rx.next().await.unwrap();
        queue.done(&r);
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Delete(gone.clone()));
        assert_eq!(queue.state.locked().served.len(), 1);
        for _ in 1..PRUNE_EVERY {
            queue.push(ObjectRef::from_obj(&stays));
            let r = rx.next().await.unwrap();
            queue.done(&r);
        }
        let served = queue.state.locked().served.clone();
        assert_eq!(
            served.keys().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["stays"]
        );
    }
}
