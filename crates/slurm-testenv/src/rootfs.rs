//! The cached Debian-unstable root file system with Slurm, built once with debootstrap.
//!
//! The cache folder is keyed by a hash of everything that shapes it (suite, package set, setup
//! version), so a change rebuilds it. A build goes into a temporary folder that is renamed into
//! place only when complete, so an interrupted build is never used; leftovers are removed on the
//! next build, under a lock so parallel test processes build once.

use crate::error::{Error, Result};
use crate::paths::{INSTANCE_MOUNT, cache_dir};
use crate::{mirror, process, sandbox};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Debian suite that carries Slurm 25.11 or newer.
const SUITE: &str = "sid";
/// Packages installed into the root file system (kubectl comes with kube-testenv instead);
/// slurmd runs the batch work of hybrid nodes; slurmdbd and MariaDB the accounting of instances
/// started with `accounting` (the server's `-core` packages, not `mariadb-server`, whose service
/// scripts pull in perl, galera and systemd: 150 packages and 2.5 minutes more to build).
pub const PACKAGES: &[&str] = &[
    "slurmctld",
    "slurmd",
    "slurmrestd",
    "slurm-client",
    "slurm-wlm-jwt-plugin",
    "slurmdbd",
    "mariadb-server-core",
    "mariadb-client-core",
];
/// Bumped whenever the post-install setup below changes.
const SETUP_VERSION: u32 = 2;
/// Unprivileged user slurmrestd runs as (it refuses to run as root).
pub const REST_USER: &str = "slurmrest";
const READY_MARKER: &str = ".slurm-testenv-ready";

/// A ready root file system.
#[derive(Clone, Debug)]
pub struct Rootfs {
    pub path: PathBuf,
}

/// FNV-1a, stable across Rust versions (unlike `DefaultHasher`).
pub(crate) fn fnv1a(data: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut h, data);
    std::hash::Hasher::finish(&h)
}

/// The cache key: changes whenever the package set, suite or setup changes.
pub fn cache_key() -> String {
    let spec = format!("{SUITE}|{}|{SETUP_VERSION}", PACKAGES.join(","));
    format!("{:016x}", fnv1a(spec.as_bytes()))
}

/// Returns the cached root file system, building it first if needed (about a minute, 400 MB).
pub fn ensure() -> Result<Rootfs> {
    let cache = cache_dir();
    let path = cache.join(format!("rootfs-{}", cache_key()));
    if is_ready(&path) {
        return Ok(Rootfs { path });
    }
    if !process::is_root() {
        return Err(Error::NotRoot);
    }
    fs::create_dir_all(&cache).map_err(Error::io(format!("create {}", cache.display())))?;
    let lock_path = cache.join("build.lock");
    let lock = fs::File::create(&lock_path)
        .map_err(Error::io(format!("create {}", lock_path.display())))?;
    lock.lock()
        .map_err(Error::io(format!("lock {}", lock_path.display())))?;
    // Another process may have finished the build while we waited for the lock.
    if is_ready(&path) {
        return Ok(Rootfs { path });
    }
    remove_stale_builds(&cache, &path)?;
    build(&cache, &path)?;
    Ok(Rootfs { path })
}

fn is_ready(path: &Path) -> bool {
    fs::read_to_string(path.join(READY_MARKER))
        .map(|k| k.trim() == cache_key())
        .unwrap_or(false)
}

/// Removes half-built folders (and a final folder without its marker), unmounting anything an
/// interrupted debootstrap left mounted inside them first.
fn remove_stale_builds(cache: &Path, final_path: &Path) -> Result<()> {
    let entries = fs::read_dir(cache).map_err(Error::io(format!("read {}", cache.display())))?;
    for entry in entries.flatten() {
        let p = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        let stale_tmp = name.starts_with("rootfs-") && name.contains(".building");
        if stale_tmp || (p == final_path && !is_ready(&p)) {
            eprintln!(
                "slurm-testenv: removing incomplete root file system {}",
                p.display()
            );
            remove_tree(&p)?;
        }
    }
    Ok(())
}

