//! The scheduling queue, ordered as kube-scheduler's active queue: higher `spec.priority` first,
//! then the pod served least recently (a pod never passed before first), then older pods, then
//! the order of arrival. It hands a pod out only while fewer passes are deciding than there are
//! workers, so when more pods wait than can run (start-up, a burst) the higher ones start first.
//! It also keeps each pod's requeue (a pass's [`Action`]) and runs a pod's passes one at a time:
//! a request for a pod whose pass is running waits for that pass to end, and requests for a pod
//! already queued merge. [`super::runner`] runs what it hands out.
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
//!
//! Every pod the queue knows has one record under one shared key ([`PodKey`]): the heap, the
//! requeue timers and the runner hold the key, not copies of the pod's names.

use super::runner::Action;
use crate::k8s::slim_pod::Pod;
use crate::sync::MutexExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::{ObjectRef, Store};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Hand-outs between two prunes of the records of pods gone from the cache.
const PRUNE_EVERY: u64 = 4096;

/// A pod's key in the queue, shared by its record, its heap entries and its timers.
pub(super) type PodKey = Arc<ObjectRef<Pod>>;

/// One request waiting in the heap.
struct Queued {
    priority: i32,
    /// Queued because the pod's job was allocated ([`PodQueue::push_allocated`]).
    allocated: bool,
    /// When the pod was last handed out (`State::handed`), 0 if never: smaller is sooner.
    served: u64,
    created: Option<Time>,
    seq: u64,
    pod: PodKey,
}

