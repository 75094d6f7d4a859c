//! The PodScheduled=False reports waiting to be sent by the pod writer's report workers
//! ([`crate::k8s::PodWriter::report`]): a pass queues what its pod should show and goes on.
//! After a restart thousands of waiting pods get their first report at once (Slurm's pending
//! reasons are known for every job by then), and a pass waiting for its two writes held up the
//! first pass over them (10,000 pods: 57 s with 7,400 reports inline, 31 s without).
//!
//! Per pod the latest report wins (the condition; a replaced report's Event is still posted)
//! and one is sent at a time (an older one never lands after a newer); what was sent last is remembered with the versions of the pod it was asked for on, so
//! a pass holding such a copy (the pod cache has not caught up) does not send it again, while a
//! pass whose copy is another version that does not show it (someone wrote over it) does; a pod
//! being bound gets no report after its Binding.

use crate::sync::MutexExt;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::watch;

/// What a pod should show: PodScheduled=False with `reason` and `message`, and an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub reason: String,
    pub message: String,
    /// The Event's type: Warning, else Normal.
    pub warning: bool,
}

/// The pod a report is about, as much of it as the status patch and the Event need.
#[derive(Clone, Debug)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// One report handed to a worker; give it back to [`ReportQueue::finished`].
#[derive(Debug)]
pub struct Job {
    pub key: String,
    id: u64,
    pub target: Target,
    pub report: Report,
}

/// What [`ReportQueue::push`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    /// The report is queued or being sent already, or it was sent on top of the caller's copy.
    Skipped,
    /// Queued; `start_worker` when fewer than the maximum of workers run (the caller starts one).
    Queued { start_worker: bool },
}

/// Reports waiting or being sent, by pod key.
#[derive(Default)]
pub struct ReportQueue {
    inner: Mutex<Inner>,
    /// Bumped whenever a report is finished or dropped: waiters look again.
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct Inner {
    pods: HashMap<String, Entry>,
    /// Pods in the order their reports are due, with the entry id they were queued for (an
    /// entry dropped and made again for a recreated pod has another).
    order: VecDeque<(String, u64)>,
    next_id: u64,
    workers: usize,
    /// Queued reports a newer one replaced before they were sent: their Events still go out
    /// ([`ReportQueue::take_replaced`]); an Event tells what happened, like a job cancelled,
    /// which the newer condition no longer says.
    replaced: Vec<(Target, Report)>,
}

struct Entry {
    id: u64,
    target: Target,
    /// The report to send next, if any.
    wanted: Option<Report>,
    /// The (reason, message) last sent with success.
    sent: Option<(String, String)>,
    /// resourceVersions of the copies of the pod the wanted or sent report was asked for on:
    /// none of them shows it.
    asked_on: Vec<Option<String>>,
    queued: bool,
    /// The report being sent, while it is.
    sending: Option<Report>,
}

impl Entry {
    fn busy(&self) -> bool {
        self.queued || self.sending.is_some()
    }
}

/// Versions kept per pod at most: a few passes' copies of one pod between two reports.
const ASKED_ON: usize = 8;

fn remember(asked_on: &mut Vec<Option<String>>, version: Option<String>) {
    if !asked_on.contains(&version) {
        if asked_on.len() == ASKED_ON {
            asked_on.remove(0);
        }
        asked_on.push(version);
    }
}

impl ReportQueue {
    /// Queues `report` for the pod `key` (of `target`'s uid), replacing one not sent yet.
    pub fn push(&self, key: &str, target: Target, report: Report, max_workers: usize) -> Pushed {
        let mut inner = self.inner.locked();
        let inner = &mut *inner;
        if inner
            .pods
            .get(key)
            .is_some_and(|e| e.target.uid != target.uid)
        {
            // Another pod of that name: nothing of the old one counts.
            inner.pods.remove(key);
        }
        let next_id = &mut inner.next_id;
        let entry = inner.pods.entry(key.to_string()).or_insert_with(|| {
            *next_id += 1;
            Entry {
                id: *next_id,
                target: target.clone(),
                wanted: None,
                sent: None,
                asked_on: Vec::new(),
                queued: false,
                sending: None,
            }
        });
        let same_as_sent = entry
            .sent
            .as_ref()
            .is_some_and(|(r, m)| *r == report.reason && *m == report.message);
        let copy = target.resource_version.clone();
        match entry.wanted.as_ref().or(entry.sending.as_ref()) {
            Some(w) if *w == report => {
                remember(&mut entry.asked_on, copy);
                return Pushed::Skipped;
            }
            None if same_as_sent && entry.asked_on.contains(&copy) => return Pushed::Skipped,
            // Sent, but this copy is a version it was not asked on and does not show it.
            None if same_as_sent => remember(&mut entry.asked_on, copy),
            _ => entry.asked_on = vec![copy],
        }
        let old_target = std::mem::replace(&mut entry.target, target);
        if let Some(old) = entry.wanted.replace(report) {
            inner.replaced.push((old_target, old));
        }
        if entry.busy() {
            // Queued already (it sends the new report), or in flight (queued again after).
            return Pushed::Queued {
                start_worker: false,
            };
        }
        entry.queued = true;
        let id = entry.id;
        inner.order.push_back((key.to_string(), id));
        let start_worker = inner.workers < max_workers;
        if start_worker {
            inner.workers += 1;
        }
        Pushed::Queued { start_worker }
    }

