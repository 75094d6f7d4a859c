//! What a [`super::PodWriter`] remembers of its job id label patches, so a pod is labelled once:
//! the patches in flight (a second caller waits for the first one's outcome instead of sending
//! its own) and, per pod, the resourceVersions older than the patch that landed (a caller holding
//! such a copy of the pod, read from a cache that had not caught up, writes nothing).

use crate::k8s::pod_key;
use crate::k8s::slim_pod::Pod;
use crate::sync::MutexExt;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// This writer's label patch of a pod, kept while the pod exists (until [`LabelMemo::forget`],
/// or another pod of that name is seen). Not dropped when the pod cache shows a newer version:
/// a pass that took its copy of the pod just before still holds the older one, and would label
/// it a second time (seen once in a 3-writes test under load). A few short strings per pod.
#[derive(Default)]
struct Written {
    uid: Option<String>,
    /// resourceVersions of the pod older than the last write: those this writer wrote on top of,
    /// and those its earlier writes made. A pass that read one of them read a pod older than the
    /// writes.
    superseded: Vec<String>,
    /// The resourceVersion the last write made, when the answer tells.
    made: Option<String>,
    /// The job id it labelled the pod with.
    labelled: Option<u32>,
}

/// A label patch being sent, by pod key.
struct InFlight {
    uid: Option<String>,
    job_id: u32,
    /// Which claim sent it (a later patch of the same pod replaces the entry).
    seq: u64,
    /// `Some(true)` once it landed, `Some(false)` if it failed.
    outcome: watch::Receiver<Option<bool>>,
}

#[derive(Default)]
struct State {
    written: HashMap<String, Written>,
    in_flight: HashMap<String, InFlight>,
    seq: u64,
}

/// The label patches a writer sent and is sending; see the module doc.
#[derive(Clone, Default)]
pub(super) struct LabelMemo(Arc<Mutex<State>>);

/// What a caller about to label a pod with a job does ([`LabelMemo::claim`]).
pub(super) enum Claim {
    /// This writer labelled the pod with that job on top of the caller's copy, or a later one.
    Done,
    /// A patch of the pod with that job is in flight: wait for its outcome (true: it landed).
    Wait(watch::Receiver<Option<bool>>),
    /// A patch of the pod with another job is in flight: wait until it has ended, then claim
    /// again. Sent beside it, the older patch could land last and put the old job id back (a
    /// gang member left out of its group's allocation and submitted alone kept the group's).
    After(watch::Receiver<Option<bool>>),
    /// Send the patch; the ticket records its outcome.
    Send(LabelTicket),
}

/// The right to send one label patch; dropped without [`LabelTicket::landed`], the patch counts
/// as failed and a waiting caller sends its own.
pub(super) struct LabelTicket {
    memo: LabelMemo,
    key: String,
    seq: u64,
    job_id: u32,
    outcome: watch::Sender<Option<bool>>,
    landed: bool,
}

impl LabelMemo {
    /// Whether a caller holding `pod` (as it read it) should label it with `job_id`.
    pub(super) fn claim(&self, pod: &Pod, job_id: u32) -> Claim {
        let key = pod_key(pod);
        let mut st = self.0.locked();
        if let Some(f) = st.in_flight.get(&key)
            && f.uid == pod.uid()
        {
            return if f.job_id == job_id {
                Claim::Wait(f.outcome.clone())
            } else {
                Claim::After(f.outcome.clone())
            };
        }
        if let Some(w) = st.written.get(&key)
            && w.uid == pod.uid()
            && w.labelled == Some(job_id)
            && pod
                .resource_version()
                .is_some_and(|rv| w.superseded.contains(&rv))
        {
            return Claim::Done;
        }
        st.seq += 1;
        let seq = st.seq;
        let (tx, rx) = watch::channel(None);
        st.in_flight.insert(
            key.clone(),
            InFlight {
                uid: pod.uid(),
                job_id,
                seq,
                outcome: rx,
            },
        );
        Claim::Send(LabelTicket {
            memo: self.clone(),
            key,
            seq,
            job_id,
            outcome: tx,
            landed: false,
        })
    }

    /// Records a write on top of `pod` (as the caller read it) that made version `made`.
    fn wrote(&self, pod: &Pod, made: Option<String>, job_id: u32) {
        let Some(rv) = pod.resource_version() else {
            return;
        };
        let mut st = self.0.locked();
        let w = st.written.entry(pod_key(pod)).or_default();
        if w.uid != pod.uid() {
            *w = Written {
                uid: pod.uid(),
                ..Default::default()
            };
        }
        for old in [Some(rv), w.made.take()].into_iter().flatten() {
            if !w.superseded.contains(&old) {
                w.superseded.push(old);
            }
        }
        w.made = made;
        w.labelled = Some(job_id);
    }

    /// The pod cache applied `pod`: a pod recreated under a known name is another pod, and
    /// nothing is kept for the old one.
    pub(super) fn seen(&self, pod: &Pod) {
        let mut st = self.0.locked();
        let key = pod_key(pod);
        if st.written.get(&key).is_some_and(|w| w.uid != pod.uid()) {
            st.written.remove(&key);
        }
    }

    /// Forgets what was written to a pod (it was deleted, or its label removed).
    pub(super) fn forget(&self, key: &str) {
        self.0.locked().written.remove(key);
    }