impl Queued {
    fn rank(
        &self,
    ) -> (
        i32,
        bool,
        Reverse<u64>,
        Reverse<Option<&Time>>,
        Reverse<u64>,
    ) {
        (
            self.priority,
            self.allocated,
            Reverse(self.served),
            Reverse(self.created.as_ref()),
            Reverse(self.seq),
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

/// A requeue waiting for its time; the earliest is the greatest (popped first).
struct Timer {
    at: Instant,
    pod: PodKey,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

/// Where a pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing queued (a requeue may be due later: `Record::due`).
    Idle,
    /// In the heap; the entry of sequence `seq` is the live one (older ones are skipped).
    Queued { seq: u64, allocated: bool },
    /// Its pass runs. `binding`: it is in its binding stage and no longer counts as a worker.
    /// `again`: a request came meanwhile, queued when the pass ends.
    Running {
        binding: bool,
        again: bool,
        allocated: bool,
    },
}

/// What the queue keeps of one pod.
struct Record {
    phase: Phase,
    /// Its number at its last hand-out (`State::handed`), 0 if never.
    served: u64,
    /// When its requeue is due, while it is idle.
    due: Option<Instant>,
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Queued>,
    timers: BinaryHeap<Timer>,
    records: HashMap<PodKey, Record>,
    /// Passes running and not in their binding stage.
    deciding: usize,
    /// Passes running, in their binding stage or not.
    running: usize,
    seq: u64,
    /// Hand-outs so far.
    handed: u64,
}

/// The queue of one term of leadership; see the module doc.
pub(super) struct PodQueue {
    state: Mutex<State>,
    wake: Notify,
    workers: usize,
    /// Passes in their binding stage at once: as many as the workers.
    binding: Arc<Semaphore>,
    pods: Store<Pod>,
}

impl PodQueue {
    /// A queue for `workers` passes deciding at once.
    pub(super) fn new(pods: Store<Pod>, workers: usize) -> Arc<Self> {
        Arc::new(PodQueue {
            state: Mutex::default(),
            wake: Notify::new(),
            workers: workers.max(1),
            binding: Arc::new(Semaphore::new(workers.max(1))),
            pods,
        })
    }

    /// Queues a pass for `pod`, ranked by what the pod cache holds of it. A requeue waiting
    /// for its time is replaced by it.
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
        let mut st = self.state.locked();
        let key = match st.records.get_key_value(&pod) {
            Some((key, _)) => key.clone(),
            None => {
                let key = Arc::new(pod);
                st.records.insert(
                    key.clone(),
                    Record {
                        phase: Phase::Idle,
                        served: 0,
                        due: None,
                    },
                );
                key
            }
        };
        st.enqueue(&key, allocated, cached.as_deref());
        drop(st);
        self.wake.notify_one();
    }

    /// Forgets `pod`, gone from the cache, unless its pass is queued or running (that pass
    /// finds it gone and forgets it then).
    pub(super) fn forget(&self, pod: &ObjectRef<Pod>) {
        let mut st = self.state.locked();
        if st.records.get(pod).is_some_and(|r| r.phase == Phase::Idle) {
            st.records.remove(pod);
        }
    }

    /// The next pod to pass, best first, with the cached pod, while fewer passes decide than
    /// there are workers and fewer run than `max_running`. Requeues due by `now` join the heap
    /// first; a pod gone from the cache is forgotten and skipped.
    pub(super) fn next_ready(
        &self,
        now: Instant,
        max_running: usize,
    ) -> Option<(PodKey, Arc<Pod>)> {
        let mut st = self.state.locked();
        st.move_due(now, &self.pods);
        loop {
            if st.deciding >= self.workers || st.running >= max_running {
                return None;
            }
            let q = st.heap.pop()?;
            let live = st
                .records
                .get(&q.pod)
                .is_some_and(|r| matches!(r.phase, Phase::Queued { seq, .. } if seq == q.seq));
            if !live {
                continue;
            }
            let Some(pod) = self.pods.get(&q.pod) else {
                st.records.remove(&q.pod);
                continue;
            };
            st.handed += 1;
            let handed = st.handed;
            if let Some(r) = st.records.get_mut(&q.pod) {
                r.phase = Phase::Running {
                    binding: false,
                    again: false,
                    allocated: false,
                };
                r.served = handed;
            }
            st.deciding += 1;
            st.running += 1;
            tracing::trace!(
                pod = %format_args!("{}/{}", q.pod.namespace.as_deref().unwrap_or_default(), q.pod.name),
                deciding = st.deciding,
                queued = st.heap.len(),
                "pod handed out"
            );
            if handed % PRUNE_EVERY == 0 {
                // A pod deleted while idle with nothing due is forgotten at its deletion
                // (`forget`); this catches a deletion the trigger missed.
                let pods = &self.pods;
                st.records.retain(|k, r| {
                    r.phase != Phase::Idle || r.due.is_some() || pods.get(k).is_some()
                });
            }
            return Some((q.pod, pod));
        }
    }

    /// When the earliest requeue is due, if any.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.state.locked().timers.peek().map(|t| t.at)
    }

    /// The pass of `pod` ended with `action`: its worker is free (unless it was freed when the
    /// pass entered its binding stage), a request that came meanwhile is queued, else its
    /// requeue is set.
    pub(super) fn finish(&self, pod: &PodKey, action: &Action, now: Instant) {
        let mut st = self.state.locked();
        let Some(Phase::Running {
            binding,
            again,
            allocated,
        }) = st.records.get(pod).map(|r| r.phase)
        else {
            return;
        };
        if !binding {
            st.deciding -= 1;
        }
        st.running -= 1;
        if let Some(r) = st.records.get_mut(pod) {
            r.phase = Phase::Idle;
        }
        if again {
            let cached = self.pods.get(pod);
            st.enqueue(pod, allocated, cached.as_deref());
        } else if let Some(after) = action.requeue_after() {
            let at = now + after;
            if let Some(r) = st.records.get_mut(pod) {
                r.due = Some(r.due.map_or(at, |d| d.min(at)));
            }
            st.timers.push(Timer {
                at,
                pod: pod.clone(),
            });
        }
        drop(st);
        self.wake.notify_one();
    }

    /// Resolves when the queue may have something new to hand out (a push, a pass's end).
    pub(super) async fn changed(&self) {
        self.wake.notified().await
    }

    /// The pass of `pod` has decided and only writes from now on (its Bindings: the binding
    /// cycle of kube-scheduler): it stops counting against the workers at once, so the next
    /// pod's pass starts while this one waits for its turn and the API server answers. At most
    /// `workers` passes write at once; the permit is held until the pass's writes are done
    /// (dropped with it).
    pub(super) async fn binding_stage(&self, pod: &ObjectRef<Pod>) -> Option<OwnedSemaphorePermit> {
        {
            let mut st = self.state.locked();
            let freed = match st.records.get_mut(pod) {
                Some(Record {
                    phase: Phase::Running { binding, .. },
                    ..
                }) if !*binding => {
                    *binding = true;
                    true
                }
                _ => false,
            };
            if freed {
                st.deciding -= 1;
                drop(st);
                self.wake.notify_one();
            }
        }
        // The semaphore is never closed.
        self.binding.clone().acquire_owned().await.ok()
    }

    /// Passes running and requests queued (tests).
    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, usize) {
        let st = self.state.locked();
        (st.running, st.heap.len())
    }
}

