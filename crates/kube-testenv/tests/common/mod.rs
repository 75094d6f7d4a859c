//! Helpers shared by kube-testenv's integration tests: scans of `/proc` to check that an
//! instance leaves no process behind, and a polling wait.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::Path;
use std::time::{Duration, Instant};

/// Generous bound for anything that waits: the machine running the tests may be busy.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A process found in `/proc`.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: i32,
    pub pgid: i32,
    pub args: Vec<String>,
}

/// Every live process (zombies, which hold nothing but a table entry, are left out).
pub fn processes() -> Vec<Proc> {
    procfs::process::all_processes()
        .expect("read /proc")
        .flatten()
        .filter_map(|p| {
            let stat = p.stat().ok()?;
            if matches!(stat.state, 'Z' | 'X') {
                return None;
            }
            Some(Proc {
                pid: p.pid,
                pgid: stat.pgrp,
                args: p.cmdline().unwrap_or_default(),
            })
        })
        .collect()
}

/// Live processes with `dir` itself, or a path below it, in their command line (as in
/// `--data-dir=/run/kube-testenv/NAME/etcd`). `/run/kube-testenv/t1-1` does not match the
/// folder `/run/kube-testenv/t1-10` of another instance.
pub fn processes_naming(dir: &Path) -> Vec<Proc> {
    let dir = dir.display().to_string();
    let below = format!("{dir}/");
    processes()
        .into_iter()
        .filter(|p| {
            p.args
                .iter()
                .any(|a| a == &dir || a.ends_with(&format!("={dir}")) || a.contains(&below))
        })
        .collect()
}

/// Live processes in process group `pgid`.
pub fn processes_in_group(pgid: i32) -> Vec<Proc> {
    processes().into_iter().filter(|p| p.pgid == pgid).collect()
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    procfs::process::Process::new(pid)
        .and_then(|p| p.stat())
        .is_ok_and(|stat| !matches!(stat.state, 'Z' | 'X'))
}

/// Polls `check` every 100 ms until it returns `Some`, for at most [`TIMEOUT`].
pub fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {} s waiting for {what}",
            TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The daemons' process group recorded in the instance's `meta.json`.
pub fn daemon_pgid(dir: &Path) -> i32 {
    let text = std::fs::read_to_string(dir.join("meta.json")).expect("read meta.json");
    let meta: serde_json::Value = serde_json::from_str(&text).expect("meta.json is JSON");
    meta["pgid"].as_i64().expect("meta.json has a pgid") as i32
}

/// The watchdog shell of the instance in `dir` (it leads its own process group).
pub fn watchdog_of(dir: &Path) -> Proc {
    let found: Vec<Proc> = processes_naming(dir)
        .into_iter()
        .filter(|p| p.args.iter().any(|a| a == "kube-testenv-watchdog"))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one watchdog for {}: {found:?}",
        dir.display()
    );
    found[0].clone()
}

/// Asserts that the instance in `dir` left nothing: no process naming its folder, none in the
/// daemons' or the watchdog's process group, and no folder. Waits (up to [`TIMEOUT`]) for
/// processes that were just sent SIGKILL to go.
pub fn assert_all_gone(dir: &Path, daemon_pgid: i32, watchdog_pgid: i32) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left: Vec<Proc> = processes_naming(dir)
            .into_iter()
            .chain(processes_in_group(daemon_pgid))
            .chain(processes_in_group(watchdog_pgid))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes of {} still running after {} s: {left:?}",
            dir.display(),
            TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for("the instance folder to be removed", || {
        (!dir.exists()).then_some(())
    });
}
