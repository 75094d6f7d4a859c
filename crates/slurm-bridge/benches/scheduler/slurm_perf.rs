//! `BENCH_SLURM_PERF=<prefix>`: `perf record -g` of the instance's slurmctld and slurmrestd
//! during a burst line (`<prefix>.<line>.<daemon>.data`), then their top symbols printed
//! beside each other: where Slurm's extra work for the bridge goes (raw Slurm's line against
//! the bridge's). Debian's Slurm is stripped, so frames resolve to exported symbols of
//! libslurmfull and the plugins, which is enough to tell RPC handling, JSON and scheduling apart.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The daemons profiled.
const DAEMONS: [&str; 2] = ["slurmctld", "slurmrestd"];
/// Symbols printed per daemon.
const TOP: usize = 15;

/// Running `perf record`s of one line; [`Recording::finish`] stops them and prints the reports.
pub(crate) struct Recording {
    runs: Vec<(&'static str, PathBuf, Child)>,
}

/// Starts recording the daemons of `slurm` for `line` when `BENCH_SLURM_PERF` is set.
pub(crate) fn start(slurm: &slurm_testenv::Instance, line: &str) -> Option<Recording> {
    let prefix = std::env::var("BENCH_SLURM_PERF").ok()?;
    let mut runs = Vec::new();
    for daemon in DAEMONS {
        let Some(pid) = daemon_pid(slurm, daemon) else {
            println!("  {daemon}: not found, not profiled");
            continue;
        };
        let out = PathBuf::from(format!("{prefix}.{line}.{daemon}.data"));
        let child = Command::new("perf")
            .args(["record", "-F", "999", "-g", "-p", &pid.to_string(), "-o"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start perf record (BENCH_SLURM_PERF)");
        runs.push((daemon, out, child));
    }
    Some(Recording { runs })
}

impl Recording {
    /// Stops the recordings (SIGINT: perf writes its data) and prints each daemon's top symbols
    /// by self time.
    pub(crate) fn finish(self) {
        for (_, _, child) in &self.runs {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
        for (daemon, out, mut child) in self.runs {
            let _ = child.wait();
            let report = Command::new("perf")
                // The recorded paths are the host's (perf resolves the daemons' chroot).
                .args(["report", "--stdio", "--no-children", "--sort", "dso,symbol"])
                .arg("-i")
                .arg(&out)
                .stderr(Stdio::null())
                .output();
            let text = report
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            println!(
                "  {daemon} profile ({}): top {TOP} by self time",
                out.display()
            );
            for line in top_entries(&text, TOP) {
                println!("    {line}");
            }
        }
    }
}

/// The instance's `daemon` process: the descendant of its sandbox wrappers with that name.
fn daemon_pid(slurm: &slurm_testenv::Instance, daemon: &str) -> Option<i32> {
    slurm
        .daemon_wrappers()
        .into_iter()
        .flat_map(|w| slurm_testenv::process::descendants(w.pid))
        .find(|p| slurm_testenv::process::command_name(*p).as_deref() == Some(daemon))
}

/// The first `n` entries of a `perf report --stdio` (lines starting with a percentage; call
/// graph lines below them are left out).
fn top_entries(report: &str, n: usize) -> Vec<String> {
    report
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.ends_with('%') && w[..w.len() - 1].parse::<f64>().is_ok())
        })
        .take(n)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}