impl State {
    /// A request for `key` (recorded): into the heap, or merged with the one queued, or held
    /// for after the running pass.
    fn enqueue(&mut self, key: &PodKey, allocated: bool, cached: Option<&Pod>) {
        self.seq += 1;
        let seq = self.seq;
        let Some(r) = self.records.get_mut(key) else {
            return;
        };
        r.due = None;
        let entry = match &mut r.phase {
            Phase::Idle => true,
            // Queued already: only an allocation ranks it higher than it is.
            Phase::Queued {
                allocated: queued, ..
            } => allocated && !*queued,
            Phase::Running {
                again,
                allocated: again_allocated,
                ..
            } => {
                *again = true;
                *again_allocated |= allocated;
                false
            }
        };
        if !entry {
            return;
        }
        r.phase = Phase::Queued { seq, allocated };
        let served = r.served;
        self.heap.push(Queued {
            priority: cached
                .and_then(|p| p.spec.as_ref())
                .and_then(|s| s.priority)
                .unwrap_or(0),
            allocated,
            served,
            created: cached.and_then(|p| p.metadata.creation_timestamp.clone()),
            seq,
            pod: key.clone(),
        });
    }

    /// Requeues due by `now` join the heap (a timer that is no longer the pod's is dropped).
    fn move_due(&mut self, now: Instant, pods: &Store<Pod>) {
        while self.timers.peek().is_some_and(|t| t.at <= now) {
            let Some(t) = self.timers.pop() else { break };
            let current = self
                .records
                .get(&t.pod)
                .is_some_and(|r| r.phase == Phase::Idle && r.due == Some(t.at));
            if current {
                let cached = pods.get(&t.pod);
                self.enqueue(&t.pod, false, cached.as_deref());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use serde_json::json;
    use std::time::Duration;

    const MAX: usize = usize::MAX;

    fn pod(name: &str, priority: Option<i32>, created: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
            "spec": {"containers": [{"name": "c"}], "priority": priority},
        }))
        .unwrap()
    }