    /// The reports replaced before they were sent since the last call (see `Inner::replaced`).
    pub fn take_replaced(&self) -> Vec<(Target, Report)> {
        std::mem::take(&mut self.inner.locked().replaced)
    }

    /// The caller's copy of the pod shows `report` already, which is what it should show: a
    /// different report queued is dropped (its Event still goes out, [`ReportQueue::take_replaced`]),
    /// and one being sent is followed by this one again.
    pub fn shown(&self, key: &str, target: &Target, report: Report) {
        let mut inner = self.inner.locked();
        let inner = &mut *inner;
        let Some(entry) = inner
            .pods
            .get_mut(key)
            .filter(|e| e.target.uid == target.uid)
        else {
            return;
        };
        let dropped = if entry.sending.as_ref().is_some_and(|s| *s != report) {
            // Sent after the copy was read: the copy's report goes back on top of it.
            entry.asked_on = vec![target.resource_version.clone()];
            entry.wanted.replace(report)
        } else if entry.wanted.as_ref().is_some_and(|w| *w != report) {
            entry.wanted.take()
        } else {
            None
        };
        if let Some(old) = dropped {
            // Its condition is not shown, but its Event still goes out.
            inner.replaced.push((entry.target.clone(), old));
        }
    }

    /// The next report to send, or `None` when there is none: the calling worker then ends.
    pub fn next(&self) -> Option<Job> {
        let (job, dropped) = self.take_next();
        if dropped {
            // A queued entry whose report was dropped is done with: waiters look again.
            self.changed.send_modify(|n| *n += 1);
        }
        job
    }

    /// [`ReportQueue::next`] under the lock; also says whether it passed over a queued entry
    /// whose report was dropped meanwhile.
    fn take_next(&self) -> (Option<Job>, bool) {
        let mut inner = self.inner.locked();
        let inner = &mut *inner;
        let mut dropped = false;
        while let Some((key, id)) = inner.order.pop_front() {
            let Some(entry) = inner.pods.get_mut(&key).filter(|e| e.id == id && e.queued) else {
                continue;
            };
            entry.queued = false;
            let Some(report) = entry.wanted.take() else {
                dropped = true;
                continue;
            };
            entry.sending = Some(report.clone());
            let job = Job {
                key,
                id,
                target: entry.target.clone(),
                report,
            };
            return (Some(job), dropped);
        }
        inner.workers -= 1;
        (None, dropped)
    }