    /// Keeps the records of the pods `keep` accepts.
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.0.locked().written.retain(|key, _| keep(key));
    }

    /// Pods with a record of a landed patch (tests).
    #[cfg(test)]
    fn recorded(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.0.locked().written.keys().cloned().collect();
        keys.sort();
        keys
    }
}

impl LabelTicket {
    /// The patch landed on top of `pod` (the caller's copy) and made version `made`.
    pub(super) fn landed(mut self, pod: &Pod, made: Option<String>) {
        // Recorded before the in-flight entry goes, so a claim in between sees one or the other.
        self.memo.wrote(pod, made, self.job_id);
        self.landed = true;
    }
}

impl Drop for LabelTicket {
    fn drop(&mut self) {
        {
            let mut st = self.memo.0.locked();
            if st
                .in_flight
                .get(&self.key)
                .is_some_and(|f| f.seq == self.seq)
            {
                st.in_flight.remove(&self.key);
            }
        }
        self.outcome.send_replace(Some(self.landed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, rv: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
        }))
        .expect("pod")
    }

    fn send(memo: &LabelMemo, p: &Pod, job: u32) -> LabelTicket {
        match memo.claim(p, job) {
            Claim::Send(t) => t,
            Claim::Done => panic!("done, not send"),
            Claim::Wait(_) | Claim::After(_) => panic!("wait, not send"),
        }
    }

    fn is_done(memo: &LabelMemo, p: &Pod, job: u32) -> bool {
        match memo.claim(p, job) {
            Claim::Done => true,
            // Claimed: give it back.
            Claim::Send(_) | Claim::Wait(_) | Claim::After(_) => false,
        }
    }

    /// The race of a pass that read the pod just before the cache applied the label patch's
    /// version: the cache's newer version must not make the writer forget the patch, or that
    /// pass labels the pod a second time. Fails with the memo dropped on a newer version.
    #[tokio::test]
    async fn a_copy_older_than_the_patch_is_known_after_the_cache_caught_up() {
        let memo = LabelMemo::default();
        let (v10, v11, v12) = (
            pod("a", "u1", "10"),
            pod("a", "u1", "11"),
            pod("a", "u1", "12"),
        );
        // Labelled on top of 10 (the patch made 11).
        send(&memo, &v10, 7).landed(&v10, Some("11".into()));
        assert!(is_done(&memo, &v10, 7));
        // The cache applies the patch's version, then a later one (the binding's).
        memo.seen(&v11);
        memo.seen(&v12);
        assert!(
            is_done(&memo, &v10, 7),
            "a pass holding version 10 labels again"
        );
        // Newer copies are judged as they are (the caller's label_patch sees the label).
        assert!(!is_done(&memo, &v11, 7));
        assert!(!is_done(&memo, &v10, 8), "another job is another label");
    }

    #[tokio::test]
    async fn what_is_written_goes_with_its_pod() {
        let memo = LabelMemo::default();
        for name in ["a", "b", "c"] {
            let p = pod(name, name, "1");
            send(&memo, &p, 1).landed(&p, None);
        }
        memo.forget("ns/a");
        memo.retain(|key| key != "ns/b");
        assert_eq!(memo.recorded(), ["ns/c"]);
        // A pod recreated under the same name is another pod.
        let recreated = pod("c", "other", "1");
        assert!(!is_done(&memo, &recreated, 1));
        memo.seen(&recreated);
        assert!(memo.recorded().is_empty());
    }

    /// A second caller waits for the patch in flight: it lands, and the caller sends nothing; it
    /// fails, and the caller may send its own.
    #[tokio::test]
    async fn a_patch_in_flight_is_waited_for() {
        let memo = LabelMemo::default();
        let v10 = pod("a", "u1", "10");
        let first = send(&memo, &v10, 7);
        let Claim::Wait(mut waiting) = memo.claim(&v10, 7) else {
            panic!("a second patch while one is in flight")
        };
        first.landed(&v10, Some("11".into()));
        assert_eq!(
            *waiting.wait_for(|o| o.is_some()).await.unwrap(),
            Some(true)
        );
        assert!(is_done(&memo, &v10, 7));

        let b = pod("b", "u2", "10");
        let failing = send(&memo, &b, 7);
        let Claim::Wait(mut waiting) = memo.claim(&b, 7) else {
            panic!("a second patch while one is in flight")
        };
        drop(failing);
        assert_eq!(
            *waiting.wait_for(|o| o.is_some()).await.unwrap(),
            Some(false)
        );
        let _retry = send(&memo, &b, 7);
    }

    /// A label with another job while one is in flight goes after it, so the newer job id is
    /// the one the pod keeps (sent beside it, the older patch could land last).
    #[tokio::test]
    async fn another_jobs_label_waits_for_the_one_in_flight() {
        let memo = LabelMemo::default();
        let v10 = pod("a", "u1", "10");
        let group = send(&memo, &v10, 7);
        let Claim::After(mut earlier) = memo.claim(&v10, 8) else {
            panic!("job 8's label sent beside job 7's")
        };
        group.landed(&v10, Some("11".into()));
        assert!(earlier.wait_for(|o| o.is_some()).await.is_ok());
        let v11 = pod("a", "u1", "11");
        let _alone = send(&memo, &v11, 8);
    }
}
