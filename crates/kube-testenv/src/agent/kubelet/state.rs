//! What the kubelet keeps of each pod it runs, and its timers.

use std::collections::VecDeque;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::time::Instant;

use super::super::runtime::RunPlan;
use super::Key;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Bound but not started (only while the first write is being prepared).
    Pending,
    /// Containers running.
    Running,
    /// A container ended and waits to be restarted (restartPolicy Always/OnFailure).
    Waiting,
    /// Succeeded or Failed.
    Terminal,
}

#[derive(Debug, Clone)]
pub(super) enum Op {
    Status(serde_json::Value),
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerKind {
    /// The containers end on their own.
    Finish,
    /// The grace period of a deleted pod is over.
    Kill,
    /// A crashed container under restartPolicy Always/OnFailure starts again.
    Restart,
    /// `spec.activeDeadlineSeconds` has passed (not invalidated by the pod's other timers).
    Deadline,
}

#[derive(Debug)]
pub(super) struct Timer {
    pub(super) at: Instant,
    pub(super) seq: u64,
    pub(super) key: Key,
    pub(super) uid: String,
    pub(super) gen_: u64,
    pub(super) kind: TimerKind,
}

impl PartialEq for Timer {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timer {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// How the previous run of the containers ended (for `lastState`).
#[derive(Debug, Clone)]
pub(super) struct LastExit {
    pub(super) code: i32,
    pub(super) started: Time,
    pub(super) finished: Time,
}

#[derive(Debug)]
pub(super) struct PodState {
    pub(super) uid: String,
    pub(super) pod: Pod,
    pub(super) phase: Phase,
    pub(super) plan: RunPlan,
    /// When the current container run started (monotonic).
    pub(super) run_started: Instant,
    /// `status.startTime` (wall clock).
    pub(super) start_time: Time,
    /// When the current container run started (wall clock).
    pub(super) run_started_wall: Time,
    pub(super) pod_ip: String,
    pub(super) host_ip: String,
    /// Restarts so far; the current run is number `restart_count` (from 0).
    pub(super) restart_count: i32,
    pub(super) last_exit: Option<LastExit>,
    /// Kill deadline once the pod is being deleted.
    pub(super) deleting: Option<Instant>,
    pub(super) delete_enqueued: bool,
    /// Bumped to invalidate pending timers.
    pub(super) gen_: u64,
    pub(super) busy: bool,
    pub(super) queue: VecDeque<Op>,
}

pub(super) fn active_deadline(s: &PodState) -> Option<Duration> {
    s.pod
        .spec
        .as_ref()
        .and_then(|p| p.active_deadline_seconds)
        .filter(|d| *d > 0)
        .map(|d| Duration::from_secs(d as u64))
}

pub(super) fn restart_policy(s: &PodState) -> &str {
    s.pod
        .spec
        .as_ref()
        .and_then(|p| p.restart_policy.as_deref())
        .unwrap_or("Always")
}

pub(super) fn will_restart(s: &PodState) -> bool {
    match restart_policy(s) {
        "Always" => true,
        "OnFailure" => s.plan.exit_code != 0,
        _ => false,
    }
}
