//! The `kube-testenv` command: up/env/exec/down of a detached instance, errors, and the
//! watchdog that cleans up after a killed `run`. Needs root, like the library tests.

mod common;

use common::{
    alive, assert_all_gone, daemon_pgid, processes, processes_naming, wait_for, watchdog_of,
};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_kube-testenv");

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kube-testenv")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `down` (and removes the `up` log) even when an assertion failed.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = cli(&["down", "--name", &self.0]);
        let _ = std::fs::remove_file(
            kube_testenv::paths::run_dir().join(format!("{}.run.log", self.0)),
        );
    }
}

fn owner_pid(dir: &Path) -> i32 {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).expect("meta.json"))
            .expect("meta.json is JSON");
    meta["owner"]["pid"].as_i64().expect("owner pid") as i32
}

#[test]
fn up_env_exec_down() {
    let name = format!("cli-{}", std::process::id());
    let _down = Down(name.clone());
    let up = cli(&["up", "--name", &name, "--nodes", "1"]);
    assert!(up.status.success(), "up failed: {}", text(&up.stderr));
    let stdout = text(&up.stdout);
    let line = stdout.trim_end();
    assert_eq!(stdout.lines().count(), 1, "up prints one line: {stdout:?}");
    let kubeconfig = PathBuf::from(
        line.strip_prefix("export KUBECONFIG=")
            .unwrap_or_else(|| panic!("not a KUBECONFIG line: {line:?}")),
    );
    assert!(kubeconfig.is_file(), "{}", kubeconfig.display());
    let dir = kubeconfig.parent().expect("instance folder").to_path_buf();
    assert_eq!(dir, kube_testenv::paths::run_dir().join(&name));

    let env = cli(&["env", "--name", &name]);
    assert!(env.status.success(), "env failed: {}", text(&env.stderr));
    assert_eq!(text(&env.stdout), stdout);

    let nodes = cli(&["exec", "--name", &name, "--", "kubectl", "get", "nodes"]);
    assert!(
        nodes.status.success(),
        "exec failed: {}",
        text(&nodes.stderr)
    );
    let table = text(&nodes.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("node-1 "))
        .unwrap_or_else(|| panic!("no node-1 in {table}"));
    assert!(row.split_whitespace().nth(1) == Some("Ready"), "{row}");
    // exec passes the environment and the command's exit code through.
    let sh = cli(&[
        "exec",
        "--name",
        &name,
        "--",
        "sh",
        "-c",
        "echo \"$KUBECONFIG\"; exit 7",
    ]);
    assert_eq!(sh.status.code(), Some(7));
    assert_eq!(text(&sh.stdout).trim(), kubeconfig.display().to_string());

    // The name is taken while the instance runs.
    let again = cli(&["up", "--name", &name, "--nodes", "1"]);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("already running"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(
        text(&cli(&["env", "--name", &name]).stdout),
        stdout,
        "the first instance lives on"
    );

    let owner = owner_pid(&dir);
    assert!(alive(owner));
    let pgid = daemon_pgid(&dir);
    let watchdog = watchdog_of(&dir);
    assert!(
        processes_naming(&dir).len() >= 4,
        "{:?}",
        processes_naming(&dir)
    );

    let down = cli(&["down", "--name", &name]);
    assert!(down.status.success(), "down failed: {}", text(&down.stderr));
    assert!(
        text(&down.stderr).contains("stopped"),
        "{}",
        text(&down.stderr)
    );
    assert!(!alive(owner), "the owner (kube-testenv run) outlived down");
    assert_all_gone(&dir, pgid, watchdog.pgid);
    // Nothing waits on the owner any more (the watchdog's `tail --pid`).
    let pid_arg = format!("--pid={owner}");
    wait_for("the watchdog's tail to end", || {
        (!processes().iter().any(|p| p.args.contains(&pid_arg))).then_some(())
    });

    let env = cli(&["env", "--name", &name]);
    assert!(!env.status.success());
    assert!(
        text(&env.stderr).contains("no running instance"),
        "{}",
        text(&env.stderr)
    );
}

#[test]
fn down_of_unknown_name_and_up_with_invalid_names() {
    let unknown = format!("never-started-{}", std::process::id());
    let down = cli(&["down", "--name", &unknown]);
    assert!(
        down.status.success(),
        "down of an unknown name: {}",
        text(&down.stderr)
    );
    assert!(
        text(&down.stderr).contains("no instance named"),
        "{}",
        text(&down.stderr)
    );

    let run_dir = kube_testenv::paths::run_dir();
    let escape = format!("../escape-{}", std::process::id());
    for bad in ["bad name!", escape.as_str()] {
        let up = cli(&["up", "--name", bad, "--nodes", "1"]);
        assert!(!up.status.success(), "up --name {bad:?} succeeded");
        let err = text(&up.stderr);
        assert!(err.contains("invalid instance name"), "{err}");
        assert!(up.stdout.is_empty());
        // Refused before anything is written, in the run folder or (for `..`) next to it.
        let log = run_dir.join(format!("{bad}.run.log"));
        assert!(!log.exists(), "{} was written", log.display());
    }
}

/// Kills (SIGKILL) and reaps a `kube-testenv run` when dropped, so a failed test leaves only
/// what the watchdog cleans up.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn watchdog_cleans_up_after_a_killed_run() {
    let name = format!("cli-run-{}", std::process::id());
    let log = std::env::temp_dir().join(format!("kube-testenv-{name}.log"));
    let (run, dir) = run_instance(&name, &log);
    let ready = wait_for("run to report its start-up time", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .find(|l| l.contains(" ready in "))
            .map(str::to_string)
    });
    eprintln!("{ready}");
    let pgid = daemon_pgid(&dir);
    let watchdog = watchdog_of(&dir);
    assert_eq!(owner_pid(&dir), run.0.id() as i32);
    assert!(
        processes_naming(&dir).len() >= 4,
        "{:?}",
        processes_naming(&dir)
    );

    // SIGKILL: `run` cannot clean up; the watchdog must.
    drop(run);
    let killed = Instant::now();
    assert_all_gone(&dir, pgid, watchdog.pgid);
    eprintln!(
        "watchdog cleaned up {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_file(&log);
}

