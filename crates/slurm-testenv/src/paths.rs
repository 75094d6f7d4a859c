//! Where the cached root file system and the running instances live on the host.

use std::path::PathBuf;

/// Cache of built root file systems; outside any checkout so every clone and CI run reuses it.
/// Override with `SLURM_TESTENV_CACHE_DIR`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("SLURM_TESTENV_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/slurm-testenv"))
}

/// State of running instances (one folder each). On tmpfs by default so a reboot clears it.
/// Override with `SLURM_TESTENV_RUN_DIR`.
pub fn run_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SLURM_TESTENV_RUN_DIR") {
        return PathBuf::from(dir);
    }
    let run = PathBuf::from("/run");
    if run.is_dir() {
        run.join("slurm-testenv")
    } else {
        std::env::temp_dir().join("slurm-testenv")
    }
}

/// Mount point inside the root file system where each process sees its own instance folder.
pub const INSTANCE_MOUNT: &str = "/slurm-testenv";

/// True for an instance name both test environments accept: 1-40 characters from
/// `[A-Za-z0-9_-]` (it names a folder and files, so no dots or slashes).
pub fn is_valid_instance_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
