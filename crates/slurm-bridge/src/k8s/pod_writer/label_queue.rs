//! Background label patches waiting for their turn ([`super::PodWriter::label_in_background`]),
//! in the order they were queued, for at most [`super::BACKGROUND_LABELS`] workers to send. A
//! burst queues thousands: each waits as a small record (the pod's identity and the patch's
//! text), not as a task of its own, and a pod's bind may take its patch over until a worker's
//! turn for it comes.

use super::super::label_memo::LabelTicket;
use super::super::writes::KubeWrites;
use crate::k8s::slim_pod::Pod;
use crate::sync::MutexExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::time::Instant;

/// What a label patch request and the memo's record of it read of a pod: its name, namespace,
/// uid and version. A queued patch keeps this (about 100 bytes and four strings) and makes the
/// pod of it ([`Identity::pod`]) when its turn comes.
pub(super) struct Identity {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
}

impl Identity {
    pub(super) fn of(pod: &Pod) -> Self {
        let m = &pod.metadata;
        Identity {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
        }
    }

    /// A pod with only this identity.
    pub(super) fn pod(self) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: self.name,
                namespace: self.namespace,
                uid: self.uid,
                resource_version: self.resource_version,
                ..Default::default()
            },
            spec: None,
            status: None,
        }
    }
}

/// A queued label patch as a worker sends it.
pub(super) struct Waiting {
    pub(super) key: String,
    seq: u64,
    pub(super) job_id: u32,
    pub(super) id: Identity,
    /// The patch's JSON text.
    pub(super) patch: String,
    /// When a worker may take it ([`super::LABEL_MIN_AGE`]).
    not_before: Instant,
    /// When it stops giving way to Bindings and submits ([`super::LABEL_MAX_LAG`]).
    pub(super) deadline: Instant,
    pub(super) writes: KubeWrites,
}

/// The ticket of a queued patch, by pod key, until a worker's turn for it comes or a bind takes
/// it over.
struct Ticket {
    uid: Option<String>,
    job_id: u32,
    seq: u64,
    ticket: LabelTicket,
}

#[derive(Default)]
struct State {
    tickets: HashMap<String, Ticket>,
    order: VecDeque<Waiting>,
    seq: u64,
    workers: usize,
}

/// What a worker does next ([`LabelQueue::next`]).
pub(super) enum Next {
    /// Send this patch (once it stops giving way).
    Take(Waiting),
    /// Wait until then: the first patch left is younger than [`super::LABEL_MIN_AGE`].
    At(Instant),
    /// Stop: no patch is left.
    Done,
}

/// The queue; see the module doc.
pub(super) struct LabelQueue {
    state: Mutex<State>,
    max_workers: usize,
}

impl LabelQueue {
    pub(super) fn new(max_workers: usize) -> Self {
        LabelQueue {
            state: Mutex::default(),
            max_workers: max_workers.max(1),
        }
    }