    fn cached(pods: &[Pod]) -> (Store<Pod>, reflector::store::Writer<Pod>) {
        let (store, mut writer) = reflector::store::<Pod>();
        for p in pods {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(p.clone()));
        }
        (store, writer)
    }

    fn next(queue: &PodQueue) -> Option<PodKey> {
        queue.next_ready(Instant::now(), MAX).map(|(k, _)| k)
    }

    fn name(key: Option<PodKey>) -> String {
        key.map(|k| k.name.clone()).unwrap_or_default()
    }

    fn done(queue: &PodQueue, key: &PodKey) {
        queue.finish(key, &Action::await_change(), Instant::now());
    }

    #[test]
    fn hands_out_the_best_first_and_no_more_than_the_workers() {
        let pods = [
            pod("low-old", Some(0), "2026-01-01T00:00:00Z"),
            pod("none", None, "2026-01-01T00:00:01Z"),
            pod("high-new", Some(1000), "2026-01-01T00:00:05Z"),
            pod("high-old", Some(1000), "2026-01-01T00:00:02Z"),
            pod("mid", Some(10), "2026-01-01T00:00:03Z"),
        ];
        let (store, _w) = cached(&pods);
        let queue = PodQueue::new(store, 2);
        for p in &pods {
            queue.push(ObjectRef::from_obj(p));
        }
        // Two workers: the two best, then nothing until a pass ends.
        let a = next(&queue).unwrap();
        assert_eq!(a.name, "high-old");
        let b = next(&queue).unwrap();
        assert_eq!(b.name, "high-new");
        assert!(
            next(&queue).is_none(),
            "a third was handed out with both workers busy"
        );
        done(&queue, &a);
        let c = next(&queue).unwrap();
        assert_eq!(c.name, "mid");
        done(&queue, &c);
        assert_eq!(name(next(&queue)), "low-old");
        done(&queue, &b);
        assert_eq!(name(next(&queue)), "none");
    }

    /// Besides the workers, the runner's cap on passes running at once holds.
    #[test]
    fn no_more_run_than_the_runners_cap() {
        let pods = [
            pod("a", None, "2026-01-01T00:00:00Z"),
            pod("b", None, "2026-01-01T00:00:01Z"),
        ];
        let (store, _w) = cached(&pods);
        let queue = PodQueue::new(store, 4);
        for p in &pods {
            queue.push(ObjectRef::from_obj(p));
        }
        assert!(queue.next_ready(Instant::now(), 1).is_some());
        assert!(queue.next_ready(Instant::now(), 1).is_none());
    }

    /// A backlog of pods passed again and again (old, same priority) does not hold back a pod
    /// never passed: it is handed out next, however many re-passes are queued; priority still
    /// comes first.
    #[test]
    fn a_new_pod_goes_before_re_passes_of_older_ones() {
        let mut backlog: Vec<Pod> = (0..50)
            .map(|i| pod(&format!("old-{i:02}"), Some(0), "2026-01-01T00:00:00Z"))
            .collect();
        backlog.push(pod("high-old", Some(10), "2026-01-01T00:00:00Z"));
        let (store, mut writer) = cached(&backlog);
        let queue = PodQueue::new(store, 1);
        // Every backlog pod served once.
        for p in &backlog {
            queue.push(ObjectRef::from_obj(p));
        }
        for _ in 0..backlog.len() {
            let r = next(&queue).unwrap();
            done(&queue, &r);
        }
        // Hold the one worker, queue a re-pass of every backlog pod, then a new pod.
        queue.push(ObjectRef::from_obj(&backlog[0]));
        let held = next(&queue).unwrap();
        for p in &backlog[1..] {
            queue.push(ObjectRef::from_obj(p));
        }
        let new = pod("new", Some(0), "2026-01-02T00:00:00Z");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(new.clone()));
        queue.push(ObjectRef::from_obj(&new));
        done(&queue, &held);
        // The higher priority first (served before, but priority ranks above service), then the
        // new pod ahead of the 49 re-passes of its priority.
        let first = next(&queue).unwrap();
        assert_eq!(first.name, "high-old");
        done(&queue, &first);
        let second = next(&queue).unwrap();
        assert_eq!(second.name, "new", "the new pod waited behind re-passes");
        done(&queue, &second);
        // Then the re-passes, least recently served first (old-01 was served before old-02...).
        assert_eq!(name(next(&queue)), "old-01");
    }

    /// A pass for a pod whose job was just allocated goes before the first passes of new pods
    /// of its priority (in a burst, binds interleave with submits), never before a higher
    /// priority; the allocation asked for during its earlier pass is kept.
    #[test]
    fn an_allocated_pod_goes_before_new_pods_of_its_priority() {
        let mut new: Vec<Pod> = (0..20)
            .map(|i| pod(&format!("new-{i:02}"), Some(0), "2026-01-01T00:00:00Z"))
            .collect();
        let allocated = pod("allocated", Some(0), "2026-01-02T00:00:00Z");
        let high = pod("high", Some(10), "2026-01-03T00:00:00Z");
        new.push(allocated.clone());
        new.push(high.clone());
        let (store, _w) = cached(&new);
        let queue = PodQueue::new(store, 1);
        // The allocated pod was passed once (its submit); hold the worker with it.
        queue.push(ObjectRef::from_obj(&allocated));
        let held = next(&queue).unwrap();
        assert_eq!(held.name, "allocated");
        for p in &new[..20] {
            queue.push(ObjectRef::from_obj(p));
        }
        queue.push(ObjectRef::from_obj(&high));
        queue.push_allocated(ObjectRef::from_obj(&allocated));
        done(&queue, &held);
        let mut order = Vec::new();
        for _ in 0..3 {
            let r = next(&queue).unwrap();
            done(&queue, &r);
            order.push(r.name.clone());
        }
        assert_eq!(order, ["high", "allocated", "new-00"]);
    }

    /// An allocation for a pod already queued moves it up.
    #[test]
    fn an_allocation_ranks_a_queued_pod_higher() {
        let pods = [
            pod("first", None, "2026-01-01T00:00:00Z"),
            pod("second", None, "2026-01-01T00:00:01Z"),
        ];
        let (store, _w) = cached(&pods);
        let queue = PodQueue::new(store, 1);
        queue.push(ObjectRef::from_obj(&pods[0]));
        queue.push(ObjectRef::from_obj(&pods[1]));
        queue.push_allocated(ObjectRef::from_obj(&pods[1]));
        let r = next(&queue).unwrap();
        assert_eq!(r.name, "second");
        done(&queue, &r);
        let r = next(&queue).unwrap();
        assert_eq!(r.name, "first");
        done(&queue, &r);
        assert!(
            next(&queue).is_none(),
            "the stale entry of second was handed out"
        );
    }

    /// Requests for a queued pod merge; a request while its pass runs waits for the pass to
    /// end (never two passes of one pod at once), then runs once.
    #[test]
    fn a_pods_passes_run_one_at_a_time_and_requests_merge() {
        let pods = [pod("a", None, "2026-01-01T00:00:00Z")];
        let (store, _w) = cached(&pods);
        let queue = PodQueue::new(store, 4);
        let r = ObjectRef::from_obj(&pods[0]);
        queue.push(r.clone());
        queue.push(r.clone());
        let a = next(&queue).unwrap();
        assert!(next(&queue).is_none(), "two requests, two passes");
        queue.push(r.clone());
        queue.push(r.clone());
        assert!(next(&queue).is_none(), "a second pass while the first runs");
        done(&queue, &a);
        let again = next(&queue).expect("the request held during the pass");
        assert!(next(&queue).is_none(), "the held requests ran twice");
        done(&queue, &again);
        assert!(next(&queue).is_none());
        assert_eq!(queue.counts(), (0, 0));
    }

    /// A requeue comes due after its delay; a request before then replaces it, and a pass
    /// asking for nothing leaves no requeue behind.
    #[test]
    fn a_requeue_is_due_after_its_delay_and_a_request_replaces_it() {
        let pods = [pod("a", None, "2026-01-01T00:00:00Z")];
        let (store, _w) = cached(&pods);
        let queue = PodQueue::new(store, 1);
        let r = ObjectRef::from_obj(&pods[0]);
        queue.push(r.clone());
        let t0 = Instant::now();
        let a = queue.next_ready(t0, MAX).unwrap().0;
        queue.finish(&a, &Action::requeue(Duration::from_secs(30)), t0);
        assert_eq!(queue.next_due(), Some(t0 + Duration::from_secs(30)));
        assert!(
            queue
                .next_ready(t0 + Duration::from_secs(29), MAX)
                .is_none(),
            "due early"
        );
        let a = queue
            .next_ready(t0 + Duration::from_secs(30), MAX)
            .expect("the requeue came due")
            .0;
        queue.finish(
            &a,
            &Action::requeue(Duration::from_secs(30)),
            t0 + Duration::from_secs(30),
        );
        // A change triggers a pass first; it asks for nothing more.
        queue.push(r.clone());
        let a = queue
            .next_ready(t0 + Duration::from_secs(31), MAX)
            .unwrap()
            .0;
        queue.finish(&a, &Action::await_change(), t0 + Duration::from_secs(31));
        assert!(
            queue
                .next_ready(t0 + Duration::from_secs(120), MAX)
                .is_none(),
            "the replaced requeue ran after all"
        );
    }

    /// A pass in its binding stage frees its worker, before it waits for its turn to write: the
    /// next pod is handed out meanwhile; its end frees nothing more, and the writing part of
    /// the stage is bounded by the workers.
    #[tokio::test]
    async fn a_pass_binding_frees_its_worker_once() {
        let pods: Vec<Pod> = ["a", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, n)| pod(n, None, &format!("2026-01-01T00:00:0{i}Z")))
            .collect();
        let (store, _w) = cached(&pods);
        let queue = PodQueue::new(store, 1);
        for p in &pods {
            queue.push(ObjectRef::from_obj(p));
        }
        let a = next(&queue).unwrap();
        assert_eq!(a.name, "a");
        assert!(
            next(&queue).is_none(),
            "b handed out with the one worker busy"
        );
        let stage_a = queue.binding_stage(&a).await;
        assert!(stage_a.is_some());
        let b = next(&queue).unwrap();
        assert_eq!(b.name, "b", "the worker went on while a binds");
        done(&queue, &a);
        assert!(next(&queue).is_none(), "a's end freed b's worker too");
        // b may not enter the binding stage while a still holds its one permit.
        let stage_b =
            tokio::time::timeout(Duration::from_millis(100), queue.binding_stage(&b)).await;
        assert!(stage_b.is_err(), "more passes binding than workers");
        // Waiting for the permit, b holds no worker: c's pass starts meanwhile.
        let c = next(&queue).expect("a pass waiting to bind held its worker");
        assert_eq!(c.name, "c");
        drop(stage_a);
        let _stage_b = queue.binding_stage(&b).await;
        done(&queue, &b);
        assert!(
            next(&queue).is_none(),
            "b's end freed a worker a second time"
        );
        done(&queue, &c);
        assert_eq!(name(next(&queue)), "d");
    }

    /// The records of pods gone from the cache do not pile up over a long term: a pod handed
    /// out after its deletion is skipped and forgotten, a deletion forgets an idle pod, and the
    /// periodic prune catches the rest.
    #[test]
    fn records_of_deleted_pods_are_dropped() {
        let gone = pod("gone", None, "2026-01-01T00:00:00Z");
        let forgotten = pod("forgotten", None, "2026-01-01T00:00:00Z");
        let pruned = pod("pruned", None, "2026-01-01T00:00:00Z");
        let stays = pod("stays", None, "2026-01-01T00:00:00Z");
        let (store, mut writer) = cached(&[
            gone.clone(),
            forgotten.clone(),
            pruned.clone(),
            stays.clone(),
        ]);
        let queue = PodQueue::new(store, 1);
        for p in [&forgotten, &pruned] {
            queue.push(ObjectRef::from_obj(p));
            let r = next(&queue).unwrap();
            done(&queue, &r);
        }
        queue.push(ObjectRef::from_obj(&gone));
        for p in [&gone, &forgotten, &pruned] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Delete(p.clone()));
        }
        assert!(
            next(&queue).is_none(),
            "a pod gone from the cache was handed out"
        );
        queue.forget(&ObjectRef::from_obj(&forgotten));
        let names = |q: &PodQueue| {
            let mut v: Vec<String> = q
                .state
                .locked()
                .records
                .keys()
                .map(|k| k.name.clone())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&queue), ["pruned"]);
        let handed = queue.state.locked().handed;
        for _ in handed..PRUNE_EVERY {
            queue.push(ObjectRef::from_obj(&stays));
            let r = next(&queue).unwrap();
            done(&queue, &r);
        }
        assert_eq!(names(&queue), ["stays"]);
    }
}