/// Unmounts everything below `dir` (deepest first) and removes it without crossing file systems.
pub fn remove_tree(dir: &Path) -> Result<()> {
    let prefix = format!("{}/", dir.display());
    if let Ok(mounts) = fs::read_to_string("/proc/self/mounts") {
        let mut points: Vec<String> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(|m| m.replace("\\040", " "))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        points.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in points {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
    }
    if dir.exists() {
        let status = Command::new("rm")
            .args(["-rf", "--one-file-system"])
            .arg(dir)
            .status()
            .map_err(Error::io("run rm"))?;
        if !status.success() {
            return Err(Error::RootfsBuild {
                what: format!("could not remove {}", dir.display()),
                log: PathBuf::new(),
                tail: String::new(),
            });
        }
    }
    Ok(())
}

/// The last `lines` lines of a log file, for error messages (empty when unreadable).
pub(crate) fn tail_of(path: &Path, lines: usize) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn ensure_debootstrap(log: &Path) -> Result<()> {
    let found = Command::new("sh")
        .args(["-c", "command -v debootstrap"])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        return Ok(());
    }
    eprintln!("slurm-testenv: installing debootstrap with apt-get");
    let out = fs::File::create(log).map_err(Error::io(format!("create {}", log.display())))?;
    let status = Command::new("sh")
        .args([
            "-c",
            "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap",
        ])
        .stdout(out.try_clone().map_err(Error::io("dup log"))?)
        .stderr(out)
        .status()
        .map_err(Error::io("run apt-get"))?;
    if !status.success() {
        let tail = tail_of(log, 20);
        if tail.contains("Could not resolve")
            || tail.contains("Failed to fetch")
            || tail.contains("Temporary failure")
        {
            return Err(Error::RegistryUnreachable {
                mirror: "the host's apt sources".into(),
                log: log.to_path_buf(),
                tail,
            });
        }
        return Err(Error::RootfsBuild {
            what: "apt-get install debootstrap failed".into(),
            log: log.to_path_buf(),
            tail,
        });
    }
    Ok(())
}