/// Starts `kube-testenv run --name NAME --nodes 0` and returns it with its instance folder once
/// it printed its KUBECONFIG line.
fn run_instance(name: &str, log: &Path) -> (Running, PathBuf) {
    let mut run = Running(
        Command::new(BIN)
            .args(["run", "--name", name, "--nodes", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("create log"))
            .spawn()
            .expect("start kube-testenv run"),
    );
    let stdout = run.0.stdout.take().expect("piped stdout");
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("KUBECONFIG="))
        .unwrap_or_else(|| {
            panic!(
                "run printed no KUBECONFIG line; its log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        });
    let dir = PathBuf::from(line.trim_start_matches("KUBECONFIG="))
        .parent()
        .expect("instance folder")
        .to_path_buf();
    assert_eq!(dir, kube_testenv::paths::run_dir().join(name));
    (run, dir)
}

#[test]
fn sweep_reaps_an_instance_whose_owner_and_watchdog_died() {
    let name = format!("cli-sweep-{}", std::process::id());
    let log = std::env::temp_dir().join(format!("kube-testenv-{name}.log"));
    let (run, dir) = run_instance(&name, &log);
    let pgid = daemon_pgid(&dir);
    let watchdog = watchdog_of(&dir);
    // The watchdog first (its shell and its tail), so nothing cleans up when `run` dies.
    // SAFETY: plain syscall on a process group this test started.
    unsafe {
        libc::kill(-watchdog.pgid, libc::SIGKILL);
    }
    wait_for("the watchdog to end", || {
        common::processes_in_group(watchdog.pgid)
            .is_empty()
            .then_some(())
    });
    // The owner still lives: no sweep may touch the instance yet.
    assert!(
        processes_naming(&dir).len() >= 3,
        "{:?}",
        processes_naming(&dir)
    );
    drop(run);

    // The next start sweeps instances whose owner is gone; here the sweep alone.
    kube_testenv::sweep_stale();
    assert_all_gone(&dir, pgid, watchdog.pgid);
    let _ = std::fs::remove_file(&log);
}
