//! Commands run inside the Slurm root file system, each in private mount and PID namespaces.
//!
//! Commands of an instance start in its `work/` folder (`/slurm-testenv/work` inside), so batch
//! jobs' output files (`slurm-<id>.out`) land there, not in the shared root file system.
//!
//! The namespaces make cleanup automatic: `/proc`, `/dev`, `/etc/hosts` and the instance folder
//! (and its `run/` over the root fs's `/run`, where slurmctld puts the auth socket `sack.socket`
//! that clients prefer to slurm.key: shared, it would mix up instances; each slurmd gets its own,
//! `run-<node>/` named by `SLURM_TESTENV_RUN`, since every slurmd binds `/run/slurm/sack.socket`
//! and two would take it from each other; and the instance's own `etc/passwd` and `etc/group`,
//! so users a test adds exist in that instance only) are mounted only inside
//! the namespace (nothing leaks into the host's mount table), and when the
//! namespace's first process dies the kernel kills everything else in it.

use crate::paths::INSTANCE_MOUNT;
use std::path::Path;
use std::process::Command;

/// Shell run as the namespace's first process for one-shot commands: mount, then become the
/// command. `$1` = root file system, `$2` = instance folder (or empty), then the command.
const EXEC_SCRIPT: &str = r#"set -e
R="$1"; I="$2"; shift 2
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --bind /etc/hosts "$R/etc/hosts"
mount --rbind /sys "$R/sys"
RUN="$I/${SLURM_TESTENV_RUN:-run}"
if [ -n "$I" ]; then mount --bind "$I" "$R/slurm-testenv"; mkdir -p "$RUN"; mount --bind "$RUN" "$R/run"; fi
if [ -f "$I/etc/passwd" ]; then mount --bind "$I/etc/passwd" "$R/etc/passwd"; mount --bind "$I/etc/group" "$R/etc/group"; fi
if [ -n "$I" ]; then exec chroot "$R" env -C /slurm-testenv/work "$@"; fi
exec chroot "$R" "$@""#;

/// Like [`EXEC_SCRIPT`] but the shell stays as PID 1 of the namespace and reaps, so a daemon that
/// drops privileges (slurmrestd) still dies with it, and nothing becomes a host zombie.
const DAEMON_SCRIPT: &str = r#"set -e
R="$1"; I="$2"; shift 2
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --bind /etc/hosts "$R/etc/hosts"
mount --rbind /sys "$R/sys"
if [ -n "$SLURM_TESTENV_CGROUPS" ]; then
  mount -t tmpfs -o mode=755,size=1m cgroup "$R/sys/fs/cgroup"
  for C in $SLURM_TESTENV_CGROUPS; do mkdir "$R/sys/fs/cgroup/$C"; mount -t cgroup -o "$C" cgroup "$R/sys/fs/cgroup/$C"; done
  unset SLURM_TESTENV_CGROUPS
fi
RUN="$I/${SLURM_TESTENV_RUN:-run}"
if [ -n "$I" ]; then mount --bind "$I" "$R/slurm-testenv"; mkdir -p "$RUN"; mount --bind "$RUN" "$R/run"; fi
if [ -f "$I/etc/passwd" ]; then mount --bind "$I/etc/passwd" "$R/etc/passwd"; mount --bind "$I/etc/group" "$R/etc/group"; fi
if [ -n "$I" ]; then chroot "$R" env -C /slurm-testenv/work "$@" & else chroot "$R" "$@" & fi
wait $!"#;

/// How the command's namespace is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The command itself becomes PID 1 of the namespace (one-shot client commands).
    Exec,
    /// A reaping shell is PID 1 and the command its child (long-running daemons).
    Daemon,
    /// Like [`Mode::Daemon`], in a cgroup namespace of its own with the cgroup v1 hierarchies
    /// (cpuset, memory, freezer) mounted at `/sys/fs/cgroup` (a slurmd confining jobs). The
    /// caller moves the `unshare` process into the folders that become the namespace's root.
    CgroupDaemon,
}

/// Builds a command that runs `argv` inside `rootfs`, with `instance_dir` mounted at
/// `/slurm-testenv` and `SLURM_CONF` pointing at that instance's slurm.conf.
pub fn command(rootfs: &Path, instance_dir: Option<&Path>, argv: &[&str], mode: Mode) -> Command {
    let mut cmd = Command::new("unshare");
    if mode == Mode::CgroupDaemon {
        cmd.arg("--cgroup");
        cmd.env(
            "SLURM_TESTENV_CGROUPS",
            crate::cgroup::CONTROLLERS.join(" "),
        );
    } else {
        cmd.env_remove("SLURM_TESTENV_CGROUPS");
    }
    cmd.args([
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        match mode {
            Mode::Exec => EXEC_SCRIPT,
            Mode::Daemon | Mode::CgroupDaemon => DAEMON_SCRIPT,
        },
        "slurm-testenv-sandbox",
    ]);
    cmd.arg(rootfs);
    match instance_dir {
        Some(dir) => {
            cmd.arg(dir);
            cmd.env("SLURM_CONF", format!("{INSTANCE_MOUNT}/slurm.conf"));
        }
        None => {
            cmd.arg("");
        }
    }
    cmd.args(argv);
    // A clean, predictable environment inside the root file system.
    cmd.env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    cmd.env("LANG", "C.UTF-8");
    cmd.env_remove("SLURM_JWT");
    cmd
}

/// Renders argv for messages, quoting words with spaces.
pub fn display_argv(argv: &[&str]) -> String {
    argv.iter()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                (*a).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
