//! slurm-testenv against the real Slurm it builds: these tests need root and run in CI.

use slurm_testenv::{Instance, InstanceOptions, NodeSpec, http};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn start(nodes: u32) -> Instance {
    Instance::start(InstanceOptions {
        nodes,
        ..Default::default()
    })
    .expect("start a Slurm instance")
}

/// GET `path` of slurmrestd at `url` with `token`; the status code.
fn http_status(url: &str, path: &str, token: &str) -> std::io::Result<u16> {
    let addr = url
        .trim_start_matches("http://")
        .parse()
        .expect("HOST:PORT");
    Ok(http::get(addr, path, &[("X-SLURM-USER-TOKEN", token)])?.status)
}

fn pid_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s[s.rfind(')').unwrap() + 2..].chars().next().unwrap();
            state != 'Z'
        })
        .unwrap_or(false)
}

/// PIDs of slurmctld/slurmrestd processes whose command line names this instance's port.
fn daemon_pids_for(port: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.starts_with("slurmrestd") && cmd.contains(port) && pid_alive(pid) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn instance_serves_rest_and_cli_with_external_nodes() {
    let slurm = start(3);
    let sinfo = slurm
        .run(&["sinfo", "--noheader", "-o", "%P %D %t %N"])
        .unwrap();
    assert_eq!(sinfo.trim(), "slurm-bridge* 3 idle node-[1-3]");
    let node = slurm.run(&["scontrol", "show", "node", "node-2"]).unwrap();
    assert!(
        node.contains("State=IDLE+") && node.contains("+EXTERNAL"),
        "{node}"
    );
    assert!(node.contains("AvailableFeatures=slurm-bridge"), "{node}");
    assert_eq!(
        http_status(slurm.rest_url(), "/slurm/v0.0.44/ping/", slurm.token()).unwrap(),
        200
    );
    // A request with a wrong token is refused by Slurm.
    let nodes_bad = http_status(slurm.rest_url(), "/slurm/v0.0.44/nodes/", "not-a-jwt").unwrap();
    assert!(nodes_bad == 401 || nodes_bad == 511, "got {nodes_bad}");
    // The token file holds the same token, mode 600.
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(slurm.token_file()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::read_to_string(slurm.token_file()).unwrap(),
        slurm.token()
    );
    let env = slurm.env_lines();
    assert!(env.starts_with(&format!("SLURM_REST_URL={}\n", slurm.rest_url())));
    assert_eq!(env.lines().count(), 4);
}

#[test]
fn exec_passes_failure_through_and_run_reports_it() {
    let slurm = start(0);
    let out = slurm.exec(&["scontrol", "show", "node", "absent"]).unwrap();
    assert!(!out.status.success());
    let err = slurm
        .run(&["scontrol", "show", "node", "absent"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("scontrol show node absent"), "{err}");
}

#[test]
fn instances_are_isolated_and_run_jobs() {
    let a = start(1);
    let b = start(0);
    assert_ne!(a.rest_url(), b.rest_url());
    b.create_node(&NodeSpec::new("solo").with_gpus("gpu.example.com", 2))
        .unwrap();
    let a_nodes = a.run(&["sinfo", "--noheader", "-o", "%N"]).unwrap();
    let b_nodes = b.run(&["sinfo", "--noheader", "-o", "%N"]).unwrap();
    assert_eq!(a_nodes.trim(), "node-1");
    assert_eq!(b_nodes.trim(), "solo");
    let gres = b.run(&["scontrol", "show", "node", "solo"]).unwrap();
    assert!(gres.contains("Gres=gpu:gpu.example.com:2"), "{gres}");
    // A batch job cannot run on an external node (no slurmd), but it is accepted and queued.
    let out = a
        .run(&["sbatch", "--parsable", "--hold", "--wrap", "true"])
        .unwrap();
    let id: u32 = out.trim().parse().expect("job id");
    let q = a.run(&["squeue", "--noheader", "-o", "%i %T"]).unwrap();
    assert_eq!(q.trim(), format!("{id} PENDING"));
    assert_eq!(
        b.run(&["squeue", "--noheader"]).unwrap().trim(),
        "",
        "the other instance sees no job"
    );
}

#[test]
fn slurmrestd_can_be_stopped_and_restarted() {
    let slurm = start(0);
    slurm.stop_slurmrestd().unwrap();
    assert!(http_status(slurm.rest_url(), "/slurm/v0.0.44/ping/", slurm.token()).is_err());
    slurm.start_slurmrestd().unwrap();
    assert_eq!(
        http_status(slurm.rest_url(), "/slurm/v0.0.44/ping/", slurm.token()).unwrap(),
        200
    );
}

#[test]
fn dropping_an_instance_leaves_no_process_or_state() {
    let slurm = start(0);
    let dir = slurm.dir().to_path_buf();
    let port = slurm.rest_url().rsplit(':').next().unwrap().to_string();
    assert_eq!(daemon_pids_for(&port).len(), 1);
    drop(slurm);
    assert!(daemon_pids_for(&port).is_empty());
    assert!(!dir.exists());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(&*dir.to_string_lossy()));
}

/// A process that owns an instance and is killed with SIGKILL leaves nothing behind: its watchdog
/// stops the daemons and removes the state.
#[test]
fn killed_owner_process_leaves_nothing_behind() {
    let name = format!("killed-{}", std::process::id());
    let mut child = Command::new(env!("CARGO_BIN_EXE_slurm-testenv"))
        .args(["run", "--name", &name])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .trim()
        .strip_prefix("SLURM_REST_URL=")
        .expect(&first)
        .to_string();
    let port = url.rsplit(':').next().unwrap().to_string();
    assert_eq!(daemon_pids_for(&port).len(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let dir = slurm_testenv::paths::run_dir().join(&name);
    let deadline = Instant::now() + Duration::from_secs(20);
    while (Path::new(&dir).exists() || !daemon_pids_for(&port).is_empty())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        daemon_pids_for(&port).is_empty(),
        "slurmrestd outlived its owner"
    );
    assert!(!dir.exists(), "state folder outlived its owner");
}

#[test]
fn cli_up_env_exec_down() {
    let bin = env!("CARGO_BIN_EXE_slurm-testenv");
    let name = format!("cli-{}", std::process::id());
    let up = Command::new(bin)
        .args(["up", "--name", &name, "--nodes", "2"])
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let lines = String::from_utf8(up.stdout).unwrap();
    let keys: Vec<&str> = lines
        .lines()
        .map(|l| {
            l.strip_prefix("export ")
                .unwrap_or_else(|| panic!("not an export line: {l:?}"))
                .split('=')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(
        keys,
        [
            "SLURM_REST_URL",
            "SLURM_JWT",
            "SLURM_JWT_FILE",
            "SLURM_CONF"
        ]
    );
    let env = Command::new(bin)
        .args(["env", "--name", &name])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(env.stdout).unwrap(), lines);
    let exec = Command::new(bin)
        .args([
            "exec",
            "--name",
            &name,
            "--",
            "sinfo",
            "--noheader",
            "-o",
            "%D",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&exec.stdout).trim(), "2");
    let failing = Command::new(bin)
        .args([
            "exec", "--name", &name, "--", "scontrol", "show", "job", "424242",
        ])
        .output()
        .unwrap();
    assert_eq!(failing.status.code(), Some(1));
    let url = lines
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("export SLURM_REST_URL=");
    let port = url.rsplit(':').next().unwrap().to_string();
    let wrappers = slurm_testenv::Instance::attach(&name)
        .unwrap()
        .daemon_wrappers();
    assert_eq!(wrappers.len(), 2, "slurmctld's and slurmrestd's");
    let down = Command::new(bin)
        .args(["down", "--name", &name])
        .output()
        .unwrap();
    assert!(down.status.success());
    assert!(daemon_pids_for(&port).is_empty());
    // The wrappers are reaped by the time `down` returns, or `down` says they are not.
    let down_err = String::from_utf8_lossy(&down.stderr);
    assert!(
        wrappers.iter().all(|w| !w.in_process_table()) || down_err.contains("has not reaped"),
        "{down_err}"
    );
    let env_after = Command::new(bin)
        .args(["env", "--name", &name])
        .output()
        .unwrap();
    assert!(!env_after.status.success());
    assert!(
        String::from_utf8_lossy(&env_after.stderr).contains("no running slurm-testenv instance")
    );
}