    /// A worker sent `job` (`landed`: the status patch succeeded). A newer report that came
    /// meanwhile is queued now, behind the others.
    pub fn finished(&self, job: Job, landed: bool) {
        {
            let mut inner = self.inner.locked();
            let inner = &mut *inner;
            if let Some(entry) = inner.pods.get_mut(&job.key).filter(|e| e.id == job.id) {
                entry.sending = None;
                entry.sent = landed.then_some((job.report.reason, job.report.message));
                if entry.wanted.is_some() {
                    entry.queued = true;
                    inner.order.push_back((job.key, job.id));
                }
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// The pod `key` is about to be bound (the caller refuses its reports from now on): its
    /// queued report is dropped and one in flight is waited for, so none lands after the Binding.
    pub async fn bind(&self, key: &str) {
        let mut changed = self.changed.subscribe();
        {
            let mut inner = self.inner.locked();
            let Some(entry) = inner.pods.get_mut(key) else {
                return;
            };
            entry.wanted = None;
            entry.queued = false;
            if entry.sending.is_none() {
                inner.pods.remove(key);
                return;
            }
        }
        let _ = changed
            .wait_for(|_| {
                self.inner
                    .locked()
                    .pods
                    .get(key)
                    .is_none_or(|e| e.sending.is_none())
            })
            .await;
        self.inner.locked().pods.remove(key);
    }

    /// Forgets the pod `key` (deleted, or another pod of that name); a report in flight ends
    /// without effect on what is kept.
    pub fn forget(&self, key: &str) {
        self.inner.locked().pods.remove(key);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Forgets the pods `keep` does not accept (after a relist).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.inner.locked().pods.retain(|k, _| keep(k));
        self.changed.send_modify(|n| *n += 1);
    }

    /// Forgets what is kept for `key` when `uid` is another pod's (the cache shows a recreated
    /// pod of that name).
    pub fn seen(&self, key: &str, uid: Option<&str>) {
        let mut inner = self.inner.locked();
        if inner
            .pods
            .get(key)
            .is_some_and(|e| e.target.uid.as_deref() != uid)
        {
            inner.pods.remove(key);
        }
    }

    /// Reports queued or in flight.
    pub fn outstanding(&self) -> usize {
        self.inner
            .locked()
            .pods
            .values()
            .filter(|e| e.busy())
            .count()
    }

    /// Returns once no report is queued or in flight.
    pub async fn idle(&self) {
        let mut changed = self.changed.subscribe();
        let _ = changed.wait_for(|_| self.outstanding() == 0).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uid: &str) -> Target {
        Target {
            namespace: "ns".into(),
            name: "a".into(),
            uid: Some(uid.into()),
            resource_version: None,
        }
    }

    fn version(uid: &str, rv: &str) -> Target {
        Target {
            resource_version: Some(rv.into()),
            ..target(uid)
        }
    }

    fn report(reason: &str) -> Report {
        Report {
            reason: reason.into(),
            message: format!("{reason} text"),
            warning: false,
        }
    }

    const QUEUED: Pushed = Pushed::Queued {
        start_worker: false,
    };

    #[test]
    fn the_latest_report_of_a_pod_wins_and_one_is_sent_at_a_time() {
        let q = ReportQueue::default();
        assert_eq!(
            q.push("ns/a", target("1"), report("A"), 4),
            Pushed::Queued { start_worker: true }
        );
        assert_eq!(q.push("ns/a", target("1"), report("B"), 4), QUEUED);
        let replaced: Vec<String> = q.take_replaced().into_iter().map(|r| r.1.reason).collect();
        assert_eq!(replaced, ["A"], "A's Event still goes out");
        assert!(q.take_replaced().is_empty(), "taken once");
        let job = q.next().expect("one report");
        assert_eq!(job.report.reason, "B", "A was replaced before it was sent");
        // C comes while B is in flight: not handed out beside it, but after it.
        assert_eq!(q.push("ns/a", target("1"), report("C"), 4), QUEUED);
        assert!(q.take_replaced().is_empty(), "B was sent, not replaced");
        assert!(
            q.next().is_none(),
            "nothing else is due while B is in flight"
        );
        assert_eq!(q.outstanding(), 1);
        q.finished(job, true);
        let again = q.inner.locked().workers;
        assert_eq!(again, 0, "the worker that found nothing ended");
        let job = q.next().expect("C after B");
        assert_eq!(job.report.reason, "C");
        q.finished(job, true);
        assert_eq!(q.outstanding(), 0);
    }

    #[test]
    fn a_report_sent_already_is_not_sent_again_unless_it_failed() {
        let q = ReportQueue::default();
        q.push("ns/a", target("1"), report("A"), 4);
        let job = q.next().unwrap();
        q.finished(job, true);
        assert_eq!(
            q.push("ns/a", target("1"), report("A"), 4),
            Pushed::Skipped,
            "the cache has not caught up: same report"
        );
        q.push("ns/a", target("1"), report("B"), 4);
        let job = q.next().unwrap();
        q.finished(job, false);
        assert_ne!(
            q.push("ns/a", target("1"), report("B"), 4),
            Pushed::Skipped,
            "B failed: sent again"
        );
    }

    #[tokio::test]
    async fn idle_returns_once_a_dropped_report_is_passed_over() {
        let q = std::sync::Arc::new(ReportQueue::default());
        q.push("ns/a", version("1", "10"), report("B"), 4);
        q.shown("ns/a", &version("1", "11"), report("A"));
        assert_eq!(
            q.outstanding(),
            1,
            "still queued until a worker passes over it"
        );
        let idle = tokio::spawn({
            let q = q.clone();
            async move { q.idle().await }
        });
        tokio::task::yield_now().await;
        assert!(q.next().is_none());
        tokio::time::timeout(std::time::Duration::from_secs(5), idle)
            .await
            .expect("idle() woke up")
            .unwrap();
    }

    #[test]
    fn a_copy_showing_what_it_should_show_cancels_another_report() {
        let q = ReportQueue::default();
        q.push("ns/a", version("1", "10"), report("B"), 4);
        // A later pass's copy shows A, and A is right again: B is not sent.
        q.shown("ns/a", &version("1", "11"), report("A"));
        assert!(q.next().is_none(), "B was dropped");
        assert_eq!(q.outstanding(), 0);
        // C is being sent when a pass whose copy shows A decides A: A goes again after C.
        q.push("ns/a", version("1", "12"), report("C"), 4);
        let job = q.next().unwrap();
        q.shown("ns/a", &version("1", "12"), report("A"));
        q.finished(job, true);
        assert_eq!(q.next().expect("A again").report.reason, "A");
    }

    #[test]
    fn a_report_written_over_is_sent_again() {
        let q = ReportQueue::default();
        q.push("ns/a", version("1", "10"), report("A"), 4);
        let job = q.next().unwrap();
        assert_eq!(
            q.push("ns/a", version("1", "11"), report("A"), 4),
            Pushed::Skipped,
            "A is being sent"
        );
        q.finished(job, true);
        for rv in ["10", "11"] {
            assert_eq!(
                q.push("ns/a", version("1", rv), report("A"), 4),
                Pushed::Skipped,
                "copy {rv} is older than A: the cache has not caught up"
            );
        }
        // Version 13 does not show A: another writer's status patch replaced it.
        assert_ne!(
            q.push("ns/a", version("1", "13"), report("A"), 4),
            Pushed::Skipped
        );
    }

    #[test]
    fn workers_are_started_up_to_the_maximum() {
        let q = ReportQueue::default();
        let starts: Vec<Pushed> = ["ns/a", "ns/b", "ns/c"]
            .iter()
            .map(|k| q.push(k, target("1"), report("A"), 2))
            .collect();
        assert_eq!(
            starts,
            [
                Pushed::Queued { start_worker: true },
                Pushed::Queued { start_worker: true },
                QUEUED
            ]
        );
    }

    #[tokio::test]
    async fn a_pod_being_bound_gets_no_report_after_its_binding() {
        let q = std::sync::Arc::new(ReportQueue::default());
        q.push("ns/a", target("1"), report("A"), 4);
        let job = q.next().unwrap();
        q.push("ns/a", target("1"), report("B"), 4);
        // The bind waits for A in flight, and B is dropped.
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.bind("ns/a").await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "A is still in flight");
        q.finished(job, true);
        waiting.await.unwrap();
        assert!(q.next().is_none(), "B was dropped");
        assert_eq!(q.outstanding(), 0);
    }

    #[test]
    fn a_recreated_pod_starts_afresh() {
        let q = ReportQueue::default();
        q.push("ns/a", target("1"), report("A"), 4);
        let job = q.next().unwrap();
        q.finished(job, true);
        q.seen("ns/a", Some("2"));
        assert_ne!(
            q.push("ns/a", target("2"), report("A"), 4),
            Pushed::Skipped,
            "the new pod was never sent A"
        );
        q.forget("ns/a");
        assert_eq!(q.outstanding(), 0);
        assert!(q.next().is_none(), "a forgotten pod's report is not sent");
    }
}
