//! The on-disk state of instances: each folder's `meta.json` (who owns it, its process group
//! and ports), instance names, and the sweep that removes instances whose owner died.

use crate::error::{Error, Result};
use crate::paths::run_dir;
use slurm_testenv::process::ProcId;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `meta.json` records so other processes (`env`, `exec`, `down`, the stale sweep) can find
/// and stop an instance.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Meta {
    pub(crate) name: String,
    /// The process holding the instance (a test, or `kube-testenv run`).
    pub(crate) owner: ProcId,
    /// Process group of the daemons (0 until the first one started).
    pub(crate) pgid: i32,
    pub(crate) ports: BTreeMap<String, u16>,
    pub(crate) bin_dir: PathBuf,
}

/// Checks an instance name: 1-40 characters from `[A-Za-z0-9_-]` (it names a folder and files).
pub fn validate_name(name: &str) -> Result<()> {
    if slurm_testenv::paths::is_valid_instance_name(name) {
        Ok(())
    } else {
        Err(Error::InvalidName { name: name.into() })
    }
}

pub(super) fn write_file(path: &Path, data: &str, mode: u32) -> Result<()> {
    fs::write(path, data).map_err(Error::io(format!("write {}", path.display())))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(Error::io(format!("chmod {}", path.display())))
}

fn meta_path(dir: &Path) -> PathBuf {
    dir.join("meta.json")
}

pub(crate) fn read_meta(dir: &Path) -> Option<Meta> {
    serde_json::from_str(&fs::read_to_string(meta_path(dir)).ok()?).ok()
}

pub(super) fn write_meta(dir: &Path, meta: &Meta) -> Result<()> {
    let text = serde_json::to_string_pretty(meta).expect("meta serializes");
    let tmp = dir.join("meta.json.tmp");
    fs::write(&tmp, text).map_err(Error::io("write meta.json"))?;
    fs::rename(&tmp, meta_path(dir)).map_err(Error::io("rename meta.json"))
}

/// Sends SIGKILL to process group `pgid` (slurm-testenv's `kill` ignores the negative PIDs
/// that name groups).
pub(crate) fn kill_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: plain syscall; a group that is already gone is fine.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Kills the daemons of an instance whose owner is gone, and removes its folder.
pub(crate) fn reap(dir: &Path, meta: Option<&Meta>) {
    if let Some(m) = meta
        && m.pgid > 0
    {
        kill_group(m.pgid);
    }
    let _ = fs::remove_dir_all(dir);
}

/// Removes instances whose owning process has died (a test killed mid-run, a crashed `run`).
pub fn sweep_stale() {
    let Ok(entries) = fs::read_dir(run_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let dir = e.path();
        if !dir.is_dir() {
            continue;
        }
        match read_meta(&dir) {
            Some(m) if m.owner.is_alive() => {}
            Some(m) => reap(&dir, Some(&m)),
            // A folder without meta.json is either being created right now (meta is written
            // right after) or left by a crash before that: only remove old ones.
            None => {
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .map(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(120))
                    .unwrap_or(false);
                if old {
                    reap(&dir, None);
                }
            }
        }
    }
}
