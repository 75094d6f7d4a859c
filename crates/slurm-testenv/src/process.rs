//! Host process helpers: liveness with PID-reuse protection, and stopping a sandboxed daemon.

use std::time::{Duration, Instant};

/// A process identity that survives PID reuse: the PID plus its start time (clock ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcId {
    pub pid: i32,
    pub start_time: u64,
}

impl ProcId {
    /// Identity of a live process, or `None` if it does not exist.
    pub fn of(pid: i32) -> Option<ProcId> {
        start_time(pid).map(|start_time| ProcId { pid, start_time })
    }

    /// The current process.
    pub fn current() -> ProcId {
        let pid = std::process::id() as i32;
        ProcId::of(pid).unwrap_or(ProcId { pid, start_time: 0 })
    }

    /// True while this very process is still in the process table, as a zombie too: it is gone
    /// once its parent (for a detached instance's wrappers, PID 1) has reaped it.
    pub fn in_process_table(&self) -> bool {
        start_time(self.pid) == Some(self.start_time)
    }

    /// True while this very process (not a later one with the same PID) is alive and not a zombie.
    pub fn is_alive(&self) -> bool {
        match stat_fields(self.pid) {
            Some((state, start)) => start == self.start_time && state != 'Z' && state != 'X',
            None => false,
        }
    }
}

impl ProcId {
    /// True only when this process is surely gone: no such PID, a later process holding it, or
    /// a zombie. An unreadable `/proc` entry (too many open files, say) counts as alive, so a
    /// sweep never removes the instance of an owner that is still running.
    pub fn is_gone(&self) -> bool {
        use procfs::ProcError;
        let stat = procfs::process::Process::new(self.pid).and_then(|p| p.stat());
        match stat {
            Ok(stat) => stat.starttime != self.start_time || stat.state == 'Z' || stat.state == 'X',
            Err(ProcError::NotFound(_)) => true,
            Err(_) => false,
        }
    }
}

/// `(state, starttime)` from `/proc/PID/stat`.
fn stat_fields(pid: i32) -> Option<(char, u64)> {
    let stat = procfs::process::Process::new(pid).ok()?.stat().ok()?;
    Some((stat.state, stat.starttime))
}

fn start_time(pid: i32) -> Option<u64> {
    stat_fields(pid).map(|(_, s)| s)
}

/// Direct children of a process (all its threads).
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = procfs::process::Process::new(pid).and_then(|p| p.tasks()) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| task.children().ok())
        .flatten()
        .map(|child| child as i32)
        .collect()
}

/// Every process below `pid` (children, their children, ...), parents before children.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = children(pid);
    while let Some(p) = todo.pop() {
        out.push(p);
        todo.extend(children(p));
    }
    out
}

/// The command name of a process (`/proc/PID/comm`), if it exists.
pub fn command_name(pid: i32) -> Option<String> {
    procfs::process::Process::new(pid)
        .ok()?
        .stat()
        .ok()
        .map(|s| s.comm)
}

/// Sends `signal` to `pid` (no-op for PIDs <= 0 or processes already gone).
pub fn kill(pid: i32, signal: i32) {
    if pid > 0 {
        // SAFETY: plain syscall with a positive PID; failure (already gone) is fine.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Stops a sandbox started with `sandbox::Mode::Daemon`: kills the namespace's PID 1 (the kernel
/// then kills every process in the namespace), so `unshare` exits by itself and can be reaped by
/// its parent; falls back to killing `unshare` itself. Waits up to `timeout` for it to go.
pub fn stop_sandbox(wrapper: ProcId, timeout: Duration) {
    if !wrapper.is_alive() {
        return;
    }
    for child in children(wrapper.pid) {
        kill(child, libc::SIGKILL);
    }
    let deadline = Instant::now() + timeout;
    while wrapper.is_alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if wrapper.is_alive() {
        kill(wrapper.pid, libc::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(2);
        while wrapper.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Waits up to `timeout` until none of `procs` is in the process table (reaped, not only dead);
/// returns those that still are (zombies whose parent has not reaped them yet).
pub fn wait_reaped(procs: &[ProcId], timeout: Duration) -> Vec<ProcId> {
    let deadline = Instant::now() + timeout;
    loop {
        let left: Vec<ProcId> = procs
            .iter()
            .copied()
            .filter(ProcId::in_process_table)
            .collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// True when running as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_process_is_alive_and_pid_reuse_is_detected() {
        let me = ProcId::current();
        assert!(me.start_time > 0);
        assert!(me.is_alive());
        let reused = ProcId {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(!reused.is_alive());
    }

    #[test]
    fn a_reaped_child_leaves_the_process_table_and_a_zombie_does_not() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let id = ProcId::of(child.id() as i32).expect("just started");
        let deadline = Instant::now() + Duration::from_secs(5);
        while id.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!id.is_alive(), "exited");
        assert!(id.in_process_table(), "a zombie until reaped");
        assert_eq!(wait_reaped(&[id], Duration::from_millis(100)), vec![id]);
        child.wait().unwrap();
        assert!(wait_reaped(&[id], Duration::from_millis(100)).is_empty());
    }

    #[test]
    fn missing_process_is_dead() {
        assert!(ProcId::of(i32::MAX).is_none());
    }
}