    /// Queues the patch of `pod` with `job_id` under `ticket`, for a worker to take from
    /// `not_before` on (patches are queued in the order of their `not_before`); true when the
    /// caller must start a worker (fewer than the most are running). A patch of the pod queued
    /// before is replaced (its ticket dropped: it counts as not landed).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
        &self,
        key: String,
        pod: &Pod,
        job_id: u32,
        patch: String,
        ticket: LabelTicket,
        (not_before, deadline): (Instant, Instant),
        writes: KubeWrites,
    ) -> bool {
        let mut st = self.state.locked();
        st.seq += 1;
        let seq = st.seq;
        st.tickets.insert(
            key.clone(),
            Ticket {
                uid: pod.metadata.uid.clone(),
                job_id,
                seq,
                ticket,
            },
        );
        st.order.push_back(Waiting {
            key,
            seq,
            job_id,
            id: Identity::of(pod),
            patch,
            not_before,
            deadline,
            writes,
        });
        let start = st.workers < self.max_workers;
        if start {
            st.workers += 1;
        }
        start
    }

    /// The next patch for a worker at `now`, skipping those a bind took over: the patch, or when
    /// the first one left may be taken, or [`Next::Done`] when none is left (the worker is
    /// counted as gone).
    pub(super) fn next(&self, now: Instant) -> Next {
        let mut st = self.state.locked();
        while let Some(w) = st.order.front() {
            if st.tickets.get(&w.key).is_none_or(|t| t.seq != w.seq) {
                st.order.pop_front();
            } else if w.not_before > now {
                return Next::At(w.not_before);
            } else {
                return st.order.pop_front().map_or(Next::Done, Next::Take);
            }
        }
        st.workers -= 1;
        Next::Done
    }

    /// The ticket of `w` when its worker's turn has come, unless a bind took it over meanwhile.
    pub(super) fn turn(&self, w: &Waiting) -> Option<LabelTicket> {
        let mut st = self.state.locked();
        if st.tickets.get(&w.key).is_some_and(|t| t.seq == w.seq) {
            return st.tickets.remove(&w.key).map(|t| t.ticket);
        }
        None
    }

    /// The ticket of the queued patch of `key` (this pod, `uid`) with `job_id` when no worker has
    /// taken it yet: the caller sends the label instead, and no worker sends it.
    pub(super) fn take(&self, key: &str, uid: Option<&str>, job_id: u32) -> Option<LabelTicket> {
        let mut st = self.state.locked();
        let t = st.tickets.get(key)?;
        if t.uid.as_deref() != uid || t.job_id != job_id {
            return None;
        }
        st.tickets.remove(key).map(|t| t.ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::label_memo::{Claim, LabelMemo};

    fn pod(name: &str, uid: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
        }))
        .expect("pod")
    }

    fn ticket(memo: &LabelMemo, pod: &Pod, job_id: u32) -> LabelTicket {
        match memo.claim(pod, job_id) {
            Claim::Send(t) => t,
            _ => panic!("a fresh memo hands out a ticket"),
        }
    }

    fn push(q: &LabelQueue, memo: &LabelMemo, name: &str, uid: &str, job_id: u32) -> bool {
        let p = pod(name, uid);
        q.push(
            format!("ns/{name}"),
            &p,
            job_id,
            "{}".into(),
            ticket(memo, &p, job_id),
            (Instant::now(), Instant::now()),
            KubeWrites::default(),
        )
    }

    /// The next patch a worker takes, however young.
    fn next(q: &LabelQueue) -> Option<Waiting> {
        match q.next(Instant::now() + std::time::Duration::from_secs(3600)) {
            Next::Take(w) => Some(w),
            Next::At(_) => panic!("every patch may be taken an hour from now"),
            Next::Done => None,
        }
    }

    #[tokio::test]
    async fn workers_take_the_patches_in_order_and_are_started_up_to_the_most() {
        let (q, memo) = (LabelQueue::new(2), LabelMemo::default());
        assert!(
            push(&q, &memo, "a", "u1", 1),
            "the first patch starts a worker"
        );
        assert!(push(&q, &memo, "b", "u2", 1), "and the second another");
        assert!(!push(&q, &memo, "c", "u3", 1), "two workers at most");
        // One worker takes them all, in order, and is gone when none is left.
        let names: Vec<String> = std::iter::from_fn(|| next(&q)).map(|w| w.key).collect();
        assert_eq!(names, ["ns/a", "ns/b", "ns/c"]);
        assert!(
            push(&q, &memo, "d", "u4", 1),
            "one worker left: another starts"
        );
        assert!(!push(&q, &memo, "e", "u5", 1), "two again");
        assert!(next(&q).is_some() && next(&q).is_some());
        assert!(next(&q).is_none() && next(&q).is_none(), "both gone");
        assert!(
            push(&q, &memo, "f", "u6", 1),
            "no worker left: a new one starts"
        );
    }

    #[tokio::test]
    async fn a_bind_takes_a_queued_patch_over_until_its_turn_comes() {
        let (q, memo) = (LabelQueue::new(4), LabelMemo::default());
        push(&q, &memo, "a", "u1", 7);
        push(&q, &memo, "b", "u2", 7);
        assert!(q.take("ns/a", Some("u1"), 8).is_none(), "another job");
        assert!(q.take("ns/a", Some("u9"), 7).is_none(), "another pod");
        assert!(q.take("ns/a", Some("u1"), 7).is_some());
        let b = next(&q).expect("a was taken over: b is next");
        assert_eq!(b.key, "ns/b");
        assert!(q.turn(&b).is_some(), "b's turn");
        assert!(q.take("ns/b", Some("u2"), 7).is_none(), "b's worker has it");
        assert!(next(&q).is_none());
    }

    #[tokio::test]
    async fn a_patch_queued_again_replaces_the_earlier_one() {
        let (q, memo) = (LabelQueue::new(4), LabelMemo::default());
        push(&q, &memo, "a", "u1", 7);
        // The pod was recreated under its name: the memo hands out a ticket for the new one.
        push(&q, &memo, "a", "u2", 8);
        let w = next(&q).expect("the later patch");
        assert_eq!((w.key.as_str(), w.job_id), ("ns/a", 8));
        assert!(q.turn(&w).is_some());
        assert!(next(&q).is_none(), "the earlier one is not sent");
    }

    /// A worker takes no patch younger than its `not_before`: it is told when the first one
    /// may be taken, and a patch taken over meanwhile is skipped, not waited for.
    #[tokio::test(start_paused = true)]
    async fn a_young_patch_is_not_taken_before_its_time() {
        let (q, memo) = (LabelQueue::new(1), LabelMemo::default());
        let t0 = Instant::now();
        for (name, uid, age) in [("a", "u1", 0), ("b", "u2", 1)] {
            let p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
            }))
            .expect("pod");
            let Claim::Send(ticket) = memo.claim(&p, 7) else {
                panic!("a fresh memo hands out a ticket")
            };
            let not_before = t0 + std::time::Duration::from_secs(2 + age);
            q.push(
                format!("ns/{name}"),
                &p,
                7,
                "{}".into(),
                ticket,
                (not_before, not_before + std::time::Duration::from_secs(3)),
                KubeWrites::default(),
            );
        }
        let at = |n: Next| match n {
            Next::At(t) => t - t0,
            Next::Take(w) => panic!("{} taken too soon", w.key),
            Next::Done => panic!("none left"),
        };
        assert_eq!(at(q.next(t0)), std::time::Duration::from_secs(2));
        assert!(
            q.take("ns/a", Some("u1"), 7).is_some(),
            "a's bind took it over"
        );
        assert_eq!(
            at(q.next(t0 + std::time::Duration::from_secs(2))),
            std::time::Duration::from_secs(3)
        );
        match q.next(t0 + std::time::Duration::from_secs(3)) {
            Next::Take(w) => assert_eq!(w.key, "ns/b"),
            _ => panic!("b may be taken at 3 s"),
        }
        assert!(matches!(
            q.next(t0 + std::time::Duration::from_secs(3)),
            Next::Done
        ));
    }
}