fn build(cache: &Path, final_path: &Path) -> Result<()> {
    let started = Instant::now();
    let tmp = cache.join(format!(
        "{}.building-{}",
        final_path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let log = cache.join("build.log");
    ensure_debootstrap(&log)?;
    let mirror = mirror::debian_mirror()?;
    eprintln!(
        "slurm-testenv: building the Slurm root file system ({SUITE}: {}) from {mirror}; this takes about a minute and 400 MB, once",
        PACKAGES.join(" ")
    );
    let out = fs::File::create(&log).map_err(Error::io(format!("create {}", log.display())))?;
    let status = Command::new("debootstrap")
        .arg("--variant=minbase")
        .arg(format!("--include={}", PACKAGES.join(",")))
        .arg(SUITE)
        .arg(&tmp)
        .arg(&mirror)
        .stdout(out.try_clone().map_err(Error::io("dup log"))?)
        .stderr(out)
        .status()
        .map_err(Error::io("run debootstrap"))?;
    if !status.success() {
        let tail = tail_of(&log, 25);
        let _ = remove_tree(&tmp);
        if tail.contains("Failed getting release file")
            || tail.contains("Couldn't download")
            || tail.contains("Could not resolve")
            || tail.contains("Temporary failure in name resolution")
        {
            return Err(Error::RegistryUnreachable { mirror, log, tail });
        }
        return Err(Error::RootfsBuild {
            what: format!("debootstrap exited with {status}"),
            log,
            tail,
        });
    }
    setup(&tmp).inspect_err(|_| {
        let _ = remove_tree(&tmp);
    })?;
    verify(&tmp, &log).inspect_err(|_| {
        let _ = remove_tree(&tmp);
    })?;
    fs::write(tmp.join(READY_MARKER), cache_key()).map_err(Error::io("write the ready marker"))?;
    fs::rename(&tmp, final_path).map_err(Error::io(format!(
        "rename {} to {}",
        tmp.display(),
        final_path.display()
    )))?;
    eprintln!(
        "slurm-testenv: root file system ready at {} after {:.0} s",
        final_path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Post-install setup: mount points, the slurmrestd user, an empty hosts file to bind over.
fn setup(root: &Path) -> Result<()> {
    let mount_point = root.join(INSTANCE_MOUNT.trim_start_matches('/'));
    fs::create_dir_all(&mount_point).map_err(Error::io("create the instance mount point"))?;
    let hosts = root.join("etc/hosts");
    if !hosts.exists() {
        fs::write(&hosts, "").map_err(Error::io("create etc/hosts"))?;
    }
    let passwd = root.join("etc/passwd");
    let text = fs::read_to_string(&passwd).map_err(Error::io("read etc/passwd"))?;
    if !text
        .lines()
        .any(|l| l.starts_with(&format!("{REST_USER}:")))
    {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&passwd)
            .map_err(Error::io("open etc/passwd"))?;
        writeln!(
            f,
            "{REST_USER}:x:990:990:slurmrestd:/nonexistent:/usr/sbin/nologin"
        )
        .map_err(Error::io("write etc/passwd"))?;
        let mut g = fs::OpenOptions::new()
            .append(true)
            .open(root.join("etc/group"))
            .map_err(Error::io("open etc/group"))?;
        writeln!(g, "{REST_USER}:x:990:").map_err(Error::io("write etc/group"))?;
    }
    make_db_template(root)
}

/// Initialises the pristine MariaDB data folder every accounting instance copies
/// ([`crate::accounting::DB_TEMPLATE`]): `mariadb-install-db` takes seconds, a copy milliseconds.
fn make_db_template(root: &Path) -> Result<()> {
    let template = crate::accounting::DB_TEMPLATE;
    let host_template = root.join(template.trim_start_matches('/'));
    if host_template.exists() {
        remove_tree(&host_template)?;
    }
    let mut argv: Vec<String> = vec![
        "mariadb-install-db".into(),
        "--no-defaults".into(),
        "--user=root".into(),
        format!("--datadir={template}"),
        "--auth-root-authentication-method=socket".into(),
        "--skip-test-db".into(),
    ];
    argv.extend(
        crate::accounting::MARIADBD_OPTIONS
            .iter()
            .map(|o| o.to_string()),
    );
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = sandbox::command(root, None, &argv, sandbox::Mode::Exec)
        .output()
        .map_err(Error::io("run mariadb-install-db"))?;
    if !out.status.success() {
        return Err(Error::RootfsBuild {
            what: format!("mariadb-install-db exited with {}", out.status),
            log: PathBuf::new(),
            tail: format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(())
}

/// Checks that the installed Slurm is new enough (external jobs and data_parser v0.0.44 need 25.11).
fn verify(root: &Path, log: &Path) -> Result<()> {
    let out = sandbox::command(root, None, &["slurmctld", "-V"], sandbox::Mode::Exec)
        .output()
        .map_err(Error::io("run slurmctld -V"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let version = parse_version(&text);
    match version {
        Some((major, minor)) if (major, minor) >= (25, 11) => Ok(()),
        _ => Err(Error::RootfsBuild {
            what: format!(
                "slurmctld -V printed {:?}; Slurm 25.11 or newer is needed",
                text.trim()
            ),
            log: log.to_path_buf(),
            tail: String::from_utf8_lossy(&out.stderr).to_string(),
        }),
    }
}

/// Parses `slurm 26.05.5` into `(26, 5)`.
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text.split_whitespace().nth(1)?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_stable_and_hex() {
        assert_eq!(cache_key(), cache_key());
        assert_eq!(cache_key().len(), 16);
    }

    #[test]
    fn version_parsing() {
        assert_eq!(parse_version("slurm 26.05.5\n"), Some((26, 5)));
        assert_eq!(parse_version("slurm 22.05.8"), Some((22, 5)));
        assert_eq!(parse_version("garbage"), None);
    }
}
