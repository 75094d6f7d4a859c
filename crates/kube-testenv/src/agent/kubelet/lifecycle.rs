//! A pod's run on its node: started, resumed after a relist, deleted with its grace period, and
//! the timers that end a run, restart it after a crash, enforce its deadline or kill it.

use super::state::{LastExit, Op, Phase, Timer, TimerKind, active_deadline, will_restart};
use super::status::{running_status, terminal_status, waiting_status};
use super::{DEFAULT_GRACE, KILLED_EXIT_CODE, Key, Kubelet, instant_of};
use crate::agent::util::now;
use std::cmp::Reverse;
use std::time::Duration;
use tokio::time::Instant;

impl Kubelet {
    /// Start a newly bound pod: Running now, finishing after its planned duration.
    pub(super) fn start(&mut self, key: &Key) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        if s.pod.metadata.deletion_timestamp.is_some() {
            return; // deleted before it started: on_deletion ends it
        }
        s.phase = Phase::Running;
        s.run_started = Instant::now();
        s.start_time = now();
        s.run_started_wall = s.start_time.clone();
        let status = running_status(s);
        s.queue.push_back(Op::Status(status));
        let due = s.plan.duration.map(|d| s.run_started + d);
        let deadline = active_deadline(s).map(|d| s.run_started + d);
        self.pump(key);
        if let Some(at) = due {
            self.schedule(key, at, TimerKind::Finish);
        }
        if let Some(at) = deadline {
            self.schedule(key, at, TimerKind::Deadline);
        }
    }

    /// Pick up a pod found Running or terminal when (re)listing or adopting.
    pub(super) fn resume(&mut self, key: &Key) {
        let Some(s) = self.pods.get(key) else { return };
        if s.phase != Phase::Running {
            return;
        }
        let due = s.plan.duration.map(|d| s.run_started + d);
        let deadline = active_deadline(s).map(|d| instant_of(&s.start_time) + d);
        if let Some(at) = due {
            self.schedule(key, at, TimerKind::Finish);
        }
        if let Some(at) = deadline {
            self.schedule(key, at, TimerKind::Deadline);
        }
    }

    pub(super) fn on_deletion(&mut self, key: &Key) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        let grace = s
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                s.pod
                    .spec
                    .as_ref()
                    .and_then(|p| p.termination_grace_period_seconds)
            })
            .map_or(DEFAULT_GRACE, |g| Duration::from_secs(g.max(0) as u64));
        let deadline = Instant::now() + grace;
        if s.deleting.is_some_and(|d| d <= deadline) {
            return; // already handled with an earlier or equal deadline
        }
        s.deleting = Some(deadline);
        match s.phase {
            Phase::Terminal => {
                s.gen_ += 1;
                self.enqueue_delete(key);
            }
            Phase::Pending => {
                // Never started: it ends at once as killed, as a kubelet reports it.
                s.phase = Phase::Terminal;
                s.gen_ += 1;
                let status = terminal_status(s, KILLED_EXIT_CODE);
                s.queue.push_back(Op::Status(status));
                self.pump(key);
                self.enqueue_delete(key);
            }
            Phase::Waiting => {
                // No container runs: it ends at once with its last exit code.
                s.phase = Phase::Terminal;
                s.gen_ += 1;
                let status = terminal_status(s, s.plan.exit_code);
                s.queue.push_back(Op::Status(status));
                self.pump(key);
                self.enqueue_delete(key);
            }
            Phase::Running => {
                let natural_end = s.plan.duration.map(|d| s.run_started + d);
                if natural_end.is_some_and(|e| e <= deadline) {
                    return; // the Finish timer ends it, then deletes
                }
                self.schedule(key, deadline, TimerKind::Kill);
            }
        }
    }

    pub(super) fn enqueue_delete(&mut self, key: &Key) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        if !s.delete_enqueued {
            s.delete_enqueued = true;
            s.queue.push_back(Op::Delete);
            self.pump(key);
        }
    }

    pub(super) fn schedule(&mut self, key: &Key, at: Instant, kind: TimerKind) {
        let Some(s) = self.pods.get(key) else { return };
        self.seq += 1;
        self.timers.push(Reverse(Timer {
            at,
            seq: self.seq,
            key: key.clone(),
            uid: s.uid.clone(),
            gen_: s.gen_,
            kind,
        }));
    }

    pub(super) fn fire_due(&mut self) {
        let now_i = Instant::now();
        while self.timers.peek().is_some_and(|t| t.0.at <= now_i) {
            let Some(Reverse(t)) = self.timers.pop() else {
                break;
            };
            if self.pods.get(&t.key).is_some_and(|s| {
                s.uid == t.uid && (s.gen_ == t.gen_ || t.kind == TimerKind::Deadline)
            }) {
                self.fire(&t.key, t.kind);
            }
        }
    }

    pub(super) fn fire(&mut self, key: &Key, kind: TimerKind) {
        let Some(s) = self.pods.get_mut(key) else {
            return;
        };
        match kind {
            TimerKind::Finish if s.phase == Phase::Running => {
                s.gen_ += 1;
                let code = s.plan.exit_code;
                if s.deleting.is_none() && will_restart(s) {
                    // Crash-loop style backoff before the next run: 10 s doubling to 5 min.
                    let backoff = Duration::from_secs(10u64 << s.restart_count.clamp(0, 5))
                        .min(Duration::from_secs(300));
                    s.last_exit = Some(LastExit {
                        code,
                        started: s.run_started_wall.clone(),
                        finished: now(),
                    });
                    s.phase = Phase::Waiting;
                    let status = waiting_status(s);
                    s.queue.push_back(Op::Status(status));
                    self.pump(key);
                    self.schedule(key, Instant::now() + backoff, TimerKind::Restart);
                } else {
                    s.phase = Phase::Terminal;
                    let status = terminal_status(s, code);
                    s.queue.push_back(Op::Status(status));
                    let deleting = s.deleting.is_some();
                    self.pump(key);
                    if deleting {
                        self.enqueue_delete(key);
                    }
                }
            }
            TimerKind::Restart if s.phase == Phase::Waiting && s.deleting.is_none() => {
                s.gen_ += 1;
                s.phase = Phase::Running;
                s.restart_count += 1;
                s.run_started = Instant::now();
                s.run_started_wall = now();
                let status = running_status(s);
                s.queue.push_back(Op::Status(status));
                let due = s.plan.duration.map(|d| s.run_started + d);
                self.pump(key);
                if let Some(at) = due {
                    self.schedule(key, at, TimerKind::Finish);
                }
            }
            TimerKind::Deadline
                if matches!(s.phase, Phase::Running | Phase::Waiting) && s.deleting.is_none() =>
            {
                s.gen_ += 1;
                s.phase = Phase::Terminal;
                let mut status = terminal_status(s, KILLED_EXIT_CODE);
                status["status"]["reason"] = "DeadlineExceeded".into();
                status["status"]["message"] =
                    "Pod was active on the node longer than the specified deadline".into();
                s.queue.push_back(Op::Status(status));
                self.pump(key);
            }
            TimerKind::Kill => {
                s.gen_ += 1;
                if s.phase == Phase::Running {
                    s.phase = Phase::Terminal;
                    let status = terminal_status(s, KILLED_EXIT_CODE);
                    s.queue.push_back(Op::Status(status));
                    self.pump(key);
                }
                self.enqueue_delete(key);
            }
            _ => {}
        }
    }
}
