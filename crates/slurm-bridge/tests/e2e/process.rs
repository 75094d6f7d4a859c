//! `slurm-bridge` processes a test starts as an admin would, and their ends.

use super::{Env, SCHEDULER};
use std::time::{Duration, Instant};

/// Sends SIGTERM to a process this test started and waits (up to 30 s) for its exit status.
pub async fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "no exit within 30 s of SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `slurm-bridge run` as an admin would, against `env`'s Slurm and control plane: a config
/// file in `dir` (the scheduler name, the Slurm URL, the partition, then `config_extra` lines),
/// KUBECONFIG and SLURM_JWT_FILE, no leader election, a 200 ms job poll, the probes on a free
/// port, then `args`; the log goes to `dir/run.log`. Returns the process and the config path.
pub fn spawn_run<A: AsRef<std::ffi::OsStr>>(
    env: &Env,
    dir: &std::path::Path,
    config_extra: &str,
    args: impl IntoIterator<Item = A>,
) -> (std::process::Child, std::path::PathBuf) {
    let config = write_config(env, dir, config_extra);
    let log = std::fs::File::create(dir.join("run.log")).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_slurm-bridge"))
        .args(["run", "--config"])
        .arg(&config)
        .args([
            "--leader-elect=false",
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--slurm-poll-interval",
            "200ms",
        ])
        .args(args)
        .env("KUBECONFIG", env.kube_env.kubeconfig())
        .env("SLURM_JWT_FILE", env.slurm.token_file())
        .env_remove("SLURM_JWT")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start slurm-bridge run");
    (child, config)
}

/// Writes `dir/config.yaml` as an admin would for `env`: the scheduler name, the Slurm URL, the
/// partition, then the `extra` lines. Returns its path.
pub fn write_config(env: &Env, dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "schedulerName: {SCHEDULER}\nslurmRestApi: {}\npartition: slurm-bridge\n{extra}",
            env.slurm.rest_url()
        ),
    )
    .unwrap();
    config
}

/// A fresh folder for one test's files: `prefix`, the process id and the time.
pub fn temp_dir(prefix: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A port for a server the test starts itself, reserved in slurm-testenv's pool: below the
/// kernel's ephemeral range, so no outgoing connection takes it before the server binds it.
pub fn free_port() -> u16 {
    slurm_testenv::ports::reserve_for_process(1).expect("reserve a port")[0]
}
