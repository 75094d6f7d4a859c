//! The host's cgroup v1 folders of instances whose slurmd confine jobs (`--cgroups`).
//!
//! Each slurmd runs in its own cgroup namespace rooted at
//! `/sys/fs/cgroup/<controller>/slurm-testenv/<instance>/<node>` (cpuset, memory, freezer), so
//! slurmd's own `slurm_<node>/uid_0/job_N/step_M` folders of two instances never meet. Folders
//! are removed deepest first (the kernel refuses to remove a cgroup with children or tasks),
//! the shared `slurm-testenv` folders too once no instance has folders there.

use crate::error::{Error, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The v1 controllers slurmd's cgroup/v1 plugin uses: cpuset (ConstrainCores), memory
/// (ConstrainRAMSpace), freezer (proctrack/cgroup).
pub const CONTROLLERS: [&str; 3] = ["cpuset", "memory", "freezer"];

/// Where the host mounts the v1 hierarchies.
const MOUNT: &str = "/sys/fs/cgroup";
/// The folder under each hierarchy's root holding the folders of every instance of the default
/// run folder (`/run/slurm-testenv`); instances of another (`SLURM_TESTENV_RUN_DIR`) use
/// `slurm-testenv-<hash of that folder>`, so equal instance names never meet and each sweep
/// sees its own instances only.
const TOP: &str = "slurm-testenv";

/// `/sys/fs/cgroup/<controller>/slurm-testenv[-<hash>]`.
fn top(controller: &str) -> PathBuf {
    let run = crate::paths::run_dir();
    let name = if run == Path::new("/run/slurm-testenv") {
        TOP.to_string()
    } else {
        // FNV-1a: stable across builds and processes.
        let hash = crate::rootfs::fnv1a(run.as_os_str().as_encoded_bytes());
        format!("{TOP}-{:08x}", hash as u32)
    };
    Path::new(MOUNT).join(controller).join(name)
}

/// The instance's folder in each controller.
pub fn instance_dirs(instance: &str) -> Vec<PathBuf> {
    CONTROLLERS.iter().map(|c| top(c).join(instance)).collect()
}

/// Fails unless the cpuset, memory and freezer v1 hierarchies are mounted.
pub fn check_available() -> Result<()> {
    for c in CONTROLLERS {
        if !Path::new(MOUNT).join(c).join("cgroup.procs").exists() {
            return Err(Error::Io {
                context: format!(
                    "--cgroups needs the cgroup v1 hierarchies cpuset, memory and freezer mounted at {MOUNT}/<controller> (missing: {MOUNT}/{c})"
                ),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
    }
    Ok(())
}

/// A cpuset folder takes no task until `cpuset.cpus` and `cpuset.mems` are set: copies its
/// parent's where they are empty.
fn fill_cpuset(dir: &Path) -> Result<()> {
    let parent = dir.parent().unwrap_or(dir);
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let own = fs::read_to_string(dir.join(file)).unwrap_or_default();
        if own.trim().is_empty() {
            let value = fs::read_to_string(parent.join(file))
                .map_err(Error::io(format!("read {}", parent.join(file).display())))?;
            fs::write(dir.join(file), value.trim())
                .map_err(Error::io(format!("write {}", dir.join(file).display())))?;
        }
    }
    Ok(())
}

/// Makes the folders of `node` (every controller; cpuset with all of its parent's CPUs, so the
/// slurmd inside may confine itself by `CpuSpecList`) and returns their `cgroup.procs` files.
pub fn prepare_node(instance: &str, node: &str) -> Result<Vec<PathBuf>> {
    let mut procs = Vec::new();
    for c in CONTROLLERS {
        let node_dir = top(c).join(instance).join(node);
        // Another process removes the shared top folder once it is empty: try again.
        let mut attempt = 0;
        while let Err(e) = make_levels(c, &[top(c), top(c).join(instance), node_dir.clone()]) {
            attempt += 1;
            if attempt >= 5 {
                return Err(e);
            }
        }
        procs.push(node_dir.join("cgroup.procs"));
    }
    Ok(procs)
}

fn make_levels(controller: &str, levels: &[PathBuf]) -> Result<()> {
    for dir in levels {
        match fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(Error::Io {
                    context: format!("create the cgroup {}", dir.display()),
                    source: e,
                });
            }
        }
        if controller == "cpuset" {
            fill_cpuset(dir)?;
        }
    }
    Ok(())
}

/// Removes the node's folders (after its slurmd was killed: it leaves `slurm_<node>/...`).
pub fn remove_node(instance: &str, node: &str) -> Result<()> {
    remove_all(CONTROLLERS.iter().map(|c| top(c).join(instance).join(node)))
}

/// Removes the instance's folders in every controller, and the shared `slurm-testenv` folders
/// if no other instance has folders there.
pub fn remove_instance(instance: &str) -> Result<()> {
    let r = remove_all(instance_dirs(instance).into_iter());
    remove_empty_tops();
    r
}

/// Removes `/sys/fs/cgroup/<controller>/slurm-testenv` where it has no instance folder left (the
/// kernel refuses while it has one).
fn remove_empty_tops() {
    for c in CONTROLLERS {
        let _ = fs::remove_dir(top(c));
    }
}

fn remove_all(dirs: impl Iterator<Item = PathBuf>) -> Result<()> {
    let mut first = Ok(());
    for dir in dirs {
        let r = remove_tree(&dir, Duration::from_secs(10));
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Every folder under `dir` (itself included), deepest first.
fn folders(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(entries) = fs::read_dir(&out[i]) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// Removes a cgroup folder and everything below it, deepest first. Tasks still in it (an
/// instance's processes dying, or frozen by proctrack/cgroup when their slurmd was killed: a
/// frozen task dies only once thawed) are thawed and killed; retried until `timeout`.
pub fn remove_tree(dir: &Path, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if !dir.exists() {
            return Ok(());
        }
        let all = folders(dir);
        for f in &all {
            let _ = fs::write(f.join("freezer.state"), "THAWED");
            for pid in fs::read_to_string(f.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse::<i32>().ok())
            {
                crate::process::kill(pid, libc::SIGKILL);
            }
        }
        let mut last = None;
        for f in &all {
            match fs::remove_dir(f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => last = Some((f.clone(), e)),
            }
        }
        match last {
            None => return Ok(()),
            Some((f, e)) if Instant::now() > deadline => {
                return Err(Error::Io {
                    context: format!("remove the cgroup {}", f.display()),
                    source: e,
                });
            }
            Some(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Removes the cgroup folders of instances whose folder under `run_dir` is gone (an instance
/// makes its folder before its cgroups and removes its cgroups before its folder).
pub fn sweep_orphans(run_dir: &Path) {
    for c in CONTROLLERS {
        let Ok(entries) = fs::read_dir(top(c)) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) && !run_dir.join(e.file_name()).exists() {
                let _ = remove_tree(&e.path(), Duration::from_secs(5));
            }
        }
    }
    remove_empty_tops();
}
