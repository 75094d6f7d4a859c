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
    /// The group's first daemon as started (absent in folders written by older versions).
    #[serde(default)]
    pub(crate) leader: Option<ProcId>,
    pub(crate) ports: BTreeMap<String, u16>,
    pub(crate) bin_dir: PathBuf,
    /// The kubelet nodes, when the instance has some.
    #[serde(default)]
    pub(crate) kubelet: Option<KubeletMeta>,
}

/// What an instance's kubelet nodes hold on the host, for `load-image` and the cleanup.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct KubeletMeta {
    /// Its slot: addresses and link names (crate::realnodes).
    pub(crate) slot: u8,
    /// The kubelet nodes (`node-1` .. `node-N`).
    pub(crate) nodes: Vec<String>,
    /// The folder of `containerd` and `ctr`.
    pub(crate) containerd_bin: PathBuf,
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
/// that name groups), unless the group's ID now belongs to another process than `leader`: a
/// process group's ID is never reused while the group lives, so a different process holding
/// that PID means ours has ended and the ID names someone else's group now.
pub(crate) fn kill_group(pgid: i32, leader: Option<ProcId>) {
    if pgid <= 0 {
        return;
    }
    if let (Some(leader), Some(now)) = (leader, ProcId::of(pgid))
        && leader != now
    {
        tracing::debug!(
            pgid,
            "kube-testenv: process group gone, its ID reused; not killed"
        );
        return;
    }
    // SAFETY: plain syscall; a group that is already gone is fine.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Kills the daemons of an instance whose owner is gone, and removes its folder.
pub(crate) fn reap(dir: &Path, meta: Option<&Meta>) {
    if let Some(m) = meta {
        kill_group(m.pgid, m.leader);
    }
    if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
        let slot = meta.and_then(|m| m.kubelet.as_ref()).map(|k| k.slot);
        crate::realnodes::cleanup(dir, name, slot);
    }
    let _ = fs::remove_dir_all(dir);
}

/// The instances running now: name and kubelet slot of each folder whose owner lives.
pub(crate) fn live_instances() -> Vec<(String, Option<u8>)> {
    let Ok(entries) = fs::read_dir(run_dir()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| read_meta(&e.path()))
        .filter(|m| !owner_gone(m))
        .map(|m| (m.name.clone(), m.kubelet.as_ref().map(|k| k.slot)))
        .collect()
}

/// True when the instance's owner has surely ended. This process's own instances are never
/// stale, whatever `/proc` answers.
pub(crate) fn owner_gone(m: &Meta) -> bool {
    m.owner.pid != std::process::id() as i32 && m.owner.is_gone()
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
            Some(m) if !owner_gone(&m) => {}
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
    // What kubelet nodes left when their folder was removed without the cleanup (the
    // watchdog does it too, but a crash of the whole machine's processes may not).
    crate::realnodes::sweep_orphans(&live_instances());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    fn group_leader() -> std::process::Child {
        Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .expect("start sleep")
    }

    fn meta(owner: ProcId) -> Meta {
        Meta {
            name: "t".into(),
            owner,
            pgid: 0,
            leader: None,
            ports: BTreeMap::new(),
            bin_dir: PathBuf::new(),
            kubelet: None,
        }
    }

    #[test]
    fn a_group_id_held_by_another_process_is_not_killed() {
        let mut child = group_leader();
        let pid = child.id() as i32;
        let now = ProcId::of(pid).expect("sleep runs");
        // The recorded leader started at another time: the ID was reused, the group is not ours.
        let earlier = ProcId {
            pid,
            start_time: now.start_time.wrapping_sub(1),
        };
        kill_group(pid, Some(earlier));
        assert_eq!(
            child.try_wait().unwrap(),
            None,
            "a reused group ID was killed"
        );
        kill_group(pid, Some(now));
        let status = child.wait().unwrap();
        assert!(!status.success(), "our own group was not killed: {status}");
    }

    #[test]
    fn this_processs_instances_are_never_stale() {
        let me = ProcId::current();
        assert!(!owner_gone(&meta(me)));
        // Even when the start time could not be read when the folder was written.
        assert!(!owner_gone(&meta(ProcId {
            pid: me.pid,
            start_time: 0
        })));
        let mut child = group_leader();
        let id = ProcId::of(child.id() as i32).expect("sleep runs");
        assert!(!owner_gone(&meta(id)), "a running owner counts as gone");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(owner_gone(&meta(id)), "a reaped owner counts as alive");
    }
}
