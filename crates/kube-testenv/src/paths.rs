//! Where built binaries and running instances live on the host.

use std::path::PathBuf;

/// Cache of Go module downloads, Go build cache and built binaries; outside any checkout so
/// every clone and CI run reuses it. Override with `KUBE_TESTENV_CACHE_DIR`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("KUBE_TESTENV_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/kube-testenv"))
}

/// State of running instances (one folder each). On tmpfs by default so a reboot clears it.
/// Override with `KUBE_TESTENV_RUN_DIR`.
pub fn run_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBE_TESTENV_RUN_DIR") {
        return PathBuf::from(dir);
    }
    let run = PathBuf::from("/run");
    if run.is_dir() {
        run.join("kube-testenv")
    } else {
        std::env::temp_dir().join("kube-testenv")
    }
}
